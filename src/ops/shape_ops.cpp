// Data-movement operators that change shape or layout: Shape, Size, Reshape,
// Flatten, Squeeze, Unsqueeze, Transpose, Concat, Split, Slice, Expand, Tile
// (Pad: pad.cpp; DepthToSpace, SpaceToDepth: space_depth.cpp)
// (https://onnx.ai/onnx/operators/, newest
// opset semantics; onnx/parsers/shape_ops.cpp turns older forms into these).
//
// Kernels move elements by their byte width, so every fixed-size dtype
// (bool and 16-bit floats included) works without per-type code. Shape
// inference keeps symbolic dims whenever the result is provably the same dim,
// because these ops carry the shape arithmetic of exported models.
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "ops/data_movement.h"

namespace kiln::ops {
namespace {

using namespace data_movement;

/// Output 0 = input 0's bytes under a new shape (Reshape, Flatten, Squeeze,
/// Unsqueeze). Nothing to copy when the memory plan placed the input where
/// the output is (the cpu target's in-place views, attribute "in_place_offsets").
void copy_reshaped(KernelContext& c, const std::vector<int64_t>& shape) {
  const Tensor& x = c.in(0);
  if (dtype_size(x.dtype()) == 0) unsupported_dtype(c.node, x.dtype(), "input 0");
  Tensor& y = c.output(0, x.dtype(), shape);
  if (x.nbytes() && y.raw() != x.raw()) std::memcpy(y.raw(), x.raw(), x.nbytes());
}

/// A product of dims as a static factor times named symbols; `opaque` once an
/// anonymous dim joins (its value can never cancel against anything).
struct DimProduct {
  int64_t known = 1;
  std::vector<std::string> syms;
  bool opaque = false;
  void mul(const Dim& d) {
    if (d.is_static()) known *= d.value;
    else if (d.symbol.empty()) opaque = true;
    else syms.push_back(d.symbol);
  }
  Dim as_dim() const {
    if (opaque || syms.size() > 1 || (syms.size() == 1 && known != 1)) return Dim::sym("");
    return syms.empty() ? Dim::known(known) : Dim::sym(syms[0]);
  }
};

// ---- Shape, Size -------------------------------------------------------------

/// Shape-15 start/end clamped into [0, rank]; the slice is [first, second).
std::pair<int64_t, int64_t> shape_range(const ir::Node& n, int64_t rank) {
  auto clampi = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
  int64_t s = clampi(n.i("start", 0)), e = clampi(n.i("end", rank));
  return {s, std::max(s, e)};
}

std::vector<OutType> infer_shape(const InferContext& c) {
  const auto& s = c.in(0).shape;
  if (!s) return one(DType::i64, Shape{Dim::sym("")});
  auto [b, e] = shape_range(c.node, static_cast<int64_t>(s->size()));
  return one(DType::i64, ir::static_shape({e - b}));
}

void kernel_shape(KernelContext& c) {
  const auto& dims = c.in(0).shape();
  auto [b, e] = shape_range(c.node, static_cast<int64_t>(dims.size()));
  Tensor& y = c.output(0, DType::i64, {e - b});
  for (int64_t i = b; i < e; ++i) y.data<int64_t>()[i - b] = dims[i];
}

std::vector<OutType> infer_size(const InferContext& c) {
  c.in(0);
  return one(DType::i64, Shape{});
}

void kernel_size(KernelContext& c) { c.output(0, DType::i64, {}).data<int64_t>()[0] = c.in(0).numel(); }

// ---- Reshape, Flatten ------------------------------------------------------------

/// Reshape-14 target shape: 0 copies the input dim (unless allowzero), one -1
/// takes the remaining size. A dim copied through 0 cancels out of the
/// element count whatever it is, so [N,3,4] with [0,-1] gives [N,12]; [N,3,4]
/// with [-1,12] gives [N,12] too. `code` is the error code for a size
/// mismatch (invalid_model at compile time, invalid_input at run time).
Shape reshape_target(const ir::Node& n, const std::optional<Shape>& in, const std::vector<int64_t>& spec,
                     ErrorCode code) {
  bool allowzero = n.i("allowzero", 0) != 0;
  Shape out(spec.size());
  int infer_at = -1;
  int64_t rest = 1;               // product of the explicit target dims
  DimProduct total;               // product of the input dims not copied by a 0
  std::vector<bool> copied(in ? in->size() : 0, false);
  for (size_t i = 0; i < spec.size(); ++i) {
    int64_t s = spec[i];
    if (s == -1 && infer_at >= 0)
      fail(ErrorCode::invalid_model, "{}: shape has more than one -1: [{}]", n.label(), fmt::join(spec, ","));
    if (s < -1) fail(code, "{}: invalid target dim {} in shape [{}]", n.label(), s, fmt::join(spec, ","));
    if (s == -1) {
      infer_at = static_cast<int>(i);
    } else if (s == 0 && !allowzero) {
      if (in && i >= in->size())
        fail(code, "{}: shape [{}] copies dim {} (0) but the input has rank {}", n.label(), fmt::join(spec, ","), i,
             in->size());
      out[i] = in ? (*in)[i] : Dim::sym("");
      if (in) copied[i] = true;
    } else {
      out[i] = Dim::known(s);
      rest *= s;
    }
  }
  if (allowzero && infer_at >= 0 && std::count(spec.begin(), spec.end(), 0) > 0)
    fail(ErrorCode::invalid_model, "{}: shape [{}] has both 0 (allowzero=1) and -1", n.label(), fmt::join(spec, ","));
  total.opaque = !in;
  for (size_t i = 0; i < copied.size(); ++i)
    if (!copied[i]) total.mul((*in)[i]);
  bool exact = !total.opaque && total.syms.empty();
  bool fits = infer_at >= 0 ? rest != 0 && total.known % rest == 0 : total.known == rest;
  if (exact && !fits) fail(code, "{}: cannot reshape {} to [{}]", n.label(), ir::shape_str(in), fmt::join(spec, ","));
  if (infer_at >= 0) {
    total.known = rest != 0 && total.known % rest == 0 ? total.known / rest : -1;
    out[infer_at] = total.known < 0 ? Dim::sym("") : total.as_dim();
  }
  return out;
}

std::vector<OutType> infer_reshape(const InferContext& c) {
  const InType& x = c.in(0);
  c.in(1);
  if (auto spec = const_ints(c, 1)) return one(x.dtype, reshape_target(c.node, x.shape, *spec, ErrorCode::invalid_model));
  if (auto len = static_length(c, 1)) return one(x.dtype, unknown_dims(static_cast<size_t>(*len)));
  return one(x.dtype, std::nullopt);
}

void kernel_reshape(KernelContext& c) {
  Shape s = reshape_target(c.node, ir::static_shape(c.in(0).shape()), to_int64s(c.in(1)), ErrorCode::invalid_input);
  copy_reshaped(c, ir::to_sizes(s));
}

/// Flatten's axis in [0, rank] (negative counts from the end).
int64_t flatten_axis(const ir::Node& n, int64_t rank) {
  int64_t a = n.i("axis", 1);
  if (a < -rank || a > rank) fail(ErrorCode::invalid_model, "{}: axis {} is out of range for rank {}", n.label(), a, rank);
  return a < 0 ? a + rank : a;
}

std::vector<OutType> infer_flatten(const InferContext& c) {
  const InType& x = c.in(0);
  if (!x.shape) return one(x.dtype, unknown_dims(2));
  size_t a = static_cast<size_t>(flatten_axis(c.node, static_cast<int64_t>(x.shape->size())));
  DimProduct outer, inner;
  for (size_t i = 0; i < x.shape->size(); ++i) (i < a ? outer : inner).mul((*x.shape)[i]);
  return one(x.dtype, Shape{outer.as_dim(), inner.as_dim()});
}

void kernel_flatten(KernelContext& c) {
  const auto& s = c.in(0).shape();
  size_t a = static_cast<size_t>(flatten_axis(c.node, c.in(0).rank()));
  copy_reshaped(c, {prod(s, 0, a), prod(s, a)});
}

// ---- Squeeze, Unsqueeze ------------------------------------------------------------

/// Squeeze output shape; without axes every static 1 goes (nullopt when a
/// symbolic dim might be 1, since then even the rank is unknown).
std::optional<Shape> squeeze_shape(const ir::Node& n, const Shape& in, const std::optional<std::vector<int64_t>>& axes,
                                   ErrorCode code) {
  Shape out;
  if (!axes || axes->empty()) {
    for (auto& d : in) {
      if (!d.is_static()) return std::nullopt;
      if (d.value != 1) out.push_back(d);
    }
    return out;
  }
  auto ax = unique_axes(n, *axes, static_cast<int64_t>(in.size()));
  for (size_t i = 0; i < in.size(); ++i) {
    if (!std::binary_search(ax.begin(), ax.end(), static_cast<int64_t>(i))) {
      out.push_back(in[i]);
    } else if (in[i].is_static() && in[i].value != 1) {
      fail(code, "{}: cannot squeeze axis {} of size {} (input shape {})", n.label(), i, in[i].value,
           ir::shape_str(in));
    }
  }
  return out;
}

std::vector<OutType> infer_squeeze(const InferContext& c) {
  const InType& x = c.in(0);
  if (!x.shape) return one(x.dtype, std::nullopt);
  if (!c.has(1)) return one(x.dtype, squeeze_shape(c.node, *x.shape, std::nullopt, ErrorCode::invalid_model));
  if (auto axes = const_ints(c, 1)) return one(x.dtype, squeeze_shape(c.node, *x.shape, axes, ErrorCode::invalid_model));
  if (auto len = static_length(c, 1); len && *len <= static_cast<int64_t>(x.shape->size()))
    return one(x.dtype, unknown_dims(x.shape->size() - static_cast<size_t>(*len)));
  return one(x.dtype, std::nullopt);
}

void kernel_squeeze(KernelContext& c) {
  std::optional<std::vector<int64_t>> axes;
  if (c.has(1)) axes = to_int64s(c.in(1));
  auto s = squeeze_shape(c.node, ir::static_shape(c.in(0).shape()), axes, ErrorCode::invalid_input);
  copy_reshaped(c, ir::to_sizes(*s));
}

/// Unsqueeze-13: axes index the output (rank + len(axes)).
Shape unsqueeze_shape(const ir::Node& n, const Shape& in, const std::vector<int64_t>& axes) {
  int64_t rank = static_cast<int64_t>(in.size() + axes.size());
  auto ax = unique_axes(n, axes, rank);
  Shape out;
  size_t next = 0;
  for (int64_t i = 0; i < rank; ++i)
    out.push_back(std::binary_search(ax.begin(), ax.end(), i) ? Dim::known(1) : in[next++]);
  return out;
}

std::vector<OutType> infer_unsqueeze(const InferContext& c) {
  const InType& x = c.in(0);
  c.in(1);
  if (!x.shape) return one(x.dtype, std::nullopt);
  if (auto axes = const_ints(c, 1)) return one(x.dtype, unsqueeze_shape(c.node, *x.shape, *axes));
  if (auto len = static_length(c, 1)) return one(x.dtype, unknown_dims(x.shape->size() + static_cast<size_t>(*len)));
  return one(x.dtype, std::nullopt);
}

void kernel_unsqueeze(KernelContext& c) {
  copy_reshaped(c, ir::to_sizes(unsqueeze_shape(c.node, ir::static_shape(c.in(0).shape()), to_int64s(c.in(1)))));
}

// ---- Transpose ------------------------------------------------------------------------

/// The perm attribute (default: reversed axes), checked to be a permutation.
std::vector<int64_t> transpose_perm(const ir::Node& n, size_t rank) {
  std::vector<int64_t> perm = n.ints("perm");
  if (!n.has("perm"))
    for (size_t i = rank; i-- > 0;) perm.push_back(static_cast<int64_t>(i));
  std::vector<bool> seen(rank, false);
  if (perm.size() != rank)
    fail(ErrorCode::invalid_model, "{}: perm [{}] does not match input rank {}", n.label(), fmt::join(perm, ","), rank);
  for (auto p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(rank) || seen[p])
      fail(ErrorCode::invalid_model, "{}: perm [{}] is not a permutation of 0..{}", n.label(), fmt::join(perm, ","),
           rank - 1);
    seen[p] = true;
  }
  return perm;
}

std::vector<OutType> infer_transpose(const InferContext& c) {
  const InType& x = c.in(0);
  if (!x.shape) return one(x.dtype, c.node.has("perm") ? std::optional(unknown_dims(c.node.ints("perm").size())) : std::nullopt);
  auto perm = transpose_perm(c.node, x.shape->size());
  Shape out;
  for (auto p : perm) out.push_back((*x.shape)[p]);
  return one(x.dtype, out);
}

void kernel_transpose(KernelContext& c) {
  const Tensor& x = c.in(0);
  auto perm = transpose_perm(c.node, x.shape().size());
  auto st = strides_of(x.shape());
  std::vector<int64_t> shape, strides;
  for (auto p : perm) {
    shape.push_back(x.dim(p));
    strides.push_back(st[p]);
  }
  copy_strided(c.node, x, c.output(0, x.dtype(), shape), shape, strides, 0);
}

// ---- Concat -----------------------------------------------------------------------------

std::vector<OutType> infer_concat(const InferContext& c) {
  const InType& x0 = c.in(0);
  std::optional<Shape> out;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    const InType& x = c.in(i);
    if (x.dtype != x0.dtype)
      fail(ErrorCode::invalid_model, "{}: input {} has dtype {}, input 0 has {}", c.node.label(), i,
           dtype_name(x.dtype), dtype_name(x0.dtype));
    if (x.shape && out && x.shape->size() != out->size())
      fail(ErrorCode::invalid_model, "{}: input {} has rank {}, expected {}", c.node.label(), i, x.shape->size(),
           out->size());
    if (x.shape && !out) out = x.shape;
  }
  if (!out) return one(x0.dtype, std::nullopt);
  size_t axis = static_cast<size_t>(normalize_axis(c.node, c.node.i("axis"), static_cast<int64_t>(out->size())));
  // The concat axis: a static sum, or the one input's dim when the others are empty.
  int64_t sum = 0;
  std::vector<Dim> dynamic;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    const auto& s = c.inputs[i].shape;
    if (!s) {
      dynamic.push_back(Dim::sym(""));
      continue;
    }
    for (size_t d = 0; d < out->size(); ++d) {
      if (d == axis) continue;
      const Dim &a = (*out)[d], &b = (*s)[d];
      if (a.is_static() && b.is_static() && a.value != b.value)
        fail(ErrorCode::invalid_model, "{}: input {} has shape {}, incompatible with {} outside axis {}",
             c.node.label(), i, ir::shape_str(s), ir::shape_str(out), axis);
      if (!a.is_static() && (b.is_static() || a.symbol.empty())) (*out)[d] = b;
    }
    if ((*s)[axis].is_static()) sum += (*s)[axis].value;
    else dynamic.push_back((*s)[axis]);
  }
  if (dynamic.empty()) (*out)[axis] = Dim::known(sum);
  else (*out)[axis] = (dynamic.size() == 1 && sum == 0) ? dynamic[0] : Dim::sym("");
  return one(x0.dtype, out);
}

