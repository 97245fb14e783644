// Shapes with static and symbolic dimensions.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::ir {

/// One dimension: a known size (value >= 0) or a symbol (value == -1; symbol
/// may be empty for an anonymous unknown dim, as ONNX allows).
struct Dim {
  int64_t value = -1;
  std::string symbol;

  static Dim known(int64_t v) { return {v, {}}; }
  static Dim sym(std::string s) { return {-1, std::move(s)}; }
  bool is_static() const { return value >= 0; }
  bool operator==(const Dim&) const = default;
  std::string str() const { return is_static() ? std::to_string(value) : (symbol.empty() ? "?" : symbol); }
};

/// A shape of known rank. Values of unknown rank use std::optional<Shape>.
using Shape = std::vector<Dim>;

/// Shape from concrete sizes.
Shape static_shape(const std::vector<int64_t>& dims);
/// True when every dim is static.
bool is_static(const Shape& s);
/// Concrete sizes of a static shape (internal error otherwise).
std::vector<int64_t> to_sizes(const Shape& s);
/// "[1,3,H,W]"
std::string shape_str(const std::optional<Shape>& s);

}  // namespace kiln::ir
