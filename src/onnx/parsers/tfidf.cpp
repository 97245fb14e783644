// ONNX parser for TfIdfVectorizer (src/ops/tfidf.cpp). Unchanged since
// opset 9, so the IR form is the ONNX form; string pools are rejected here
// (kiln has no string tensors).
#include "onnx/parser.h"

namespace kiln::onnx_import {
namespace {

void parse_tfidf(ir::Node& n, ParseContext&) {
  if (n.has("pool_strings")) unsupported_attr(n, "pool_strings", "(string n-grams)");
}

}  // namespace

/// Registers the TfIdfVectorizer parser.
void register_tfidf_parsers(ParserRegistry& r) { r.add({"", "TfIdfVectorizer", 9, 1000, parse_tfidf}); }

}  // namespace kiln::onnx_import
