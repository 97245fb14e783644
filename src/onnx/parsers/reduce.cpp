// ONNX parsers for the reduction family (src/ops/reduce.cpp).
//
// Normalisation: before opset 18 (ReduceSum: before 13) `axes` was an ints
// attribute; it becomes the constant int64 input 1 of the opset 18 form, so
// the kernel and every target see one form. An absent attribute leaves the
// input absent (reduce every axis, the old and new default alike).
// noop_with_empty_axes did not exist before and defaults to 0 in both forms.
// ArgMax/ArgMin have had the same attributes since opset 12
// (select_last_index, default 0, was added then) and pass through.
#include "onnx/parser.h"
#include "support/error.h"

namespace kiln::onnx_import {
namespace {

void parse_reduce(ir::Node& n, ParseContext& ctx) {
  if (!n.has("axes")) return;
  if (n.inputs.size() > 1 && n.inputs[1] != ir::kNoValue)
    fail(ErrorCode::invalid_model, "{}: has both an 'axes' attribute and an axes input (opset {})", n.label(),
         n.opset);
  attr_to_input(n, ctx, "axes", 1);
}

}  // namespace

/// Registers the reduction parsers (see the file comment).
void register_reduce_parsers(ParserRegistry& r) {
  for (const char* op : {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                         "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"})
    r.add({"", op, 1, 1000, parse_reduce});
  r.add({"", "ArgMax", 1, 1000, nullptr});
  r.add({"", "ArgMin", 1, 1000, nullptr});
}

}  // namespace kiln::onnx_import
