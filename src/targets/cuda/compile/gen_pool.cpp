// Pooling windows: MaxPool and AveragePool over any number of spatial dims
// (NCHW, or 2-D NHWC after to_nhwc), one thread per output element (codegen.h: gen_pool). float32, float16 or
// bfloat16 storage; windows are accumulated in float.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/error.h"
#include "targets/cuda/compile/codegen.h"

namespace kiln::targets::cuda {

std::vector<ir::Node> gen_pool(Lowering& L, const ir::Node& n) {
  if (!n.domain.empty() || (n.op_type != "MaxPool" && n.op_type != "AveragePool" && n.op_type != "LpPool")) return {};
  bool is_max = n.op_type == "MaxPool", is_lp = n.op_type == "LpPool";
  float p = static_cast<float>(n.i("p", 2));
  const DType tx = L.model.value(n.inputs[0]).dtype, ty = L.model.value(n.outputs[0]).dtype;
  if (!is_float_storage(tx) || !is_float_storage(ty)) refuse(n, "float32, float16 or bfloat16 only in this version");
  if (n.outputs.size() > 1 && n.outputs[1] != ir::kNoValue) refuse(n, "the Indices output is not supported");
  auto x = L.dims(n, n.inputs[0]), y = L.dims(n, n.outputs[0]);
  if (x.size() < 3) refuse(n, "input rank below 3");
  // to_nhwc's pools read and write [N, H, W, C]: the spatial dims are 1..k
  // and the channel is the innermost index.
  const bool nhwc = n.i("kiln_nhwc", 0) != 0;
  if (nhwc && x.size() != 4) refuse(n, "an NHWC pool must be 2-D");
  size_t k = x.size() - 2;
  const int64_t C = nhwc ? x[3] : 1;
  std::vector<int64_t> in(x.begin() + (nhwc ? 1 : 2), x.end() - (nhwc ? 1 : 0)),
      out(y.begin() + (nhwc ? 1 : 2), y.end() - (nhwc ? 1 : 0));
  auto kernel = n.ints("kernel_shape");
  if (kernel.size() != k) refuse(n, "kernel_shape does not match the spatial rank");
  auto strides = n.ints("strides", std::vector<int64_t>(k, 1));
  auto dil = n.ints("dilations", std::vector<int64_t>(k, 1));
  if (strides.size() != k || dil.size() != k) refuse(n, "strides / dilations do not match the spatial rank");
  auto [pb, pe] = window_pads(n, in, out, kernel, strides, dil);
  bool include_pad = n.i("count_include_pad", 0) != 0;
  int64_t N = numel(y);
  // Output coords: c (= n*C + channel) then o0..o{k-1}; window loops nested.
  // NHWC: the channel first (innermost), then o.., then the image.
  std::string body = "I r = i;";
  if (nhwc) body += fmt::format(" const I ch = r % {0}u; r /= {0}u;", C);
  for (int64_t d = static_cast<int64_t>(k) - 1; d >= 0; --d) body += fmt::format(" long long o{0} = r % {1}u; r /= {1}u;", d, out[d]);
  if (nhwc)
    body += fmt::format(" const {}* xp = x + (unsigned long long)r * {}ull + ch;", *storage_type(tx), numel(in) * C);
  else
    body += fmt::format(" const {}* xp = x + (unsigned long long)r * {}ull;", *storage_type(tx), numel(in));
  body += is_max ? " float acc = -__int_as_float(0x7f800000);" : " float acc = 0.f; int cnt = 0;";
  std::string idx = "0";
  auto ist = strides_of(in);
  for (size_t d = 0; d < k; ++d) {
    body += fmt::format(" for (int w{0} = 0; w{0} < {1}; ++w{0}) {{ long long p{0} = o{0} * {2} - {3} + (long long)w{0} * {4};", d,
                        kernel[d], strides[d], pb[d], dil[d]);
    body += fmt::format(" bool in{0} = p{0} >= 0 && p{0} < {1};", d, in[d]);
    idx += fmt::format(" + p{} * {}", d, ist[d] * C);
  }
  std::string inside = "in0";
  for (size_t d = 1; d < k; ++d) inside += fmt::format(" && in{}", d);
  const std::string elem = load_float(tx, fmt::format("xp[{}]", idx));
  if (is_max)
    body += fmt::format(" if ({}) acc = kl_max(acc, {});", inside, elem);
  else
    body += fmt::format(" if ({}) {{ acc += {}; ++cnt; }}", inside,
                        is_lp ? fmt::format("powf(fabsf({}), {})", elem, float_literal(p)) : elem);
  for (size_t d = 0; d < k; ++d) body += " }";
  // count_include_pad divides by the whole kernel, even where a ceil-mode
  // window hangs past the end padding (as the reference kernel, onnxruntime
  // and the ONNX reference do).
  std::string result = is_lp    ? fmt::format("powf(acc, 1.f / {})", float_literal(p))
                       : is_max ? std::string("acc")
                                : fmt::format("acc / (float)({})", include_pad ? std::to_string(numel(kernel)) : "cnt");
  body += fmt::format(" y[i] = {};", store_float(ty, result));
  std::string name = L.kernel_name(n.op_type);
  L.source += fmt::format(
      "\n// {} kernel [{}] strides [{}] pads [{}|{}]\nextern \"C\" __global__ void __launch_bounds__(256) {}(const {}* __restrict__ x, {}* __restrict__ y) {{\n"
      "  typedef {} I;\n"
      "  for (I i = (I)blockIdx.x * 256u + threadIdx.x; i < (I){}ull; i += (I)gridDim.x * 256u) {{\n    {}\n  }}\n}}\n",
      n.label(), fmt::join(kernel, ","), fmt::join(strides, ","), fmt::join(pb, ","), fmt::join(pe, ","), name,
      *storage_type(tx), *storage_type(ty), index_type(N), N, body);
  return {L.kernel_node(n, name, {n.inputs[0]}, {n.outputs[0]}, L.grid_for(N, 256), 256)};
}

}  // namespace kiln::targets::cuda
