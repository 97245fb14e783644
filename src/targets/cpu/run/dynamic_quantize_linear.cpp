// kiln.cpu.DynamicQuantizeLinear: ONNX DynamicQuantizeLinear-11 (float32 ->
// uint8, scale, zero point) vectorised and on the node's threads, bit-exact to
// the reference kernel (ops/quantize.cpp, ops/quant_common.h).
//
// The range is the reference's: min / max with 0, a NaN never replacing the
// running value (v < lo ? v : lo), kept in 16 SSE2 lanes; the lanes' order does not change the result (a -0.0
// never replaces the initial +0.0, as -0.0 < 0.0 is false). The parameters
// come from the same function (dynamic_u8_params_of_range). Each value is
// quantized as the reference does, q = x / scale in float32, then
// round-half-even(q) + zero point saturated to [0, 255], NaN x giving the zero
// point and a NaN sum 0 (the tail: the reference's own quantize_u8);
// round-half-even is (q + 1.5 * 2^23) - 1.5 * 2^23 for
// |q| < 2^22 (exact in float32's default rounding) and q itself beyond, where
// the saturation gives 0 or 255 whatever the rounding.
#include <emmintrin.h>

#include <cmath>

#include "ops/quant_common.h"
#include "support/error.h"
#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets::cpu {

namespace {

constexpr int64_t kParallel = 1 << 16;  ///< elements below which one thread does it all

/// [min(x, 0), max(x, 0)] of x[0, n), NaN ignored, folded into mn / mx.
/// SSE2 (every x86-64): minps(v, lo) is v < lo ? v : lo, keeping lo for a NaN v.
void range_of(const float* x, int64_t n, float& mn, float& mx) {
  __m128 lo[4], hi[4];
  for (int j = 0; j < 4; ++j) lo[j] = hi[j] = _mm_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 4; ++j) {
      const __m128 v = _mm_loadu_ps(x + i + 4 * j);
      lo[j] = _mm_min_ps(v, lo[j]);
      hi[j] = _mm_max_ps(v, hi[j]);
    }
  float l[16], h[16];
  for (int j = 0; j < 4; ++j) {
    _mm_storeu_ps(l + 4 * j, lo[j]);
    _mm_storeu_ps(h + 4 * j, hi[j]);
  }
  for (int j = 0; j < 16; ++j) {
    mn = l[j] < mn ? l[j] : mn;
    mx = mx < h[j] ? h[j] : mx;
  }
  for (; i < n; ++i) {
    mn = x[i] < mn ? x[i] : mn;
    mx = mx < x[i] ? x[i] : mx;
  }
}

/// Four float lanes quantized (see the file comment) to int32 lanes.
inline __m128i quantize4(__m128 x, __m128 scale, __m128 zp, __m128i zp_i) {
  const __m128 q = _mm_div_ps(x, scale);
  const __m128 small = _mm_cmplt_ps(_mm_andnot_ps(_mm_set1_ps(-0.0f), q), _mm_set1_ps(0x1p22f));  // NaN: false
  const __m128 magic = _mm_set1_ps(0x1.8p23f);
  const __m128 rounded = _mm_sub_ps(_mm_add_ps(q, magic), magic);
  const __m128 r = _mm_or_ps(_mm_and_ps(small, rounded), _mm_andnot_ps(small, q));
  // maxps(v, 0) is 0 for a NaN v, as the reference's saturation of NaN.
  const __m128 c = _mm_min_ps(_mm_max_ps(_mm_add_ps(r, zp), _mm_setzero_ps()), _mm_set1_ps(255.0f));
  const __m128i nan_x = _mm_castps_si128(_mm_cmpunord_ps(x, x));
  const __m128i v = _mm_cvttps_epi32(c);
  return _mm_or_si128(_mm_and_si128(nan_x, zp_i), _mm_andnot_si128(nan_x, v));
}

