// STUB: parsers for operator family 'matmul' not written yet.
#include "onnx/parser.h"

namespace kiln::onnx_import {

void register_matmul_parsers(ParserRegistry&) {}

}  // namespace kiln::onnx_import
