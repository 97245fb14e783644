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
};

/// Size of one element in bytes; 0 for undefined and string.
size_t dtype_size(DType t);

/// Short name as used on the command line, in .npy-style descriptions and in
/// error messages: "float32", "float16", "bfloat16", "int64", "bool", ...
std::string_view dtype_name(DType t);

/// Inverse of dtype_name; std::nullopt for an unknown name.
std::optional<DType> dtype_from_name(std::string_view name);

/// True for f16, bf16, f32, f64.
bool dtype_is_float(DType t);

}  // namespace kiln
