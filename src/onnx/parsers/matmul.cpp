// Parsers for the matmul family (MatMul, Gemm). Canonical IR form: ONNX
// MatMul-13 and Gemm-13 (C optional, unidirectional broadcast).
#include "onnx/parser.h"

namespace kiln::onnx_import {

namespace {

/// Gemm-1..6 carried a `broadcast` flag; later opsets always broadcast C, and
/// a model that set broadcast=0 has a C of full shape, which broadcasting
/// accepts unchanged. So the flag is dropped.
void parse_gemm(ir::Node& n, ParseContext&) { n.attrs.erase("broadcast"); }

}  // namespace

void register_matmul_parsers(ParserRegistry& r) {
  r.add({"", "MatMul", 1, 1000, nullptr});
  r.add({"", "Gemm", 1, 1000, parse_gemm});
}

}  // namespace kiln::onnx_import
