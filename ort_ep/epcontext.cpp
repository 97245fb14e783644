#include "epcontext.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstring>

#include "artifact/artifact.h"
#include "kiln/compile.h"
#include "ort_graph.h"
#include "ort_util.h"
#include "support/error.h"
#include "support/file.h"
#include "support/version.h"

namespace kiln::ort_ep {

namespace fs = std::filesystem;

bool is_kiln_epcontext(const NodeInfo& n) {
  if (n.op_type != "EPContext" || n.domain != "com.microsoft") return false;
  size_t nattr = 0;
  check(ORT_API(Node_GetNumAttributes)(n.node, &nattr), "Node_GetNumAttributes");
  std::vector<const OrtOpAttr*> attrs(nattr);
  if (nattr) check(ORT_API(Node_GetAttributes)(n.node, attrs.data(), nattr), "Node_GetAttributes");
  for (auto* a : attrs) {
    const char* name = nullptr;
    check(ORT_API(OpAttr_GetName)(a, &name), "OpAttr_GetName");
    if (!name || std::strcmp(name, "source") != 0) continue;
    OrtOpAttrType type{};
    check(ORT_API(OpAttr_GetType)(a, &type), "OpAttr_GetType");
    if (type != ORT_OP_ATTR_STRING) return false;
    std::string s(probe_attr_size(a, type), '\0');
    size_t len = 0;
    if (!s.empty()) check(ORT_API(ReadOpAttr)(a, type, s.data(), s.size(), &len), "ReadOpAttr");
    s.resize(std::min(len, s.size()));
    return s == kEpName;
  }
  return false;
}

namespace {

/// INT and STRING attributes of a node (others ignored).
void read_attrs(const OrtNode* n, std::map<std::string, int64_t>& ints, std::map<std::string, std::string>& strings) {
  size_t nattr = 0;
  check(ORT_API(Node_GetNumAttributes)(n, &nattr), "Node_GetNumAttributes");
  std::vector<const OrtOpAttr*> attrs(nattr);
  if (nattr) check(ORT_API(Node_GetAttributes)(n, attrs.data(), nattr), "Node_GetAttributes");
  for (auto* a : attrs) {
    const char* name = nullptr;
    OrtOpAttrType type{};
    check(ORT_API(OpAttr_GetName)(a, &name), "OpAttr_GetName");
    check(ORT_API(OpAttr_GetType)(a, &type), "OpAttr_GetType");
    size_t need = 0;
    if (type == ORT_OP_ATTR_INT) {
      int64_t v = 0;
      check(ORT_API(ReadOpAttr)(a, type, &v, sizeof v, &need), "ReadOpAttr");
      ints[name] = v;
    } else if (type == ORT_OP_ATTR_STRING) {
      need = probe_attr_size(a, type);
      std::string s(need, '\0');
      if (need) check(ORT_API(ReadOpAttr)(a, type, s.data(), s.size(), &need), "ReadOpAttr");
      s.resize(need);
      strings[name] = std::move(s);
    }
  }
}

/// kiln's own checks of an artifact's compatibility block, each naming the field.
void check_compat(const fs::path& path, const EpOptions& o, const std::string& what) {
  artifact::CompatInfo c = artifact::read_compat(path);  // corrupt_artifact on a damaged header / block
  check_compat_fields(c, o.precision_given ? precision_text(o.kiln.precision, o.kiln.allow_tf32) : "", what);
}

}  // namespace

std::unique_ptr<Session> load_artifact(const fs::path& path, const EpOptions& o, const std::string& what) {
  check_compat(path, o, what);
  SessionOptions so = o.kiln;
  if (!o.precision_given) so.precision = parse_precision(artifact::read_compat(path).precision.substr(0, 4));
  return std::make_unique<Session>(Session::load(path, so));
}

std::optional<EpContextNode> find_epcontext(const OrtGraph* g) {
  auto nodes = graph_nodes(g);
  if (nodes.size() != 1) return std::nullopt;
  NodeInfo ni = node_info(nodes[0]);
  if (!is_kiln_epcontext(ni)) return std::nullopt;
  std::map<std::string, int64_t> ints;
  std::map<std::string, std::string> strings;
  read_attrs(nodes[0], ints, strings);
  return parse_epcontext(ni.name, ints, strings);
}

std::unique_ptr<Session> load_epcontext(const EpContextNode& ctx, const EpOptions& o, const OrtGraph* g) {
  std::string what = fmt::format("EPContext node '{}'", ctx.name);
  if (ctx.embed_mode == 0) {
    const char* model = nullptr;
    check(ORT_API(Graph_GetModelPath)(g, &model), "Graph_GetModelPath");
    fs::path dir = model && *model ? fs::path(model).parent_path() : fs::current_path();
    fs::path file = dir / ctx.cache;
    return load_artifact(file, o, what + " (artifact '" + file.string() + "')");
  }
  // Embedded: the reader maps files, so the bytes go to a private temporary file first.
  std::string tmpl = (fs::temp_directory_path() / "kiln-ctx-XXXXXX").string();
  int fd = ::mkstemp(tmpl.data());
  if (fd < 0) fail(ErrorCode::io, "cannot create a temporary file for {}: {}", what, std::strerror(errno));
  ::close(fd);
  struct Remove {
    fs::path p;
    ~Remove() {
      std::error_code ec;
      fs::remove(p, ec);
    }
  } remove{tmpl};
  atomic_write(tmpl, ctx.cache.data(), ctx.cache.size());
  return load_artifact(tmpl, o, what);
}

OrtNode* make_epcontext_node(KilnEp& ep, const Partition& part, const OrtNode* fused) {
  const EpOptions& o = ep.options;
  const SessionStats& st = part.session->stats();
  std::vector<uint8_t> bytes;
  if (!st.artifact_path.empty() && fs::exists(st.artifact_path)) {
    bytes = read_file(st.artifact_path);
  } else {
    // Compiled in memory (no cache) or not compiled yet (specialised on the
    // first run's shapes): compile the artifact for the EPContext node now.
    fs::path tmp = part.model;
    tmp.replace_extension(".kiln");
    kiln::compile(part.model, tmp, o.kiln);
    bytes = read_file(tmp);
    std::error_code ec;
    fs::remove(tmp, ec);
  }
  std::string cache;
  if (o.context_embed) {
    cache.assign(bytes.begin(), bytes.end());
  } else {
    fs::path model = o.context_file.empty() ? fs::path("model_ctx.onnx") : o.context_file;
    std::string file = model.stem().string() + "_" + part.fused_name + ".kiln";
    fs::path dir = model.parent_path().empty() ? fs::current_path() : model.parent_path();
    atomic_write(dir / file, bytes.data(), bytes.size());
    cache = file;
  }
  std::vector<OrtOpAttr*> attrs;
  auto add = [&](const char* name, const void* data, int len, OrtOpAttrType t) {
    OrtOpAttr* a = nullptr;
    check(ORT_API(CreateOpAttr)(name, data, len, t, &a), "CreateOpAttr");
    attrs.push_back(a);
  };
  // CreateOpAttr fails only when ORT is out of memory; the few attributes
  // made before such a failure are then left (kiln declares no ReleaseOpAttr
  // that it would call on that path alone).
  int64_t one = 1, embed = o.context_embed ? 1 : 0;
  std::string version = kiln::version();
  add("main_context", &one, 1, ORT_OP_ATTR_INT);
  add("embed_mode", &embed, 1, ORT_OP_ATTR_INT);
  add("ep_cache_context", cache.data(), static_cast<int>(cache.size()), ORT_OP_ATTR_STRING);
  add("source", kEpName, static_cast<int>(std::strlen(kEpName)), ORT_OP_ATTR_STRING);
  add("ep_sdk_version", version.data(), static_cast<int>(version.size()), ORT_OP_ATTR_STRING);
  add("partition_name", part.fused_name.data(), static_cast<int>(part.fused_name.size()), ORT_OP_ATTR_STRING);
  std::vector<const char*> ins, outs;
  for (auto& n : part.input_names) ins.push_back(n.c_str());
  for (auto& n : part.output_names) outs.push_back(n.c_str());
  OrtNode* node = nullptr;
  check(ORT_EDITOR_API(CreateNode)("EPContext", "com.microsoft", part.fused_name.c_str(), ins.data(), ins.size(),
                                   outs.data(), outs.size(), attrs.data(), attrs.size(), &node),
        "CreateNode");
  (void)fused;
  return node;
}

std::string compatibility_string(const EpOptions& o) {
  return fmt::format("kiln={};format={};target={};precision={}", kiln::version(), artifact::kFormatVersion,
                     o.kiln.target.name(), precision_text(o.kiln.precision, o.kiln.allow_tf32));
}

std::string compatibility_problem(const std::string& info) {
  std::map<std::string, std::string> f;
  size_t pos = 0;
  while (pos < info.size()) {
    size_t end = info.find(';', pos);
    std::string item = info.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    pos = end == std::string::npos ? info.size() : end + 1;
    if (auto eq = item.find('='); eq != std::string::npos) f[item.substr(0, eq)] = item.substr(eq + 1);
  }
  if (f["kiln"] != kiln::version())
    return fmt::format("kiln_version: compiled by kiln '{}', this is kiln {}", f["kiln"], kiln::version());
  if (f["format"] != std::to_string(artifact::kFormatVersion))
    return fmt::format("format_version: '{}', this kiln writes {}", f["format"], artifact::kFormatVersion);
  return "";
}

}  // namespace kiln::ort_ep
