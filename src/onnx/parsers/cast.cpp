// STUB: parsers for operator family 'cast' not written yet.
#include "onnx/parser.h"

namespace kiln::onnx_import {

void register_cast_parsers(ParserRegistry&) {}

}  // namespace kiln::onnx_import
