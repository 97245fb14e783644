// kiln.cpu.GroupConv: a 2-D grouped convolution whose groups are 2 or 4
// channels wide (input and output), on channel-blocked activations
// (nChw8c / nChw16c), kiln's own kernel.
//
// Why: ResNeXt's 32x4d blocks convolve 3x3 over groups of 4 channels.
// oneDNN 2.6 has no jit kernel for a group narrower than its vector (8 floats
// on AVX2); it runs them on its gemm convolution, 6x slower than ONNX
// Runtime's on the 2-core EPYC (4.2 ms against 0.7 ms for 128 channels at
// 56x56). Here one AVX2 vector holds 8 output channels, i.e. 8 / w whole
// groups: for each tap and in-group input channel j, the 8 input channels
// at that position are shuffled so that each group's lanes see its own
// channel j, then multiplied by the packed weights (8 output channels of
// that tap and j) and accumulated. The 8 channels of a vector are contiguous
// in both blocked layouts, so no reorder surrounds the node.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "support/error.h"
#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets::cpu {

namespace {

/// What one node computes; dims in elements.
struct GcDims {
  int64_t N = 0, C = 0, H = 0, W = 0, OH = 0, OW = 0, KH = 0, KW = 0;
  int64_t SH = 1, SW = 1, DH = 1, DW = 1, PT = 0, PL = 0;  ///< strides, ONNX dilations, leading pads
  int64_t width = 4, block = 8;                           ///< group width; channel block of both layouts
  bool bias = false, relu = false;
};

/// Offset of channel c's block at pixel (n, h, w) of a [N, C, H, W] tensor in nChw<block>c.
inline int64_t at(const GcDims& d, int64_t n, int64_t c, int64_t h, int64_t w, int64_t H, int64_t W) {
  return (((n * (d.C / d.block) + c / d.block) * H + h) * W + w) * d.block + c % d.block;
}

/// Each group's in-group channel J spread over its lanes: groups of 4 are
/// the two 128-bit halves, groups of 2 their pairs, so one in-lane shuffle
/// (1 cycle) does it where a cross-lane permute would take several.
template <int Wd, int J>
__attribute__((target("avx2,fma"))) inline __m256 spread(__m256 xv) {
  if constexpr (Wd == 4) return _mm256_shuffle_ps(xv, xv, J * 0x55);
  else return _mm256_shuffle_ps(xv, xv, J | (J << 2) | ((2 + J) << 4) | ((2 + J) << 6));
}

/// acc += sum over in-group channels j of spread<j>(xv) * wv[j].
template <int Wd>
__attribute__((target("avx2,fma"))) inline __m256 group_fma(__m256 xv, const __m256* wv, __m256 acc) {
  acc = _mm256_fmadd_ps(spread<Wd, 0>(xv), wv[0], acc);
  acc = _mm256_fmadd_ps(spread<Wd, 1>(xv), wv[1], acc);
  if constexpr (Wd == 4) {
    acc = _mm256_fmadd_ps(spread<Wd, 2>(xv), wv[2], acc);
    acc = _mm256_fmadd_ps(spread<Wd, 3>(xv), wv[3], acc);
  }
  return acc;
}

template <int Wd>
__attribute__((target("avx2,fma"))) void row_avx2(const GcDims& d, const float* x, const float* wp, const float* bias,
                                                  float* y, int64_t n, int64_t oh) {
  const int64_t bs = d.block;
  for (int64_t c0 = 0; c0 < d.C; c0 += 8) {
    const float* wb = wp + c0 / 8 * d.KH * d.KW * Wd * 8;
    const __m256 b0 = d.bias ? _mm256_loadu_ps(bias + c0) : _mm256_setzero_ps();
    // The 8 channels' place at pixel (0, 0) of image n; a pixel (h, w) is (h * W + w) * block further.
    const float* xb = x + at(d, n, c0, 0, 0, d.H, d.W);
    float* yb = y + at(d, n, c0, oh, 0, d.OH, d.OW);
    // kTile output pixels at a time: independent FMA chains (one chain of
    // KH * KW * Wd dependent FMAs per pixel would wait on the FMA latency),
    // and each weight vector loaded once for all of them.
    constexpr int kTile = 4;
    for (int64_t ow0 = 0; ow0 < d.OW; ow0 += kTile) {
      const int tile = static_cast<int>(std::min<int64_t>(kTile, d.OW - ow0));
      __m256 acc[kTile];
      for (int t = 0; t < kTile; ++t) acc[t] = b0;
      for (int64_t kh = 0; kh < d.KH; ++kh) {
        const int64_t ih = oh * d.SH - d.PT + kh * d.DH;
        if (ih < 0 || ih >= d.H) continue;
        for (int64_t kw = 0; kw < d.KW; ++kw) {
          const float* wt = wb + (kh * d.KW + kw) * Wd * 8;
          __m256 wv[Wd];
          for (int j = 0; j < Wd; ++j) wv[j] = _mm256_loadu_ps(wt + j * 8);
          for (int t = 0; t < tile; ++t) {
            const int64_t iw = (ow0 + t) * d.SW - d.PL + kw * d.DW;
            if (iw < 0 || iw >= d.W) continue;
            acc[t] = group_fma<Wd>(_mm256_loadu_ps(xb + (ih * d.W + iw) * bs), wv, acc[t]);
          }
        }
      }
      for (int t = 0; t < tile; ++t) {
        const __m256 v = d.relu ? _mm256_max_ps(acc[t], _mm256_setzero_ps()) : acc[t];
        _mm256_storeu_ps(yb + (ow0 + t) * bs, v);
      }
    }
  }
}

/// The portable form of row_avx2.
void row_plain(const GcDims& d, const float* x, const float* wp, const float* bias, float* y, int64_t n, int64_t oh) {
  const int64_t wd = d.width;
  for (int64_t c0 = 0; c0 < d.C; c0 += 8) {
    const float* wb = wp + c0 / 8 * d.KH * d.KW * wd * 8;
    for (int64_t ow = 0; ow < d.OW; ++ow)
      for (int64_t l = 0; l < 8; ++l) {
        float acc = d.bias ? bias[c0 + l] : 0.f;
        for (int64_t kh = 0; kh < d.KH; ++kh) {
          const int64_t ih = oh * d.SH - d.PT + kh * d.DH;
          if (ih < 0 || ih >= d.H) continue;
          for (int64_t kw = 0; kw < d.KW; ++kw) {
            const int64_t iw = ow * d.SW - d.PL + kw * d.DW;
            if (iw < 0 || iw >= d.W) continue;
            for (int64_t j = 0; j < wd; ++j)
              acc += x[at(d, n, c0 + l / wd * wd + j, ih, iw, d.H, d.W)] * wb[((kh * d.KW + kw) * wd + j) * 8 + l];
          }
        }
        y[at(d, n, c0 + l, oh, ow, d.OH, d.OW)] = d.relu ? std::max(acc, 0.f) : acc;
      }
  }
}

bool has_avx2_fma() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

GcDims gc_dims(const ir::Node& n, const ir::Model& m) {
  auto ints = [&](const char* name, size_t count) {
    std::vector<int64_t> v = n.ints(name);
    if (v.size() != count)
      fail(ErrorCode::corrupt_artifact, "{}: attribute '{}' has {} values, expected {}", n.label(), name, v.size(), count);
    return v;
  };
  GcDims d;
  const auto shape = ints("shape", 8);  // N, C, H, W, OH, OW, KH, KW
  d.N = shape[0], d.C = shape[1], d.H = shape[2], d.W = shape[3], d.OH = shape[4], d.OW = shape[5], d.KH = shape[6],
  d.KW = shape[7];
  const auto s = ints("strides", 2), dl = ints("dilations", 2), p = ints("pads_begin", 2);
  d.SH = s[0], d.SW = s[1], d.DH = dl[0], d.DW = dl[1], d.PT = p[0], d.PL = p[1];
  d.width = n.i("width", 0);
  d.block = n.i("block", 0);
  d.bias = n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue;
  d.relu = n.i("relu", 0) != 0;
  for (int64_t v : {d.N, d.C, d.H, d.W, d.OH, d.OW, d.KH, d.KW, d.SH, d.SW, d.DH, d.DW})
    if (v < 1) fail(ErrorCode::corrupt_artifact, "{}: a GroupConv dim is {}", n.label(), v);
  if ((d.width != 2 && d.width != 4) || (d.block != 8 && d.block != 16) || d.C % d.block || d.PT < 0 || d.PL < 0)
    fail(ErrorCode::corrupt_artifact, "{}: GroupConv width {} / block {} / channels {} / pads not supported", n.label(),
         d.width, d.block, d.C);
  const ir::Value& w = m.value(n.inputs.at(1));
  if (!w.constant || w.constant->dtype() != DType::f32 || w.constant->numel() != d.C * d.KH * d.KW * d.width)
    fail(ErrorCode::corrupt_artifact, "{}: packed weights must be {} float32 constants", n.label(),
         d.C * d.KH * d.KW * d.width);
  return d;
}

}  // namespace

