// ONNX Concat of f32 tensors -> kiln.cpu.Concat (so that a channel concat of
// blocked activations needs no reorder).
#include "targets/cpu/compile/lower_ops.h"

namespace kiln::targets::cpu {

std::optional<std::vector<ir::Node>> lower_concat(ir::Model& m, const ir::Node& n) {
  if (!is_onnx(n, "Concat") || n.inputs.empty() || n.outputs.size() != 1) return std::nullopt;
  ir::ValueId y = n.outputs[0];
  if (!is_static_f32(m, y)) return std::nullopt;
  auto yd = *static_dims(m, y);
  int64_t r = static_cast<int64_t>(yd.size()), axis = n.i("axis", 0);
  if (axis < 0) axis += r;
  if (r == 0 || axis < 0 || axis >= r) return std::nullopt;
  if (r < 3 || r > 5) return std::nullopt;  // never blocked: the reference copy does as well
  ir::Node c = cpu_node(n, "Concat");
  c.outputs = {y};
  c.attrs["axis"] = axis;
  for (auto x : n.inputs) {
    if (!is_static_f32(m, x)) return std::nullopt;
    auto xd = *static_dims(m, x);
    if (xd.size() != yd.size()) return std::nullopt;
    if (xd[axis] == 0) continue;  // oneDNN rejects empty parts; they add nothing
    set_md_attr(c, "md.src" + std::to_string(c.inputs.size()), plain_md(xd));
    c.inputs.push_back(x);
  }
  if (c.inputs.size() < 2) return std::nullopt;
  set_md_attr(c, "md.dst", plain_md(yd));
  return std::vector<ir::Node>{std::move(c)};
}

}  // namespace kiln::targets::cpu
