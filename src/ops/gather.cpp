// Indexed reads and writes: Gather, GatherElements, GatherND, ScatterElements,
// ScatterND, and Scatter (the pre-opset-11 name of ScatterElements)
// (https://onnx.ai/onnx/operators/, newest opset semantics).
//
// Indices may be int32 or int64 and negative (counting from the end of the
// axis); an index outside [-dim, dim-1] is an Error(invalid_input) naming the
// node, never an out-of-bounds access. Plain copies move raw elements, so they
// work for every dtype; scatter reductions need arithmetic and take the
// numeric dtypes.
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

#include "ops/util.h"

namespace kiln::ops {
namespace {

using ir::Dim;
using ir::Shape;

/// Indices input i as int64 values (int32/int64 only, as the spec allows).
std::vector<int64_t> read_indices(const KernelContext& c, size_t i) {
  const Tensor& t = c.in(i);
  if (t.dtype() != DType::i64 && t.dtype() != DType::i32) unsupported_dtype(c.node, t.dtype(), "indices");
  return to_int64s(t);
}

/// Maps index v on an axis of size dim into [0, dim); Error(invalid_input) otherwise.
int64_t resolve_index(const ir::Node& n, int64_t v, int64_t dim, int64_t axis) {
  if (v < -dim || v >= dim)
    fail(ErrorCode::invalid_input, "{}: index {} is out of range for axis {} of size {}", n.label(), v, axis, dim);
  return v < 0 ? v + dim : v;
}

std::vector<OutType> one(DType dt, std::optional<Shape> s) { return {OutType{dt, std::move(s)}}; }

void check_index_dtype(const InferContext& c, size_t i) {
  DType t = c.in(i).dtype;
  if (t != DType::i64 && t != DType::i32) unsupported_dtype(c.node, t, "indices");
}

// ---- Gather ---------------------------------------------------------------------------------

std::vector<OutType> infer_gather(const InferContext& c) {
  const InType& x = c.in(0);
  const InType& idx = c.in(1);
  check_index_dtype(c, 1);
  if (!x.shape || !idx.shape) return one(x.dtype, std::nullopt);
  size_t axis = static_cast<size_t>(normalize_axis(c.node, c.node.i("axis", 0), static_cast<int64_t>(x.shape->size())));
  Shape out(x.shape->begin(), x.shape->begin() + axis);
  out.insert(out.end(), idx.shape->begin(), idx.shape->end());
  out.insert(out.end(), x.shape->begin() + axis + 1, x.shape->end());
  return one(x.dtype, out);
}

void kernel_gather(KernelContext& c) {
  const Tensor& x = c.in(0);
  auto idx = read_indices(c, 1);
  int64_t axis = normalize_axis(c.node, c.node.i("axis", 0), x.rank());
  std::vector<int64_t> shape(x.shape().begin(), x.shape().begin() + axis);
  shape.insert(shape.end(), c.in(1).shape().begin(), c.in(1).shape().end());
  shape.insert(shape.end(), x.shape().begin() + axis + 1, x.shape().end());
  int64_t dim = x.dim(axis);
  for (auto& v : idx) v = resolve_index(c.node, v, dim, axis);
  size_t esize = dtype_size(x.dtype());
  if (esize == 0) unsupported_dtype(c.node, x.dtype(), "input 0");
  Tensor& y = c.output(0, x.dtype(), shape);
  int64_t outer = prod(x.shape(), 0, axis);
  size_t block = static_cast<size_t>(prod(x.shape(), axis + 1)) * esize;
  if (block == 0) return;
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(y.raw());
  for (int64_t o = 0; o < outer; ++o)
    for (size_t j = 0; j < idx.size(); ++j)
      std::memcpy(dst + (o * idx.size() + j) * block, src + (o * dim + idx[j]) * block, block);
}

// ---- GatherElements / ScatterElements addressing ----------------------------------------

/// Checks that an index tensor of `index_shape` fits a data tensor of
/// `data_shape` outside `axis` (same rank, no larger elsewhere).
void check_element_shapes(const ir::Node& n, const std::vector<int64_t>& data_shape,
                          const std::vector<int64_t>& index_shape, int64_t axis) {
  if (index_shape.size() != data_shape.size())
    fail(ErrorCode::invalid_input, "{}: indices rank {} differs from data rank {}", n.label(), index_shape.size(),
         data_shape.size());
  for (size_t d = 0; d < data_shape.size(); ++d)
    if (static_cast<int64_t>(d) != axis && index_shape[d] > data_shape[d])
      fail(ErrorCode::invalid_input, "{}: indices shape [{}] exceeds data shape [{}] on axis {}", n.label(),
           fmt::join(index_shape, ","), fmt::join(data_shape, ","), d);
}

/// Calls f(e, off) for every element e of the index tensor `it` in row-major
/// order, off being the flat offset into a tensor of `data_shape` that e
/// addresses along `axis` (its index value there, the element's own position
/// elsewhere). Raises Error(invalid_input) on a bad shape or an index outside
/// [-dim, dim-1]. Walks the index tensor a row (last dimension) at a time with
/// the row's base offset computed once: no per-element offset table (a
/// detector's RoI scatter addresses ~2M elements).
template <class F>
void for_each_element(const ir::Node& n, const std::vector<int64_t>& data_shape, const Tensor& it, int64_t axis,
                      F&& f) {
  const std::vector<int64_t>& index_shape = it.shape();
  check_element_shapes(n, data_shape, index_shape, axis);
  const int64_t total = it.numel();
  if (total == 0 || index_shape.empty()) return;
  if (it.dtype() != DType::i64 && it.dtype() != DType::i32) unsupported_dtype(n, it.dtype(), "indices");
  const size_t r = index_shape.size();
  const auto st = strides_of(data_shape);
  const int64_t dim = data_shape[static_cast<size_t>(axis)], axis_stride = st[static_cast<size_t>(axis)];
  const int64_t inner = index_shape[r - 1];
  const bool axis_last = axis == static_cast<int64_t>(r) - 1;
  auto walk = [&](const auto* idx) {
    std::vector<int64_t> pos(r - 1, 0);
    for (int64_t e0 = 0; e0 < total; e0 += inner) {
      int64_t base = 0;
      for (size_t d = 0; d + 1 < r; ++d)
        if (static_cast<int64_t>(d) != axis) base += pos[d] * st[d];
      for (int64_t j = 0; j < inner; ++j) {
        const int64_t v = static_cast<int64_t>(idx[e0 + j]);
        const int64_t k = v < 0 ? v + dim : v;
        if (k < 0 || k >= dim) resolve_index(n, v, dim, axis);  // raises, naming the value
        f(e0 + j, base + k * axis_stride + (axis_last ? 0 : j));
      }
      for (size_t d = r - 1; d-- > 0;) {
        if (++pos[d] < index_shape[d]) break;
        pos[d] = 0;
      }
    }
  };
  if (it.dtype() == DType::i64)
    walk(it.data<int64_t>());
  else
    walk(it.data<int32_t>());
}

std::vector<OutType> infer_gather_elements(const InferContext& c) {
  const InType& x = c.in(0);
  check_index_dtype(c, 1);
  if (x.shape && c.in(1).shape && x.shape->size() != c.in(1).shape->size())
    fail(ErrorCode::invalid_model, "{}: indices rank {} differs from data rank {}", c.node.label(),
         c.in(1).shape->size(), x.shape->size());
  if (x.shape) normalize_axis(c.node, c.node.i("axis", 0), static_cast<int64_t>(x.shape->size()));
  return one(x.dtype, c.in(1).shape);
}

void kernel_gather_elements(KernelContext& c) {
  const Tensor& x = c.in(0);
  const Tensor& it = c.in(1);
  int64_t axis = normalize_axis(c.node, c.node.i("axis", 0), x.rank());
  Tensor& y = c.output(0, x.dtype(), it.shape());  // shapes checked by for_each_element
  by_width(c.node, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* src = x.data<T>();
    T* dst = y.data<T>();
    for_each_element(c.node, x.shape(), it, axis, [&](int64_t e, int64_t off) { dst[e] = src[off]; });
  });
}

// ---- GatherND / ScatterND addressing ---------------------------------------------------------

/// Checks GatherND/ScatterND geometry: indices [..., k] against data with
/// `batch` leading dims shared by both (GatherND batch_dims). Returns the
/// number of data elements each index tuple addresses.
int64_t nd_block(const ir::Node& n, const std::vector<int64_t>& data_shape, const std::vector<int64_t>& index_shape,
                 size_t batch) {
  size_t r = data_shape.size(), q = index_shape.size();
  if (q == 0 || batch >= q || batch >= r)
    fail(ErrorCode::invalid_input, "{}: indices of rank {} and batch_dims {} do not fit data of rank {}", n.label(), q,
         batch, r);
  size_t k = static_cast<size_t>(index_shape[q - 1]);
  if (k > r - batch)
    fail(ErrorCode::invalid_input, "{}: index tuples of length {} exceed data rank {} (batch_dims {})", n.label(), k,
         r, batch);
  for (size_t d = 0; d < batch; ++d)
    if (index_shape[d] != data_shape[d])
      fail(ErrorCode::invalid_input, "{}: batch dim {} differs: data {} vs indices {}", n.label(), d, data_shape[d],
           index_shape[d]);
  return prod(data_shape, batch + k);
}

/// Calls f(t, off) for every index tuple t of `it` (int32 / int64, last dim
/// k) in order, off being the flat data offset it addresses (geometry checked
/// by nd_block first). Raises Error(invalid_input) on an index out of range.
/// Reads the indices where they are: a detector's score gather has ~10M tuples.
template <class F>
void for_each_tuple(const ir::Node& n, const std::vector<int64_t>& data_shape, const Tensor& it, size_t batch, F&& f) {
  if (it.dtype() != DType::i64 && it.dtype() != DType::i32) unsupported_dtype(n, it.dtype(), "indices");
  const std::vector<int64_t>& index_shape = it.shape();
  nd_block(n, data_shape, index_shape, batch);
  const size_t q = index_shape.size(), k = static_cast<size_t>(index_shape[q - 1]);
  const auto st = strides_of(data_shape);
  const int64_t batches = prod(data_shape, 0, batch), per_batch = prod(index_shape, batch, q - 1);
  const int64_t batch_stride = prod(data_shape, batch);
  auto walk = [&](const auto* idx) {
    for (int64_t b = 0; b < batches; ++b)
      for (int64_t t = 0; t < per_batch; ++t) {
        const auto* tuple = idx + (b * per_batch + t) * static_cast<int64_t>(k);
        int64_t off = b * batch_stride;
        for (size_t j = 0; j < k; ++j) {
          const int64_t v = static_cast<int64_t>(tuple[j]), dim = data_shape[batch + j];
          const int64_t i = v < 0 ? v + dim : v;
          if (i < 0 || i >= dim) resolve_index(n, v, dim, static_cast<int64_t>(batch + j));  // raises
          off += i * st[batch + j];
        }
        f(b * per_batch + t, off);
      }
  };
  if (it.dtype() == DType::i64)
    walk(it.data<int64_t>());
  else
    walk(it.data<int32_t>());
}

std::vector<OutType> infer_gather_nd(const InferContext& c) {
  const InType& x = c.in(0);
  const InType& idx = c.in(1);
  check_index_dtype(c, 1);
  if (!x.shape || !idx.shape || idx.shape->empty() || !idx.shape->back().is_static())
    return one(x.dtype, std::nullopt);
  size_t b = static_cast<size_t>(c.node.i("batch_dims", 0)), k = static_cast<size_t>(idx.shape->back().value);
  if (b >= idx.shape->size() || b >= x.shape->size() || k > x.shape->size() - b)
    fail(ErrorCode::invalid_model, "{}: indices {} with batch_dims {} do not fit data {}", c.node.label(),
         ir::shape_str(idx.shape), b, ir::shape_str(x.shape));
  Shape out(idx.shape->begin(), idx.shape->end() - 1);
  out.insert(out.end(), x.shape->begin() + b + k, x.shape->end());
  return one(x.dtype, out);
}

void kernel_gather_nd(KernelContext& c) {
  const Tensor& x = c.in(0);
  const Tensor& it = c.in(1);
  int64_t b = c.node.i("batch_dims", 0);
  if (b < 0) fail(ErrorCode::invalid_model, "{}: batch_dims must be >= 0, got {}", c.node.label(), b);
  const int64_t block = nd_block(c.node, x.shape(), it.shape(), static_cast<size_t>(b));
  std::vector<int64_t> shape(it.shape().begin(), it.shape().end() - 1);
  shape.insert(shape.end(), x.shape().begin() + b + it.shape().back(), x.shape().end());
  Tensor& y = c.output(0, x.dtype(), shape);
  if (block == 0 || y.numel() == 0) return;
  by_width(c.node, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* src = x.data<T>();
    T* dst = y.data<T>();
    if (block == 1)  // whole-element tuples (NonZero's output): no memcpy per element
      for_each_tuple(c.node, x.shape(), it, static_cast<size_t>(b), [&](int64_t t, int64_t off) { dst[t] = src[off]; });
    else
      for_each_tuple(c.node, x.shape(), it, static_cast<size_t>(b),
                     [&](int64_t t, int64_t off) { std::copy_n(src + off, block, dst + t * block); });
  });
}

