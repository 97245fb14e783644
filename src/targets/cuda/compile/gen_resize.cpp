// Resize, nearest mode (codegen.h: gen_resize): one thread per output
// element, the source coordinate per axis in double precision like the
// reference kernel.
#include <fmt/format.h>

#include "support/error.h"
#include "targets/cuda/compile/codegen.h"

namespace kiln::targets::cuda {

std::vector<ir::Node> gen_resize(Lowering& L, const ir::Node& n) {
  if (!n.domain.empty() || n.op_type != "Resize") return {};
  if (n.s("mode", "nearest") != "nearest") refuse(n, "mode '" + n.s("mode", "nearest") + "' (only nearest in this version)");
  if (n.has("axes")) refuse(n, "the axes attribute");
  if (n.s("keep_aspect_ratio_policy", "stretch") != "stretch") refuse(n, "keep_aspect_ratio_policy");
  std::string ctm = n.s("coordinate_transformation_mode", "half_pixel");
  std::string nm = n.s("nearest_mode", "round_prefer_floor");
  auto x = L.dims(n, n.inputs[0]), y = L.dims(n, n.outputs[0]);
  size_t r = x.size();
  std::vector<double> scale(r, 1.0);
  const ir::Value* sc = n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue ? &L.model.value(n.inputs[2]) : nullptr;
  if (sc && sc->constant && sc->constant->numel() == static_cast<int64_t>(r) && sc->dtype == DType::f32) {
    for (size_t d = 0; d < r; ++d) scale[d] = sc->constant->data<float>()[d];
  } else if (sc && !(sc->constant && sc->constant->numel() == 0)) {
    refuse(n, "scales must be a float32 constant with one entry per dim");
  } else {
    if (n.inputs.size() > 3 && n.inputs[3] != ir::kNoValue && !L.model.value(n.inputs[3]).constant)
      refuse(n, "sizes must be a constant");
    for (size_t d = 0; d < r; ++d) scale[d] = x[d] ? static_cast<double>(y[d]) / static_cast<double>(x[d]) : 1.0;
  }
  std::string round;
  if (nm == "round_prefer_floor") round = "(c == floor(c) + 0.5 ? floor(c) : round(c))";
  else if (nm == "round_prefer_ceil") round = "(c == floor(c) + 0.5 ? ceil(c) : round(c))";
  else if (nm == "floor") round = "floor(c)";
  else if (nm == "ceil") round = "ceil(c)";
  else refuse(n, "nearest_mode '" + nm + "'");
  auto xs = strides_of(x);
  std::string body = "I r = i; unsigned long long j = 0; double c; long long k;";
  for (int64_t d = static_cast<int64_t>(r) - 1; d >= 0; --d) {
    std::string o = fmt::format("(double)(r % {}u)", y[d]);
    std::string coord;
    double s = scale[d];
    if (ctm == "half_pixel") coord = fmt::format("({} + 0.5) / {:.17g} - 0.5", o, s);
    else if (ctm == "pytorch_half_pixel") coord = y[d] > 1 ? fmt::format("({} + 0.5) / {:.17g} - 0.5", o, s) : "0.0";
    else if (ctm == "align_corners") coord = y[d] > 1 ? fmt::format("{} * {:.17g} / {:.17g}", o, double(x[d] - 1), double(y[d] - 1)) : "0.0";
    else if (ctm == "asymmetric") coord = fmt::format("{} / {:.17g}", o, s);
    else refuse(n, "coordinate_transformation_mode '" + ctm + "'");
    body += fmt::format(" c = {}; k = (long long){}; if (k < 0) k = 0; if (k > {}) k = {}; j += (unsigned long long)k * {}ull;",
                        coord, round, x[d] - 1, x[d] - 1, xs[d]);
    if (d > 0) body += fmt::format(" r /= {}u;", y[d]);
  }
  std::string T = raw_type(dtype_size(L.model.value(n.inputs[0]).dtype));
  if (!c_type(L.model.value(n.inputs[0]).dtype)) refuse(n, "dtype not supported");
  std::string name = L.kernel_name("resize");
  int64_t N = numel(y);
  L.source += fmt::format(
      "\n// {} nearest, {}, {}\nextern \"C\" __global__ void __launch_bounds__(256) {}(const {} * __restrict__ x, {}* __restrict__ y) {{\n"
      "  typedef {} I;\n"
      "  for (I i = (I)blockIdx.x * 256u + threadIdx.x; i < (I){}ull; i += (I)gridDim.x * 256u) {{\n    {} y[i] = x[j];\n  }}\n}}\n",
      n.label(), ctm, nm, name, T, T, index_type(N), N, body);
  return {L.kernel_node(n, name, {n.inputs[0]}, {n.outputs[0]}, L.grid_for(N, 256), 256)};
}

}  // namespace kiln::targets::cuda
