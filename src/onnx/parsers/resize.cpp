// Parsers for the resize family. Canonical IR form: ONNX Resize-19, inputs
// (X, roi?, scales?, sizes?) with absent optional inputs as kNoValue.
//  - Resize-11/12 pass "" or an empty tensor for an unused roi/scales: empty
//    constants become kNoValue (the kernel also treats run-time empty tensors so).
//  - Resize-10 (X, scales) and Upsample-7..10 (scales attribute / input) become
//    Resize with coordinate_transformation_mode=asymmetric and nearest_mode=floor,
//    which is Upsample's definition (output[i] = input[floor(i / scale)]).
//  - antialias=1 and unknown mode strings are rejected.
#include "onnx/parser.h"
#include "support/error.h"

namespace kiln::onnx_import {

namespace {

[[noreturn]] void fail_missing(const ir::Node& n) {
  fail(ErrorCode::invalid_model, "{}: the scales input is missing (opset {})", n.label(), n.opset);
}

void check_one_of(const ir::Node& n, const char* attr, const std::string& def, std::initializer_list<const char*> ok) {
  const std::string v = n.s(attr, def);
  for (const char* o : ok)
    if (v == o) return;
  unsupported_attr(n, attr, v);
}

void check_resize_attrs(const ir::Node& n) {
  check_one_of(n, "mode", "nearest", {"nearest", "linear", "cubic"});
  check_one_of(n, "coordinate_transformation_mode", "half_pixel",
               {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                "tf_half_pixel_for_nn", "tf_crop_and_resize"});
  check_one_of(n, "nearest_mode", "round_prefer_floor", {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"});
  check_one_of(n, "keep_aspect_ratio_policy", "stretch", {"stretch", "not_larger", "not_smaller"});
  if (n.i("antialias", 0) != 0) unsupported_attr(n, "antialias", "1");
}

/// Turns an (X, scales) node of Upsample/Resize-10 into canonical Resize.
void to_asymmetric_resize(ir::Node& n, ir::ValueId scales) {
  std::string mode = n.s("mode", "nearest");
  if (mode == "bilinear") mode = "linear";  // Upsample-7 spelling
  n.op_type = "Resize";
  n.inputs = {n.inputs.at(0), ir::kNoValue, scales};
  n.attrs.clear();
  n.attrs["mode"] = mode;
  n.attrs["coordinate_transformation_mode"] = std::string("asymmetric");
  n.attrs["nearest_mode"] = std::string("floor");
  check_resize_attrs(n);
}

void parse_resize(ir::Node& n, ParseContext& ctx) {
  if (n.opset < 11) {
    if (n.inputs.size() < 2) fail_missing(n);
    to_asymmetric_resize(n, n.inputs[1]);
    return;
  }
  check_resize_attrs(n);
  for (size_t i = 1; i < n.inputs.size() && i < 3; ++i) {
    if (n.inputs[i] == ir::kNoValue) continue;
    const ir::Value& v = ctx.value(n.inputs[i]);
    if (v.constant && v.constant->numel() == 0) n.inputs[i] = ir::kNoValue;
  }
}

void parse_upsample(ir::Node& n, ParseContext& ctx) {
  if (n.has("scales")) {  // Upsample-7: scales attribute
    const std::vector<float> s = n.floats("scales");
    Tensor t(DType::f32, {static_cast<int64_t>(s.size())});
    for (size_t i = 0; i < s.size(); ++i) t.data<float>()[i] = s[i];
    to_asymmetric_resize(n, ctx.add_constant(n.name + "_scales", t));
    return;
  }
  if (n.inputs.size() < 2) fail_missing(n);
  to_asymmetric_resize(n, n.inputs[1]);
}

}  // namespace

void register_resize_parsers(ParserRegistry& r) {
  r.add({"", "Resize", 10, 1000, parse_resize});
  r.add({"", "Upsample", 7, 10, parse_upsample});  // deprecated from 10, removed later
}

}  // namespace kiln::onnx_import
