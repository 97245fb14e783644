// STUB: parsers for operator family 'softmax' not written yet.
#include "onnx/parser.h"

namespace kiln::onnx_import {

void register_softmax_parsers(ParserRegistry&) {}

}  // namespace kiln::onnx_import
