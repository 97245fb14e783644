// The normalisations oneDNN's layer normalisation computes:
//   - ONNX LayerNormalization (Y only) -> kiln.cpu.LayerNorm over the dims
//     from `axis` on, flattened to one (oneDNN normalises the last dim);
//   - ONNX InstanceNormalization -> kiln.cpu.LayerNorm without scale over
//     x viewed as [N*C, spatial] (each row one instance and channel), then
//     the per-channel scale and B as one Binary (channel_affine) unless they
//     are ones and zeros: torch exports GroupNorm that way, a Reshape to
//     [N, groups, -1] around an InstanceNormalization (FCOS / RetinaNet-style
//     detection heads, diffusion U-Nets).
#include "targets/cpu/compile/lower_ops.h"

namespace kiln::targets::cpu {

std::optional<std::vector<ir::Node>> lower_layernorm(ir::Model& m, const ir::Node& n) {
  if (!is_onnx(n, "LayerNormalization") || n.inputs.size() < 2 || n.outputs.empty()) return std::nullopt;
  for (size_t i = 1; i < n.outputs.size(); ++i)
    if (n.outputs[i] != ir::kNoValue) return std::nullopt;  // Mean / InvStdDev are not produced by oneDNN here
  ir::ValueId x = n.inputs[0], scale = n.inputs[1], bias = n.inputs.size() > 2 ? n.inputs[2] : ir::kNoValue;
  ir::ValueId y = n.outputs[0];
  if (!is_static_f32(m, x) || !is_static_f32(m, y) || !is_static_f32(m, scale)) return std::nullopt;
  if (bias != ir::kNoValue && !is_static_f32(m, bias)) return std::nullopt;
  auto xd = *static_dims(m, x);
  int64_t r = static_cast<int64_t>(xd.size()), axis = n.i("axis", -1);
  if (axis < 0) axis += r;
  if (r == 0 || axis < 0 || axis >= r) return std::nullopt;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < r; ++i) (i < axis ? outer : inner) *= xd[i];
  auto numel = [&](ir::ValueId v) {
    int64_t p = 1;
    auto dims = *static_dims(m, v);  // a copy: the optional is a temporary
    for (auto d : dims) p *= d;
    return p;
  };
  if (numel(scale) != inner || (bias != ir::kNoValue && numel(bias) != inner)) return std::nullopt;
  ir::Node c = cpu_node(n, "LayerNorm");
  c.inputs = {x, scale};
  if (bias != ir::kNoValue) c.inputs.push_back(bias);
  c.outputs = {y};
  c.attrs["epsilon"] = n.f("epsilon", 1e-5f);
  set_md_attr(c, "md.src", plain_md({outer, inner}));
  set_md_attr(c, "md.scale", plain_md({inner}));
  if (!fast_primitive(c)) return std::nullopt;
  return std::vector<ir::Node>{std::move(c)};
}

std::optional<std::vector<ir::Node>> lower_instancenorm(ir::Model& m, const ir::Node& n) {
  if (!is_onnx(n, "InstanceNormalization") || n.inputs.size() != 3 || n.outputs.size() != 1) return std::nullopt;
  const ir::ValueId x = n.inputs[0], y = n.outputs[0];
  if (!is_static_f32(m, x) || !is_static_f32(m, y)) return std::nullopt;
  const auto xd = *static_dims(m, x);
  if (xd.size() < 3 || xd.size() > 5) return std::nullopt;
  const Tensor* scale = constant_of(m, n.inputs[1]);
  const Tensor* bias = constant_of(m, n.inputs[2]);
  if (!scale || !bias || scale->dtype() != DType::f32 || bias->dtype() != DType::f32 || scale->numel() != xd[1] ||
      bias->numel() != xd[1])
    return std::nullopt;
  std::vector<float> s(scale->data<float>(), scale->data<float>() + xd[1]);
  std::vector<float> t(bias->data<float>(), bias->data<float>() + xd[1]);
  const bool identity = std::all_of(s.begin(), s.end(), [](float v) { return v == 1.f; }) &&
                        std::all_of(t.begin(), t.end(), [](float v) { return v == 0.f; });
  int64_t inner = 1;
  for (size_t i = 2; i < xd.size(); ++i) inner *= xd[i];
  if (inner == 0) return std::nullopt;
  ir::Node ln = cpu_node(n, "LayerNorm");
  ln.inputs = {x, ir::kNoValue};
  ln.outputs = {identity ? y : add_value(m, m.value(y).name + "/normalised", DType::f32, xd)};
  ln.attrs["epsilon"] = n.f("epsilon", 1e-5f);
  set_md_attr(ln, "md.src", plain_md({xd[0] * xd[1], inner}));
  if (!fast_primitive(ln)) return std::nullopt;
  std::vector<ir::Node> out{ln};
  if (!identity) {
    auto affine = channel_affine(m, n, ln.outputs[0], y, xd, s, t);
    if (!affine) return std::nullopt;
    out.push_back(std::move(*affine));
  }
  return out;
}

}  // namespace kiln::targets::cpu
