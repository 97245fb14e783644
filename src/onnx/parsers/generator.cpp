// STUB: parsers for operator family 'generator' not written yet.
#include "onnx/parser.h"

namespace kiln::onnx_import {

void register_generator_parsers(ParserRegistry&) {}

}  // namespace kiln::onnx_import
