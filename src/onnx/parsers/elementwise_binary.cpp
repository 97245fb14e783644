// STUB: parsers for operator family 'elementwise_binary' not written yet.
#include "onnx/parser.h"

namespace kiln::onnx_import {

void register_elementwise_binary_parsers(ParserRegistry&) {}

}  // namespace kiln::onnx_import
