// ONNX Add / Sub / Mul / Div / Max / Min -> kiln.cpu.Binary. oneDNN
// broadcasts only its second operand, so a broadcast first operand of a
// commutative op is swapped (and a - b with a broadcast becomes -(b - a)).
#include "targets/cpu/compile/lower_ops.h"

namespace kiln::targets::cpu {

namespace {

std::optional<dnnl::algorithm> binary_alg(const ir::Node& n) {
  using A = dnnl::algorithm;
  if (is_onnx(n, "Add")) return A::binary_add;
  if (is_onnx(n, "Sub")) return A::binary_sub;
  if (is_onnx(n, "Mul")) return A::binary_mul;
  if (is_onnx(n, "Div")) return A::binary_div;
  if (is_onnx(n, "Max") && n.inputs.size() == 2) return A::binary_max;
  if (is_onnx(n, "Min") && n.inputs.size() == 2) return A::binary_min;
  return std::nullopt;
}

/// dims right-aligned to rank r with leading 1s.
dims_t pad_to(std::vector<int64_t> d, size_t r) {
  while (d.size() < r) d.insert(d.begin(), 1);
  return dims_t(d.begin(), d.end());
}

}  // namespace

std::optional<std::vector<ir::Node>> lower_binary(ir::Model& m, const ir::Node& n) {
  auto alg = binary_alg(n);
  if (!alg || n.inputs.size() != 2 || n.outputs.size() != 1) return std::nullopt;
  ir::ValueId a = n.inputs[0], b = n.inputs[1], y = n.outputs[0];
  if (!is_static_f32(m, a) || !is_static_f32(m, b) || !is_static_f32(m, y)) return std::nullopt;
  auto yd = *static_dims(m, y);
  size_t r = std::max<size_t>(1, yd.size());
  dims_t dd = pad_to(yd, r), ad = pad_to(*static_dims(m, a), r), bd = pad_to(*static_dims(m, b), r);
  bool negate = false;
  if (ad != dd) {
    if (bd != dd) return std::nullopt;  // both broadcast: no oneDNN form
    if (*alg == dnnl::algorithm::binary_div) return std::nullopt;
    negate = *alg == dnnl::algorithm::binary_sub;
    std::swap(a, b);
    std::swap(ad, bd);
  }
  for (size_t i = 0; i < r; ++i)
    if (bd[i] != dd[i] && bd[i] != 1) return std::nullopt;
  ir::Node c = cpu_node(n, "Binary");
  c.inputs = {a, b};
  c.outputs = {y};
  c.attrs["alg"] = static_cast<int64_t>(*alg);
  set_md_attr(c, "md.src0", plain_md(ad));
  set_md_attr(c, "md.src1", plain_md(bd));
  set_md_attr(c, "md.dst", plain_md(dd));
  if (negate)
    write_post_ops(c, {{PostOp::eltwise, static_cast<int64_t>(dnnl::algorithm::eltwise_linear), -1.f, 0.f, 1.f, -1}});
  if (!fast_primitive(c)) return std::nullopt;
  return std::vector<ir::Node>{std::move(c)};
}

}  // namespace kiln::targets::cpu
