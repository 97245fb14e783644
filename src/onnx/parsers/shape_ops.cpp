// ONNX parsers for the shape_ops family (src/ops/shape_ops.cpp). Canonical IR
// form = the newest opset: attributes that later became inputs are moved into
// those inputs, so the kernels see only one form:
//   Reshape-1 `shape`, Squeeze/Unsqueeze-1..11 `axes`, Split-1..12 `split`,
//   Slice-1..9 `starts`/`ends`/`axes`, Pad-1..10 `pads` (`paddings`) and `value`.
#include "onnx/parser.h"

#include "support/error.h"

namespace kiln::onnx_import {
namespace {

void parse_reshape(ir::Node& n, ParseContext& ctx) { attr_to_input(n, ctx, "shape", 1); }

void parse_axes_input(ir::Node& n, ParseContext& ctx) { attr_to_input(n, ctx, "axes", 1); }

/// Split-2..12 take `split` as an attribute; Split-18 adds num_outputs (kept as is).
void parse_split(ir::Node& n, ParseContext& ctx) {
  if (n.has("split") && n.has("num_outputs"))
    fail(ErrorCode::invalid_model, "{}: split and num_outputs are both given", n.label());
  attr_to_input(n, ctx, "split", 1);
}

/// Slice-1..9 take starts/ends/axes as attributes (steps did not exist).
void parse_slice(ir::Node& n, ParseContext& ctx) {
  attr_to_input(n, ctx, "starts", 1);
  attr_to_input(n, ctx, "ends", 2);
  attr_to_input(n, ctx, "axes", 3);
}

/// Concat-1..3 defaulted axis to 1; later opsets require it.
void parse_concat(ir::Node& n, ParseContext&) {
  if (!n.has("axis")) {
    if (n.opset >= 4) fail(ErrorCode::invalid_model, "{}: required attribute 'axis' is missing", n.label());
    n.attrs["axis"] = int64_t{1};
  }
}

/// Pad-1..10: pads (Pad-1: paddings) and the float `value` become inputs 1 and 2.
void parse_pad(ir::Node& n, ParseContext& ctx) {
  if (n.has("paddings")) {
    n.attrs["pads"] = n.ints("paddings");
    n.attrs.erase("paddings");
  }
  attr_to_input(n, ctx, "pads", 1);
  if (n.has("value")) {
    float v = n.f("value", 0.0f);
    n.attrs.erase("value");
    if (v != 0.0f) {
      Tensor t(DType::f32, {});
      t.data<float>()[0] = v;
      if (n.inputs.size() < 3) n.inputs.resize(3, ir::kNoValue);
      n.inputs[2] = ctx.add_constant(n.name + "_value", t);
    }
  }
  std::string mode = n.s("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap") unsupported_attr(n, "mode", mode);
}

void parse_depth_to_space(ir::Node& n, ParseContext&) {
  std::string mode = n.s("mode", "DCR");
  if (mode != "DCR" && mode != "CRD") unsupported_attr(n, "mode", mode);
}

}  // namespace

void register_shape_ops_parsers(ParserRegistry& r) {
  r.add({"", "Shape", 1, 1000, nullptr});
  r.add({"", "Size", 1, 1000, nullptr});
  r.add({"", "Reshape", 1, 1000, parse_reshape});
  r.add({"", "Flatten", 1, 1000, nullptr});
  r.add({"", "Squeeze", 1, 1000, parse_axes_input});
  r.add({"", "Unsqueeze", 1, 1000, parse_axes_input});
  r.add({"", "Transpose", 1, 1000, nullptr});
  r.add({"", "Concat", 1, 1000, parse_concat});
  r.add({"", "Split", 1, 1000, parse_split});
  r.add({"", "Slice", 1, 1000, parse_slice});
  r.add({"", "Expand", 1, 1000, nullptr});
  r.add({"", "Tile", 6, 1000, nullptr});  // Tile-1 took (tiles, axis) inputs
  r.add({"", "Pad", 1, 1000, parse_pad});
  r.add({"", "DepthToSpace", 1, 1000, parse_depth_to_space});
  r.add({"", "SpaceToDepth", 1, 1000, nullptr});
}

}  // namespace kiln::onnx_import
