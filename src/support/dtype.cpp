#include "kiln/dtype.h"

#include <array>
#include <utility>

namespace kiln {

namespace {
constexpr std::array<std::pair<DType, std::string_view>, 20> kNames{{
    {DType::f32, "float32"},  {DType::u8, "uint8"},    {DType::i8, "int8"},
    {DType::u16, "uint16"},   {DType::i16, "int16"},   {DType::i32, "int32"},
    {DType::i64, "int64"},    {DType::string, "string"}, {DType::boolean, "bool"},
    {DType::f16, "float16"},  {DType::f64, "float64"}, {DType::u32, "uint32"},
    {DType::u64, "uint64"},   {DType::bf16, "bfloat16"},
    {DType::f8e4m3fn, "float8e4m3fn"}, {DType::f8e4m3fnuz, "float8e4m3fnuz"},
    {DType::f8e5m2, "float8e5m2"},     {DType::f8e5m2fnuz, "float8e5m2fnuz"},
    {DType::u4, "uint4"},              {DType::i4, "int4"},
}};
}  // namespace

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: case DType::i32: case DType::u32: return 4;
    case DType::u8: case DType::i8: case DType::boolean: return 1;
    // 4-bit integers are stored unpacked, one per byte (see dtype.h).
    case DType::f8e4m3fn: case DType::f8e4m3fnuz: case DType::f8e5m2: case DType::f8e5m2fnuz:
    case DType::u4: case DType::i4: return 1;
    case DType::u16: case DType::i16: case DType::f16: case DType::bf16: return 2;
    case DType::i64: case DType::u64: case DType::f64: return 8;
    default: return 0;
  }
}

std::string_view dtype_name(DType t) {
  for (auto& [d, n] : kNames)
    if (d == t) return n;
  return "undefined";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (auto& [d, n] : kNames)
    if (n == name) return d;
  return std::nullopt;
}

bool dtype_is_float(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::f64;
}

bool dtype_is_float8(DType t) {
  return t == DType::f8e4m3fn || t == DType::f8e4m3fnuz || t == DType::f8e5m2 || t == DType::f8e5m2fnuz;
}

}  // namespace kiln
