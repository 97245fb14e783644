// DeformConv-22 (same as 19) (https://onnx.ai/onnx/operators/onnx__DeformConv.html),
// 2-D.
//
// X [N, C, H, W], W [oC, C / group, kH, kW], offset [N, G * kH * kW * 2, oH, oW]
// (G = offset_group), optional B [oC], optional mask [N, G * kH * kW, oH, oW]
// -> Y [N, oC, oH, oW] with oH = (H + pads - ((kH - 1) * dH + 1)) / sH + 1.
// Like Conv, except that kernel tap (i, j) of output (oh, ow) reads X at
//   y = oh * sH - pad_top  + i * dH + offset[n, g, i, j, 0, oh, ow]
//   x = ow * sW - pad_left + j * dW + offset[n, g, i, j, 1, oh, ow]
// (offset channels ordered (g, i, j, {y, x})), by bilinear interpolation in
// which corners outside the image read 0, and the tap is scaled by
// mask[n, g, i, j, oh, ow] (1 without mask). Input channel c uses offset
// group c / (C / G). This is the spec's reference (GridSample, linear,
// zeros padding, align_corners=1) and torchvision's deform_conv2d.
// Computed in double; dtypes float32 / float64.
#include <cmath>

#include "ops/util.h"

namespace kiln::ops {

namespace {

bool is_f32_or_f64(DType t) { return t == DType::f32 || t == DType::f64; }

struct DeformParams {
  int64_t group, offset_group, kH, kW, sH, sW, dH, dW, pT, pL, pB, pR;
};

DeformParams deform_params(const ir::Node& n, int64_t kh_w, int64_t kw_w) {
  DeformParams p;
  p.group = n.i("group", 1);
  p.offset_group = n.i("offset_group", 1);
  const auto k = n.ints("kernel_shape", {kh_w, kw_w});
  const auto s = n.ints("strides", {1, 1}), d = n.ints("dilations", {1, 1}), pads = n.ints("pads", {0, 0, 0, 0});
  if (k.size() != 2 || s.size() != 2 || d.size() != 2 || pads.size() != 4)
    fail(ErrorCode::unsupported, "{}: only 2-D DeformConv is supported", n.label());
  if (p.group < 1 || p.offset_group < 1 || s[0] < 1 || s[1] < 1 || d[0] < 1 || d[1] < 1)
    fail(ErrorCode::invalid_model, "{}: group, offset_group, strides and dilations must be >= 1", n.label());
  p.kH = k[0];
  p.kW = k[1];
  p.sH = s[0];
  p.sW = s[1];
  p.dH = d[0];
  p.dW = d[1];
  p.pT = pads[0];
  p.pL = pads[1];
  p.pB = pads[2];
  p.pR = pads[3];
  return p;
}

std::vector<OutType> infer_deform_conv(const InferContext& c) {
  const InType& x = c.in(0);
  for (size_t i = 0; i < c.num_inputs(); ++i)
    if (c.has(i) && !is_f32_or_f64(c.in(i).dtype)) unsupported_dtype(c.node, c.in(i).dtype, "an input");
  if (x.shape && x.shape->size() != 4)
    fail(ErrorCode::unsupported, "{}: only 2-D DeformConv (X of rank 4) is supported, X is {}", c.node.label(),
         ir::shape_str(x.shape));
  const ir::Dim any = ir::Dim::sym("");
  ir::Shape s{x.shape ? (*x.shape)[0] : any, c.in(1).shape ? (*c.in(1).shape)[0] : any, any, any};
  const auto& w = c.in(1).shape;
  if (x.shape && w && w->size() == 4 && (*w)[2].is_static() && (*w)[3].is_static()) {
    const DeformParams p = deform_params(c.node, (*w)[2].value, (*w)[3].value);
    const ir::Dim &H = (*x.shape)[2], &W = (*x.shape)[3];
    if (H.is_static()) s[2] = ir::Dim::known((H.value + p.pT + p.pB - ((p.kH - 1) * p.dH + 1)) / p.sH + 1);
    if (W.is_static()) s[3] = ir::Dim::known((W.value + p.pL + p.pR - ((p.kW - 1) * p.dW + 1)) / p.sW + 1);
  }
  return {OutType{x.dtype, s}};
}

std::vector<double> doubles_of(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = element_as_double(t, i);
  return v;
}

/// Bilinear sample of an H x W plane at (y, x); corners outside read 0.
double sample(const double* plane, int64_t H, int64_t W, double y, double x) {
  const double fy = std::floor(y), fx = std::floor(x);
  const int64_t y0 = static_cast<int64_t>(fy), x0 = static_cast<int64_t>(fx);
  const double ly = y - fy, lx = x - fx;
  double v = 0;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b) {
      const int64_t yy = y0 + a, xx = x0 + b;
      if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
      v += (a ? ly : 1 - ly) * (b ? lx : 1 - lx) * plane[yy * W + xx];
    }
  return v;
}

void kernel_deform_conv(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor &x = ctx.in(0), &w = ctx.in(1), &off = ctx.in(2);
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has(i) && !is_f32_or_f64(ctx.in(i).dtype())) unsupported_dtype(n, ctx.in(i).dtype(), "an input");
  if (x.rank() != 4 || w.rank() != 4)
    fail(ErrorCode::unsupported, "{}: only 2-D DeformConv is supported (X {}, W {})", n.label(), x.describe(),
         w.describe());
  const DeformParams p = deform_params(n, w.dim(2), w.dim(3));
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), OC = w.dim(0);
  const int64_t oH = (H + p.pT + p.pB - ((p.kH - 1) * p.dH + 1)) / p.sH + 1;
  const int64_t oW = (W + p.pL + p.pR - ((p.kW - 1) * p.dW + 1)) / p.sW + 1;
  const int64_t K = p.kH * p.kW, G = p.offset_group, cpg = C / p.group, opg = OC / p.group;
  if (w.dim(1) * p.group != C || OC % p.group != 0 || C % G != 0 || w.dim(2) != p.kH || w.dim(3) != p.kW)
    fail(ErrorCode::invalid_input, "{}: X {} and W {} do not match group {} / offset_group {} / kernel_shape",
         n.label(), x.describe(), w.describe(), p.group, G);
  if (oH < 1 || oW < 1 || off.shape() != std::vector<int64_t>{N, G * K * 2, oH, oW})
    fail(ErrorCode::invalid_input, "{}: offset {} must be [{}, {}, {}, {}]", n.label(), off.describe(), N, G * K * 2,
         oH, oW);
  const bool has_b = ctx.has(3), has_m = ctx.has(4);
  if (has_b && ctx.in(3).numel() != OC)
    fail(ErrorCode::invalid_input, "{}: B {} must have {} values", n.label(), ctx.in(3).describe(), OC);
  if (has_m && ctx.in(4).shape() != std::vector<int64_t>{N, G * K, oH, oW})
    fail(ErrorCode::invalid_input, "{}: mask {} must be [{}, {}, {}, {}]", n.label(), ctx.in(4).describe(), N, G * K,
         oH, oW);
  const std::vector<double> xv = doubles_of(x), wv = doubles_of(w), ov = doubles_of(off);
  const std::vector<double> bv = has_b ? doubles_of(ctx.in(3)) : std::vector<double>(static_cast<size_t>(OC), 0.0);
  const std::vector<double> mv = has_m ? doubles_of(ctx.in(4)) : std::vector<double>{};
  const int64_t plane = oH * oW;
  // Sampled columns of every input channel, [N, C, K, oH * oW]; then each
  // output channel sums its group's columns (deterministic order).
  std::vector<double> cols(static_cast<size_t>(N * C * K * plane));