// ---- Scatter -----------------------------------------------------------------------------

enum class Reduction { none, add, mul, max, min };

Reduction reduction_of(const ir::Node& n) {
  std::string r = n.s("reduction", "none");
  if (r == "none") return Reduction::none;
  if (r == "add") return Reduction::add;
  if (r == "mul") return Reduction::mul;
  if (r == "max") return Reduction::max;
  if (r == "min") return Reduction::min;
  fail(ErrorCode::unsupported, "{}: reduction '{}' is not supported", n.label(), r);
}

template <class T>
void reduce_into(T& dst, T v, Reduction r) {
  switch (r) {
    case Reduction::none: dst = v; break;
    case Reduction::add: dst = static_cast<T>(dst + v); break;
    case Reduction::mul: dst = static_cast<T>(dst * v); break;
    case Reduction::max: dst = std::max(dst, v); break;
    case Reduction::min: dst = std::min(dst, v); break;
  }
}

/// Output = copy of data, then updates[src..src+block) combined into
/// output[dst..dst+block) for each (dst, src) pair, in order (so with
/// reduction none a repeated index keeps the last update).
void scatter(KernelContext& c, const std::vector<int64_t>& dst_offsets, int64_t block) {
  const Tensor& x = c.in(0);
  const Tensor& u = c.in(2);
  if (u.dtype() != x.dtype())
    fail(ErrorCode::invalid_input, "{}: updates dtype {} differs from data dtype {}", c.node.label(),
         dtype_name(u.dtype()), dtype_name(x.dtype()));
  Reduction red = reduction_of(c.node);
  if (dtype_size(x.dtype()) == 0) unsupported_dtype(c.node, x.dtype(), "input 0");
  Tensor& y = c.output(0, x.dtype(), x.shape());
  if (x.nbytes()) std::memcpy(y.raw(), x.raw(), x.nbytes());
  auto apply = [&](auto* out, const auto* upd) {
    for (size_t t = 0; t < dst_offsets.size(); ++t)
      for (int64_t j = 0; j < block; ++j) reduce_into(out[dst_offsets[t] + j], upd[t * block + j], red);
  };
  if (red == Reduction::none) {
    by_width(c.node, x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      apply(y.data<T>(), u.data<T>());
    });
  } else {
    KILN_DISPATCH_NUMERIC(x.dtype(), c.node, "data with a reduction", { apply(y.data<scalar_t>(), u.data<scalar_t>()); });
  }
}

