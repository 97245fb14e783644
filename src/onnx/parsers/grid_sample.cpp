// ONNX parsers for GridSample and AffineGrid (src/ops/grid_sample.cpp).
// Canonical IR form: GridSample-20 (mode names linear / cubic / nearest).
// GridSample-16 named the modes bilinear / bicubic (and allowed 4-D input
// only, a subset of the later N-D form); the names are rewritten.
#include <string>

#include "onnx/parser.h"

namespace kiln::onnx_import {
namespace {

void parse_grid_sample(ir::Node& n, ParseContext&) {
  std::string mode = n.s("mode", n.opset >= 20 ? "linear" : "bilinear");
  if (mode == "bilinear") mode = "linear";
  if (mode == "bicubic") mode = "cubic";
  if (mode != "linear" && mode != "cubic" && mode != "nearest") unsupported_attr(n, "mode", "'" + mode + "'");
  n.attrs["mode"] = mode;
  const std::string pad = n.s("padding_mode", "zeros");
  if (pad != "zeros" && pad != "border" && pad != "reflection") unsupported_attr(n, "padding_mode", "'" + pad + "'");
}

}  // namespace

/// Registers the GridSample (opset 16+) and AffineGrid (opset 20+) parsers.
void register_grid_sample_parsers(ParserRegistry& r) {
  r.add({"", "GridSample", 16, 1000, parse_grid_sample});
  r.add({"", "AffineGrid", 20, 1000, nullptr});
}

}  // namespace kiln::onnx_import
