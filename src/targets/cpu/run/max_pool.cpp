// kiln.cpu.Pool, max pooling over 2-D channel-blocked activations
// (nChw8c / nChw16c) or plain NCHW ones: kiln's own kernel, in place of
// oneDNN's.
//
// Why: oneDNN 2.6's jit max pooling (jit:avx2) takes 0.36 ms for a 3x3
// stride-2 pool of 64 x 111 x 111 on the 2-core EPYC (a standalone probe;
// 0.71 ms inside SqueezeNet), about 9 GB/s, where ONNX Runtime's takes about
// a third; the pools were 23-25% of GoogLeNet's and SqueezeNet's time. Here
// one AVX2 vector holds 8 channels of a pixel, each output is the max of its
// window's in-bounds vectors (padding, as ONNX's, never wins), rows of
// output in parallel. The artifact is the same: make_pool picks this kernel
// at load for a node it fits.
#include <immintrin.h>

#include <limits>
#include <optional>

#include "support/error.h"
#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets::cpu {

namespace {

struct PoolDims {
  int64_t N = 0, C = 0, H = 0, W = 0, OH = 0, OW = 0, KH = 0, KW = 0;
  int64_t SH = 1, SW = 1, DH = 1, DW = 1, PT = 0, PL = 0, block = 8;
};

/// One row of output pixels (n, channel block cb, oh): max over each window's in-bounds pixels.
__attribute__((target("avx2"))) void pool_row_avx2(const PoolDims& d, const float* x, float* y) {
  for (int64_t ow = 0; ow < d.OW; ++ow)
    for (int64_t v = 0; v < d.block; v += 8) {
      __m256 acc = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
      for (int64_t kh = 0; kh < d.KH; ++kh) {
        const int64_t ih = kh * d.DH;  // x points at the window's top row (relative)
        for (int64_t kw = 0; kw < d.KW; ++kw) {
          const int64_t iw = ow * d.SW - d.PL + kw * d.DW;
          if (iw < 0 || iw >= d.W || ih < 0) continue;
          // vmaxps returns its second operand when either is NaN: a NaN input never replaces the max,
          // as in the reference kernel's `if (v > m) m = v`.
          acc = _mm256_max_ps(_mm256_loadu_ps(x + (ih * d.W + iw) * d.block + v), acc);
        }
      }
      _mm256_storeu_ps(y + ow * d.block + v, acc);
    }
}

void pool_row_plain(const PoolDims& d, const float* x, float* y) {
  for (int64_t ow = 0; ow < d.OW; ++ow)
    for (int64_t l = 0; l < d.block; ++l) {
      float acc = -std::numeric_limits<float>::infinity();
      for (int64_t kh = 0; kh < d.KH; ++kh)
        for (int64_t kw = 0; kw < d.KW; ++kw) {
          const int64_t iw = ow * d.SW - d.PL + kw * d.DW;
          if (iw < 0 || iw >= d.W) continue;
          const float v = x[(kh * d.DH * d.W + iw) * d.block + l];
          if (v > acc) acc = v;
        }
      y[ow * d.block + l] = acc;
    }
}

/// The node's dims when it is a 2-D max pool over matching blocked layouts, else nullopt.
std::optional<PoolDims> blocked_max_pool(const ir::Node& n) {
  if (static_cast<dnnl::algorithm>(n.i("alg")) != dnnl::algorithm::pooling_max || !read_post_ops(n).empty())
    return std::nullopt;
  const md_t src = md_attr(n, "md.src"), dst = md_attr(n, "md.dst");
  if (src.data.ndims != 4 || dst.data.ndims != 4) return std::nullopt;
  const dims_t sd = src.dims(), dd = dst.dims();
  PoolDims d;
  // Plain NCHW is "block 1" (each channel a plane): oneDNN 2.6 runs it on
  // simple_nchw, 11x slower than its own jit kernel on blocked data.
  d.block = src == plain_md(sd) && dst == plain_md(dd) ? 1 : 8;
  for (int64_t b : {int64_t{8}, int64_t{16}})
    if (src == blocked_md(sd, b) && dst == blocked_md(dd, b)) d.block = b;
  const auto layout = [&](const dims_t& dims) { return d.block == 1 ? plain_md(dims) : blocked_md(dims, d.block); };
  if (src != layout(sd) || dst != layout(dd) || sd[1] % d.block || sd[0] != dd[0] || sd[1] != dd[1])
    return std::nullopt;
  const auto k = n.ints("kernel"), s = n.ints("strides"), dl = n.ints("dilates"), pb = n.ints("pads_begin");
  if (k.size() != 2 || s.size() != 2 || dl.size() != 2 || pb.size() != 2) return std::nullopt;
  d.N = sd[0], d.C = sd[1], d.H = sd[2], d.W = sd[3], d.OH = dd[2], d.OW = dd[3];
  d.KH = k[0], d.KW = k[1], d.SH = s[0], d.SW = s[1], d.DH = dl[0] + 1, d.DW = dl[1] + 1, d.PT = pb[0], d.PL = pb[1];
  for (int64_t v : {d.KH, d.KW, d.SH, d.SW, d.OH, d.OW})
    if (v < 1) return std::nullopt;
  return d;
}

}  // namespace

