// ONNX ModelProto -> ir::Model. Name resolution follows the ONNX IR spec
// (docs/IR.md "Names Within a Graph"): a subgraph sees the names of its outer
// scopes; a name defined in a subgraph shadows nothing outside it.
#include "onnx/importer.h"

#include <google/protobuf/io/coded_stream.h>

#include <map>
#include <unordered_map>

#include "onnx/onnx_pb.h"
#include "onnx/parser.h"
#include "onnx/tensor_proto.h"
#include "support/error.h"
#include "support/file.h"

namespace kiln::onnx_import {

namespace fs = std::filesystem;

namespace {

class Importer : public ParseContext {
 public:
  Importer(ir::Model& m, fs::path base_dir, std::string what) : m_(m), base_dir_(std::move(base_dir)), what_(std::move(what)) {}

  ir::ValueId add_constant(const std::string& name_hint, Tensor t) override {
    ir::Value v;
    v.name = unique_name(name_hint);
    v.dtype = t.dtype();
    v.shape = ir::static_shape(t.shape());
    v.constant = std::move(t);
    return m_.add_value(std::move(v));
  }
  const ir::Value& value(ir::ValueId id) const override { return m_.value(id); }

  void import_model(const onnx::ModelProto& mp) {
    if (!mp.has_graph()) fail(ErrorCode::invalid_model, "{}: the model has no graph", what_);
    bool has_default = false;
    for (auto& os : mp.opset_import()) {
      std::string d = os.domain() == "ai.onnx" ? "" : os.domain();
      opsets_[d] = static_cast<int>(os.version());
      if (d.empty()) has_default = true;
    }
    if (!has_default) {
      if (mp.ir_version() >= 3 || mp.opset_import_size() > 0)
        fail(ErrorCode::invalid_model, "{}: the model imports no opset of the default ONNX domain", what_);
      opsets_[""] = 1;
    }
    m_.opset = opsets_[""];
    if (m_.opset < kMinOpset || m_.opset > kMaxOpset)
      fail(ErrorCode::unsupported, "{}: default-domain opset {} is not supported (kiln supports opsets {} to {})",
           what_, m_.opset, kMinOpset, kMaxOpset);
    m_.producer = mp.producer_name() + (mp.producer_version().empty() ? "" : " " + mp.producer_version());
    scopes_.emplace_back();
    import_graph(mp.graph(), m_.main, /*is_main=*/true);
  }

 private:
  std::string unique_name(const std::string& hint) {
    std::string n = hint;
    for (int i = 1; used_names_.count(n); ++i) n = hint + "__" + std::to_string(i);
    used_names_.insert({n, 0});
    return n;
  }

  ir::ValueId define(const std::string& name, ir::Value v) {
    v.name = name;
    used_names_[name] = 0;
    ir::ValueId id = m_.add_value(std::move(v));
    scopes_.back()[name] = id;
    return id;
  }

  ir::ValueId resolve(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return ir::kNoValue;
  }

  /// `input_name`: set for a main-graph input, whose unknown dims (a dim_value
  /// of -1, as Paddle exports write it, or a dim with neither value nor
  /// param, or the dim_param "?") get the symbol "<input>:<axis>" so that shapes can be bound and
  /// specialized per dim (and `--dim` can name them). Elsewhere -1 and
  /// missing dims stay anonymous (unknown, empty symbol).
  void apply_type(ir::Value& v, const onnx::TypeProto& tp, const std::string& where,
                  const std::string* input_name = nullptr) {
    if (tp.value_case() == onnx::TypeProto::VALUE_NOT_SET) return;  // untyped: left to inference
    if (!tp.has_tensor_type()) {
      fail(ErrorCode::unsupported, "{}: {} has a non-tensor type (sequence, map, optional or sparse), which kiln does not support",
           what_, where);
    }
    auto& tt = tp.tensor_type();
    if (tt.elem_type() != 0) v.dtype = dtype_from_onnx(tt.elem_type(), what_ + ": " + where);
    if (tt.has_shape()) {
      ir::Shape s;
      for (auto& d : tt.shape().dim()) {
        // paddle2onnx writes "?" for every unknown dim ([None, 3, '?', '?']): not one shared symbol.
        const bool unknown = d.has_dim_value() ? d.dim_value() == -1 : d.dim_param().empty() || d.dim_param() == "?";
        if (unknown) {
          s.push_back(ir::Dim::sym(input_name ? fmt::format("{}:{}", *input_name, s.size()) : std::string()));
        } else if (d.has_dim_value()) {
          if (d.dim_value() < 0)
            fail(ErrorCode::invalid_model, "{}: {} has a negative dimension {}", what_, where, d.dim_value());
          s.push_back(ir::Dim::known(d.dim_value()));
        } else {
          s.push_back(ir::Dim::sym(d.dim_param()));
        }
      }
      v.shape = std::move(s);
    }
  }

