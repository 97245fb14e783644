// Helpers shared by the quantization operator files (quantize.cpp,
// qlinear.cpp, dynamic_quantize_lstm.cpp): reading scales and zero points of
// any quantized or float dtype as float, the saturation range of each
// quantized integer type, writing a rounded value into a quantized output, and
// DynamicQuantizeLinear's data-chosen uint8 parameters.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/util.h"
#include "support/float8.h"
#include "support/half.h"

namespace kiln::ops {

/// Element i of a float (f32/f64/f16/bf16/float8) or integer tensor
/// (including unpacked int4/uint4) as double. Throws Error(unsupported) for
/// other dtypes.
inline double quant_element(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::i4: return t.data<int8_t>()[i];
    case DType::u4: return t.data<uint8_t>()[i];
    case DType::f8e4m3fn: case DType::f8e4m3fnuz: case DType::f8e5m2: case DType::f8e5m2fnuz:
      return float8_to_float(t.data<uint8_t>()[i], float8_format(t.dtype()));
    default: return element_as_double(t, i);
  }
}

/// All elements of a (small) scale / zero-point tensor as float.
inline std::vector<float> quant_values(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = static_cast<float>(quant_element(t, i));
  return v;
}

/// True for the integer types QuantizeLinear may produce (and the
/// quantized-integer ops consume): int4/uint4, int8/uint8, int16/uint16.
inline bool is_quant_int(DType t) {
  return t == DType::i4 || t == DType::u4 || t == DType::i8 || t == DType::u8 || t == DType::i16 || t == DType::u16;
}

/// [lo, hi] of a quantized integer type (int32 for DequantizeLinear inputs).
inline void quant_range(DType t, double* lo, double* hi) {
  switch (t) {
    case DType::i4: *lo = -8; *hi = 7; break;
    case DType::u4: *lo = 0; *hi = 15; break;
    case DType::i8: *lo = -128; *hi = 127; break;
    case DType::u8: *lo = 0; *hi = 255; break;
    case DType::i16: *lo = -32768; *hi = 32767; break;
    case DType::u16: *lo = 0; *hi = 65535; break;
    default: *lo = -2147483648.0; *hi = 2147483647.0; break;
  }
}

/// Writes the integer value v (already rounded and inside the range of t)
/// to element i of an integer tensor of type t.
inline void store_quant_int(Tensor& out, int64_t i, double v) {
  switch (out.dtype()) {
    case DType::i4: case DType::i8: out.data<int8_t>()[i] = static_cast<int8_t>(v); break;
    case DType::u4: case DType::u8: out.data<uint8_t>()[i] = static_cast<uint8_t>(v); break;
    case DType::i16: out.data<int16_t>()[i] = static_cast<int16_t>(v); break;
    case DType::u16: out.data<uint16_t>()[i] = static_cast<uint16_t>(v); break;
    default: out.data<int32_t>()[i] = static_cast<int32_t>(v); break;
  }
}

/// round-half-to-even(v) clamped to [lo, hi]; NaN gives `nan_value`.
inline double round_saturate(double v, double lo, double hi, double nan_value = 0) {
  if (std::isnan(v)) return nan_value;
  return std::clamp(std::nearbyint(v), lo, hi);  // default rounding mode: half to even
}

/// uint8 scale and zero point chosen from data (ONNX DynamicQuantizeLinear-11,
/// also ONNX Runtime's dynamic quantization of float GEMM inputs).
struct DynamicU8Params {
  float scale = 1.0f;
  float zero_point = 0;  ///< an integer in [0, 255]
};

/// The parameters for data whose range with 0 (NaN ignored) is [mn, mx],
/// mapped onto [0, 255]: scale = (mx - mn) / 255 (1/255 for an all-zero
/// range), zero point = saturate(round_half_even(-mn / scale)), in float32.
inline DynamicU8Params dynamic_u8_params_of_range(float mn, float mx) {
  DynamicU8Params p;
  p.scale = (mx == mn ? 1.0f : mx - mn) / 255.0f;
  p.zero_point = static_cast<float>(round_saturate(0.0f - mn / p.scale, 0, 255));
  return p;
}

/// The parameters of n floats: their range [min(x, 0), max(x, 0)] (NaN
/// ignored) as dynamic_u8_params_of_range maps it.
inline DynamicU8Params dynamic_u8_params(const float* x, int64_t n) {
  float mn = 0.0f, mx = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) continue;
    mn = std::min(mn, x[i]);
    mx = std::max(mx, x[i]);
  }
  return dynamic_u8_params_of_range(mn, mx);
}

/// saturate(round_half_even(v / scale) + zero_point) to uint8; NaN gives the zero point.
inline uint8_t quantize_u8(float v, const DynamicU8Params& p) {
  if (std::isnan(v)) return static_cast<uint8_t>(p.zero_point);
  return static_cast<uint8_t>(round_saturate(std::nearbyint(v / p.scale) + p.zero_point, 0, 255));
}

/// float32 -> bits of a 16-bit float output (f16 / bf16) or the float itself.
inline void store_float(Tensor& out, int64_t i, float v) {
  switch (out.dtype()) {
    case DType::f16: out.data<uint16_t>()[i] = float_to_half(v); break;
    case DType::bf16: out.data<uint16_t>()[i] = float_to_bf16(v); break;
    default: out.data<float>()[i] = v; break;
  }
}

/// True for the dtypes a scale may have: float32, float16, bfloat16.
inline bool is_scale_dtype(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

}  // namespace kiln::ops
