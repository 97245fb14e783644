// STUB: parsers for operator family 'pool' not written yet.
#include "onnx/parser.h"

namespace kiln::onnx_import {

void register_pool_parsers(ParserRegistry&) {}

}  // namespace kiln::onnx_import
