// QuantizeLinear and DequantizeLinear (codegen.h: gen_quant), per-tensor and
// per-axis, the formulas of src/ops/quantize.cpp: quantize divides in
// float32, rounds half to even, adds the zero point and saturates (NaN gives
// the zero point); dequantize computes (x - zero_point) * scale in float32.
// Blocked scales, 4-bit and 8-bit float types are refused.
#include <fmt/format.h>

#include "support/error.h"
#include "targets/cuda/compile/codegen.h"

namespace kiln::targets::cuda {

namespace {

/// Integer range of a quantized dtype, or false.
bool int_range(DType t, int64_t& lo, int64_t& hi) {
  switch (t) {
    case DType::u8: lo = 0, hi = 255; return true;
    case DType::i8: lo = -128, hi = 127; return true;
    case DType::u16: lo = 0, hi = 65535; return true;
    case DType::i16: lo = -32768, hi = 32767; return true;
    default: return false;
  }
}

}  // namespace

std::vector<ir::Node> gen_quant(Lowering& L, const ir::Node& n) {
  if (!n.domain.empty() || (n.op_type != "QuantizeLinear" && n.op_type != "DequantizeLinear")) return {};
  const ir::Model& m = L.model;
  if (n.i("block_size", 0) != 0) refuse(n, "blocked quantization");
  auto x = L.dims(n, n.inputs[0]);
  const int64_t r = static_cast<int64_t>(x.size());
  auto sdims = L.dims(n, n.inputs[1]);
  const int64_t sc = numel(sdims);
  int64_t inner = 1, C = 1;
  if (sc > 1) {  // per axis
    int64_t axis = norm_axis(n, n.i("axis", 1), r);
    C = x[axis];
    if (sc != C) refuse(n, "scale length does not match the axis");
    for (int64_t d = axis + 1; d < r; ++d) inner *= x[d];
  }
  bool has_zp = n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue;
  DType xt = m.value(n.inputs[0]).dtype, st = m.value(n.inputs[1]).dtype, yt = m.value(n.outputs[0]).dtype;
  std::string ch = sc > 1 ? fmt::format("((i / {}u) % {}u)", inner, C) : "0";
  std::string name = L.kernel_name(n.op_type);
  std::vector<ir::ValueId> ins = {n.inputs[0], n.inputs[1]};
  if (has_zp) ins.push_back(n.inputs[2]);
  const int64_t N = numel(x);
  std::string body, params;
  if (n.op_type == "QuantizeLinear") {
    int64_t lo, hi;
    if (!int_range(yt, lo, hi)) refuse(n, fmt::format("output dtype {}", dtype_name(yt)));
    if (xt != DType::f32 || st != DType::f32) refuse(n, "float32 input and scale only in this version");
    std::string Y = *c_type(yt);
    params = fmt::format("const float* __restrict__ x, const float* __restrict__ s, {}{}* __restrict__ y",
                         has_zp ? fmt::format("const {}* __restrict__ z, ", Y) : "", Y);
    body = fmt::format(
        "const unsigned long long c = {0}; const float q = x[i] / s[c]; const float zp = {1};"
        " float v = isnan(q) ? zp : rintf(q) + zp; v = v < {2}.f ? {2}.f : (v > {3}.f ? {3}.f : v); y[i] = ({4})v;",
        ch, has_zp ? "(float)z[c]" : "0.f", lo, hi, Y);
  } else {
    if (st != DType::f32) refuse(n, "float32 scale only in this version");
    int64_t lo, hi;
    if (!int_range(xt, lo, hi) && xt != DType::i32) refuse(n, fmt::format("input dtype {}", dtype_name(xt)));
    std::string X = *c_type(xt);
    params = fmt::format("const {0}* __restrict__ x, const float* __restrict__ s, {1}float* __restrict__ y", X,
                         has_zp ? fmt::format("const {}* __restrict__ z, ", X) : "");
    body = fmt::format("const unsigned long long c = {0}; y[i] = ((float)x[i] - {1}) * s[c];", ch,
                       has_zp ? "(float)z[c]" : "0.f");
  }
  L.source += fmt::format(
      "\n// {}\nextern \"C\" __global__ void __launch_bounds__(256) {}({}) {{\n"
      "  typedef {} I;\n"
      "  for (I i = (I)blockIdx.x * 256u + threadIdx.x; i < (I){}ull; i += (I)gridDim.x * 256u) {{\n    {}\n  }}\n}}\n",
      n.label(), name, params, index_type(N), N, body);
  return {L.kernel_node(n, name, ins, {n.outputs[0]}, L.grid_for(N, 256), 256)};
}

}  // namespace kiln::targets::cuda
