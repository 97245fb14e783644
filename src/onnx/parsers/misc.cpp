// ONNX parsers for LRN, Shrink, Det and MeanVarianceNormalization
// (src/ops/misc.cpp). Their attributes and meaning have not changed across
// opsets (later versions only widened dtypes), so the IR form is the ONNX
// form; LRN's required `size` is checked here.
#include "onnx/parser.h"
#include "support/error.h"

namespace kiln::onnx_import {
namespace {

void parse_lrn(ir::Node& n, ParseContext&) {
  if (!n.has("size")) fail(ErrorCode::invalid_model, "{}: attribute 'size' is missing", n.label());
}

}  // namespace

/// Registers the misc-family parsers.
void register_misc_parsers(ParserRegistry& r) {
  r.add({"", "LRN", 1, 1000, parse_lrn});
  r.add({"", "Shrink", 9, 1000, nullptr});
  r.add({"", "Det", 11, 1000, nullptr});
  r.add({"", "MeanVarianceNormalization", 9, 1000, nullptr});
}

}  // namespace kiln::onnx_import
