// STUB: parsers for operator family 'conv' not written yet.
#include "onnx/parser.h"

namespace kiln::onnx_import {

void register_conv_parsers(ParserRegistry&) {}

}  // namespace kiln::onnx_import
