// Helpers shared by the data-movement operator families (shape_ops.cpp,
// pad.cpp, space_depth.cpp): moving elements by byte width, strided copies,
// constant inputs during inference, and dim arithmetic that keeps symbols.
#pragma once
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "ops/util.h"

namespace kiln::ops::data_movement {

using ir::Dim;
using ir::Shape;

// dst[o] = src[offset + sum_d idx_d(o) * strides[d]] for every o of `shape` in
// row-major order. Strides may be 0 (broadcast) or negative (reversed slices).
template <class T>
void gather_strided(const T* src, T* dst, const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                    int64_t offset) {
  int64_t total = prod(shape);
  if (total == 0) return;
  size_t r = shape.size();
  if (r == 0) {
    dst[0] = src[offset];
    return;
  }
  std::vector<int64_t> idx(r, 0);
  const int64_t inner = shape[r - 1], istride = strides[r - 1];
  int64_t off = offset;
  for (int64_t o = 0; o < total; o += inner) {
    for (int64_t j = 0; j < inner; ++j) dst[o + j] = src[off + j * istride];
    for (size_t d = r - 1; d-- > 0;) {
      off += strides[d];
      if (++idx[d] < shape[d]) break;
      off -= strides[d] * shape[d];
      idx[d] = 0;
    }
  }
}

/// Type-erased gather_strided from `src` into `dst` (dst's element count = prod(shape)).
inline void copy_strided(const ir::Node& n, const Tensor& src, Tensor& dst, const std::vector<int64_t>& shape,
                  const std::vector<int64_t>& strides, int64_t offset) {
  by_width(n, src.dtype(), [&](auto tag) {
    using T = decltype(tag);
    gather_strided(src.data<T>(), dst.data<T>(), shape, strides, offset);
  });
}

/// Constant integer input i of an inference context, if known.
inline std::optional<std::vector<int64_t>> const_ints(const InferContext& c, size_t i) {
  if (!c.has(i) || !c.inputs[i].value) return std::nullopt;
  return to_int64s(*c.inputs[i].value);
}

/// Length of a 1-D input whose shape is statically known (e.g. a non-constant shape tensor).
inline std::optional<int64_t> static_length(const InferContext& c, size_t i) {
  if (!c.has(i) || !c.inputs[i].shape || c.inputs[i].shape->size() != 1 || !(*c.inputs[i].shape)[0].is_static())
    return std::nullopt;
  return (*c.inputs[i].shape)[0].value;
}

inline Shape unknown_dims(size_t rank) { return Shape(rank, Dim::sym("")); }

/// 0, 1, ..., k-1: the default axes list.
inline std::vector<int64_t> first_axes(size_t k) {
  std::vector<int64_t> a(k);
  for (size_t i = 0; i < k; ++i) a[i] = static_cast<int64_t>(i);
  return a;
}

/// a*b for dims: exact when both static, the symbol when the other factor is 1.
inline Dim mul_dim(const Dim& a, const Dim& b) {
  if (a.is_static() && b.is_static()) return Dim::known(a.value * b.value);
  if (a.is_static() && a.value == 1) return b;
  if (b.is_static() && b.value == 1) return a;
  return Dim::sym("");
}

inline std::vector<OutType> one(DType dt, std::optional<Shape> s) { return {OutType{dt, std::move(s)}}; }

/// Sorted, normalised axes; throws Error(invalid_model) when one repeats.
inline std::vector<int64_t> unique_axes(const ir::Node& n, std::vector<int64_t> axes, int64_t rank) {
  for (auto& a : axes) a = normalize_axis(n, a, rank, "axes entry");
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
    fail(ErrorCode::invalid_model, "{}: axes contain a repeated axis", n.label());
  return axes;
}

}  // namespace kiln::ops::data_movement