std::vector<OutType> infer_scatter(const InferContext& c) {
  const InType& x = c.in(0);
  check_index_dtype(c, 1);
  if (c.in(2).dtype != x.dtype)
    fail(ErrorCode::invalid_model, "{}: updates dtype {} differs from data dtype {}", c.node.label(),
         dtype_name(c.in(2).dtype), dtype_name(x.dtype));
  reduction_of(c.node);
  return one(x.dtype, x.shape);
}

void kernel_scatter_elements(KernelContext& c) {
  const Tensor& x = c.in(0);
  const Tensor& it = c.in(1);
  const Tensor& u = c.in(2);
  if (u.shape() != it.shape())
    fail(ErrorCode::invalid_input, "{}: updates {} must have the shape of indices {}", c.node.label(), u.describe(),
         it.describe());
  if (u.dtype() != x.dtype())
    fail(ErrorCode::invalid_input, "{}: updates dtype {} differs from data dtype {}", c.node.label(),
         dtype_name(u.dtype()), dtype_name(x.dtype()));
  int64_t axis = normalize_axis(c.node, c.node.i("axis", 0), x.rank());
  check_element_shapes(c.node, x.shape(), it.shape(), axis);
  Reduction red = reduction_of(c.node);
  if (dtype_size(x.dtype()) == 0) unsupported_dtype(c.node, x.dtype(), "input 0");
  Tensor& y = c.output(0, x.dtype(), x.shape());
  if (x.nbytes()) std::memcpy(y.raw(), x.raw(), x.nbytes());
  // In index order, so that with reduction none a repeated index keeps the last update.
  if (red == Reduction::none) {
    by_width(c.node, x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* out = y.data<T>();
      const T* upd = u.data<T>();
      for_each_element(c.node, x.shape(), it, axis, [&](int64_t e, int64_t off) { out[off] = upd[e]; });
    });
  } else {
    KILN_DISPATCH_NUMERIC(x.dtype(), c.node, "data with a reduction", {
      scalar_t* out = y.data<scalar_t>();
      const scalar_t* upd = u.data<scalar_t>();
      for_each_element(c.node, x.shape(), it, axis,
                       [&](int64_t e, int64_t off) { reduce_into(out[off], upd[e], red); });
    });
  }
}

