// ONNX parser for Einsum (src/ops/einsum.cpp). Einsum has been unchanged
// since opset 12; the parser only checks that an equation is given.
#include "onnx/parser.h"
#include "support/error.h"

namespace kiln::onnx_import {
namespace {

void parse_einsum(ir::Node& n, ParseContext&) {
  if (!n.has("equation")) fail(ErrorCode::invalid_model, "{}: attribute 'equation' is missing", n.label());
}

}  // namespace

/// Registers the Einsum parser.
void register_einsum_parsers(ParserRegistry& r) { r.add({"", "Einsum", 12, 1000, parse_einsum}); }

}  // namespace kiln::onnx_import
