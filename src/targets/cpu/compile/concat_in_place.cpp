// Marks the kiln.cpu.Concat nodes whose inputs are byte ranges of the
// output: with every dim before the concat axis 1 (batch 1, channel axis),
// input i's slice of a row-major output is one contiguous range laid out as
// the input itself, and so is a channel slice of a blocked output (nChw16c)
// that starts and ends on a block boundary (or ends at the last channel).
// The memory plan then places each input's producer inside the output
// (passes::plan_memory, attribute "in_place_offsets"), and the concat copies
// only what was not produced in place: DenseNet-style blocks, whose every
// layer concatenates all earlier feature maps, stop copying them.
//
// Also marks the ONNX nodes that only give their input new dims (Reshape,
// Flatten, Squeeze, Unsqueeze: output 0 is input 0's bytes): with the input
// placed at offset 0 of the output the reference kernel has nothing to copy
// (ShuffleNet's channel shuffle is a Reshape, a Transpose and a Reshape in
// every unit).
#include "targets/cpu/compile/lowering.h"

namespace kiln::targets::cpu {

namespace {

/// Byte offset of each input inside the output when all of them are
/// contiguous slices in the input's own layout; empty otherwise.
std::vector<int64_t> in_place_offsets(const ir::Node& n) {
  md_t dst = md_attr(n, "md.dst");
  dims_t dd = dst.dims();
  int64_t axis = n.i("axis");
  if (axis < 0 || axis >= static_cast<int64_t>(dd.size())) return {};
  for (int64_t a = 0; a < axis; ++a)
    if (dd[a] != 1) return {};
  const bool blocked = is_blocked(dst);
  const int64_t block = blocked ? channel_block() : 1;
  if (blocked && (axis != 1 || dst != blocked_md(dd, block))) return {};
  if (!blocked && dst != plain_md(dd)) return {};
  int64_t inner = 1;  // elements per unit of the concat axis
  for (size_t a = static_cast<size_t>(axis) + 1; a < dd.size(); ++a) inner *= dd[a];
  std::vector<int64_t> offs;
  int64_t at = 0;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    md_t src = md_attr(n, "md.src" + std::to_string(i));
    dims_t sd = src.dims();
    if (sd.size() != dd.size()) return {};
    int64_t len = sd[static_cast<size_t>(axis)];
    if (src != (blocked ? blocked_md(sd, block) : plain_md(sd))) return {};
    // A blocked part must not share a block with its neighbours: its padding
    // would overwrite them (the last part's padding is the output's).
    if (blocked && (at % block != 0 || (len % block != 0 && at + len != dd[1]))) return {};
    offs.push_back(at * inner * 4);
    at += len;
  }
  if (at != dd[static_cast<size_t>(axis)]) return {};
  return offs;
}

int mark_graph(ir::Graph& g) {
  int marked = 0;
  for (auto& n : g.nodes) {
    for (auto& [k, a] : n.attrs)
      if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a)) marked += mark_graph(**sg);
    if (!is_cpu(n, "Concat")) continue;
    auto offs = in_place_offsets(n);
    if (offs.empty()) continue;
    n.attrs["in_place_offsets"] = offs;
    ++marked;
  }
  return marked;
}

/// True for an ONNX node whose output 0 holds input 0's bytes under other
/// dims, both of static shape (the memory plan places only those).
bool is_static_view(const ir::Model& m, const ir::Node& n) {
  static const char* const ops[] = {"Reshape", "Flatten", "Squeeze", "Unsqueeze"};
  bool view = false;
  for (const char* op : ops) view = view || is_onnx(n, op);
  if (!view || n.inputs.empty() || n.outputs.empty() || n.inputs[0] == ir::kNoValue || n.outputs[0] == ir::kNoValue)
    return false;
  const ir::Value &x = m.value(n.inputs[0]), &y = m.value(n.outputs[0]);
  return x.dtype == y.dtype && static_dims(m, n.inputs[0]) && static_dims(m, n.outputs[0]);
}

}  // namespace

int mark_concat_in_place(ir::Model& m) { return mark_graph(m.main); }

int mark_views_in_place(ir::Model& m) {
  int marked = 0;
  for (auto& n : m.main.nodes) {
    if (!is_static_view(m, n)) continue;
    // Input 0 at offset 0; the others (Reshape's shape, Squeeze's axes) are
    // small integer tensors the plan leaves alone when they are constants.
    std::vector<int64_t> offs(n.inputs.size(), 0);
    for (size_t i = 1; i < n.inputs.size(); ++i)
      if (n.inputs[i] != ir::kNoValue && !constant_of(m, n.inputs[i])) offs.clear();
    if (offs.empty()) continue;
    n.attrs["in_place_offsets"] = offs;
    ++marked;
  }
  return marked;
}

}  // namespace kiln::targets::cpu
