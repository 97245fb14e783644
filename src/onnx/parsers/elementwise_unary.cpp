// STUB: parsers for operator family 'elementwise_unary' not written yet.
#include "onnx/parser.h"

namespace kiln::onnx_import {

void register_elementwise_unary_parsers(ParserRegistry&) {}

}  // namespace kiln::onnx_import
