// STUB: parsers for operator family 'normalization' not written yet.
#include "onnx/parser.h"

namespace kiln::onnx_import {

void register_normalization_parsers(ParserRegistry&) {}

}  // namespace kiln::onnx_import
