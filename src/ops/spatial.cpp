// Spatial rearrangements: Col2Im-18, CenterCropPad-18 and MaxUnpool-22
// (same as 11) (https://onnx.ai/onnx/operators/).
//
// Col2Im: input [N, C * prod(block), L] -> [N, C, *image_shape]: column
// (c * prod(block) + k, l) is added into the image at position
// l_pos * strides - pads_begin + k_pos * dilations (k_pos: position k in
// the block, l_pos: block l in the row-major grid of
// (image + pads - dilated block) / strides + 1 blocks per dim); positions in
// the padding are dropped. The inverse of im2col (overlaps are summed).
//
// CenterCropPad: for each listed axis (default all), crops the centred
// window of the target size (start floor((dim - target) / 2)) or pads
// zeros around the input (start floor((target - dim) / 2)).
//
// MaxUnpool: X and I [N, C, D1..Dn] (I = MaxPool's flat Indices into the
// whole tensor) -> zeros of shape [N, C, (D - 1) * stride - pads + kernel]
// with Y.flat[I] = X; an output_shape input that is larger places that
// result in its leading corner and pads with zeros (the spec's reference
// implementation does exactly this).
//
// dtypes: Col2Im and MaxUnpool float32 / float64; CenterCropPad any
// fixed-size dtype (it only moves elements).
#include <cstring>

#include "ops/util.h"