#pragma omp parallel for schedule(static) if (N * C * K * plane > (1 << 14))
  for (int64_t nc = 0; nc < N * C; ++nc) {
    const int64_t b = nc / C, c = nc % C, g = c / (C / G);
    for (int64_t k = 0; k < K; ++k)
      for (int64_t pos = 0; pos < plane; ++pos) {
        const int64_t oh = pos / oW, ow = pos % oW, i = k / p.kW, j = k % p.kW;
        const size_t o = static_cast<size_t>(((b * G + g) * K * 2 + k * 2) * plane + pos);
        const double yy = static_cast<double>(oh * p.sH - p.pT + i * p.dH) + ov[o];
        const double xx = static_cast<double>(ow * p.sW - p.pL + j * p.dW) + ov[o + static_cast<size_t>(plane)];
        double v = sample(xv.data() + nc * H * W, H, W, yy, xx);
        if (has_m) v *= mv[static_cast<size_t>(((b * G + g) * K + k) * plane + pos)];
        cols[static_cast<size_t>((nc * K + k) * plane + pos)] = v;
      }
  }
  std::vector<double> yv(static_cast<size_t>(N * OC * plane));
#pragma omp parallel for schedule(static) if (N * OC * cpg * K * plane > (1 << 14))
  for (int64_t bo = 0; bo < N * OC; ++bo) {
    const int64_t b = bo / OC, oc = bo % OC, grp = oc / opg;
    double* yp = yv.data() + bo * plane;
    for (int64_t pos = 0; pos < plane; ++pos) yp[pos] = bv[static_cast<size_t>(oc)];
    for (int64_t ci = 0; ci < cpg; ++ci) {
      const double* wk = wv.data() + (oc * cpg + ci) * K;
      const double* col = cols.data() + ((b * C + grp * cpg + ci) * K) * plane;
      for (int64_t k = 0; k < K; ++k)
        for (int64_t pos = 0; pos < plane; ++pos) yp[pos] += wk[k] * col[k * plane + pos];
    }
  }
  Tensor& y = ctx.output(0, x.dtype(), {N, OC, oH, oW});
  KILN_DISPATCH_FLOAT(x.dtype(), n, "input 0", {
    for (int64_t i = 0; i < y.numel(); ++i)
      y.data<scalar_t>()[i] = static_cast<scalar_t>(yv[i]);
  });
}

}  // namespace

/// Registers DeformConv.
void register_deform_conv(Registry& r) { r.add({"", "DeformConv", infer_deform_conv, kernel_deform_conv}); }

}  // namespace kiln::ops
