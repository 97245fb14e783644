#include "ort_graph.h"

#include <cstring>
#include <set>

#include "kiln/dtype.h"
#include "onnx/onnx_pb.h"
#include "ort_util.h"
#include "support/error.h"
#include "support/hash.h"

namespace kiln::ort_ep {

std::string value_name(const OrtValueInfo* v) {
  const char* name = nullptr;
  check(ORT_API(GetValueInfoName)(v, &name), "GetValueInfoName");
  return name ? name : "";
}

TensorType value_type(const OrtValueInfo* v) {
  TensorType t;
  const OrtTypeInfo* ti = nullptr;
  check(ORT_API(GetValueInfoTypeInfo)(v, &ti), "GetValueInfoTypeInfo");
  if (!ti) return t;
  t.known = true;
  ONNXType kind = ONNX_TYPE_UNKNOWN;
  check(ORT_API(GetOnnxTypeFromTypeInfo)(ti, &kind), "GetOnnxTypeFromTypeInfo");
  const OrtTensorTypeAndShapeInfo* tt = nullptr;
  if (kind == ONNX_TYPE_TENSOR) check(ORT_API(CastTypeInfoToTensorInfo)(ti, &tt), "CastTypeInfoToTensorInfo");
  if (!tt) {
    t.tensor = false;
    return t;
  }
  ONNXTensorElementDataType et{};
  check(ORT_API(GetTensorElementType)(tt, &et), "GetTensorElementType");
  t.elem_type = et;
  size_t rank = 0;
  check(ORT_API(GetDimensionsCount)(tt, &rank), "GetDimensionsCount");
  t.dims.resize(rank);
  std::vector<const char*> syms(rank, nullptr);
  if (rank) {
    check(ORT_API(GetDimensions)(tt, t.dims.data(), rank), "GetDimensions");
    check(ORT_API(GetSymbolicDimensions)(tt, syms.data(), rank), "GetSymbolicDimensions");
  }
  for (auto* s : syms) t.symbols.emplace_back(s ? s : "");
  t.has_shape = true;  // ORT reports an unknown rank as rank 0 with no dims: told apart below by the caller's context
  return t;
}

namespace {

template <class CountFn, class GetFn, class T, class H>
std::vector<const T*> list_of(H* h, CountFn count, GetFn get, const char* what) {
  size_t n = 0;
  check(count(h, &n), what);
  std::vector<const T*> out(n, nullptr);
  if (n) check(get(h, out.data(), n), what);
  return out;
}

std::string c_str_or_empty(const char* s) { return s ? s : ""; }

}  // namespace

std::vector<const OrtNode*> graph_nodes(const OrtGraph* g) {
  return list_of<decltype(g_api->Graph_GetNumNodes), decltype(g_api->Graph_GetNodes), OrtNode>(
      g, ORT_API(Graph_GetNumNodes), ORT_API(Graph_GetNodes), "Graph_GetNodes");
}
std::vector<const OrtValueInfo*> graph_inputs(const OrtGraph* g) {
  return list_of<decltype(g_api->Graph_GetNumInputs), decltype(g_api->Graph_GetInputs), OrtValueInfo>(
      g, ORT_API(Graph_GetNumInputs), ORT_API(Graph_GetInputs), "Graph_GetInputs");
}
std::vector<const OrtValueInfo*> graph_outputs(const OrtGraph* g) {
  return list_of<decltype(g_api->Graph_GetNumOutputs), decltype(g_api->Graph_GetOutputs), OrtValueInfo>(
      g, ORT_API(Graph_GetNumOutputs), ORT_API(Graph_GetOutputs), "Graph_GetOutputs");
}
std::vector<const OrtValueInfo*> graph_initializers(const OrtGraph* g) {
  return list_of<decltype(g_api->Graph_GetNumInitializers), decltype(g_api->Graph_GetInitializers), OrtValueInfo>(
      g, ORT_API(Graph_GetNumInitializers), ORT_API(Graph_GetInitializers), "Graph_GetInitializers");
}

std::map<std::string, int64_t> graph_opsets(const OrtGraph* g) {
  size_t n = 0;
  check(ORT_API(Graph_GetNumOperatorSets)(g, &n), "Graph_GetNumOperatorSets");
  std::vector<const char*> domains(n);
  std::vector<int64_t> versions(n);
  if (n) check(ORT_API(Graph_GetOperatorSets)(g, domains.data(), versions.data(), n), "Graph_GetOperatorSets");
  std::map<std::string, int64_t> out;
  for (size_t i = 0; i < n; ++i) {
    std::string d = c_str_or_empty(domains[i]);
    out[d == "ai.onnx" ? "" : d] = versions[i];
  }
  return out;
}

bool is_subgraph(const OrtGraph* g) {
  const OrtNode* parent = nullptr;
  check(ORT_API(Graph_GetParentNode)(g, &parent), "Graph_GetParentNode");
  return parent != nullptr;
}

NodeInfo node_info(const OrtNode* n) {
  NodeInfo ni;
  ni.node = n;
  const char* s = nullptr;
  check(ORT_API(Node_GetName)(n, &s), "Node_GetName");
  ni.name = c_str_or_empty(s);
  check(ORT_API(Node_GetOperatorType)(n, &s), "Node_GetOperatorType");
  ni.op_type = c_str_or_empty(s);
  check(ORT_API(Node_GetDomain)(n, &s), "Node_GetDomain");
  ni.domain = c_str_or_empty(s);
  if (ni.domain == "ai.onnx") ni.domain.clear();
  ni.input_infos = list_of<decltype(g_api->Node_GetNumInputs), decltype(g_api->Node_GetInputs), OrtValueInfo>(
      n, ORT_API(Node_GetNumInputs), ORT_API(Node_GetInputs), "Node_GetInputs");
  ni.output_infos = list_of<decltype(g_api->Node_GetNumOutputs), decltype(g_api->Node_GetOutputs), OrtValueInfo>(
      n, ORT_API(Node_GetNumOutputs), ORT_API(Node_GetOutputs), "Node_GetOutputs");
  for (auto* v : ni.input_infos) ni.inputs.push_back(v ? value_name(v) : "");
  for (auto* v : ni.output_infos) ni.outputs.push_back(v ? value_name(v) : "");
  check(ORT_API(Node_GetNumSubgraphs)(n, &ni.subgraphs), "Node_GetNumSubgraphs");
  return ni;
}

std::vector<std::pair<std::string, const OrtGraph*>> node_subgraphs(const OrtNode* n) {
  size_t count = 0;
  check(ORT_API(Node_GetNumSubgraphs)(n, &count), "Node_GetNumSubgraphs");
  std::vector<const OrtGraph*> graphs(count);
  std::vector<const char*> names(count);
  if (count) check(ORT_API(Node_GetSubgraphs)(n, graphs.data(), count, names.data()), "Node_GetSubgraphs");
  std::vector<std::pair<std::string, const OrtGraph*>> out;
  for (size_t i = 0; i < count; ++i) out.emplace_back(c_str_or_empty(names[i]), graphs[i]);
  return out;
}

namespace {

/// A value's type into a ValueInfoProto (no type when ORT has none).
void fill_value_info(onnx::ValueInfoProto& vi, const OrtValueInfo* v, const std::string& where) {
  vi.set_name(value_name(v));
  TensorType t = value_type(v);
  if (!t.known) return;
  if (!t.tensor) fail(ErrorCode::unsupported, "{}: value '{}' is not a tensor (kiln takes tensors only)", where, vi.name());
  auto* tt = vi.mutable_type()->mutable_tensor_type();
  tt->set_elem_type(t.elem_type);
  auto* shape = tt->mutable_shape();
  for (size_t i = 0; i < t.dims.size(); ++i) {
    auto* d = shape->add_dim();
    if (t.dims[i] >= 0)
      d->set_dim_value(t.dims[i]);
    else if (!t.symbols[i].empty())
      d->set_dim_param(t.symbols[i]);
  }
}

/// How tensors are written: with their bytes (the model kiln compiles), or
/// without them and only hashed into `weights` (the partition's identity).
struct Sink {
  bool with_weights = true;
  Hasher128* weights = nullptr;
};

/// Raw bytes of a tensor OrtValue into a TensorProto (dims, type, raw_data).
void fill_tensor(onnx::TensorProto& tp, const OrtValue* value, const std::string& name, const std::string& where,
                 Sink& sink) {
  OrtTensorTypeAndShapeInfo* info = nullptr;
  check(ORT_API(GetTensorTypeAndShape)(value, &info), "GetTensorTypeAndShape");
  struct Free {
    OrtTensorTypeAndShapeInfo* p;
    ~Free() { ORT_API(ReleaseTensorTypeAndShapeInfo)(p); }
  } free_info{info};
  ONNXTensorElementDataType et{};
  check(ORT_API(GetTensorElementType)(info, &et), "GetTensorElementType");
  size_t rank = 0, count = 0;
  check(ORT_API(GetDimensionsCount)(info, &rank), "GetDimensionsCount");
  std::vector<int64_t> dims(rank);
  if (rank) check(ORT_API(GetDimensions)(info, dims.data(), rank), "GetDimensions");
  check(ORT_API(GetTensorShapeElementCount)(info, &count), "GetTensorShapeElementCount");
  tp.set_name(name);
  tp.set_data_type(et);
  for (auto d : dims) tp.add_dims(d);
  size_t elem = dtype_size(static_cast<DType>(et));
  if (et == ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING || elem == 0 || et == 21 || et == 22)
    fail(ErrorCode::unsupported, "{}: tensor '{}' has element type {} that kiln cannot take from ONNX Runtime", where,
         name, static_cast<int>(et));
  void* data = nullptr;
  check(ORT_API(GetTensorMutableData)(const_cast<OrtValue*>(value), &data), "GetTensorMutableData");
  if (sink.weights) {
    sink.weights->field(name);
    sink.weights->update(data, count * elem);
  }
  if (count && sink.with_weights) tp.set_raw_data(data, count * elem);
}

void fill_graph(onnx::GraphProto& gp, const OrtGraph* g, const std::string& name, Sink& sink);

/// The values ReadOpAttr wrote for an INTS / FLOATS attribute (unaligned bytes).
template <class T>
std::vector<T> unpack(const std::vector<char>& buf) {
  std::vector<T> out(buf.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), buf.data(), out.size() * sizeof(T));
  return out;
}

void fill_attribute(onnx::AttributeProto& ap, const OrtOpAttr* a, const NodeInfo& ni,
                    const std::map<std::string, const OrtGraph*>& subgraphs, Sink& sink) {
  const char* aname = nullptr;
  check(ORT_API(OpAttr_GetName)(a, &aname), "OpAttr_GetName");
  ap.set_name(c_str_or_empty(aname));
  OrtOpAttrType type{};
  check(ORT_API(OpAttr_GetType)(a, &type), "OpAttr_GetType");
  std::string where = "node '" + ni.name + "' (" + ni.op_type + ")";
  // ReadOpAttr: first ask for the size (an error status carrying it), then read.
  auto read = [&](std::vector<char>& buf) {
    size_t need = probe_attr_size(a, type);
    buf.assign(need, 0);
    if (need) check(ORT_API(ReadOpAttr)(a, type, buf.data(), buf.size(), &need), "ReadOpAttr");
    buf.resize(need);
  };
  std::vector<char> buf;
  switch (type) {
    case ORT_OP_ATTR_INT: {
      int64_t v = 0;
      size_t out = 0;
      check(ORT_API(ReadOpAttr)(a, type, &v, sizeof v, &out), "ReadOpAttr");
      ap.set_type(onnx::AttributeProto::INT);
      ap.set_i(v);
      return;
    }
    case ORT_OP_ATTR_FLOAT: {
      float v = 0;
      size_t out = 0;
      check(ORT_API(ReadOpAttr)(a, type, &v, sizeof v, &out), "ReadOpAttr");
      ap.set_type(onnx::AttributeProto::FLOAT);
      ap.set_f(v);
      return;
    }
    case ORT_OP_ATTR_INTS:
      read(buf);
      ap.set_type(onnx::AttributeProto::INTS);
      for (int64_t v : unpack<int64_t>(buf)) ap.add_ints(v);
      return;
    case ORT_OP_ATTR_FLOATS:
      read(buf);
      ap.set_type(onnx::AttributeProto::FLOATS);
      for (float v : unpack<float>(buf)) ap.add_floats(v);
      return;
    case ORT_OP_ATTR_STRING: {
      read(buf);
      while (!buf.empty() && buf.back() == '\0') buf.pop_back();
      ap.set_type(onnx::AttributeProto::STRING);
      ap.set_s(std::string(buf.begin(), buf.end()));
      return;
    }
    case ORT_OP_ATTR_STRINGS: {
      read(buf);
      ap.set_type(onnx::AttributeProto::STRINGS);
      size_t start = 0;
      for (size_t i = 0; i < buf.size(); ++i)
        if (buf[i] == '\0') {
          ap.add_strings(std::string(buf.data() + start, i - start));
          start = i + 1;
        }
      return;
    }
    case ORT_OP_ATTR_TENSOR: {
      OrtValue* v = nullptr;
      check(ORT_API(OpAttr_GetTensorAttributeAsOrtValue)(a, &v), "OpAttr_GetTensorAttributeAsOrtValue");
      struct Free {
        OrtValue* p;
        ~Free() { ORT_API(ReleaseValue)(p); }
      } free_v{v};
      ap.set_type(onnx::AttributeProto::TENSOR);
      fill_tensor(*ap.mutable_t(), v, ap.name(), where, sink);
      return;
    }
    case ORT_OP_ATTR_GRAPH: {
      auto it = subgraphs.find(ap.name());
      if (it == subgraphs.end())
        fail(ErrorCode::unsupported, "{}: ONNX Runtime gave no subgraph for attribute '{}'", where, ap.name());
      ap.set_type(onnx::AttributeProto::GRAPH);
      fill_graph(*ap.mutable_g(), it->second, ni.name + "_" + ap.name(), sink);
      return;
    }
    default:
      fail(ErrorCode::unsupported, "{}: attribute '{}' has a kind ({}) kiln cannot take from ONNX Runtime", where,
           ap.name(), static_cast<int>(type));
  }
}

void fill_node(onnx::NodeProto& np, const OrtNode* n, Sink& sink) {
  NodeInfo ni = node_info(n);
  np.set_name(ni.name);
  np.set_op_type(ni.op_type);
  if (!ni.domain.empty()) np.set_domain(ni.domain);
  for (auto& s : ni.inputs) np.add_input(s);
  // Trailing omitted outputs are dropped (ONNX allows that; "" keeps a slot).
  size_t nout = ni.outputs.size();
  while (nout && ni.outputs[nout - 1].empty()) --nout;
  for (size_t i = 0; i < nout; ++i) np.add_output(ni.outputs[i]);
  std::map<std::string, const OrtGraph*> subgraphs;
  for (auto& [attr, g] : node_subgraphs(n)) subgraphs[attr] = g;
  size_t nattr = 0;
  check(ORT_API(Node_GetNumAttributes)(n, &nattr), "Node_GetNumAttributes");
  std::vector<const OrtOpAttr*> attrs(nattr);
  if (nattr) check(ORT_API(Node_GetAttributes)(n, attrs.data(), nattr), "Node_GetAttributes");
  for (auto* a : attrs) fill_attribute(*np.add_attribute(), a, ni, subgraphs, sink);
}

void fill_graph(onnx::GraphProto& gp, const OrtGraph* g, const std::string& name, Sink& sink) {
  gp.set_name(name);
  // By name: ORT's order of initializers is not stable between processes,
  // and the bytes written must be (they are the cache key's model digest).
  std::map<std::string, const OrtValueInfo*> inits;
  for (auto* v : graph_initializers(g)) inits.emplace(value_name(v), v);
  std::set<std::string> constants;
  for (auto& [vname, v] : inits) {
    const OrtValue* value = nullptr;
    check(ORT_API(ValueInfo_GetInitializerValue)(v, &value), "ValueInfo_GetInitializerValue");
    if (!value) continue;
    constants.insert(vname);
    fill_tensor(*gp.add_initializer(), value, vname, "graph '" + name + "'", sink);
  }
  for (auto* v : graph_inputs(g)) {
    bool is_const = false;
    check(ORT_API(ValueInfo_IsConstantInitializer)(v, &is_const), "ValueInfo_IsConstantInitializer");
    std::string vname = value_name(v);
    if (is_const || constants.count(vname)) continue;
    fill_value_info(*gp.add_input(), v, "graph '" + name + "' input");
  }
  std::set<std::string> inputs_or_made = constants;
  for (auto& in : gp.input()) inputs_or_made.insert(in.name());
  auto nodes = graph_nodes(g);
  for (auto* n : nodes)
    for (auto* v : node_info(n).output_infos)
      if (v) inputs_or_made.insert(value_name(v));
  // Outer-scope values a subgraph reads (If / Loop bodies): ORT 1.24 leaves
  // them out of a partition's inputs; the model kiln compiles declares them.
  if (!is_subgraph(g))
    for (auto* n : nodes)
      for (auto* v : list_of<decltype(g_api->Node_GetNumImplicitInputs), decltype(g_api->Node_GetImplicitInputs),
                             OrtValueInfo>(n, ORT_API(Node_GetNumImplicitInputs), ORT_API(Node_GetImplicitInputs),
                                           "Node_GetImplicitInputs"))
        if (v && inputs_or_made.insert(value_name(v)).second)
          fill_value_info(*gp.add_input(), v, "graph '" + name + "' input");
  for (auto* v : graph_outputs(g)) fill_value_info(*gp.add_output(), v, "graph '" + name + "' output");
  for (auto* n : nodes) fill_node(*gp.add_node(), n, sink);
}

}  // namespace