void kernel_scatter_nd(KernelContext& c) {
  const Tensor& x = c.in(0);
  const Tensor& it = c.in(1);
  const int64_t block = nd_block(c.node, x.shape(), it.shape(), 0);
  std::vector<int64_t> offsets;
  offsets.reserve(static_cast<size_t>(it.numel() / std::max<int64_t>(it.shape().back(), 1)));
  for_each_tuple(c.node, x.shape(), it, 0, [&](int64_t, int64_t off) { offsets.push_back(off); });
  std::vector<int64_t> expect(it.shape().begin(), it.shape().end() - 1);
  expect.insert(expect.end(), x.shape().begin() + it.shape().back(), x.shape().end());
  if (c.in(2).shape() != expect)
    fail(ErrorCode::invalid_input, "{}: updates {} must have shape [{}]", c.node.label(), c.in(2).describe(),
         fmt::join(expect, ","));
  scatter(c, offsets, block);
}

}  // namespace

void register_gather(Registry& r) {
  r.add({"", "Gather", infer_gather, kernel_gather});
  r.add({"", "GatherElements", infer_gather_elements, kernel_gather_elements});
  r.add({"", "GatherND", infer_gather_nd, kernel_gather_nd});
  r.add({"", "ScatterElements", infer_scatter, kernel_scatter_elements});
  r.add({"", "ScatterND", infer_scatter, kernel_scatter_nd});
  // The parser renames Scatter to ScatterElements; registered too so a graph built without it still runs.
  r.add({"", "Scatter", infer_scatter, kernel_scatter_elements});
}

}  // namespace kiln::ops
