// ONNX parsers for the activation family (src/ops/activation.cpp).
//
// Normalisation:
// - Clip opset < 11 carries `min` / `max` as float attributes (defaults
//   -/+3.4028234663852886e+38); they become rank-0 constant inputs 1 and 2 of
//   X's dtype, the opset 11+ form the kernel implements. Both are always
//   materialised so that the float32-range defaults stay exact for float64 X.
// - Gelu: `approximate` must be "none" or "tanh".
// The other activations have had the same attributes and meaning since
// opset 6, so they pass through.
#include <string>

#include "onnx/parser.h"
#include "support/error.h"
#include "support/half.h"

namespace kiln::onnx_import {
namespace {

/// A rank-0 tensor of dtype t holding v (converted as static_cast would).
Tensor scalar_of(const ir::Node& n, DType t, double v) {
  Tensor s(t, {});
  switch (t) {
    case DType::f32: *s.data<float>() = static_cast<float>(v); break;
    case DType::f64: *s.data<double>() = v; break;
    case DType::f16: *s.data<uint16_t>() = float_to_half(static_cast<float>(v)); break;
    case DType::bf16: *s.data<uint16_t>() = float_to_bf16(static_cast<float>(v)); break;
    default:
      fail(ErrorCode::unsupported, "{}: Clip with min/max attributes on a {} input is not supported (opset {})",
           n.label(), dtype_name(t), n.opset);
  }
  return s;
}

/// Clip-6: attributes min/max -> constant inputs (see the file comment).
void parse_clip(ir::Node& n, ParseContext& ctx) {
  if (n.opset >= 11) return;
  if (n.inputs.empty() || n.inputs[0] == ir::kNoValue)
    fail(ErrorCode::invalid_model, "{}: input X is missing", n.label());
  DType t = ctx.value(n.inputs[0]).dtype;
  if (t == DType::undefined) t = DType::f32;  // Clip-6 is defined on float types only
  const double lo = n.f("min", -3.4028234663852886e+38f);
  const double hi = n.f("max", 3.4028234663852886e+38f);
  n.inputs.resize(3, ir::kNoValue);
  n.inputs[1] = ctx.add_constant(n.name + "_min", scalar_of(n, t, lo));
  n.inputs[2] = ctx.add_constant(n.name + "_max", scalar_of(n, t, hi));
  n.attrs.erase("min");
  n.attrs.erase("max");
}

/// Gelu: approximate in {none, tanh}.
void parse_gelu(ir::Node& n, ParseContext&) {
  const std::string a = n.s("approximate", "none");
  if (a != "none" && a != "tanh") unsupported_attr(n, "approximate", "'" + a + "'");
}

}  // namespace

/// Registers the activation parsers (see the file comment for normalisation).
void register_activation_parsers(ParserRegistry& r) {
  for (const char* op : {"Relu", "LeakyRelu", "PRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu", "Selu",
                         "Celu", "Softplus", "Softsign", "Mish", "ThresholdedRelu"})
    r.add({"", op, 1, 1000, nullptr});
  r.add({"", "Gelu", 1, 1000, parse_gelu});
  r.add({"", "Clip", 1, 1000, parse_clip});
}

}  // namespace kiln::onnx_import