Tensor pack_group_conv_weights(const float* w, int64_t C, int64_t width, int64_t KH, int64_t KW) {
  Tensor out(DType::f32, {C * KH * KW * width});
  float* dst = out.data<float>();
  for (int64_t c0 = 0; c0 < C; c0 += 8)
    for (int64_t kh = 0; kh < KH; ++kh)
      for (int64_t kw = 0; kw < KW; ++kw)
        for (int64_t j = 0; j < width; ++j)
          for (int64_t l = 0; l < 8; ++l)
            *dst++ = w[(((c0 + l) * width + j) * KH + kh) * KW + kw];
  return out;
}

BoundKernel make_group_conv(const ir::Node& n, const ir::Model& m) {
  const GcDims d = gc_dims(n, m);
  const int64_t in_elems = d.N * d.C * d.H * d.W, out_elems = d.N * d.C * d.OH * d.OW;
  const bool fast = has_avx2_fma();
  const bool single = 2.0 * static_cast<double>(out_elems * d.KH * d.KW * d.width) < 1e6;
  return [d, in_elems, out_elems, fast, single](ops::KernelContext& ctx) {
    const Tensor& x = ctx.in(0);
    if (x.dtype() != DType::f32 || x.numel() < in_elems)
      fail(ErrorCode::invalid_input, "{}: input is {}, {} float32 values expected", ctx.node.label(), x.describe(),
           in_elems);
    const float* wp = ctx.in(1).data<float>();
    const float* bias = d.bias ? ctx.in(2).data<float>() : nullptr;
    Tensor& y = ctx.output(0, DType::f32, {out_elems});
    const float* xp = x.data<float>();
    float* yp = y.data<float>();
    const int64_t rows = d.N * d.OH;
#pragma omp parallel for schedule(static) if (!single && rows > 1)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t nn = r / d.OH, oh = r % d.OH;
      if (!fast) row_plain(d, xp, wp, bias, yp, nn, oh);
      else if (d.width == 4) row_avx2<4>(d, xp, wp, bias, yp, nn, oh);
      else row_avx2<2>(d, xp, wp, bias, yp, nn, oh);
    }
  };
}

}  // namespace kiln::targets::cpu