void kernel_concat(KernelContext& c) {
  const Tensor& x0 = c.in(0);
  int64_t rank = x0.rank();
  size_t axis = static_cast<size_t>(normalize_axis(c.node, c.node.i("axis"), rank));
  std::vector<int64_t> shape = x0.shape();
  shape[axis] = 0;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    const Tensor& x = c.in(i);
    bool ok = x.dtype() == x0.dtype() && x.rank() == rank;
    for (size_t d = 0; ok && d < shape.size(); ++d) ok = d == axis || x.dim(d) == x0.dim(d);
    if (!ok)
      fail(ErrorCode::invalid_input, "{}: input {} is {}, incompatible with input 0 {} for axis {}", c.node.label(),
           i, x.describe(), x0.describe(), axis);
    shape[axis] += x.dim(axis);
  }
  size_t esize = dtype_size(x0.dtype());
  if (esize == 0) unsupported_dtype(c.node, x0.dtype(), "input 0");
  Tensor& y = c.output(0, x0.dtype(), shape);
  int64_t outer = prod(shape, 0, axis);
  size_t out_row = static_cast<size_t>(prod(shape, axis)) * esize, at = 0;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    const Tensor& x = c.in(i);
    size_t row = static_cast<size_t>(prod(x.shape(), axis)) * esize;
    for (int64_t o = 0; o < outer && row; ++o)
      std::memcpy(static_cast<char*>(y.raw()) + o * out_row + at, static_cast<const char*>(x.raw()) + o * row, row);
    at += row;
  }
}

