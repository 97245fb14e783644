// Loss operators (codegen.h: gen_loss): NegativeLogLikelihoodLoss, and
// SoftmaxCrossEntropyLoss as LogSoftmax over axis 1 followed by the same
// loss. Semantics of src/ops/loss.cpp: scores viewed as [N, C, inner],
// targets as [N, inner]; an ignored position has loss 0 and weight 0; mean
// divides by the total weight. Float32 scores; sum / mean accumulate in
// double in one block (losses are small tensors).
#include <fmt/format.h>

#include "support/error.h"
#include "targets/cuda/compile/codegen.h"

namespace kiln::targets::cuda {

namespace {

/// The NLL kernel over log-probabilities `lp` (a value of the scores' shape).
ir::Node nll(Lowering& L, const ir::Node& n, ir::ValueId lp, ir::ValueId target, ir::ValueId weight) {
  auto x = L.dims(n, lp), t = L.dims(n, target);
  if (x.size() < 2) refuse(n, "scores of rank below 2");
  int64_t N = x[0], C = x[1], inner = numel(x) / (N * C > 0 ? N * C : 1), P = numel(t);
  DType tt = L.model.value(target).dtype;
  if (tt != DType::i64 && tt != DType::i32) refuse(n, "targets must be int64 or int32");
  std::string red = n.s("reduction", "mean");
  bool has_ignore = n.has("ignore_index");
  int64_t ignore = has_ignore ? n.i("ignore_index") : 0;
  bool w = weight != ir::kNoValue;
  std::string params = fmt::format("const float* __restrict__ x, const {}* __restrict__ t, ", tt == DType::i64 ? "long long" : "int");
  if (w) params += "const float* __restrict__ w, ";
  params += "float* __restrict__ y";
  // Position p = b * inner + i; its loss and weight.
  std::string one = fmt::format(
      "long long c = (long long)t[p]; double l = 0.0, wt = 0.0;"
      " if (!({0} && c == {1}LL)) {{ if (c < 0) c = 0; if (c >= {2}) c = {2} - 1; wt = {3};"
      " l = -(double)x[((unsigned long long)(p / {4}) * {2} + (unsigned long long)c) * {4} + p % {4}] * wt; }}",
      has_ignore ? "true" : "false", ignore, C, w ? "(double)w[c]" : "1.0", inner);
  std::string name = L.kernel_name(n.op_type == "NegativeLogLikelihoodLoss" ? "nll" : "sce");
  std::vector<ir::ValueId> ins = {lp, target};
  if (w) ins.push_back(weight);
  if (red == "none") {
    L.source += fmt::format(
        "\n// {} reduction none\nextern \"C\" __global__ void __launch_bounds__(256) {}({}) {{\n"
        "  for (unsigned long long p = (unsigned long long)blockIdx.x * 256 + threadIdx.x; p < {}ull; p += (unsigned long long)gridDim.x * 256) {{\n"
        "    {} y[p] = (float)l;\n  }}\n}}\n",
        n.label(), name, params, P, one);
    return L.kernel_node(n, name, ins, {n.outputs[0]}, L.grid_for(P, 256), 256);
  }
  L.source += fmt::format(
      "\n// {} reduction {}\nextern \"C\" __global__ void __launch_bounds__(256) {}({}) {{\n"
      "  double sl = 0.0, sw = 0.0;\n"
      "  for (unsigned long long p = threadIdx.x; p < {}ull; p += 256) {{ {} sl += l; sw += wt; }}\n"
      "  sl = kl_block_sum(sl); sw = kl_block_sum(sw);\n"
      "  if (threadIdx.x == 0) y[0] = (float)({});\n}}\n",
      n.label(), red, name, params, P, one, red == "sum" ? "sl" : "sl / sw");
  return L.kernel_node(n, name, ins, {n.outputs[0]}, 1, 256);
}

}  // namespace

std::vector<ir::Node> gen_loss(Lowering& L, const ir::Node& n) {
  if (!n.domain.empty() || (n.op_type != "NegativeLogLikelihoodLoss" && n.op_type != "SoftmaxCrossEntropyLoss")) return {};
  if (L.model.value(n.inputs[0]).dtype != DType::f32) refuse(n, "float32 scores only in this version");
  ir::ValueId weight = n.inputs.size() > 2 ? n.inputs[2] : ir::kNoValue;
  if (weight != ir::kNoValue && L.model.value(weight).dtype != DType::f32) refuse(n, "float32 weights only");
  if (n.op_type == "NegativeLogLikelihoodLoss") return {nll(L, n, n.inputs[0], n.inputs[1], weight)};
  // SoftmaxCrossEntropyLoss: log_prob into output 1, or into a new intermediate.
  ir::ValueId lp = n.outputs.size() > 1 ? n.outputs[1] : ir::kNoValue;
  if (lp == ir::kNoValue) {
    ir::Value v = L.model.value(n.inputs[0]);
    v.name = n.name + "_log_prob";
    v.constant.reset();
    lp = L.model.add_value(v);
  }
  ir::Node ls;
  ls.op_type = "LogSoftmax";
  ls.name = n.name + "_log_softmax";
  ls.opset = 13;
  ls.inputs = {n.inputs[0]};
  ls.outputs = {lp};
  ls.attrs["axis"] = int64_t{1};
  std::vector<ir::Node> out = gen_reduce(L, ls);
  out[0].name = n.name;
  out.push_back(nll(L, n, lp, n.inputs[1], weight));
  return out;
}

}  // namespace kiln::targets::cuda
