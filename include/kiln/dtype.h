// kiln public API: element types.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln {

/// Element type of a tensor. Values follow ONNX TensorProto.DataType so that
/// a model's elem_type maps one to one (onnx.proto, "message TensorProto").
enum class DType : int32_t {
  undefined = 0,
  f32 = 1,
  u8 = 2,
  i8 = 3,
  u16 = 4,
  i16 = 5,
  i32 = 6,
  i64 = 7,
  string = 8,  ///< not supported by kernels; imported only to give a clear error
  boolean = 9,
  f16 = 10,
  f64 = 11,
  u32 = 12,
  u64 = 13,
  bf16 = 16,
  // 8-bit floats (ONNX "Float stored in 8 bits", docs/Float8.md of the ONNX
  // repo): one byte per element holding the raw bit pattern. Conversions are
  // in src/support/float8.h. FN: no infinities; UZ: no negative zero, the
  // single NaN is 0x80.
  f8e4m3fn = 17,    ///< 1 sign, 4 exponent (bias 7), 3 mantissa bits; max 448
  f8e4m3fnuz = 18,  ///< 1 sign, 4 exponent (bias 8), 3 mantissa bits; max 240
  f8e5m2 = 19,      ///< 1 sign, 5 exponent (bias 15), 2 mantissa bits, IEEE-like inf/NaN; max 57344
  f8e5m2fnuz = 20,  ///< 1 sign, 5 exponent (bias 16), 2 mantissa bits; max 57344
  // 4-bit integers. ONNX packs two per byte (first element in the low
  // nibble); kiln stores them UNPACKED, one element per byte (u4 as a uint8_t
  // in [0, 15], i4 as a sign-extended int8_t in [-8, 7]), so dtype_size is 1
  // and every byte-wise kernel works on them. The importer unpacks
  // (src/onnx/tensor_proto.cpp); kernels must keep values inside the range.
  u4 = 21,
  i4 = 22,
};

/// Size of one element in bytes; 0 for undefined and string.
size_t dtype_size(DType t);

/// Short name as used on the command line, in .npy-style descriptions and in
/// error messages: "float32", "float16", "bfloat16", "int64", "bool",
/// "float8e4m3fn", "int4", ... (the 8-bit float and 4-bit names are ml_dtypes').
std::string_view dtype_name(DType t);

/// Inverse of dtype_name; std::nullopt for an unknown name.
std::optional<DType> dtype_from_name(std::string_view name);

/// True for f16, bf16, f32, f64 (not the 8-bit floats: see dtype_is_float8).
bool dtype_is_float(DType t);

/// True for the four 8-bit float types (f8e4m3fn, f8e4m3fnuz, f8e5m2, f8e5m2fnuz).
bool dtype_is_float8(DType t);

}  // namespace kiln
