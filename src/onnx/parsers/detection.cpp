// ONNX parsers for RoiAlign and NonMaxSuppression (src/ops/detection.cpp).
// Canonical IR form: RoiAlign-16 (coordinate_transformation_mode always
// set) and NonMaxSuppression-11.
// - RoiAlign-10 had no coordinate_transformation_mode; it behaved as
//   output_half_pixel (no half-pixel shift), which the parser writes out.
// - NonMaxSuppression-10 and -11 are the same operator.
#include <string>

#include "onnx/parser.h"

namespace kiln::onnx_import {
namespace {

void parse_roi_align(ir::Node& n, ParseContext&) {
  if (n.opset < 16) n.attrs["coordinate_transformation_mode"] = std::string("output_half_pixel");
  const std::string ctm = n.s("coordinate_transformation_mode", "half_pixel");
  if (ctm != "half_pixel" && ctm != "output_half_pixel")
    unsupported_attr(n, "coordinate_transformation_mode", "'" + ctm + "'");
  const std::string mode = n.s("mode", "avg");
  if (mode != "avg" && mode != "max") unsupported_attr(n, "mode", "'" + mode + "'");
}

void parse_nms(ir::Node& n, ParseContext&) {
  const int64_t c = n.i("center_point_box", 0);
  if (c != 0 && c != 1) unsupported_attr(n, "center_point_box", std::to_string(c));
}

}  // namespace

/// Registers the RoiAlign and NonMaxSuppression parsers (both from opset 10).
void register_detection_parsers(ParserRegistry& r) {
  r.add({"", "RoiAlign", 10, 1000, parse_roi_align});
  r.add({"", "NonMaxSuppression", 10, 1000, parse_nms});
}

}  // namespace kiln::onnx_import
