// STUB: parsers for operator family 'reduce' not written yet.
#include "onnx/parser.h"

namespace kiln::onnx_import {

void register_reduce_parsers(ParserRegistry&) {}

}  // namespace kiln::onnx_import