namespace {

std::string model_bytes(const OrtGraph* g, const std::string& graph_name, Sink& sink) {
  onnx::ModelProto mp;
  int64_t ir = 0;
  check(ORT_API(Graph_GetOnnxIRVersion)(g, &ir), "Graph_GetOnnxIRVersion");
  mp.set_ir_version(ir > 0 ? ir : 8);
  mp.set_producer_name("onnxruntime (kiln plugin EP partition)");
  for (auto& [domain, version] : graph_opsets(g)) {
    auto* op = mp.add_opset_import();
    op->set_domain(domain);
    op->set_version(version);
  }
  fill_graph(*mp.mutable_graph(), g, graph_name, sink);
  std::string bytes;
  if (!mp.SerializeToString(&bytes))
    fail(ErrorCode::unsupported, "graph '{}' is too large to hand to kiln as one ONNX model (over 2 GiB)", graph_name);
  return bytes;
}

}  // namespace

std::string graph_to_model_bytes(const OrtGraph* g, const std::string& graph_name) {
  Sink sink;
  return model_bytes(g, graph_name, sink);
}

std::string partition_identity(const OrtGraph* g, const std::string& graph_name) {
  Hasher128 weights;
  Sink sink{false, &weights};
  std::string skeleton = model_bytes(g, graph_name, sink);
  Hasher128 h;
  h.field(skeleton);
  h.field(weights.hex_digest());
  return h.hex_digest();
}

}  // namespace kiln::ort_ep