namespace kiln::ops {

namespace {

bool is_f32_or_f64(DType t) { return t == DType::f32 || t == DType::f64; }

/// Advances a row-major multi-index over `sizes`; false after the last one.
bool next_index(std::vector<int64_t>& idx, const std::vector<int64_t>& sizes) {
  for (size_t d = idx.size(); d-- > 0;) {
    if (++idx[d] < sizes[d]) return true;
    idx[d] = 0;
  }
  return false;
}

/// An ints attribute of length n (or its default value repeated).
std::vector<int64_t> ints_or(const ir::Node& n, const char* name, size_t len, int64_t def) {
  std::vector<int64_t> v = n.ints(name, std::vector<int64_t>(len, def));
  if (v.size() != len)
    fail(ErrorCode::invalid_model, "{}: attribute '{}' must have {} values, got {}", n.label(), name, len, v.size());
  return v;
}

// ---------------------------------------------------------------- Col2Im

std::vector<OutType> infer_col2im(const InferContext& c) {
  const InType& x = c.in(0);
  if (!is_f32_or_f64(x.dtype)) unsupported_dtype(c.node, x.dtype, "input 0");
  const ir::Dim any = ir::Dim::sym("");
  const ir::Dim N = x.shape && x.shape->size() == 3 ? (*x.shape)[0] : any;
  if (!c.in(1).value) {
    if (c.in(1).shape && c.in(1).shape->size() == 1 && (*c.in(1).shape)[0].is_static())
      return {OutType{x.dtype, ir::Shape(static_cast<size_t>((*c.in(1).shape)[0].value + 2), any)}};
    return {OutType{x.dtype, std::nullopt}};
  }
  ir::Shape s{N, any};
  for (int64_t v : to_int64s(*c.in(1).value)) s.push_back(ir::Dim::known(v));
  if (c.in(2).value && x.shape && x.shape->size() == 3 && (*x.shape)[1].is_static()) {
    const int64_t block = prod(to_int64s(*c.in(2).value));
    if (block > 0) s[1] = ir::Dim::known((*x.shape)[1].value / block);
  }
  return {OutType{x.dtype, s}};
}

template <class T>
void col2im(const T* in, T* out, int64_t N, int64_t C, const std::vector<int64_t>& image,
            const std::vector<int64_t>& block, const std::vector<int64_t>& grid, const std::vector<int64_t>& dil,
            const std::vector<int64_t>& pads, const std::vector<int64_t>& strides) {
  const size_t nd = image.size();
  const int64_t K = prod(block), L = prod(grid), P = prod(image);
  const std::vector<int64_t> istr = strides_of(image);
  for (int64_t nc = 0; nc < N * C; ++nc) {
    T* img = out + nc * P;
    for (int64_t p = 0; p < P; ++p) img[p] = T(0);
    std::vector<int64_t> k(nd, 0);
    for (int64_t kf = 0; kf < K; ++kf, next_index(k, block)) {
      const T* col = in + (nc * K + kf) * L;
      std::vector<int64_t> l(nd, 0);
      for (int64_t lf = 0; lf < L; ++lf, next_index(l, grid)) {
        int64_t off = 0;
        bool inside = true;
        for (size_t d = 0; d < nd && inside; ++d) {
          const int64_t pos = l[d] * strides[d] - pads[d] + k[d] * dil[d];
          inside = pos >= 0 && pos < image[d];
          off += pos * istr[d];
        }
        if (inside) img[off] += col[lf];
      }
    }
  }
}

void kernel_col2im(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  if (!is_f32_or_f64(x.dtype())) unsupported_dtype(n, x.dtype(), "input 0");
  const std::vector<int64_t> image = to_int64s(ctx.in(1)), block = to_int64s(ctx.in(2));
  const size_t nd = image.size();
  if (nd == 0 || block.size() != nd)
    fail(ErrorCode::invalid_input, "{}: image_shape {} and block_shape {} must have the same non-zero length",
         n.label(), ctx.in(1).describe(), ctx.in(2).describe());
  const auto dil = ints_or(n, "dilations", nd, 1), strides = ints_or(n, "strides", nd, 1);
  const auto pads = ints_or(n, "pads", 2 * nd, 0);
  const int64_t K = prod(block);
  if (x.rank() != 3 || K <= 0 || x.dim(1) % K != 0)
    fail(ErrorCode::invalid_input, "{}: input {} must be [N, C * {}, L]", n.label(), x.describe(), K);
  std::vector<int64_t> grid(nd);
  for (size_t d = 0; d < nd; ++d) {
    const int64_t span = dil[d] * (block[d] - 1) + 1, room = image[d] + pads[d] + pads[d + nd] - span;
    if (strides[d] < 1 || room < 0)
      fail(ErrorCode::invalid_input, "{}: block {} does not fit image dim {} of size {}", n.label(), block[d], d,
           image[d]);
    grid[d] = room / strides[d] + 1;
  }
  if (prod(grid) != x.dim(2))
    fail(ErrorCode::invalid_input, "{}: input {} has {} blocks but the image holds {}", n.label(), x.describe(),
         x.dim(2), prod(grid));
  std::vector<int64_t> out{x.dim(0), x.dim(1) / K};
  out.insert(out.end(), image.begin(), image.end());
  Tensor& y = ctx.output(0, x.dtype(), out);
  KILN_DISPATCH_FLOAT(x.dtype(), n, "input 0", {
    col2im(x.data<scalar_t>(), y.data<scalar_t>(), out[0], out[1], image, block, grid, dil,
           std::vector<int64_t>(pads.begin(), pads.begin() + static_cast<int64_t>(nd)), strides);
  });
}

// ---------------------------------------------------------------- CenterCropPad

/// Target size of every dim of x (the listed axes changed).
std::vector<int64_t> crop_pad_shape(const ir::Node& n, const std::vector<int64_t>& x, const Tensor& shape) {
  const std::vector<int64_t> target = to_int64s(shape);
  const int64_t r = static_cast<int64_t>(x.size());
  std::vector<int64_t> axes = n.ints("axes", {});
  if (!n.has("axes"))
    for (int64_t a = 0; a < r; ++a) axes.push_back(a);
  if (axes.size() != target.size())
    fail(ErrorCode::invalid_input, "{}: shape {} must have one entry per axis ({})", n.label(), shape.describe(),
         axes.size());
  std::vector<int64_t> out = x;
  for (size_t i = 0; i < axes.size(); ++i) {
    if (target[i] < 0) fail(ErrorCode::invalid_input, "{}: negative target size {}", n.label(), target[i]);
    out[static_cast<size_t>(normalize_axis(n, axes[i], r, "axes"))] = target[i];
  }
  return out;
}

std::vector<OutType> infer_center_crop_pad(const InferContext& c) {
  const InType& x = c.in(0);
  if (dtype_size(x.dtype) == 0) unsupported_dtype(c.node, x.dtype, "input 0");
  if (!x.shape) return {OutType{x.dtype, std::nullopt}};
  ir::Shape s = *x.shape;
  const int64_t r = static_cast<int64_t>(s.size());
  std::vector<int64_t> axes = c.node.ints("axes", {});
  if (!c.node.has("axes"))
    for (int64_t a = 0; a < r; ++a) axes.push_back(a);
  const std::vector<int64_t> target = c.in(1).value ? to_int64s(*c.in(1).value) : std::vector<int64_t>{};
  for (size_t i = 0; i < axes.size(); ++i) {
    const size_t a = static_cast<size_t>(normalize_axis(c.node, axes[i], r, "axes"));
    s[a] = i < target.size() ? ir::Dim::known(target[i]) : ir::Dim::sym("");
  }
  return {OutType{x.dtype, s}};
}

void kernel_center_crop_pad(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  if (dtype_size(x.dtype()) == 0) unsupported_dtype(n, x.dtype(), "input 0");
  const std::vector<int64_t> out = crop_pad_shape(n, x.shape(), ctx.in(1));
  Tensor& y = ctx.output(0, x.dtype(), out);
  const size_t es = dtype_size(x.dtype());
  if (y.nbytes()) std::memset(y.raw(), 0, y.nbytes());
  const size_t r = out.size();
  // Per dim: the copied extent and where it starts in the input and output.
  std::vector<int64_t> len(r), src0(r), dst0(r);
  for (size_t d = 0; d < r; ++d) {
    const int64_t in = x.dim(static_cast<int64_t>(d)), o = out[d];
    len[d] = std::min(in, o);
    src0[d] = in > o ? (in - o) / 2 : 0;
    dst0[d] = o > in ? (o - in) / 2 : 0;
  }
  if (prod(len) == 0) return;
  const std::vector<int64_t> xs = strides_of(x.shape()), ys = strides_of(out);
  const auto* src = static_cast<const uint8_t*>(x.raw());
  auto* dst = static_cast<uint8_t*>(y.raw());
  std::vector<int64_t> idx(r, 0);
  do {
    int64_t so = 0, doff = 0;
    for (size_t d = 0; d < r; ++d) {
      so += (src0[d] + idx[d]) * xs[d];
      doff += (dst0[d] + idx[d]) * ys[d];
    }
    std::memcpy(dst + static_cast<size_t>(doff) * es, src + static_cast<size_t>(so) * es, es);
  } while (next_index(idx, len));
}

// ---------------------------------------------------------------- MaxUnpool

/// The shape MaxUnpool infers from X's spatial dims and the attributes.
std::vector<int64_t> unpool_shape(const ir::Node& n, const std::vector<int64_t>& x) {
  if (x.size() < 3) fail(ErrorCode::invalid_input, "{}: X must be [N, C, D1, ...]", n.label());
  const size_t nd = x.size() - 2;
  const std::vector<int64_t> k = n.ints("kernel_shape");
  if (k.size() != nd)
    fail(ErrorCode::invalid_model, "{}: kernel_shape has {} values for {} spatial dims", n.label(), k.size(), nd);
  const auto strides = ints_or(n, "strides", nd, 1), pads = ints_or(n, "pads", 2 * nd, 0);
  std::vector<int64_t> out{x[0], x[1]};
  for (size_t d = 0; d < nd; ++d) out.push_back((x[d + 2] - 1) * strides[d] - (pads[d] + pads[d + nd]) + k[d]);
  return out;
}

std::vector<OutType> infer_max_unpool(const InferContext& c) {
  const InType& x = c.in(0);
  if (!is_f32_or_f64(x.dtype)) unsupported_dtype(c.node, x.dtype, "input 0");
  if (c.in(1).dtype != DType::i64) unsupported_dtype(c.node, c.in(1).dtype, "input 1 (I)");
  if (c.has(2)) {
    if (c.in(2).value) return {OutType{x.dtype, ir::static_shape(to_int64s(*c.in(2).value))}};
    return {OutType{x.dtype, x.shape ? std::optional(ir::Shape(x.shape->size(), ir::Dim::sym(""))) : std::nullopt}};
  }
  if (!x.shape || !ir::is_static(*x.shape)) {
    if (!x.shape) return {OutType{x.dtype, std::nullopt}};
    ir::Shape s(x.shape->size(), ir::Dim::sym(""));
    s[0] = (*x.shape)[0];
    s[1] = (*x.shape)[1];
    return {OutType{x.dtype, s}};
  }
  return {OutType{x.dtype, ir::static_shape(unpool_shape(c.node, ir::to_sizes(*x.shape)))}};
}

template <class T>
void max_unpool(const ir::Node& n, const Tensor& x, const std::vector<int64_t>& idx, const std::vector<int64_t>& inner,
                Tensor& y) {
  const int64_t total = prod(inner);
  std::vector<T> flat(static_cast<size_t>(total), T(0));
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (idx[i] < 0 || idx[i] >= total)
      fail(ErrorCode::invalid_input, "{}: index {} is outside the unpooled tensor of {} elements", n.label(), idx[i],
           total);
    flat[static_cast<size_t>(idx[i])] = x.data<T>()[i];
  }
  T* yp = y.data<T>();
  for (int64_t i = 0; i < y.numel(); ++i) yp[i] = T(0);
  const std::vector<int64_t> is = strides_of(inner), ys = strides_of(y.shape());
  std::vector<int64_t> at(inner.size(), 0);
  if (total == 0) return;
  do {
    int64_t src = 0, dst = 0;
    for (size_t d = 0; d < at.size(); ++d) {
      src += at[d] * is[d];
      dst += at[d] * ys[d];
    }
    yp[dst] = flat[static_cast<size_t>(src)];
  } while (next_index(at, inner));
}

void kernel_max_unpool(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  if (!is_f32_or_f64(x.dtype())) unsupported_dtype(n, x.dtype(), "input 0");
  const Tensor& I = ctx.in(1);
  if (I.shape() != x.shape())
    fail(ErrorCode::invalid_input, "{}: I {} must have X's shape {}", n.label(), I.describe(), x.describe());
  const std::vector<int64_t> inner = unpool_shape(n, x.shape());
  std::vector<int64_t> out = inner;
  if (ctx.has(2)) {
    out = to_int64s(ctx.in(2));
    bool fits = out.size() == inner.size();
    for (size_t d = 0; fits && d < out.size(); ++d) fits = out[d] >= inner[d];
    if (!fits)
      fail(ErrorCode::invalid_input, "{}: output_shape [{}] is smaller than the unpooled shape [{}]", n.label(),
           shape_to_string(out), shape_to_string(inner));
  }
  Tensor& y = ctx.output(0, x.dtype(), out);
  const std::vector<int64_t> idx = to_int64s(I);
  KILN_DISPATCH_FLOAT(x.dtype(), n, "input 0", { max_unpool<scalar_t>(n, x, idx, inner, y); });
}

}  // namespace

/// Registers Col2Im, CenterCropPad and MaxUnpool.
void register_spatial(Registry& r) {
  r.add({"", "Col2Im", infer_col2im, kernel_col2im});
  r.add({"", "CenterCropPad", infer_center_crop_pad, kernel_center_crop_pad});
  r.add({"", "MaxUnpool", infer_max_unpool, kernel_max_unpool});
}

}  // namespace kiln::ops
