// lower_ops: every supported ONNX node of every graph -> kiln.cpu node(s).
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "targets/cpu/compile/lower_ops.h"

namespace kiln::targets::cpu {

namespace {

LowerFn lowering_of(const ir::Node& n) {
  if (n.domain == "com.microsoft" && n.op_type == "DynamicQuantizeLSTM") return lower_dynamic_quantize_lstm;
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
      {"InstanceNormalization", lower_instancenorm},
      {"Concat", lower_concat},
      {"Split", lower_split},
      {"Resize", lower_resize},
      {"BatchNormalization", lower_batchnorm},
      {"LSTM", lower_lstm},
      {"MatMulInteger", lower_matmul_integer},
      {"ConvInteger", lower_conv_integer},
      {"DynamicQuantizeLinear", lower_dynamic_quantize_linear},
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

int lower_graph(ir::Model& m, ir::Graph& g, std::vector<Lowered>* elementwise) {
  int lowered = 0;
  std::vector<ir::Node> out;
  out.reserve(g.nodes.size());
  for (auto& n : g.nodes) {
    for (auto& [k, a] : n.attrs)
      if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a)) lowered += lower_graph(m, **sg, elementwise);
    std::optional<std::vector<ir::Node>> rep;
    if (LowerFn f = lowering_of(n); f && !skipped(n.op_type) && !ir::has_empty_tensor(m, n)) rep = f(m, n);  // oneDNN cannot plan 0-sized dims (SIGFPE)
    if (!rep) {
      out.push_back(std::move(n));
      continue;
    }
    ++lowered;
    if (elementwise && rep->size() == 1 && (is_cpu((*rep)[0], "Eltwise") || is_cpu((*rep)[0], "Binary")))
      elementwise->push_back({(*rep)[0], n});
    for (auto& r : *rep) out.push_back(std::move(r));
  }
  g.nodes = std::move(out);
  return lowered;
}

}  // namespace

int lower_ops(ir::Model& m, std::vector<Lowered>* elementwise) { return lower_graph(m, m.main, elementwise); }

namespace {

int restore_graph(ir::Model& m, ir::Graph& g, const std::map<ir::ValueId, const Lowered*>& by_output,
                  int64_t max_elems) {
  int restored = 0;
  for (auto& n : g.nodes) {
    for (auto& [k, a] : n.attrs)
      if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a)) restored += restore_graph(m, **sg, by_output, max_elems);
    if (!(is_cpu(n, "Eltwise") || is_cpu(n, "Binary")) || n.outputs.size() != 1) continue;
    auto it = by_output.find(n.outputs[0]);
    if (it == by_output.end()) continue;
    const ir::Node& low = it->second->lowered;
    // Still exactly as lowered: same operator, inputs and post-ops (no fusion,
    // no blocked twin read or written).
    if (low.op_type != n.op_type || low.inputs != n.inputs || read_post_ops(low).size() != read_post_ops(n).size())
      continue;
    auto dims = static_dims(m, n.outputs[0]);
    int64_t elems = 1;
    for (auto d : dims ? *dims : std::vector<int64_t>{}) elems *= d;
    if (!dims || elems >= max_elems) continue;
    n = it->second->original;
    ++restored;
  }
  return restored;
}

}  // namespace

int restore_small_elementwise(ir::Model& m, const std::vector<Lowered>& elementwise, int64_t max_elems) {
  std::map<ir::ValueId, const Lowered*> by_output;
  for (auto& l : elementwise) by_output[l.lowered.outputs[0]] = &l;
  return restore_graph(m, m.main, by_output, max_elems);
}

}  // namespace kiln::targets::cpu