std::optional<BoundKernel> make_blocked_max_pool(const ir::Node& n) {
  auto dims = blocked_max_pool(n);
  if (!dims) return std::nullopt;
  const PoolDims d = *dims;
  const bool fast = __builtin_cpu_supports("avx2");
  // The input is what a pool reads (a 3x3 stride-2 pool reads 4x what it
  // writes): one thread only for under 1 MiB of both together.
  const bool single = (d.N * d.C * (d.H * d.W + d.OH * d.OW)) * 4 < (1 << 20);
  return BoundKernel([d, fast, single](ops::KernelContext& ctx) {
    const Tensor& x = ctx.in(0);
    const int64_t in = d.N * d.C * d.H * d.W, out = d.N * d.C * d.OH * d.OW;
    if (x.dtype() != DType::f32 || x.numel() < in)
      fail(ErrorCode::invalid_input, "{}: input is {}, {} float32 values expected", ctx.node.label(), x.describe(), in);
    // A blocked value is flat in the IR ([bytes / 4]); a plain one keeps its dims.
    Tensor& y = ctx.output(0, DType::f32, d.block == 1 ? std::vector<int64_t>{d.N, d.C, d.OH, d.OW}
                                                       : std::vector<int64_t>{out});
    const float* xp = x.data<float>();
    float* yp = y.data<float>();
    const int64_t planes = d.N * (d.C / d.block), rows = planes * d.OH;
#pragma omp parallel for schedule(static) if (!single && rows > 1)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t p = r / d.OH, oh = r % d.OH;
      // The window's rows inside the input: [h0, h1) of KH, each DH apart.
      PoolDims row = d;
      int64_t top = oh * d.SH - d.PT, k0 = 0;
      while (k0 < d.KH && top + k0 * d.DH < 0) ++k0;
      int64_t k1 = k0;
      while (k1 < d.KH && top + k1 * d.DH < d.H) ++k1;
      row.KH = k1 - k0;
      const float* xr = xp + (p * d.H + top + k0 * d.DH) * d.W * d.block;
      float* yr = yp + (p * d.OH + oh) * d.OW * d.block;
      if (row.KH <= 0) {  // a window wholly in the padding: ONNX's max over nothing
        for (int64_t i = 0; i < d.OW * d.block; ++i) yr[i] = -std::numeric_limits<float>::infinity();
        continue;
      }
      if (fast && d.block % 8 == 0) pool_row_avx2(row, xr, yr);
      else pool_row_plain(row, xr, yr);
    }
  });
}

}  // namespace kiln::targets::cpu
