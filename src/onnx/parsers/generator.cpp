// ONNX parsers for the generator family (src/ops/generator.cpp). Canonical IR
// forms: Constant carries its data in the `value` tensor attribute (the
// value_float(s)/value_int(s) forms are converted); TopK-1's `k` attribute
// becomes the int64 [1] input 1 of TopK-10+.
#include "onnx/parser.h"

#include "support/error.h"

namespace kiln::onnx_import {
namespace {

void parse_constant(ir::Node& n, ParseContext&) {
  for (const char* a : {"value_string", "value_strings", "sparse_value"})
    if (n.has(a)) unsupported_attr(n, a, "(string or sparse constant)");
  int set = 0;
  for (const char* a : {"value", "value_float", "value_floats", "value_int", "value_ints"}) set += n.has(a);
  if (set != 1) fail(ErrorCode::invalid_model, "{}: exactly one value attribute must be set, found {}", n.label(), set);
  if (n.has("value")) {
    if (n.tensor("value").dtype() == DType::string) unsupported_attr(n, "value", "(a string tensor)");
    return;
  }
  Tensor t;
  if (n.has("value_float")) {
    t = Tensor(DType::f32, {});
    t.data<float>()[0] = n.f("value_float");
  } else if (n.has("value_int")) {
    t = Tensor(DType::i64, {});
    t.data<int64_t>()[0] = n.i("value_int");
  } else if (n.has("value_floats")) {
    auto v = n.floats("value_floats");
    t = Tensor::from_bytes(DType::f32, {static_cast<int64_t>(v.size())}, v.data(), v.size() * sizeof(float));
  } else {
    auto v = n.ints("value_ints");
    t = Tensor::from_bytes(DType::i64, {static_cast<int64_t>(v.size())}, v.data(), v.size() * sizeof(int64_t));
  }
  for (const char* a : {"value_float", "value_floats", "value_int", "value_ints"}) n.attrs.erase(a);
  n.attrs["value"] = t;
}

void parse_constant_of_shape(ir::Node& n, ParseContext&) {
  if (n.has("value") && n.tensor("value").numel() != 1)
    fail(ErrorCode::invalid_model, "{}: value must have exactly one element, got {}", n.label(),
         n.tensor("value").describe());
}

/// TopK-1: k is an attribute.
void parse_topk(ir::Node& n, ParseContext& ctx) {
  if (!n.has("k")) return;
  Tensor t(DType::i64, {1});
  t.data<int64_t>()[0] = n.i("k");
  n.attrs.erase("k");
  if (n.inputs.size() < 2) n.inputs.resize(2, ir::kNoValue);
  n.inputs[1] = ctx.add_constant(n.name + "_k", t);
}

}  // namespace

void register_generator_parsers(ParserRegistry& r) {
  r.add({"", "Constant", 1, 1000, parse_constant});
  r.add({"", "ConstantOfShape", 1, 1000, parse_constant_of_shape});
  r.add({"", "Range", 1, 1000, nullptr});
  r.add({"", "Identity", 1, 1000, nullptr});
  r.add({"", "EyeLike", 1, 1000, nullptr});
  r.add({"", "OneHot", 1, 1000, nullptr});
  r.add({"", "NonZero", 1, 1000, nullptr});
  r.add({"", "TopK", 1, 1000, parse_topk});
  r.add({"", "CumSum", 1, 1000, nullptr});
  r.add({"", "Trilu", 1, 1000, nullptr});
}

}  // namespace kiln::onnx_import
