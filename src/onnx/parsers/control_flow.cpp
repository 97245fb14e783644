// STUB: parsers for operator family 'control_flow' not written yet.
#include "onnx/parser.h"

namespace kiln::onnx_import {

void register_control_flow_parsers(ParserRegistry&) {}

}  // namespace kiln::onnx_import
