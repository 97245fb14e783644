// Parsers for the linear quantization family (QuantizeLinear,
// DequantizeLinear, DynamicQuantizeLinear; src/ops/quantize.cpp). Canonical
// IR form: the opset-21 operators. Earlier opsets are subsets (no axis before
// 13, no saturate before 19, no block_size / output_dtype before 21) whose
// missing attributes take the defaults that reproduce the old behaviour, so
// the parsers only validate attribute values.
#include "onnx/parser.h"
#include "support/error.h"

namespace kiln::onnx_import {
namespace {

void parse_quantize(ir::Node& n, ParseContext&) {
  const int64_t sat = n.i("saturate", 1);
  if (sat != 0 && sat != 1) unsupported_attr(n, "saturate", std::to_string(sat));
  const int64_t block = n.i("block_size", 0);
  if (block < 0) fail(ErrorCode::invalid_model, "{}: block_size must be >= 0, got {}", n.label(), block);
}

}  // namespace

/// Registers the QuantizeLinear / DequantizeLinear / DynamicQuantizeLinear parsers.
void register_quantize_parsers(ParserRegistry& r) {
  r.add({"", "QuantizeLinear", 1, 1000, parse_quantize});
  r.add({"", "DequantizeLinear", 1, 1000, parse_quantize});
  r.add({"", "DynamicQuantizeLinear", 1, 1000, nullptr});
}

}  // namespace kiln::onnx_import
