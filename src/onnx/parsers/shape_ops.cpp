// STUB: parsers for operator family 'shape_ops' not written yet.
#include "onnx/parser.h"

namespace kiln::onnx_import {

void register_shape_ops_parsers(ParserRegistry&) {}

}  // namespace kiln::onnx_import
