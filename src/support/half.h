// float16 (IEEE 754 binary16) and bfloat16 conversions, round to nearest even.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace kiln {

/// binary16 bits -> float (exact).
inline float half_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) { mant <<= 1; --exp; }
      bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// float -> binary16 bits, round to nearest even, overflow to inf, NaN kept.
inline uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (absx < 0x38800000u) {  // subnormal or zero in half
    float a;
    std::memcpy(&a, &absx, 4);
    // 2^-24 is the half subnormal step; adding 0.5 via float rounding gives RNE.
    float scaled = a * 16777216.0f;  // a / 2^-24
    uint32_t m = static_cast<uint32_t>(scaled);
    float rem = scaled - static_cast<float>(m);
    if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t mant = absx & 0x7fffffu;
  uint32_t exp = (absx >> 23) - 127 + 15;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

/// bfloat16 bits -> float (exact).
inline float bf16_to_float(uint16_t b) {
  uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

/// float -> bfloat16 bits, round to nearest even, NaN kept quiet.
inline uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  uint32_t lsb = (x >> 16) & 1u;
  x += 0x7fffu + lsb;
  return static_cast<uint16_t>(x >> 16);
}


/// half_to_float(float_to_half(f)) without leaving float: `f` rounded to the
/// nearest float16 value (nearest even; past 65504 to infinity, NaN a quiet
/// NaN with `f`'s sign). Branch-free, so that a loop over it vectorizes (the
/// precision check rounds every 16-bit value of a program this way).
inline float round_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = x & 0x80000000u, absx = x & 0x7fffffffu;
  // Normal float16 range: drop 13 mantissa bits, nearest even (a carry
  // moves into the exponent, which is right).
  uint32_t normal = (absx + 0xfffu + ((absx >> 13) & 1u)) & ~0x1fffu;
  normal = normal >= 0x47800000u ? 0x7f800000u : normal;  // rounds past 65504
  // Below 2^-14 the float16 step is 2^-24: round a * 2^24 (< 1024) to an
  // integer with the float adder (adding and taking away 1.5 * 2^23).
  float a;
  std::memcpy(&a, &absx, 4);
  const float sub = ((a * 16777216.0f + 12582912.0f) - 12582912.0f) * 5.9604644775390625e-08f;
  uint32_t subbits;
  std::memcpy(&subbits, &sub, 4);
  uint32_t r = absx < 0x38800000u ? subbits : normal;
  r = absx > 0x7f800000u ? 0x7fc00000u : absx == 0x7f800000u ? 0x7f800000u : r;
  r |= sign;
  float out;
  std::memcpy(&out, &r, 4);
  return out;
}

/// bf16_to_float(float_to_bf16(f)) without leaving float (see round_to_half).
inline float round_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t nan = ((x & 0x7fffffffu) > 0x7f800000u) ? 1u : 0u;
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) & 0xffff0000u;
  const uint32_t r = nan ? ((x | 0x00400000u) & 0xffff0000u) : rounded;
  float out;
  std::memcpy(&out, &r, 4);
  return out;
}

/// The largest finite float16 (65504) or, with `bf16`, bfloat16 (3.3895e38) value.
inline float half_max(bool bf16) { return bf16 ? bf16_to_float(0x7f7fu) : 65504.f; }

/// Whether a 16-bit program holds `ref`, a float32 value beyond the 16-bit
/// type's finite range, *saturated* as `got`: with ref's sign, infinite or in
/// the type's top binade (fp16 [32768, 65504], bf16 [2^127, 3.39e38]). A
/// constant clamped to the range (a mask's float32 lowest as -65504) plus
/// small terms, or an overflow to infinity; whether it matters shows in what
/// reads the value (kiln verify compares those after it).
inline bool held_saturated(double got, double ref, bool bf16) {
  const double top = half_max(bf16);
  if (!(std::fabs(ref) > top) || std::isnan(got) || std::isinf(ref) || std::signbit(got) != std::signbit(ref))
    return false;
  return std::isinf(got) || (std::fabs(got) >= std::ldexp(1.0, std::ilogb(top)) && std::fabs(got) <= top);
}

}  // namespace kiln