void quantize(const float* x, int64_t n, const ops::DynamicU8Params& p, uint8_t* y) {
  const __m128 scale = _mm_set1_ps(p.scale), zp = _mm_set1_ps(p.zero_point);
  const __m128i zp_i = _mm_set1_epi32(static_cast<int32_t>(p.zero_point));
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i a = quantize4(_mm_loadu_ps(x + i), scale, zp, zp_i);
    const __m128i b = quantize4(_mm_loadu_ps(x + i + 4), scale, zp, zp_i);
    const __m128i c = quantize4(_mm_loadu_ps(x + i + 8), scale, zp, zp_i);
    const __m128i d = quantize4(_mm_loadu_ps(x + i + 12), scale, zp, zp_i);
    // Values are 0..255: the signed 32->16 and unsigned 16->8 packs keep them.
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm_packus_epi16(_mm_packs_epi32(a, b), _mm_packs_epi32(c, d)));
  }
  for (; i < n; ++i) y[i] = ops::quantize_u8(x[i], p);
}

void dynamic_quantize_linear(ops::KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  if (x.dtype() != DType::f32)
    fail(ErrorCode::invalid_input, "{}: x must be float32, got {}", ctx.node.label(), x.describe());
  const float* src = x.data<float>();
  const int64_t n = x.numel();
  Tensor& y = ctx.output(0, DType::u8, x.shape());
  uint8_t* dst = y.data<uint8_t>();
  // Two passes over halves (one per thread of this 2-core target's usual
  // setting; more threads take more parts), each part's range then combined.
  const int parts = n >= kParallel ? std::max(1, omp_get_max_threads()) : 1;
  const int64_t chunk = (n + parts - 1) / parts;
  std::vector<float> lo(static_cast<size_t>(parts), 0.0f), hi(static_cast<size_t>(parts), 0.0f);
#pragma omp parallel for schedule(static) num_threads(parts) if (parts > 1)
  for (int p = 0; p < parts; ++p) {
    const int64_t b = p * chunk, e = std::min(n, b + chunk);
    if (b < e) range_of(src + b, e - b, lo[static_cast<size_t>(p)], hi[static_cast<size_t>(p)]);
  }
  float mn = 0.0f, mx = 0.0f;
  for (int p = 0; p < parts; ++p) {
    mn = lo[static_cast<size_t>(p)] < mn ? lo[static_cast<size_t>(p)] : mn;
    mx = mx < hi[static_cast<size_t>(p)] ? hi[static_cast<size_t>(p)] : mx;
  }
  const ops::DynamicU8Params prm = ops::dynamic_u8_params_of_range(mn, mx);
#pragma omp parallel for schedule(static) num_threads(parts) if (parts > 1)
  for (int p = 0; p < parts; ++p) {
    const int64_t b = p * chunk, e = std::min(n, b + chunk);
    if (b < e) quantize(src + b, e - b, prm, dst + b);
  }
  if (ctx.num_outputs() > 1 && ctx.node.outputs[1] != ir::kNoValue)
    ctx.output(1, DType::f32, {}).data<float>()[0] = prm.scale;
  if (ctx.num_outputs() > 2 && ctx.node.outputs[2] != ir::kNoValue)
    ctx.output(2, DType::u8, {}).data<uint8_t>()[0] = static_cast<uint8_t>(prm.zero_point);
}

}  // namespace

BoundKernel make_dynamic_quantize_linear(const ir::Node& n, const ir::Model& m) {
  if (n.inputs.size() != 1 || n.inputs[0] == ir::kNoValue || m.value(n.inputs[0]).dtype != DType::f32 ||
      n.outputs.empty() || n.outputs.size() > 3 || n.outputs[0] == ir::kNoValue)
    fail(ErrorCode::corrupt_artifact, "{}: DynamicQuantizeLinear needs one float32 input and the output y", n.label());
  return dynamic_quantize_linear;
}

}  // namespace kiln::targets::cpu