// ---- Split -----------------------------------------------------------------------------

/// Chunk sizes along the split axis: the `split` input, else num_outputs
/// chunks of ceil(dim/n) with a smaller last one (Split-18), else an even split.
std::vector<int64_t> split_sizes(const ir::Node& n, int64_t dim, const std::optional<std::vector<int64_t>>& split,
                                 size_t num_outputs, ErrorCode code) {
  if (split) {
    int64_t sum = 0;
    for (auto s : *split) {
      if (s < 0) fail(code, "{}: negative split size {}", n.label(), s);
      sum += s;
    }
    if (split->size() != num_outputs || sum != dim)
      fail(code, "{}: split [{}] must have {} entries summing to the axis size {}", n.label(), fmt::join(*split, ","),
           num_outputs, dim);
    return *split;
  }
  int64_t k = static_cast<int64_t>(num_outputs);
  if (n.has("num_outputs") && n.i("num_outputs") != k)
    fail(ErrorCode::invalid_model, "{}: num_outputs = {} but the node has {} outputs", n.label(), n.i("num_outputs"), k);
  if (k == 0) fail(ErrorCode::invalid_model, "{}: no outputs", n.label());
  int64_t chunk = (dim + k - 1) / k;
  if (!n.has("num_outputs") && dim % k != 0)
    fail(code, "{}: axis size {} cannot be split evenly into {} outputs", n.label(), dim, k);
  std::vector<int64_t> sizes;
  for (int64_t i = 0, left = dim; i < k; ++i, left -= std::min(left, chunk)) sizes.push_back(std::min(left, chunk));
  return sizes;
}

