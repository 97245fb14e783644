// lower_ops: every supported ONNX node of every graph -> kiln.cpu node(s).
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include "targets/cpu/compile/lower_ops.h"

namespace kiln::targets::cpu {

namespace {

LowerFn lowering_of(const ir::Node& n) {
  if (!(n.domain.empty() || n.domain == "ai.onnx")) return nullptr;
  static const std::pair<std::string_view, LowerFn> table[] = {
      {"Conv", lower_conv},
      {"MatMul", lower_matmul},
      {"Gemm", lower_matmul},
      {"MaxPool", lower_pool},
      {"AveragePool", lower_pool},
      {"GlobalAveragePool", lower_pool},
      {"GlobalMaxPool", lower_pool},
      {"Add", lower_binary},
      {"Sub", lower_binary},
      {"Mul", lower_binary},
      {"Div", lower_binary},
      {"Max", lower_binary},
      {"Min", lower_binary},
      {"Softmax", lower_softmax},
      {"LayerNormalization", lower_layernorm},
      {"Concat", lower_concat},
      {"Split", lower_split},
      {"Resize", lower_resize},
  };
  for (auto& [op, f] : table)
    if (op == n.op_type) return f;
  return lower_eltwise;  // returns nullopt for anything that is not an activation
}

/// Debugging aid: KILN_DEBUG_CPU_SKIP="Softmax,MatMul" keeps those ONNX ops
/// on the reference kernels (to bisect a numerical difference).
bool skipped(const std::string& op) {
  static const std::string list = [] {
    const char* e = std::getenv("KILN_DEBUG_CPU_SKIP");
    return e ? "," + std::string(e) + "," : std::string();
  }();
  return !list.empty() && list.find("," + op + ",") != std::string::npos;
}

int lower_graph(ir::Model& m, ir::Graph& g) {
  int lowered = 0;
  std::vector<ir::Node> out;
  out.reserve(g.nodes.size());
  for (auto& n : g.nodes) {
    for (auto& [k, a] : n.attrs)
      if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a)) lowered += lower_graph(m, **sg);
    std::optional<std::vector<ir::Node>> rep;
    if (LowerFn f = lowering_of(n); f && !skipped(n.op_type)) rep = f(m, n);
    if (!rep) {
      out.push_back(std::move(n));
      continue;
    }
    ++lowered;
    for (auto& r : *rep) out.push_back(std::move(r));
  }
  g.nodes = std::move(out);
  return lowered;
}

}  // namespace

int lower_ops(ir::Model& m) { return lower_graph(m, m.main); }

}  // namespace kiln::targets::cpu
