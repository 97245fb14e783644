// STUB: parsers for operator family 'activation' not written yet.
#include "onnx/parser.h"

namespace kiln::onnx_import {

void register_activation_parsers(ParserRegistry&) {}

}  // namespace kiln::onnx_import
