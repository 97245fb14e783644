// ONNX parsers for the gather family (src/ops/gather.cpp). Scatter (deprecated
// at opset 11) is renamed ScatterElements, which has the same semantics
// without a reduction; reduction strings are checked here so an unknown one
// fails at import with the node's name.
#include "onnx/parser.h"

namespace kiln::onnx_import {
namespace {

void check_reduction(ir::Node& n, ParseContext&) {
  std::string r = n.s("reduction", "none");
  if (r != "none" && r != "add" && r != "mul" && r != "max" && r != "min") unsupported_attr(n, "reduction", r);
}

void parse_scatter(ir::Node& n, ParseContext& ctx) {
  n.op_type = "ScatterElements";
  check_reduction(n, ctx);
}

}  // namespace

void register_gather_parsers(ParserRegistry& r) {
  r.add({"", "Gather", 1, 1000, nullptr});
  r.add({"", "GatherElements", 1, 1000, nullptr});
  r.add({"", "GatherND", 1, 1000, nullptr});
  r.add({"", "ScatterElements", 1, 1000, check_reduction});
  r.add({"", "ScatterND", 1, 1000, check_reduction});
  r.add({"", "Scatter", 1, 1000, parse_scatter});
}

}  // namespace kiln::onnx_import
