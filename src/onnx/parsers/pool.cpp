// Parsers for the pool family. Canonical IR form: MaxPool-12, AveragePool-19,
// LpPool-18 and the Global*Pool ops; older opsets only lack attributes whose
// defaults give the old behaviour, except LpPool-1 whose `p` was a float.
#include <cmath>

#include "onnx/parser.h"

namespace kiln::onnx_import {

namespace {

/// Rejects an auto_pad value outside NOTSET / SAME_UPPER / SAME_LOWER / VALID.
void check_auto_pad(const ir::Node& n) {
  const std::string ap = n.s("auto_pad", "NOTSET");
  if (ap != "NOTSET" && ap != "SAME_UPPER" && ap != "SAME_LOWER" && ap != "VALID") unsupported_attr(n, "auto_pad", ap);
}

void parse_window_pool(ir::Node& n, ParseContext&) { check_auto_pad(n); }

/// LpPool-1 / GlobalLpPool-1 carried p as a float; later opsets as an int.
void parse_lp(ir::Node& n, ParseContext&) {
  if (n.op_type == "LpPool") check_auto_pad(n);
  auto it = n.attrs.find("p");
  if (it == n.attrs.end()) return;
  if (const float* f = std::get_if<float>(&it->second)) {
    if (*f != std::round(*f) || *f < 1) unsupported_attr(n, "p", std::to_string(*f));
    it->second = static_cast<int64_t>(*f);
  }
}

}  // namespace

void register_pool_parsers(ParserRegistry& r) {
  r.add({"", "MaxPool", 1, 1000, parse_window_pool});
  r.add({"", "AveragePool", 1, 1000, parse_window_pool});
  r.add({"", "LpPool", 1, 1000, parse_lp});
  r.add({"", "GlobalMaxPool", 1, 1000, nullptr});
  r.add({"", "GlobalAveragePool", 1, 1000, nullptr});
  r.add({"", "GlobalLpPool", 1, 1000, parse_lp});
}

}  // namespace kiln::onnx_import
