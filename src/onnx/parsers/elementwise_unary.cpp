// ONNX parsers for the elementwise unary family (src/ops/elementwise_unary.cpp).
// Opsets 6..21 of these operators differ only in the dtypes they allow (and
// opset < 6 in a `consumed_inputs` attribute that modern exporters never
// write), so the IR form is the ONNX form and nothing needs normalising.
#include "onnx/parser.h"

namespace kiln::onnx_import {

/// Registers a pass-through parser for every operator of the family.
void register_elementwise_unary_parsers(ParserRegistry& r) {
  for (const char* op : {"Abs",  "Neg",  "Exp",   "Log",   "Sqrt",  "Reciprocal", "Floor", "Ceil",  "Round",
                         "Sign", "Erf",  "Sin",   "Cos",   "Tan",   "Asin",       "Acos",  "Atan",  "Sinh",
                         "Cosh", "Asinh", "Acosh", "Atanh", "Not",  "IsNaN",      "IsInf", "BitwiseNot"})
    r.add({"", op, 1, 1000, nullptr});
}

}  // namespace kiln::onnx_import
