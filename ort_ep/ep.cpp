// The kiln OrtEp: GetCapability, Compile (through kiln's cache), Compute.
#include "ep.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>

#include "artifact/artifact.h"
#include "cache/maintenance.h"
#include "epcontext.h"
#include "kiln/compile.h"
#include "ort_graph.h"
#include "ort_util.h"
#include "support/error.h"
#include "support/file.h"

namespace kiln::ort_ep {

namespace fs = std::filesystem;

namespace {

/// A private temporary folder (mkdtemp) for a partition's .onnx.
fs::path make_temp_dir() {
  std::string tmpl = (fs::temp_directory_path() / "kiln-ort-XXXXXX").string();
  if (!::mkdtemp(tmpl.data()))
    fail(ErrorCode::io, "cannot create a temporary folder under '{}': {}", fs::temp_directory_path().string(),
         std::strerror(errno));
  return tmpl;
}

/// Where a partition's .onnx lives: "<cache_dir>/ort-partitions/<identity>.onnx",
/// written once (a later session, in any process, finds it by the graph's
/// identity without serialising the weights again, and kiln's digest memo
/// then makes its cache lookup a stat). Without a usable cache directory: a
/// private temporary folder removed with the partition.
fs::path partition_model(const EpOptions& o, const OrtGraph* g, Partition& part) {
  std::string id = partition_identity(g, part.fused_name);
  fs::path dir;
  std::string why;
  if (o.kiln.use_cache) {
    dir = (o.kiln.cache_dir ? *o.kiln.cache_dir : default_cache_dir()) / cache::kPartitionDir;
    if (!ensure_writable_dir(dir, &why)) dir.clear();
  }
  if (dir.empty()) dir = part.model_dir = make_temp_dir();
  fs::path model = dir / (id + ".onnx");
  if (!fs::exists(model)) {
    std::string bytes = graph_to_model_bytes(g, part.fused_name);
    atomic_write(model, bytes.data(), bytes.size());
  }
  return model;
}

}  // namespace

void fill_io(Partition& p, const OrtNode* fused) {
  NodeInfo fi = node_info(fused);
  p.input_names = fi.inputs;
  p.output_names = fi.outputs;
  std::set<std::string> takes;
  for (auto& t : p.session->inputs()) takes.insert(t.name);
  for (auto& n : p.input_names) p.input_used.push_back(takes.count(n) > 0);
  std::map<std::string, TensorInfo> gives;
  for (auto& t : p.session->outputs()) gives.emplace(t.name, t);
  bool all_static = true;
  for (auto& n : p.output_names) {
    auto it = gives.find(n);
    if (it == gives.end())
      fail(ErrorCode::invalid_model, "kiln partition '{}': the compiled program has no output '{}' that ONNX Runtime "
           "expects from it", p.fused_name, n);
    p.output_dtypes[n] = it->second.dtype;
    for (auto d : it->second.dims) all_static &= d >= 0;
  }
  // A static program of one shape: ORT's outputs can be allocated before
  // every run without asking the session (a bucketed one may pad or
  // specialise, so it is asked per run).
  if (all_static && p.session->buckets().dims.empty())
    for (auto& n : p.output_names) p.static_shapes[n] = gives.at(n).dims;
  // KILN_ORT_EP_COPY_OUTPUTS=1: the copy path (kiln's outputs copied into
  // ORT's after the run), for measuring what writing in place saves.
  const char* copy = std::getenv("KILN_ORT_EP_COPY_OUTPUTS");
  p.copy_outputs = copy && std::string(copy) == "1";
}

std::shared_ptr<Partition> compile_partition(KilnEp& ep, const OrtGraph* g, const OrtNode* fused, size_t count) {
  const EpOptions& o = ep.options;
  auto part = std::make_shared<Partition>();
  const char* fname = nullptr;
  check(ORT_API(Node_GetName)(fused, &fname), "Node_GetName");
  part->fused_name = fname ? fname : "kiln_partition";
  if (o.load_model_path) {
    if (count != 1)
      fail(ErrorCode::invalid_option,
           "EP option 'load_model_path' names one .kiln artifact, but kiln takes {} partitions of this model; "
           "a loaded artifact can serve only a model kiln takes whole (1 partition)",
           count);
    part->session = load_artifact(*o.load_model_path, o, "EP option 'load_model_path'");
    log_to(ep.logger, ORT_LOGGING_LEVEL_INFO,
           fmt::format("kiln partition '{}': loaded '{}' (load_model_path; no compile, load {:.1f} ms)",
                       part->fused_name, o.load_model_path->string(), part->session->stats().load_ms));
    fill_io(*part, fused);
    return part;
  }
  if (auto ctx = find_epcontext(g)) {  // a node of an EPContext model: load its artifact
    part->session = load_epcontext(*ctx, o, g);
    log_to(ep.logger, ORT_LOGGING_LEVEL_INFO,
           fmt::format("kiln partition '{}': loaded from EPContext node '{}' (no compile, load {:.1f} ms)",
                       part->fused_name, ctx->name, part->session->stats().load_ms));
    fill_io(*part, fused);
    return part;
  }
  if (o.save_model_path && count != 1)
    fail(ErrorCode::invalid_option,
         "EP option 'save_model_path' writes one .kiln artifact, but kiln takes {} partitions of this model", count);
  fs::path model = part->model = partition_model(o, g, *part);
  part->session = std::make_unique<Session>(model, o.kiln);
  const SessionStats& st = part->session->stats();
  log_to(ep.logger, ORT_LOGGING_LEVEL_INFO,
         fmt::format("kiln partition '{}': {} (compile {:.0f} ms, load {:.1f} ms)", part->fused_name,
                     st.cache == SessionStats::Cache::hit    ? "loaded from kiln's cache"
                     : st.cache == SessionStats::Cache::miss ? "compiled and cached"
                                                             : "compiled in memory",
                     st.compile_ms, st.load_ms));
  for (auto& note : st.notes) log_to(ep.logger, ORT_LOGGING_LEVEL_INFO, "kiln: " + note);
  if (o.save_model_path) {
    if (!st.artifact_path.empty() && fs::exists(st.artifact_path)) {
      auto data = read_file(st.artifact_path);
      atomic_write(*o.save_model_path, data.data(), data.size());
    } else {
      kiln::compile(model, *o.save_model_path, o.kiln);
    }
  }
  fill_io(*part, fused);
  return part;
}

namespace {

const char* ORT_API_CALL_GetName(const OrtEp*) {
  mark_callback("OrtEp::GetName");
  return kEpName;
}

OrtStatus* GetCapability(OrtEp* this_ptr, const OrtGraph* graph, OrtEpGraphSupportInfo* info) {
  mark_callback("OrtEp::GetCapability");
  return guarded([&] {
    auto& ep = *static_cast<KilnEp*>(this_ptr);
    OrtNodeFusionOptions fo{kKilnOrtApiVersion, true};
    for (auto& group : claim_groups(graph, ep.options, ep.logger))
      check(ORT_EP_API(EpGraphSupportInfo_AddNodesToFuse)(info, group.data(), group.size(), &fo),
            "EpGraphSupportInfo_AddNodesToFuse");
  });
}

OrtStatus* CreateState(OrtNodeComputeInfo* this_ptr, OrtNodeComputeContext* ctx, void** state) {
  mark_callback("OrtNodeComputeInfo::CreateState");
  return guarded([&] {
    auto* ci = static_cast<ComputeInfo*>(this_ptr);
    const char* name = ORT_EP_API(NodeComputeContext_NodeName)(ctx);
    if (name && ci->part->fused_name != name)
      fail(ErrorCode::internal, "kiln: compute state for node '{}' asked of partition '{}'", name, ci->part->fused_name);
    *state = ci->part.get();
  });
}

/// ORT's input `i` of a partition viewed as a kiln Tensor (not copied).
Tensor input_view(OrtKernelContext* kctx, size_t i) {
  const OrtValue* v = nullptr;
  check(ORT_API(KernelContext_GetInput)(kctx, i, &v), "KernelContext_GetInput");
  OrtTensorTypeAndShapeInfo* info = nullptr;
  check(ORT_API(GetTensorTypeAndShape)(v, &info), "GetTensorTypeAndShape");
  ONNXTensorElementDataType et{};
  size_t rank = 0;
  OrtStatus* st = ORT_API(GetTensorElementType)(info, &et);
  if (!st) st = ORT_API(GetDimensionsCount)(info, &rank);
  std::vector<int64_t> dims(rank);
  if (!st && rank) st = ORT_API(GetDimensions)(info, dims.data(), rank);
  ORT_API(ReleaseTensorTypeAndShapeInfo)(info);
  check(st, "reading an input's type");
  void* data = nullptr;
  check(ORT_API(GetTensorMutableData)(const_cast<OrtValue*>(v), &data), "GetTensorMutableData");
  return Tensor::view(static_cast<DType>(et), std::move(dims), data, nullptr);
}

/// ORT's output `j` of a partition, allocated by ORT with `shape`, viewed as
/// a kiln Tensor of `dtype`.
Tensor output_view(OrtKernelContext* kctx, size_t j, DType dtype, const std::vector<int64_t>& shape) {
  OrtValue* ov = nullptr;
  check(ORT_API(KernelContext_GetOutput)(kctx, j, shape.data(), shape.size(), &ov), "KernelContext_GetOutput");
  void* dst = nullptr;
  check(ORT_API(GetTensorMutableData)(ov, &dst), "GetTensorMutableData");
  return Tensor::view(dtype, shape, dst, nullptr);
}

/// Runs one partition: ORT's input tensors are viewed (not copied). When
/// kiln can tell every output's shape before running (a static program, or
/// the program of these shapes is held: Session::output_shapes), ORT
/// allocates the outputs first and kiln writes into them (Session::run_into:
/// no host copy of kiln's own, the cuda target's device-to-host copies land
/// there); otherwise kiln's outputs are copied into the tensors ORT
/// allocates after the run.
OrtStatus* Compute(OrtNodeComputeInfo*, void* state, OrtKernelContext* kctx) {
  mark_callback("OrtNodeComputeInfo::Compute");
  return guarded([&] {
    auto& part = *static_cast<Partition*>(state);
    size_t nin = 0, nout = 0;
    check(ORT_API(KernelContext_GetInputCount)(kctx, &nin), "KernelContext_GetInputCount");
    check(ORT_API(KernelContext_GetOutputCount)(kctx, &nout), "KernelContext_GetOutputCount");
    if (nin != part.input_names.size() || nout != part.output_names.size())
      fail(ErrorCode::internal, "kiln partition '{}': ORT passes {} inputs / {} outputs, kiln expects {} / {}",
           part.fused_name, nin, nout, part.input_names.size(), part.output_names.size());
    std::map<std::string, Tensor> feeds;
    for (size_t i = 0; i < nin; ++i)
      if (part.input_used[i]) feeds.emplace(part.input_names[i], input_view(kctx, i));
    std::map<std::string, std::vector<int64_t>> shapes =
        part.static_shapes.empty() ? part.session->output_shapes(feeds) : part.static_shapes;
    bool known = true;
    for (auto& n : part.output_names) known &= shapes.count(n) > 0;
    if (known && !part.copy_outputs) {
      std::map<std::string, Tensor> outs;
      for (size_t j = 0; j < nout; ++j) {
        const std::string& n = part.output_names[j];
        outs.emplace(n, output_view(kctx, j, part.output_dtypes.at(n), shapes.at(n)));
      }
      part.session->run_into(feeds, outs);
      return;
    }
    auto outs = part.session->run(feeds);
    for (size_t j = 0; j < nout; ++j) {
      const Tensor& t = outs.at(part.output_names[j]);
      Tensor dst = output_view(kctx, j, t.dtype(), t.shape());
      if (t.nbytes()) std::memcpy(dst.raw(), t.raw(), t.nbytes());
    }
  });
}

void ReleaseState(OrtNodeComputeInfo*, void*) { mark_callback("OrtNodeComputeInfo::ReleaseState"); }

OrtStatus* Compile(OrtEp* this_ptr, const OrtGraph** graphs, const OrtNode** fused, size_t count,
                   OrtNodeComputeInfo** infos, OrtNode** ep_context_nodes) {
  mark_callback("OrtEp::Compile");
  for (size_t i = 0; i < count; ++i) infos[i] = nullptr;
  OrtStatus* st = guarded([&] {
    auto& ep = *static_cast<KilnEp*>(this_ptr);
    for (size_t i = 0; i < count; ++i) {
      auto* ci = new ComputeInfo();
      ci->ort_version_supported = kKilnOrtApiVersion;
      ci->CreateState = CreateState;
      ci->Compute = Compute;
      ci->ReleaseState = ReleaseState;
      infos[i] = ci;
      ci->part = compile_partition(ep, graphs[i], fused[i], count);
      if (ep.options.context_enable && ep_context_nodes)
        ep_context_nodes[i] = make_epcontext_node(ep, *ci->part, fused[i]);
    }
  });
  if (st)
    for (size_t i = 0; i < count; ++i) {
      delete static_cast<ComputeInfo*>(infos[i]);
      infos[i] = nullptr;
    }
  return st;
}

void ReleaseNodeComputeInfos(OrtEp*, OrtNodeComputeInfo** infos, size_t n) {
  mark_callback("OrtEp::ReleaseNodeComputeInfos");
  for (size_t i = 0; i < n; ++i) delete static_cast<ComputeInfo*>(infos[i]);
}

const char* GetCompiledModelCompatibilityInfo(OrtEp* this_ptr, const OrtGraph*) {
  mark_callback("OrtEp::GetCompiledModelCompatibilityInfo");
  auto& ep = *static_cast<KilnEp*>(this_ptr);
  ep.compat_info = compatibility_string(ep.options);
  return ep.compat_info.c_str();
}

}  // namespace

Partition::~Partition() {
  session.reset();
  if (!model_dir.empty()) {
    std::error_code ec;
    fs::remove_all(model_dir, ec);
  }
}

KilnEp::KilnEp(EpOptions o, const OrtLogger* l) : OrtEp{}, options(std::move(o)), logger(l) {
  ort_version_supported = kKilnOrtApiVersion;
  GetName = ORT_API_CALL_GetName;
  this->GetCapability = ort_ep::GetCapability;
  this->Compile = ort_ep::Compile;
  this->ReleaseNodeComputeInfos = ort_ep::ReleaseNodeComputeInfos;
  this->GetCompiledModelCompatibilityInfo = ort_ep::GetCompiledModelCompatibilityInfo;
}

}  // namespace kiln::ort_ep
