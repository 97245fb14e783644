// ONNX Resize -> kiln.cpu.Resample (oneDNN resampling), N and C unchanged:
//   - nearest mode with integer upscale factors on the spatial dims. oneDNN's
//     nearest source index, round((d + 0.5) / f - 0.5), equals floor(d / f)
//     for an integer factor f, so it matches ONNX's asymmetric + floor and
//     half_pixel + round_prefer_* modes;
//   - linear mode (bilinear / trilinear, any factor) with half_pixel
//     coordinates, src = (d + 0.5) * in / out - 0.5, clamped to the edge:
//     oneDNN's linear resampling computes exactly that (torch's
//     interpolate(mode="bilinear", align_corners=False), the segmentation
//     heads' upsampling). pytorch_half_pixel differs only for an output
//     size of 1 (it takes source 0), accepted where no resized dim is 1.
#include <cmath>

#include "targets/cpu/compile/lower_ops.h"

namespace kiln::targets::cpu {

std::optional<std::vector<ir::Node>> lower_resize(ir::Model& m, const ir::Node& n) {
  if (!is_onnx(n, "Resize") || n.inputs.empty() || n.outputs.size() != 1) return std::nullopt;
  const std::string mode = n.s("mode", "nearest");
  if ((mode != "nearest" && mode != "linear") || n.i("antialias", 0) != 0 || n.has("axes")) return std::nullopt;
  if (n.s("keep_aspect_ratio_policy", "stretch") != "stretch") return std::nullopt;
  const bool linear = mode == "linear";
  std::string ctm = n.s("coordinate_transformation_mode", "half_pixel"), nm = n.s("nearest_mode", "round_prefer_floor");
  bool ok_mode = linear ? (ctm == "half_pixel" || ctm == "pytorch_half_pixel")
                        : (ctm == "asymmetric" && nm == "floor") ||
                              ((ctm == "half_pixel" || ctm == "pytorch_half_pixel") &&
                               (nm == "round_prefer_floor" || nm == "round_prefer_ceil"));
  if (!ok_mode) return std::nullopt;
  ir::ValueId x = n.inputs[0], y = n.outputs[0];
  if (!is_static_f32(m, x) || !is_static_f32(m, y)) return std::nullopt;
  auto xd = *static_dims(m, x), yd = *static_dims(m, y);
  if (xd.size() < 3 || xd.size() > 5 || yd.size() != xd.size() || xd[0] != yd[0] || xd[1] != yd[1]) return std::nullopt;
  // Scales, when given, must be exactly the factors the dims show (ONNX maps
  // coordinates with the given scale, oneDNN with out / in).
  const Tensor* scales = n.inputs.size() > 2 ? constant_of(m, n.inputs[2]) : nullptr;
  if (n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue && !scales) return std::nullopt;
  if (scales && scales->numel() > 0 && (scales->dtype() != DType::f32 || scales->numel() != static_cast<int64_t>(xd.size())))
    return std::nullopt;
  for (size_t i = 2; i < xd.size(); ++i) {
    if (xd[i] == 0 || yd[i] == 0) return std::nullopt;
    if (!linear && (yd[i] % xd[i] != 0 || yd[i] < xd[i])) return std::nullopt;
    if (linear && ctm == "pytorch_half_pixel" && yd[i] == 1 && xd[i] != 1) return std::nullopt;
    const float factor = linear ? static_cast<float>(yd[i]) / static_cast<float>(xd[i]) : static_cast<float>(yd[i] / xd[i]);
    if (scales && scales->numel() > 0 && scales->data<float>()[i] != factor) return std::nullopt;
  }
  ir::Node c = cpu_node(n, "Resample");
  c.inputs = {x};
  c.outputs = {y};
  if (linear) c.attrs["alg"] = static_cast<int64_t>(dnnl::algorithm::resampling_linear);
  set_md_attr(c, "md.src", plain_md(dims_t(xd.begin(), xd.end())));
  set_md_attr(c, "md.dst", plain_md(dims_t(yd.begin(), yd.end())));
  if (!fast_primitive(c)) return std::nullopt;
  return std::vector<ir::Node>{std::move(c)};
}

}  // namespace kiln::targets::cpu
