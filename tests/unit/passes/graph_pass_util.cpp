#include "graph_pass_util.h"

#include "onnx/importer.h"
#include "passes/passes.h"

namespace kiln::testing {

ir::Model import_inferred(const ModelBuilder& b) {
  auto bytes = b.bytes();
  ir::Model m = onnx_import::import_bytes(bytes.data(), bytes.size(), ".", "test");
  passes::infer_and_fold(m);
  return m;
}

std::vector<std::string> op_types(const ir::Model& m) {
  std::vector<std::string> out;
  for (auto& n : m.main.nodes) out.push_back(n.domain.empty() ? n.op_type : n.domain + "." + n.op_type);
  return out;
}

ir::ValueId value_named(const ir::Model& m, const std::string& name) {
  for (size_t i = 0; i < m.values.size(); ++i)
    if (m.values[i].name == name) return static_cast<ir::ValueId>(i);
  return ir::kNoValue;
}

const ir::Node* producer(const ir::Model& m, const std::string& name) {
  ir::ValueId v = value_named(m, name);
  for (auto& n : m.main.nodes)
    for (auto o : n.outputs)
      if (o == v && v != ir::kNoValue) return &n;
  return nullptr;
}

std::vector<float> constant_floats(const ir::Model& m, ir::ValueId v) {
  const Tensor& t = *m.value(v).constant;
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

void attr_float(onnx::NodeProto& n, const std::string& name, float v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

void attr_string(onnx::NodeProto& n, const std::string& name, const std::string& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

}  // namespace kiln::testing