  void import_graph(const onnx::GraphProto& g, ir::Graph& out, bool is_main) {
    out.name = g.name();
    // Initializers first: a graph input with the same name is then a constant.
    for (int i = 0; i < g.initializer_size(); ++i) {
      auto& tp = g.initializer(i);
      std::string where = fmt::format("{}: initializer '{}'", what_, tp.name());
      if (tp.name().empty()) fail(ErrorCode::invalid_model, "{}: initializer #{} has no name", what_, i);
      ir::Value v;
      Tensor t = tensor_from_proto(tp, base_dir_, where);
      v.dtype = t.dtype();
      v.shape = ir::static_shape(t.shape());
      v.constant = std::move(t);
      define(tp.name(), std::move(v));
    }
    if (g.sparse_initializer_size() > 0)
      fail(ErrorCode::unsupported, "{}: sparse initializers are not supported", what_);
    for (auto& in : g.input()) {
      if (scopes_.back().count(in.name())) continue;  // overridable initializer: kept constant
      ir::Value v;
      apply_type(v, in.type(), fmt::format("graph input '{}'", in.name()), is_main ? &in.name() : nullptr);
      if (is_main && v.dtype == DType::undefined)
        fail(ErrorCode::invalid_model, "{}: graph input '{}' has no element type", what_, in.name());
      out.inputs.push_back(define(in.name(), std::move(v)));
    }
    for (auto& vi : g.value_info()) hints_[vi.name()] = &vi.type();
    for (int i = 0; i < g.node_size(); ++i) out.nodes.push_back(import_node(g.node(i), i));
    for (auto& o : g.output()) {
      ir::ValueId id = resolve(o.name());
      if (id == ir::kNoValue)
        fail(ErrorCode::invalid_model, "{}: graph '{}' output '{}' is not produced by any node, input or initializer",
             what_, g.name(), o.name());
      ir::Value& v = m_.value(id);
      ir::Value declared;
      apply_type(declared, o.type(), fmt::format("graph output '{}'", o.name()));
      if (v.dtype == DType::undefined) v.dtype = declared.dtype;
      if (!v.shape && declared.shape) v.shape = declared.shape;
      out.outputs.push_back(id);
    }
  }

  ir::Node import_node(const onnx::NodeProto& np, int index) {
    ir::Node n;
    n.op_type = np.op_type();
    n.domain = np.domain() == "ai.onnx" ? "" : np.domain();
    n.name = np.name().empty() ? fmt::format("{}_{}", np.op_type(), index) : np.name();
    auto os = opsets_.find(n.domain);
    if (os == opsets_.end())
      fail(ErrorCode::invalid_model, "{}: {} node '{}' uses domain '{}', which the model does not import", what_,
           n.op_type, n.name, n.domain);
    n.opset = os->second;
    const ParserEntry* pe = parsers().find(n.domain, n.op_type);
    if (!pe)
      fail(ErrorCode::unsupported, "unsupported operator {} (domain '{}', opset {}) at node '{}'", n.op_type,
           n.domain.empty() ? "ai.onnx" : n.domain, n.opset, n.name);
    if (n.opset < pe->min_opset || n.opset > pe->max_opset)
      fail(ErrorCode::unsupported, "{}: opset {} is not supported for {} (supported: {} to {})", n.label(), n.opset,
           n.op_type, pe->min_opset, pe->max_opset);
    for (auto& in : np.input()) {
      if (in.empty()) {
        n.inputs.push_back(ir::kNoValue);
        continue;
      }
      ir::ValueId id = resolve(in);
      if (id == ir::kNoValue)
        fail(ErrorCode::invalid_model, "{}: {}: input '{}' is not produced by any earlier node, graph input or initializer",
             what_, n.label(), in);
      n.inputs.push_back(id);
    }
    for (auto& a : np.attribute()) n.attrs[a.name()] = convert_attr(n, a);
    for (auto& o : np.output()) {
      if (o.empty()) {
        n.outputs.push_back(ir::kNoValue);
        continue;
      }
      if (scopes_.back().count(o))
        fail(ErrorCode::invalid_model, "{}: {}: output '{}' is already defined (ONNX graphs are single-assignment)",
             what_, n.label(), o);
      ir::Value v;
      auto h = hints_.find(o);
      if (h != hints_.end() && h->second->has_tensor_type()) apply_type(v, *h->second, fmt::format("value_info '{}'", o));
      n.outputs.push_back(define(o, std::move(v)));
    }
    while (!n.inputs.empty() && n.inputs.back() == ir::kNoValue) n.inputs.pop_back();
    if (pe->parse) pe->parse(n, *this);
    return n;
  }

