// ONNX parsers for Cast and CastLike (src/ops/cast.cpp). Cast-6..21 all carry
// the target as the int attribute `to` (Cast-1 used a string and is outside
// the supported opset range); the parser checks that `to` is present and an
// element type the kernel converts, so an unsupported cast (string, complex,
// float4) is reported at import with the node's name. `saturate` (Cast-19+,
// default 1) only affects casts to the 8-bit floats; the kernel reads it and
// the parser checks it is 0 or 1.
#include <string>

#include "kiln/dtype.h"
#include "onnx/parser.h"
#include "support/error.h"

namespace kiln::onnx_import {
namespace {

/// Element types (ONNX TensorProto.DataType numbers) the Cast kernel implements.
bool supported_target(int64_t to) {
  switch (static_cast<DType>(to)) {
    case DType::f32: case DType::f64: case DType::f16: case DType::bf16: case DType::i8: case DType::i16:
    case DType::i32: case DType::i64: case DType::u8: case DType::u16: case DType::u32: case DType::u64:
    case DType::boolean: case DType::f8e4m3fn: case DType::f8e4m3fnuz: case DType::f8e5m2: case DType::f8e5m2fnuz:
    case DType::u4: case DType::i4:
      return true;
    default:
      return false;
  }
}

void check_saturate(const ir::Node& n) {
  const int64_t sat = n.i("saturate", 1);
  if (sat != 0 && sat != 1)
    fail(ErrorCode::invalid_model, "{}: attribute 'saturate' must be 0 or 1, got {}", n.label(), sat);
}

void parse_cast(ir::Node& n, ParseContext&) {
  if (!n.has("to")) fail(ErrorCode::invalid_model, "{}: required attribute 'to' is missing", n.label());
  const int64_t to = n.i("to");
  if (!supported_target(to)) unsupported_attr(n, "to", std::to_string(to));
  check_saturate(n);
}

void parse_cast_like(ir::Node& n, ParseContext&) { check_saturate(n); }

}  // namespace

/// Registers the Cast / CastLike parsers.
void register_cast_parsers(ParserRegistry& r) {
  r.add({"", "Cast", 1, 1000, parse_cast});
  r.add({"", "CastLike", 1, 1000, parse_cast_like});
}

}  // namespace kiln::onnx_import
