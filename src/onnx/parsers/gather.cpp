// STUB: parsers for operator family 'gather' not written yet.
#include "onnx/parser.h"

namespace kiln::onnx_import {

void register_gather_parsers(ParserRegistry&) {}

}  // namespace kiln::onnx_import
