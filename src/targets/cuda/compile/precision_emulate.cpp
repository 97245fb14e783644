// A 16-bit cuda program (convert_precision's output) emulated in float32 on
// the ref target, for the precision check (precision.h: emulate_16bit).
#include "support/error.h"
#include "support/half.h"
#include "targets/cuda/compile/precision.h"

namespace kiln::targets::cuda {

namespace {

bool is_16bit(DType t) { return t == DType::f16 || t == DType::bf16; }

/// A float32 copy of the 16-bit tensor `t` (exact: every 16-bit value is a float).
Tensor widen(const Tensor& t) {
  Tensor out(DType::f32, t.shape());
  const uint16_t* src = t.data<uint16_t>();
  float* dst = out.data<float>();
  const int64_t n = t.numel();
  const bool half = t.dtype() == DType::f16;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) dst[i] = half ? half_to_float(src[i]) : bf16_to_float(src[i]);
  return out;
}

ir::Node cast_node(const std::string& name, int opset, ir::ValueId in, ir::ValueId out, DType to) {
  ir::Node c;
  c.op_type = "Cast";
  c.name = name;
  c.opset = opset;
  c.inputs = {in};
  c.outputs = {out};
  c.attrs["to"] = static_cast<int64_t>(to);
  return c;
}

}  // namespace

int emulate_16bit(ir::Model& m, std::vector<DType>* round_in_place) {
  // Constants first: a 16-bit constant becomes the float32 value of its bits.
  for (auto& v : m.values) {
    if (!is_16bit(v.dtype)) continue;
    if (v.constant) v.constant = widen(*v.constant);
  }
  std::vector<DType> marks;
  std::vector<ir::Node> nodes = std::move(m.main.nodes);
  m.main.nodes.clear();
  int points = 0;
  for (auto& n : nodes) {
    if (!n.domain.empty())
      for (auto v : n.outputs)
        if (v != ir::kNoValue && is_16bit(m.value(v).dtype))
          fail(ErrorCode::internal, "emulate_16bit: {} writes a 16-bit value", n.label());
    // Each 16-bit output: the node writes it (as float32, or as the 16-bit
    // type for a Cast to it) under a new name, then Casts round it and widen
    // it back into the original value, which becomes float32. With
    // `round_in_place` a node other than such a Cast writes the value itself
    // in float32 and the caller rounds it there.
    std::vector<ir::Node> after;
    const bool narrowing_cast = n.op_type == "Cast" && n.domain.empty();
    const std::string label = precision_node_key(m, n);
    for (auto& out : n.outputs) {
      if (out == ir::kNoValue || !is_16bit(m.value(out).dtype)) continue;
      const ir::ValueId orig = out;
      const DType h = m.value(orig).dtype;
      ++points;
      if (round_in_place && !narrowing_cast) {
        if (marks.size() <= static_cast<size_t>(orig)) marks.resize(static_cast<size_t>(orig) + 1, DType::undefined);
        marks[static_cast<size_t>(orig)] = h;
        m.value(orig).dtype = DType::f32;
        continue;
      }
      ir::Value narrow = m.value(orig);
      narrow.name += "~16";
      narrow.constant.reset();
      const ir::ValueId nid = m.add_value(std::move(narrow));
      if (narrowing_cast) {
        out = nid;  // the Cast itself rounds
      } else {
        ir::Value wide = m.value(orig);
        wide.name += "~wide";
        wide.dtype = DType::f32;
        wide.constant.reset();
        const ir::ValueId wid = m.add_value(std::move(wide));
        after.push_back(cast_node(label + "~round", n.opset, wid, nid, h));
        out = wid;
      }
      after.push_back(cast_node(label + "~widen", n.opset, nid, orig, DType::f32));
      m.value(orig).dtype = DType::f32;
    }
    m.main.nodes.push_back(std::move(n));
    for (auto& a : after) m.main.nodes.push_back(std::move(a));
  }
  if (round_in_place) {
    marks.resize(m.values.size(), DType::undefined);
    *round_in_place = std::move(marks);
  }
  return points;
}

}  // namespace kiln::targets::cuda
