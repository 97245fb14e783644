#include "ir/shape.h"

#include "support/error.h"

namespace kiln::ir {

Shape static_shape(const std::vector<int64_t>& dims) {
  Shape s;
  s.reserve(dims.size());
  for (auto d : dims) s.push_back(Dim::known(d));
  return s;
}

bool is_static(const Shape& s) {
  for (auto& d : s)
    if (!d.is_static()) return false;
  return true;
}

std::vector<int64_t> to_sizes(const Shape& s) {
  std::vector<int64_t> out;
  out.reserve(s.size());
  for (auto& d : s) {
    KILN_CHECK(d.is_static(), "dim {} is not static", d.str());
    out.push_back(d.value);
  }
  return out;
}

std::string shape_str(const std::optional<Shape>& s) {
  if (!s) return "[unknown rank]";
  std::string out = "[";
  for (size_t i = 0; i < s->size(); ++i) out += (i ? "," : "") + (*s)[i].str();
  return out + "]";
}

}  // namespace kiln::ir
