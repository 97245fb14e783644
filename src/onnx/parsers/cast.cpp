// ONNX parsers for Cast and CastLike (src/ops/cast.cpp). Cast-6..21 all carry
// the target as the int attribute `to` (Cast-1 used a string and is outside
// the supported opset range); the parser checks that `to` is present and an
// element type the kernel converts, so an unsupported cast (string, 8-bit
// floats, 4-bit ints) is reported at import with the node's name. `saturate`
// (Cast-19+) only affects 8-bit floats and is accepted and ignored.
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
    case DType::boolean:
      return true;
    default:
      return false;
  }
}

void parse_cast(ir::Node& n, ParseContext&) {
  if (!n.has("to")) fail(ErrorCode::invalid_model, "{}: required attribute 'to' is missing", n.label());
  const int64_t to = n.i("to");
  if (!supported_target(to)) unsupported_attr(n, "to", std::to_string(to));
}

}  // namespace

/// Registers the Cast / CastLike parsers.
void register_cast_parsers(ParserRegistry& r) {
  r.add({"", "Cast", 1, 1000, parse_cast});
  r.add({"", "CastLike", 1, 1000, nullptr});
}

}  // namespace kiln::onnx_import
