// ONNX LayerNormalization (Y only) -> kiln.cpu.LayerNorm over the dims from
// `axis` on, flattened to one (oneDNN normalises the last dim).
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

}  // namespace kiln::targets::cpu