std::vector<OutType> infer_split(const InferContext& c) {
  const InType& x = c.in(0);
  std::vector<OutType> out(c.num_outputs, OutType{x.dtype, std::nullopt});
  if (!x.shape) return out;
  size_t axis = static_cast<size_t>(normalize_axis(c.node, c.node.i("axis", 0), static_cast<int64_t>(x.shape->size())));
  auto split = const_ints(c, 1);
  std::vector<Dim> dims(c.num_outputs, Dim::sym(""));
  const Dim& d = (*x.shape)[axis];
  if (d.is_static() && (split || !c.has(1))) {
    auto sizes = split_sizes(c.node, d.value, split, c.num_outputs, ErrorCode::invalid_model);
    for (size_t i = 0; i < dims.size(); ++i) dims[i] = Dim::known(sizes[i]);
  } else if (split) {
    for (size_t i = 0; i < dims.size() && i < split->size(); ++i) dims[i] = Dim::known((*split)[i]);
  } else if (c.num_outputs == 1) {
    dims[0] = d;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].shape = x.shape;
    (*out[i].shape)[axis] = dims[i];
  }
  return out;
}

void kernel_split(KernelContext& c) {
  const Tensor& x = c.in(0);
  size_t axis = static_cast<size_t>(normalize_axis(c.node, c.node.i("axis", 0), x.rank()));
  std::optional<std::vector<int64_t>> split;
  if (c.has(1)) split = to_int64s(c.in(1));
  auto sizes = split_sizes(c.node, x.dim(axis), split, c.num_outputs(), ErrorCode::invalid_input);
  auto st = strides_of(x.shape());
  int64_t start = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<int64_t> shape = x.shape();
    shape[axis] = sizes[i];
    copy_strided(c.node, x, c.output(i, x.dtype(), shape), shape, st, start * st[axis]);
    start += sizes[i];
  }
}

