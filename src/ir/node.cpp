#include <fmt/format.h>

#include "ir/graph.h"
#include "support/error.h"

namespace kiln::ir {

namespace {
template <class T>
const T& get(const Node& n, const std::string& a, const char* type) {
  auto it = n.attrs.find(a);
  if (it == n.attrs.end()) fail(ErrorCode::invalid_model, "{}: required attribute '{}' is missing", n.label(), a);
  const T* v = std::get_if<T>(&it->second);
  if (!v) fail(ErrorCode::invalid_model, "{}: attribute '{}' must be of type {}", n.label(), a, type);
  return *v;
}
}  // namespace

std::string Node::label() const {
  return fmt::format("{}{} node '{}'", domain.empty() ? "" : domain + ".", op_type, name);
}

int64_t Node::i(const std::string& a) const { return get<int64_t>(*this, a, "int"); }
int64_t Node::i(const std::string& a, int64_t def) const { return has(a) ? i(a) : def; }
float Node::f(const std::string& a) const { return get<float>(*this, a, "float"); }
float Node::f(const std::string& a, float def) const { return has(a) ? f(a) : def; }
std::string Node::s(const std::string& a, const std::string& def) const {
  return has(a) ? get<std::string>(*this, a, "string") : def;
}
std::vector<int64_t> Node::ints(const std::string& a, std::vector<int64_t> def) const {
  return has(a) ? get<std::vector<int64_t>>(*this, a, "ints") : def;
}
std::vector<float> Node::floats(const std::string& a, std::vector<float> def) const {
  return has(a) ? get<std::vector<float>>(*this, a, "floats") : def;
}
const Tensor& Node::tensor(const std::string& a) const { return get<Tensor>(*this, a, "tensor"); }
const Graph& Node::graph(const std::string& a) const { return *get<std::shared_ptr<Graph>>(*this, a, "graph"); }

namespace {
void clone_subgraphs(Graph& g) {
  for (auto& n : g.nodes)
    for (auto& [k, a] : n.attrs)
      if (auto* sg = std::get_if<std::shared_ptr<Graph>>(&a)) {
        *sg = std::make_shared<Graph>(**sg);
        clone_subgraphs(**sg);
      }
}
}  // namespace

bool has_empty_tensor(const Model& m, const Node& n) {
  auto empty = [&](ValueId v) {
    if (v == kNoValue || !m.value(v).shape) return false;
    for (auto& d : *m.value(v).shape)
      if (d.is_static() && d.value == 0) return true;
    return false;
  };
  for (auto v : n.inputs)
    if (empty(v)) return true;
  for (auto v : n.outputs)
    if (empty(v)) return true;
  return false;
}

Model deep_copy(const Model& m) {
  Model out = m;
  clone_subgraphs(out.main);
  return out;
}

}  // namespace kiln::ir
