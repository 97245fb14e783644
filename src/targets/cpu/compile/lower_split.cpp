// ONNX Split of an f32 tensor of static shape -> one kiln.cpu.Reorder per
// part, reading a sub-memory descriptor of the input (so that a channel split
// of a blocked activation stays blocked, see assign_layouts).
#include "targets/cpu/compile/lower_ops.h"

namespace kiln::targets::cpu {

std::optional<std::vector<ir::Node>> lower_split(ir::Model& m, const ir::Node& n) {
  if (!is_onnx(n, "Split") || n.inputs.empty() || n.outputs.empty()) return std::nullopt;
  ir::ValueId x = n.inputs[0];
  if (!is_static_f32(m, x)) return std::nullopt;
  auto xd = *static_dims(m, x);
  int64_t r = static_cast<int64_t>(xd.size()), axis = n.i("axis", 0);
  if (axis < 0) axis += r;
  if (r == 0 || axis < 0 || axis >= r) return std::nullopt;
  // Only activations that may be channel-blocked gain anything: a plain
  // split is a copy either way, and one reference node beats N oneDNN calls.
  if (r < 3 || r > 5) return std::nullopt;
  std::vector<ir::Node> out;
  int64_t offset = 0;
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    ir::ValueId y = n.outputs[k];
    if (y == ir::kNoValue || !is_static_f32(m, y)) return std::nullopt;
    auto yd = *static_dims(m, y);
    if (yd.size() != xd.size()) return std::nullopt;
    for (int64_t i = 0; i < r; ++i)
      if (i != axis && yd[i] != xd[i]) return std::nullopt;
    int64_t size = yd[axis];
    if (size > 0) {
      ir::Node c = cpu_node(n, "Reorder");
      c.name += "/part" + std::to_string(k);
      c.inputs = {x};
      c.outputs = {y};
      c.attrs["slice_axis"] = axis;
      c.attrs["slice_offset"] = offset;
      dims_t offs(xd.size(), 0);
      offs[axis] = offset;
      set_md_attr(c, "md.src", plain_md(dims_t(xd.begin(), xd.end())).submemory_desc(dims_t(yd.begin(), yd.end()), offs));
      set_md_attr(c, "md.dst", plain_md(dims_t(yd.begin(), yd.end())));
      if (!fast_primitive(c)) return std::nullopt;
      out.push_back(std::move(c));
    } else {
      return std::nullopt;  // an empty part has no reorder; keep the reference Split
    }
    offset += size;
  }
  if (offset != xd[axis]) return std::nullopt;
  return out;
}

}  // namespace kiln::targets::cpu
