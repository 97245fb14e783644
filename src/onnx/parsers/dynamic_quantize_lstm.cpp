// Parser for ONNX Runtime's contrib operator com.microsoft::DynamicQuantizeLSTM
// (domain opset 1). The IR form is the NodeProto's: the kernel
// (src/ops/dynamic_quantize_lstm.cpp) reads the attributes as they are; the
// parser refuses the attribute values ONNX Runtime refuses.
#include "onnx/parser.h"
#include "support/error.h"

namespace kiln::onnx_import {
namespace {

/// Checks direction, hidden_size (required) and layout (0 only).
void parse_dynamic_quantize_lstm(ir::Node& n, ParseContext&) {
  const std::string dir = n.s("direction", "forward");
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional") unsupported_attr(n, "direction", dir);
  if (!n.has("hidden_size")) fail(ErrorCode::invalid_model, "{}: attribute 'hidden_size' is required", n.label());
  const int64_t layout = n.i("layout", 0);
  if (layout != 0) unsupported_attr(n, "layout", std::to_string(layout));
}

}  // namespace

/// Registers the com.microsoft DynamicQuantizeLSTM parser.
void register_dynamic_quantize_lstm_parsers(ParserRegistry& r) {
  r.add({"com.microsoft", "DynamicQuantizeLSTM", 1, 1, parse_dynamic_quantize_lstm});
}

}  // namespace kiln::onnx_import