  ir::AttrValue convert_attr(const ir::Node& n, const onnx::AttributeProto& a) {
    std::string where = fmt::format("{}: {} attribute '{}'", what_, n.label(), a.name());
    if (!a.ref_attr_name().empty())
      fail(ErrorCode::unsupported, "{}: attribute references (functions) are not supported", where);
    switch (a.type()) {
      case onnx::AttributeProto::INT: return static_cast<int64_t>(a.i());
      case onnx::AttributeProto::FLOAT: return a.f();
      case onnx::AttributeProto::STRING: return a.s();
      case onnx::AttributeProto::INTS: return std::vector<int64_t>(a.ints().begin(), a.ints().end());
      case onnx::AttributeProto::FLOATS: return std::vector<float>(a.floats().begin(), a.floats().end());
      case onnx::AttributeProto::STRINGS: return std::vector<std::string>(a.strings().begin(), a.strings().end());
      case onnx::AttributeProto::TENSOR: return tensor_from_proto(a.t(), base_dir_, where);
      case onnx::AttributeProto::GRAPH: {
        auto g = std::make_shared<ir::Graph>();
        scopes_.emplace_back();
        import_graph(a.g(), *g, /*is_main=*/false);
        scopes_.pop_back();
        return g;
      }
      case onnx::AttributeProto::UNDEFINED: {
        // Old exporters leave the type unset; infer it from the populated field.
        if (a.has_i()) return static_cast<int64_t>(a.i());
        if (a.has_f()) return a.f();
        if (a.has_s()) return a.s();
        if (a.ints_size()) return std::vector<int64_t>(a.ints().begin(), a.ints().end());
        if (a.floats_size()) return std::vector<float>(a.floats().begin(), a.floats().end());
        fail(ErrorCode::invalid_model, "{}: attribute has no type and no value", where);
      }
      default:
        fail(ErrorCode::unsupported, "{}: attribute type {} (tensors, graphs, sparse tensors or type protos lists) is not supported",
             where, static_cast<int>(a.type()));
    }
  }

  ir::Model& m_;
  fs::path base_dir_;
  std::string what_;
  std::map<std::string, int> opsets_;
  std::vector<std::unordered_map<std::string, ir::ValueId>> scopes_;
  std::unordered_map<std::string, int> used_names_;
  std::unordered_map<std::string, const onnx::TypeProto*> hints_;
};

}  // namespace

ir::Model import_bytes(const void* data, size_t size, const fs::path& base_dir, const std::string& what) {
  onnx::ModelProto mp;
  google::protobuf::io::CodedInputStream cis(static_cast<const uint8_t*>(data), static_cast<int>(std::min<size_t>(size, INT32_MAX)));
  cis.SetTotalBytesLimit(INT32_MAX);
  if (size > static_cast<size_t>(INT32_MAX))
    fail(ErrorCode::unsupported, "{}: models larger than 2 GiB must keep their weights as external data", what);
  if (size == 0) fail(ErrorCode::invalid_model, "{}: the file is empty, not an ONNX model", what);
  if (!mp.ParseFromCodedStream(&cis) || !cis.ConsumedEntireMessage())
    fail(ErrorCode::invalid_model, "{}: not a valid ONNX model (the protobuf does not parse: the file is truncated, damaged or not ONNX)",
         what);
  if (!mp.has_graph() && mp.ir_version() == 0)
    fail(ErrorCode::invalid_model, "{}: not an ONNX model (no ir_version and no graph)", what);
  ir::Model m;
  Importer imp(m, base_dir, what);
  imp.import_model(mp);
  ir::verify(m);
  return m;
}

ir::Model import_file(const fs::path& path) {
  auto bytes = read_file(path);
  fs::path base = path.has_parent_path() ? path.parent_path() : fs::path(".");
  return import_bytes(bytes.data(), bytes.size(), base, "'" + path.string() + "'");
}

}  // namespace kiln::onnx_import
