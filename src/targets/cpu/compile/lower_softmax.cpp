// ONNX Softmax -> kiln.cpu.Softmax (opset < 13: the 2-D coercion at `axis`).
#include "targets/cpu/compile/lower_ops.h"

namespace kiln::targets::cpu {

std::optional<std::vector<ir::Node>> lower_softmax(ir::Model& m, const ir::Node& n) {
  if (!is_onnx(n, "Softmax") || n.inputs.size() != 1 || n.outputs.size() != 1) return std::nullopt;
  ir::ValueId x = n.inputs[0], y = n.outputs[0];
  if (!is_static_f32(m, x) || !is_static_f32(m, y)) return std::nullopt;
  auto xd = *static_dims(m, x);
  int64_t r = static_cast<int64_t>(xd.size());
  if (r == 0) return std::nullopt;
  bool coerce = n.opset > 0 && n.opset < 13;
  int64_t axis = n.i("axis", coerce ? 1 : -1);
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return std::nullopt;
  dims_t dims(xd.begin(), xd.end());
  if (coerce) {
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < r; ++i) (i < axis ? outer : inner) *= xd[i];
    dims = {outer, inner};
    axis = 1;
  }
  ir::Node c = cpu_node(n, "Softmax");
  c.inputs = {x};
  c.outputs = {y};
  c.attrs["axis"] = axis;
  set_md_attr(c, "md.src", plain_md(dims));
  if (!fast_primitive(c)) return std::nullopt;
  return std::vector<ir::Node>{std::move(c)};
}

}  // namespace kiln::targets::cpu