// ---- Slice -------------------------------------------------------------------------------

/// One sliced axis after the Slice-13 clamping rules.
struct SliceAxis {
  int64_t start, step, count;
};

/// Resolves start/end/step on an axis of size dim: negatives count from the
/// end, then start is clamped to [0,dim] ([0,dim-1] for step<0) and end to
/// [0,dim] ([-1,dim-1] for step<0).
SliceAxis slice_axis(int64_t dim, int64_t start, int64_t end, int64_t step) {
  if (dim == 0) return {0, step, 0};
  // A step longer than the axis takes at most one element; clamping it keeps the arithmetic in range.
  step = std::clamp<int64_t>(step, -dim - 1, dim + 1);
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    return {start, step, end > start ? (end - start + step - 1) / step : 0};
  }
  start = std::clamp<int64_t>(start, 0, dim - 1);
  end = std::clamp<int64_t>(end, -1, dim - 1);
  return {start, step, start > end ? (start - end - step - 1) / -step : 0};
}

/// A Slice's starts/ends/axes/steps with defaults filled in and axes normalised.
struct SliceSpec {
  std::vector<int64_t> starts, ends, axes, steps;
};

SliceSpec slice_spec(const ir::Node& n, int64_t rank, std::vector<int64_t> starts, std::vector<int64_t> ends,
                     std::optional<std::vector<int64_t>> axes, std::optional<std::vector<int64_t>> steps) {
  size_t k = starts.size();
  if (!axes) axes = first_axes(k);
  if (!steps) steps = std::vector<int64_t>(k, 1);
  if (ends.size() != k || axes->size() != k || steps->size() != k)
    fail(ErrorCode::invalid_model, "{}: starts, ends, axes and steps must have the same length ({}, {}, {}, {})",
         n.label(), k, ends.size(), axes->size(), steps->size());
  unique_axes(n, *axes, rank);  // rejects repeats; the entries keep their order
  for (auto& a : *axes) a = normalize_axis(n, a, rank, "axes entry");
  for (auto s : *steps)
    if (s == 0) fail(ErrorCode::invalid_model, "{}: steps must not be 0", n.label());
  return {std::move(starts), std::move(ends), std::move(*axes), std::move(*steps)};
}

