// ONNX Conv -> kiln.cpu.Conv (weights constant, packed later by pack_weights).
#include "targets/cpu/compile/lower_ops.h"

namespace kiln::targets::cpu {

bool conv_pads(const std::string& auto_pad, int64_t in, int64_t out, int64_t k, int64_t s, int64_t d, int64_t& pb,
               int64_t& pe) {
  int64_t span = (k - 1) * d + 1;
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    int64_t total = std::max<int64_t>(0, (out - 1) * s + span - in);
    pb = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
    pe = total - pb;
  } else if (auto_pad == "VALID") {
    pb = pe = 0;
  }
  // oneDNN's rule: out = (in + pb + pe - span) / s + 1 exactly.
  return in + pb + pe - span >= 0 && (in + pb + pe - span) / s + 1 == out;
}

std::optional<std::vector<ir::Node>> lower_conv(ir::Model& m, const ir::Node& n) {
  if (n.inputs.size() < 2 || n.outputs.size() != 1) return std::nullopt;
  ir::ValueId x = n.inputs[0], w = n.inputs[1], b = n.inputs.size() > 2 ? n.inputs[2] : ir::kNoValue;
  ir::ValueId y = n.outputs[0];
  if (!is_static_f32(m, x) || !is_static_f32(m, y) || !constant_of(m, w) || m.value(w).dtype != DType::f32)
    return std::nullopt;
  if (b != ir::kNoValue && !is_static_f32(m, b)) return std::nullopt;
  auto xd = *static_dims(m, x), yd = *static_dims(m, y), wd = constant_of(m, w)->shape();
  size_t r = xd.size();
  if (r < 3 || r > 5 || wd.size() != r || yd.size() != r) return std::nullopt;
  size_t sp = r - 2;
  int64_t group = n.i("group", 1);
  std::vector<int64_t> kernel(wd.begin() + 2, wd.end());
  std::vector<int64_t> strides = n.ints("strides", std::vector<int64_t>(sp, 1));
  std::vector<int64_t> dil = n.ints("dilations", std::vector<int64_t>(sp, 1));
  std::vector<int64_t> pads = n.ints("pads", std::vector<int64_t>(2 * sp, 0));
  std::string auto_pad = n.s("auto_pad", "NOTSET");
  if (strides.size() != sp || dil.size() != sp || pads.size() != 2 * sp || group < 1 || wd[0] % group) return std::nullopt;
  if (xd[1] != wd[1] * group || yd[1] != wd[0]) return std::nullopt;
  dims_t pb(sp), pe(sp), dilates(sp);
  for (size_t i = 0; i < sp; ++i) {
    pb[i] = pads[i];
    pe[i] = pads[i + sp];
    dilates[i] = dil[i] - 1;
    if (!conv_pads(auto_pad, xd[i + 2], yd[i + 2], kernel[i], strides[i], dil[i], pb[i], pe[i])) return std::nullopt;
  }
  ir::Node c = cpu_node(n, "Conv");
  c.inputs = {x, w};
  if (b != ir::kNoValue) c.inputs.push_back(b);
  c.outputs = {y};
  c.attrs["strides"] = strides;
  c.attrs["dilates"] = std::vector<int64_t>(dilates.begin(), dilates.end());
  c.attrs["pads_begin"] = std::vector<int64_t>(pb.begin(), pb.end());
  c.attrs["pads_end"] = std::vector<int64_t>(pe.begin(), pe.end());
  dims_t wdims;
  if (group == 1) {
    wdims.assign(wd.begin(), wd.end());
  } else {
    wdims = {group, wd[0] / group};
    wdims.insert(wdims.end(), wd.begin() + 1, wd.end());
  }
  set_md_attr(c, "md.src", plain_md(xd));
  set_md_attr(c, "md.wei", any_md(wdims));
  set_md_attr(c, "md.wei_src", plain_md(wdims));  // the constant's own layout, for pack_weights
  if (b != ir::kNoValue) {
    if (static_dims(m, b)->size() != 1 || (*static_dims(m, b))[0] != yd[1]) return std::nullopt;
    set_md_attr(c, "md.bias", plain_md({yd[1]}));
  }
  set_md_attr(c, "md.dst", plain_md(yd));
  if (!fast_primitive(c)) return std::nullopt;
  return std::vector<ir::Node>{std::move(c)};
}

}  // namespace kiln::targets::cpu
