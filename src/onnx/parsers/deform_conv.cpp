// ONNX parser for DeformConv (src/ops/deform_conv.cpp). DeformConv-19 and -22
// differ only in dtypes, so the IR form is the ONNX form; the kernel is 2-D
// only, so other kernel ranks are rejected here, at import.
#include <string>

#include "onnx/parser.h"

namespace kiln::onnx_import {
namespace {

void parse_deform_conv(ir::Node& n, ParseContext&) {
  const auto k = n.ints("kernel_shape", {});
  if (n.has("kernel_shape") && k.size() != 2) unsupported_attr(n, "kernel_shape", std::to_string(k.size()) + "-D");
}

}  // namespace

/// Registers the DeformConv parser.
void register_deform_conv_parsers(ParserRegistry& r) { r.add({"", "DeformConv", 19, 1000, parse_deform_conv}); }

}  // namespace kiln::onnx_import