std::vector<OutType> infer_slice(const InferContext& c) {
  const InType& x = c.in(0);
  c.in(1);
  c.in(2);
  if (!x.shape) return one(x.dtype, std::nullopt);
  Shape out = *x.shape;
  auto starts = const_ints(c, 1), ends = const_ints(c, 2), axes = const_ints(c, 3), steps = const_ints(c, 4);
  bool known = starts && ends && (axes || !c.has(3)) && (steps || !c.has(4));
  if (!known) {
    // Only the axes that may be sliced lose their size.
    if (axes) {
      for (auto a : *axes) out[normalize_axis(c.node, a, static_cast<int64_t>(out.size()), "axes entry")] = Dim::sym("");
    } else if (auto len = static_length(c, 1); len && !c.has(3)) {
      for (int64_t i = 0; i < *len && i < static_cast<int64_t>(out.size()); ++i) out[i] = Dim::sym("");
    } else {
      out = unknown_dims(out.size());
    }
    return one(x.dtype, out);
  }
  auto sp = slice_spec(c.node, static_cast<int64_t>(out.size()), *starts, *ends, axes, steps);
  for (size_t i = 0; i < sp.axes.size(); ++i) {
    Dim& d = out[sp.axes[i]];
    if (d.is_static()) {
      d = Dim::known(slice_axis(d.value, sp.starts[i], sp.ends[i], sp.steps[i]).count);
    } else {
      // A whole-axis slice (forward or reversed) keeps the symbol; anything else depends on its value.
      bool whole = (sp.starts[i] == 0 && sp.steps[i] == 1 && sp.ends[i] >= std::numeric_limits<int32_t>::max()) ||
                   (sp.starts[i] == -1 && sp.steps[i] == -1 && sp.ends[i] <= std::numeric_limits<int32_t>::min());
      if (!whole) d = Dim::sym("");
    }
  }
  return one(x.dtype, out);
}

void kernel_slice(KernelContext& c) {
  const Tensor& x = c.in(0);
  std::optional<std::vector<int64_t>> axes, steps;
  if (c.has(3)) axes = to_int64s(c.in(3));
  if (c.has(4)) steps = to_int64s(c.in(4));
  auto sp = slice_spec(c.node, x.rank(), to_int64s(c.in(1)), to_int64s(c.in(2)), axes, steps);
  auto st = strides_of(x.shape());
  std::vector<int64_t> shape = x.shape(), strides = st;
  int64_t offset = 0;
  for (size_t i = 0; i < sp.axes.size(); ++i) {
    auto a = sp.axes[i];
    SliceAxis s = slice_axis(x.dim(a), sp.starts[i], sp.ends[i], sp.steps[i]);
    shape[a] = s.count;
    strides[a] = st[a] * s.step;
    if (s.count) offset += s.start * st[a];
  }
  copy_strided(c.node, x, c.output(0, x.dtype(), shape), shape, strides, offset);
}

