// ONNX MaxPool / AveragePool / GlobalAveragePool / GlobalMaxPool -> kiln.cpu.Pool.
#include "targets/cpu/compile/lower_ops.h"

namespace kiln::targets::cpu {

std::optional<std::vector<ir::Node>> lower_pool(ir::Model& m, const ir::Node& n) {
  bool global = is_onnx(n, "GlobalAveragePool") || is_onnx(n, "GlobalMaxPool");
  bool max = is_onnx(n, "MaxPool") || is_onnx(n, "GlobalMaxPool");
  if (n.inputs.size() != 1 || n.outputs.empty()) return std::nullopt;
  // MaxPool's Indices output has no oneDNN counterpart.
  if (n.outputs.size() > 1 && n.outputs[1] != ir::kNoValue) return std::nullopt;
  ir::ValueId x = n.inputs[0], y = n.outputs[0];
  if (!is_static_f32(m, x) || !is_static_f32(m, y)) return std::nullopt;
  auto xd = *static_dims(m, x), yd = *static_dims(m, y);
  size_t r = xd.size();
  if (r < 3 || r > 5 || yd.size() != r) return std::nullopt;
  size_t sp = r - 2;
  std::vector<int64_t> kernel, strides, dil, pads;
  std::string auto_pad = "NOTSET";
  bool include_pad = false;
  if (global) {
    kernel.assign(xd.begin() + 2, xd.end());
    strides.assign(sp, 1);
    dil.assign(sp, 1);
    pads.assign(2 * sp, 0);
  } else {
    if (max && n.i("storage_order", 0) != 0) return std::nullopt;
    kernel = n.ints("kernel_shape");
    strides = n.ints("strides", std::vector<int64_t>(sp, 1));
    dil = n.ints("dilations", std::vector<int64_t>(sp, 1));
    pads = n.ints("pads", std::vector<int64_t>(2 * sp, 0));
    auto_pad = n.s("auto_pad", "NOTSET");
    include_pad = !max && n.i("count_include_pad", 0) != 0;
    if (kernel.size() != sp || strides.size() != sp || dil.size() != sp || pads.size() != 2 * sp) return std::nullopt;
  }
  dims_t pb(sp), pe(sp), dilates(sp);
  for (size_t i = 0; i < sp; ++i) {
    int64_t in = xd[i + 2], out = yd[i + 2], span = (kernel[i] - 1) * dil[i] + 1;
    pb[i] = pads[i];
    pe[i] = pads[i + sp];
    if (auto_pad == "VALID") {
      pb[i] = pe[i] = 0;
    } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      int64_t total = std::max<int64_t>(0, (out - 1) * strides[i] + span - in);
      pb[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pe[i] = total - pb[i];
    }
    // `need`: the end padding the last window reaches into. Ceil mode
    // (need > pe): oneDNN takes the extra end padding explicitly; an
    // averaging pool that counts padding must not count it (ONNX does not),
    // so that case stays on the reference kernel. Floor mode (need < pe):
    // the rows past the last window are never read (fewer than a stride,
    // need > pe - stride), and oneDNN, which rounds its output size down
    // too, takes max(need, 0): a 3x3 stride-2 pool over an even size
    // without padding (need = -1) is an ordinary oneDNN pooling.
    int64_t need = (out - 1) * strides[i] + span - in - pb[i];
    if (need > pe[i]) {
      if (include_pad) return std::nullopt;
      pe[i] = need;
    } else if (need < pe[i]) {
      pe[i] = std::max<int64_t>(need, 0);
    }
    dilates[i] = dil[i] - 1;
  }
  ir::Node c = cpu_node(n, "Pool");
  c.inputs = {x};
  c.outputs = {y};
  auto alg = max ? dnnl::algorithm::pooling_max
                 : include_pad ? dnnl::algorithm::pooling_avg_include_padding
                               : dnnl::algorithm::pooling_avg_exclude_padding;
  c.attrs["alg"] = static_cast<int64_t>(alg);
  c.attrs["kernel"] = kernel;
  c.attrs["strides"] = strides;
  c.attrs["dilates"] = std::vector<int64_t>(dilates.begin(), dilates.end());
  c.attrs["pads_begin"] = std::vector<int64_t>(pb.begin(), pb.end());
  c.attrs["pads_end"] = std::vector<int64_t>(pe.begin(), pe.end());
  set_md_attr(c, "md.src", plain_md(xd));
  set_md_attr(c, "md.dst", plain_md(yd));
  if (!fast_primitive(c)) return std::nullopt;
  return std::vector<ir::Node>{std::move(c)};
}

}  // namespace kiln::targets::cpu
