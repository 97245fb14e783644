// ONNX parsers for the elementwise binary family (src/ops/elementwise_binary.cpp).
// Opsets 7..21 of these operators differ only in the dtypes they allow, so
// the IR form is the ONNX form; the parsers only reject attribute values the
// kernels do not implement. (Opsets < 7 had a `broadcast`/`axis` attribute
// pair; a node still carrying it is rejected rather than misread.)
#include <string>

#include "onnx/parser.h"
#include "support/error.h"

namespace kiln::onnx_import {
namespace {

/// Rejects the legacy limited-broadcast attributes of opsets < 7.
void reject_legacy_broadcast(ir::Node& n, ParseContext&) {
  if (n.has("broadcast")) unsupported_attr(n, "broadcast", std::to_string(n.i("broadcast", 0)));
  if (n.has("axis")) unsupported_attr(n, "axis", std::to_string(n.i("axis", 0)));
}

/// Mod: fmod must be 0 (sign of the divisor) or 1 (sign of the dividend).
void parse_mod(ir::Node& n, ParseContext&) {
  const int64_t fmod = n.i("fmod", 0);
  if (fmod != 0 && fmod != 1) unsupported_attr(n, "fmod", std::to_string(fmod));
}

/// BitShift: direction is required and must be LEFT or RIGHT.
void parse_bitshift(ir::Node& n, ParseContext&) {
  if (!n.has("direction"))
    fail(ErrorCode::invalid_model, "{}: required attribute 'direction' is missing", n.label());
  const std::string dir = n.s("direction", "");
  if (dir != "LEFT" && dir != "RIGHT") unsupported_attr(n, "direction", "'" + dir + "'");
}

}  // namespace

/// Registers parsers for Add..Where; see the file comment for normalisation.
void register_elementwise_binary_parsers(ParserRegistry& r) {
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater", "And", "Or", "Xor"})
    r.add({"", op, 1, 1000, reject_legacy_broadcast});
  for (const char* op : {"Max", "Min", "Sum", "Mean", "LessOrEqual", "GreaterOrEqual", "BitwiseAnd", "BitwiseOr",
                         "BitwiseXor", "Where"})
    r.add({"", op, 1, 1000, nullptr});
  r.add({"", "Mod", 1, 1000, parse_mod});
  r.add({"", "BitShift", 1, 1000, parse_bitshift});
}

}  // namespace kiln::onnx_import
