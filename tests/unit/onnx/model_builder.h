// Builds small ONNX models in tests with the ONNX protobuf classes.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/tensor.h"
#include "onnx/onnx_pb.h"

namespace kiln::testing {

class ModelBuilder {
 public:
  explicit ModelBuilder(int opset = 17) {
    model_.set_ir_version(8);
    model_.set_producer_name("kiln-tests");
    auto* os = model_.add_opset_import();
    os->set_domain("");
    os->set_version(opset);
    model_.mutable_graph()->set_name("test");
  }
  onnx::ModelProto& proto() { return model_; }
  onnx::GraphProto& graph() { return *model_.mutable_graph(); }

  /// Graph input; a negative dim is symbolic with name `sym` (or "N").
  ModelBuilder& input(const std::string& name, int elem_type, const std::vector<int64_t>& dims,
                      const std::string& sym = "N") {
    fill_type(graph().add_input(), name, elem_type, dims, sym);
    return *this;
  }
  ModelBuilder& output(const std::string& name, int elem_type = 0, const std::vector<int64_t>& dims = {}) {
    auto* v = graph().add_output();
    v->set_name(name);
    if (elem_type) fill_type(v, name, elem_type, dims, "N");
    return *this;
  }
  /// Float32 initializer stored as raw_data.
  ModelBuilder& initializer(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& vals) {
    auto* t = graph().add_initializer();
    t->set_name(name);
    t->set_data_type(1);
    for (auto d : dims) t->add_dims(d);
    t->set_raw_data(std::string(reinterpret_cast<const char*>(vals.data()), vals.size() * 4));
    return *this;
  }
  ModelBuilder& initializer_i64(const std::string& name, const std::vector<int64_t>& dims, const std::vector<int64_t>& vals) {
    auto* t = graph().add_initializer();
    t->set_name(name);
    t->set_data_type(7);
    for (auto d : dims) t->add_dims(d);
    for (auto v : vals) t->add_int64_data(v);
    return *this;
  }
  onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& ins, const std::vector<std::string>& outs,
                        const std::string& name = "") {
    auto* n = graph().add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? op + "_" + std::to_string(graph().node_size()) : name);
    for (auto& i : ins) n->add_input(i);
    for (auto& o : outs) n->add_output(o);
    return *n;
  }
  static void attr_int(onnx::NodeProto& n, const std::string& name, int64_t v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr_ints(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (auto x : v) a->add_ints(x);
  }
  std::string bytes() const { return model_.SerializeAsString(); }
  void save(const std::filesystem::path& p) const;

 private:
  static void fill_type(onnx::ValueInfoProto* v, const std::string& name, int elem_type, const std::vector<int64_t>& dims,
                        const std::string& sym) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem_type);
    auto* shape = tt->mutable_shape();
    for (auto d : dims) {
      auto* dim = shape->add_dim();
      if (d >= 0) dim->set_dim_value(d);
      else dim->set_dim_param(sym);
    }
  }
  onnx::ModelProto model_;
};

/// Types graph input/output `v` as `name`, ONNX elem type `elem`, with dims
/// `dims`: a negative dim is symbolic, named syms[i] (one symbol per axis).
inline void typed(onnx::ValueInfoProto* v, const std::string& name, int elem, const std::vector<int64_t>& dims,
                  const std::vector<std::string>& syms) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  for (size_t i = 0; i < dims.size(); ++i) {
    auto* d = tt->mutable_shape()->add_dim();
    if (dims[i] >= 0) d->set_dim_value(dims[i]);
    else d->set_dim_param(syms[i]);
  }
}

/// A fresh empty directory under the system temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::filesystem::path& path() const { return p_; }
  std::filesystem::path operator/(const std::string& s) const { return p_ / s; }

 private:
  std::filesystem::path p_;
};

/// A small MLP model: x[N,4] -> MatMul(W 4x3) -> Add(b[3]) -> Relu -> y[N,3].
/// W and b are deterministic (W[i][j] = 0.1*(i+1) - 0.2*j, b = {0.5,-0.25,0}).
ModelBuilder mlp_model(float w_scale = 1.0f);

}  // namespace kiln::testing
