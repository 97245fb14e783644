// STUB: parsers for operator family 'resize' not written yet.
#include "onnx/parser.h"

namespace kiln::onnx_import {

void register_resize_parsers(ParserRegistry&) {}

}  // namespace kiln::onnx_import