// ---- Expand, Tile ----------------------------------------------------------------------

std::vector<OutType> infer_expand(const InferContext& c) {
  const InType& x = c.in(0);
  c.in(1);
  if (auto shape = const_ints(c, 1)) {
    for (auto d : *shape)
      if (d < 0) fail(ErrorCode::invalid_model, "{}: negative dim {} in shape", c.node.label(), d);
    return one(x.dtype, broadcast_shapes(c.node, x.shape, ir::static_shape(*shape)));
  }
  if (auto len = static_length(c, 1); len && x.shape)
    return one(x.dtype, unknown_dims(std::max<size_t>(x.shape->size(), static_cast<size_t>(*len))));
  return one(x.dtype, std::nullopt);
}

void kernel_expand(KernelContext& c) {
  const Tensor& x = c.in(0);
  auto shape = broadcast_sizes(c.node, x.shape(), to_int64s(c.in(1)));
  auto st = strides_of(x.shape());
  size_t lead = shape.size() - x.shape().size();
  std::vector<int64_t> strides(shape.size(), 0);
  for (size_t d = lead; d < shape.size(); ++d) strides[d] = x.dim(d - lead) == 1 ? 0 : st[d - lead];
  copy_strided(c.node, x, c.output(0, x.dtype(), shape), shape, strides, 0);
}

std::vector<int64_t> tile_repeats(const ir::Node& n, const std::vector<int64_t>& reps, size_t rank, ErrorCode code) {
  if (reps.size() != rank)
    fail(code, "{}: repeats has {} entries, input rank is {}", n.label(), reps.size(), rank);
  for (auto r : reps)
    if (r < 0) fail(code, "{}: negative repeat {}", n.label(), r);
  return reps;
}

std::vector<OutType> infer_tile(const InferContext& c) {
  const InType& x = c.in(0);
  c.in(1);
  if (!x.shape) return one(x.dtype, std::nullopt);
  auto reps = const_ints(c, 1);
  if (!reps) return one(x.dtype, unknown_dims(x.shape->size()));
  tile_repeats(c.node, *reps, x.shape->size(), ErrorCode::invalid_model);
  Shape out;
  for (size_t i = 0; i < reps->size(); ++i) out.push_back(mul_dim((*x.shape)[i], Dim::known((*reps)[i])));
  return one(x.dtype, out);
}

void kernel_tile(KernelContext& c) {
  const Tensor& x = c.in(0);
  auto reps = tile_repeats(c.node, to_int64s(c.in(1)), x.shape().size(), ErrorCode::invalid_input);
  // The output seen as [r0, d0, r1, d1, ...] reads the input with stride 0 on each r.
  auto st = strides_of(x.shape());
  std::vector<int64_t> view, strides, out;
  for (size_t d = 0; d < reps.size(); ++d) {
    view.insert(view.end(), {reps[d], x.dim(d)});
    strides.insert(strides.end(), {0, st[d]});
    out.push_back(reps[d] * x.dim(d));
  }
  copy_strided(c.node, x, c.output(0, x.dtype(), out), view, strides, 0);
}

}  // namespace

void register_shape_ops(Registry& r) {
  r.add({"", "Shape", infer_shape, kernel_shape});
  r.add({"", "Size", infer_size, kernel_size});
  r.add({"", "Reshape", infer_reshape, kernel_reshape});
  r.add({"", "Flatten", infer_flatten, kernel_flatten});
  r.add({"", "Squeeze", infer_squeeze, kernel_squeeze});
  r.add({"", "Unsqueeze", infer_unsqueeze, kernel_unsqueeze});
  r.add({"", "Transpose", infer_transpose, kernel_transpose});
  r.add({"", "Concat", infer_concat, kernel_concat});
  r.add({"", "Split", infer_split, kernel_split});
  r.add({"", "Slice", infer_slice, kernel_slice});
  r.add({"", "Expand", infer_expand, kernel_expand});
  r.add({"", "Tile", infer_tile, kernel_tile});
}

}  // namespace kiln::ops
