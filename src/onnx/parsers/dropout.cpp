// ONNX parser for Dropout (src/ops/dropout.cpp). Canonical IR form: Dropout-12+
// (inputs data, ratio, training_mode; attribute seed ignored).
//
// Dropout-7..11 has no training mode: an inference runtime treats it as the
// identity, so its `ratio` attribute (meaningful only when training) is
// dropped and the node becomes Dropout-12 without optional inputs. Dropout-1/6
// carried `is_test` (default 0 = training), which meant something else and is
// not accepted (min opset 7).
#include "onnx/parser.h"

namespace kiln::onnx_import {
namespace {

void parse_dropout(ir::Node& n, ParseContext&) {
  if (n.opset >= 12) return;
  n.attrs.erase("ratio");
  n.inputs.resize(1);
}

}  // namespace

/// Registers the Dropout parser (see the file comment).
void register_dropout_parsers(ParserRegistry& r) { r.add({"", "Dropout", 7, 1000, parse_dropout}); }

}  // namespace kiln::onnx_import
