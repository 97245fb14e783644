// Data-dependent selection: Compress-11, Unique-11 and ReverseSequence-10
// (https://onnx.ai/onnx/operators/). All three only move elements, so they
// take any fixed-size dtype (Unique compares values, so not the 16-bit
// floats, which it would have to compare as raw bits).
//
// Compress: keeps the slices along `axis` (or the elements of the flattened
// input, without axis) whose condition entry is true. A condition shorter
// than the axis drops the remaining slices; a longer one may only have
// false entries past the end (numpy.compress raises otherwise).
//
// Unique: the distinct elements of the flattened input (or distinct slices
// along `axis`), sorted ascending (slices lexicographically) when sorted=1,
// else in order of first occurrence. Outputs: Y, indices (position of each
// unique value's first occurrence in the input), inverse_indices (for every
// input element/slice, its position in Y) and counts, all int64.
//
// ReverseSequence: input [batch, time, ...] or [time, batch, ...]
// (batch_axis/time_axis in {0, 1}, different); for each batch entry b the
// first sequence_lens[b] time steps are reversed, the rest copied.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>

#include "ops/util.h"

namespace kiln::ops {

namespace {

void check_movable(const ir::Node& n, DType t) {
  if (dtype_size(t) == 0) unsupported_dtype(n, t, "input 0");
}

/// [outer, axis, inner] view of a shape around `axis`.
struct AxisView {
  int64_t outer, len, inner;
};

AxisView view_around(const std::vector<int64_t>& shape, int64_t axis) {
  return {prod(shape, 0, static_cast<size_t>(axis)), shape[static_cast<size_t>(axis)],
          prod(shape, static_cast<size_t>(axis) + 1)};
}

/// Copies slice `src` of the axis into slice `dst` of another [outer, *, inner] buffer.
void copy_slice(const uint8_t* in, uint8_t* out, const AxisView& from, int64_t to_len, int64_t src, int64_t dst,
                size_t esize) {
  const size_t bytes = static_cast<size_t>(from.inner) * esize;
  for (int64_t o = 0; o < from.outer; ++o)
    std::memcpy(out + static_cast<size_t>((o * to_len + dst) * from.inner) * esize,
                in + static_cast<size_t>((o * from.len + src) * from.inner) * esize, bytes);
}

// ---------------------------------------------------------------- Compress

std::vector<int64_t> kept_positions(const ir::Node& n, const Tensor& cond, int64_t len) {
  if (cond.rank() != 1) fail(ErrorCode::invalid_input, "{}: condition {} must be 1-D", n.label(), cond.describe());
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < cond.dim(0); ++i) {
    if (element_as_double(cond, i) == 0.0) continue;
    if (i >= len)
      fail(ErrorCode::invalid_input, "{}: condition {} selects index {} of an axis of length {}", n.label(),
           cond.describe(), i, len);
    keep.push_back(i);
  }
  return keep;
}

std::vector<OutType> infer_compress(const InferContext& c) {
  const InType& x = c.in(0);
  check_movable(c.node, x.dtype);
  if (c.in(1).dtype != DType::boolean) unsupported_dtype(c.node, c.in(1).dtype, "input 1 (condition)");
  if (!x.shape) return {OutType{x.dtype, std::nullopt}};
  ir::Dim kept = ir::Dim::sym("");
  if (const Tensor* cv = c.in(1).value) {
    int64_t count = 0;
    for (int64_t i = 0; i < cv->numel(); ++i) count += element_as_double(*cv, i) != 0.0;
    kept = ir::Dim::known(count);
  }
  ir::Shape s = *x.shape;
  if (!c.node.has("axis")) s = ir::Shape{kept};
  else s[static_cast<size_t>(normalize_axis(c.node, c.node.i("axis"), static_cast<int64_t>(s.size())))] = kept;
  return {OutType{x.dtype, s}};
}

void kernel_compress(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  check_movable(n, x.dtype());
  const bool flat = !n.has("axis");
  const std::vector<int64_t> shape = flat ? std::vector<int64_t>{x.numel()} : x.shape();
  const int64_t axis = flat ? 0 : normalize_axis(n, n.i("axis"), x.rank());
  const AxisView v = view_around(shape, axis);
  const std::vector<int64_t> keep = kept_positions(n, ctx.in(1), v.len);
  std::vector<int64_t> out = shape;
  out[static_cast<size_t>(axis)] = static_cast<int64_t>(keep.size());
  Tensor& y = ctx.output(0, x.dtype(), out);
  const size_t es = dtype_size(x.dtype());
  for (size_t k = 0; k < keep.size(); ++k)
    copy_slice(static_cast<const uint8_t*>(x.raw()), static_cast<uint8_t*>(y.raw()), v,
               static_cast<int64_t>(keep.size()), keep[k], static_cast<int64_t>(k), es);
}

// ---------------------------------------------------------------- Unique

/// The unique slices: for each, the first slice index; and each slice's group.
struct UniqueResult {
  std::vector<int64_t> first;    ///< slice index of each unique value, in output order
  std::vector<int64_t> inverse;  ///< output position of every input slice
  std::vector<int64_t> counts;
};

template <class T>
UniqueResult unique_slices(const T* x, const AxisView& v, bool sorted) {
  // Slice s is the elements x[o, s, i] for all (o, i), compared in that order.
  auto less = [&](int64_t a, int64_t b) {
    for (int64_t o = 0; o < v.outer; ++o)
      for (int64_t i = 0; i < v.inner; ++i) {
        const T xa = x[(o * v.len + a) * v.inner + i], xb = x[(o * v.len + b) * v.inner + i];
        if (xa < xb) return true;
        if (xb < xa) return false;
      }
    return false;
  };
  auto equal = [&](int64_t a, int64_t b) { return !less(a, b) && !less(b, a); };
  std::vector<int64_t> order(static_cast<size_t>(v.len));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), less);  // equal slices stay in input order
  // Groups of equal slices in sorted order; a group's first member is its first occurrence.
  std::vector<int64_t> group_first, group_count, group_of(static_cast<size_t>(v.len));
  for (size_t k = 0; k < order.size(); ++k) {
    if (k == 0 || !equal(order[k - 1], order[k])) {
      group_first.push_back(order[k]);
      group_count.push_back(0);
    }
    ++group_count.back();
    group_of[static_cast<size_t>(order[k])] = static_cast<int64_t>(group_first.size()) - 1;
  }
  std::vector<int64_t> pos(group_first.size());  // group -> output position
  std::iota(pos.begin(), pos.end(), 0);
  if (!sorted)
    std::sort(pos.begin(), pos.end(), [&](int64_t a, int64_t b) { return group_first[a] < group_first[b]; });
  UniqueResult r;
  std::vector<int64_t> out_of(group_first.size());
  for (size_t k = 0; k < pos.size(); ++k) {
    out_of[static_cast<size_t>(pos[k])] = static_cast<int64_t>(k);
    r.first.push_back(group_first[static_cast<size_t>(pos[k])]);
    r.counts.push_back(group_count[static_cast<size_t>(pos[k])]);
  }
  for (int64_t s = 0; s < v.len; ++s) r.inverse.push_back(out_of[static_cast<size_t>(group_of[s])]);
  return r;
}

void check_unique_dtype(const ir::Node& n, DType t) {
  if (t == DType::f16 || t == DType::bf16 || dtype_is_float8(t) || dtype_size(t) == 0)
    unsupported_dtype(n, t, "input 0");
}

std::vector<OutType> infer_unique(const InferContext& c) {
  const InType& x = c.in(0);
  check_unique_dtype(c.node, x.dtype);
  const ir::Dim u = ir::Dim::sym("");
  std::vector<OutType> out(c.num_outputs, OutType{DType::i64, ir::Shape{u}});
  out[0] = OutType{x.dtype, ir::Shape{u}};
  if (c.node.has("axis")) {
    if (!x.shape) {
      out[0].shape = std::nullopt;
      if (out.size() > 2) out[2].shape = std::nullopt;
    } else {
      ir::Shape s = *x.shape;
      const int64_t axis = normalize_axis(c.node, c.node.i("axis"), static_cast<int64_t>(s.size()));
      if (out.size() > 2) out[2].shape = ir::Shape{s[static_cast<size_t>(axis)]};
      s[static_cast<size_t>(axis)] = u;
      out[0].shape = s;
    }
  } else if (out.size() > 2) {
    ir::Dim total = ir::Dim::sym("");
    if (x.shape && ir::is_static(*x.shape)) total = ir::Dim::known(prod(ir::to_sizes(*x.shape)));
    out[2].shape = ir::Shape{total};
  }
  return out;
}

void kernel_unique(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  check_unique_dtype(n, x.dtype());
  const bool flat = !n.has("axis");
  const std::vector<int64_t> shape = flat ? std::vector<int64_t>{x.numel()} : x.shape();
  const int64_t axis = flat ? 0 : normalize_axis(n, n.i("axis"), x.rank());
  const AxisView v = view_around(shape, axis);
  const bool sorted = n.i("sorted", 1) != 0;
  UniqueResult r;
  KILN_DISPATCH_ALL(x.dtype(), n, "input 0", { r = unique_slices(x.data<scalar_t>(), v, sorted); });
  const int64_t U = static_cast<int64_t>(r.first.size());
  std::vector<int64_t> out = shape;
  out[static_cast<size_t>(axis)] = U;
  Tensor& y = ctx.output(0, x.dtype(), out);
  for (int64_t k = 0; k < U; ++k)
    copy_slice(static_cast<const uint8_t*>(x.raw()), static_cast<uint8_t*>(y.raw()), v, U, r.first[k], k,
               dtype_size(x.dtype()));
  const std::vector<int64_t>* lists[] = {&r.first, &r.inverse, &r.counts};
  for (size_t i = 1; i < ctx.num_outputs() && i < 4; ++i) {
    const std::vector<int64_t>& l = *lists[i - 1];
    Tensor& t = ctx.output(i, DType::i64, {static_cast<int64_t>(l.size())});
    std::copy(l.begin(), l.end(), t.data<int64_t>());
  }
}

// ---------------------------------------------------------------- ReverseSequence

struct SeqAxes {
  int64_t batch, time;
};

SeqAxes seq_axes(const ir::Node& n) {
  const SeqAxes a{n.i("batch_axis", 1), n.i("time_axis", 0)};
  if (a.batch < 0 || a.batch > 1 || a.time < 0 || a.time > 1 || a.batch == a.time)
    fail(ErrorCode::invalid_model, "{}: batch_axis {} and time_axis {} must be 0 and 1 in some order", n.label(),
         a.batch, a.time);
  return a;
}

std::vector<OutType> infer_reverse_sequence(const InferContext& c) {
  check_movable(c.node, c.in(0).dtype);
  seq_axes(c.node);
  const DType lt = c.in(1).dtype;
  if (lt != DType::i64 && lt != DType::i32) unsupported_dtype(c.node, lt, "input 1 (sequence_lens)");
  return {OutType{c.in(0).dtype, c.in(0).shape}};
}

void kernel_reverse_sequence(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  check_movable(n, x.dtype());
  const SeqAxes a = seq_axes(n);
  if (x.rank() < 2) fail(ErrorCode::invalid_input, "{}: input {} must have rank >= 2", n.label(), x.describe());
  const std::vector<int64_t> lens = to_int64s(ctx.in(1));
  const int64_t B = x.dim(a.batch), T = x.dim(a.time), inner = prod(x.shape(), 2);
  if (static_cast<int64_t>(lens.size()) != B)
    fail(ErrorCode::invalid_input, "{}: sequence_lens has {} entries for batch size {}", n.label(), lens.size(), B);
  for (int64_t l : lens)
    if (l < 0 || l > T) fail(ErrorCode::invalid_input, "{}: sequence length {} is outside [0, {}]", n.label(), l, T);
  Tensor& y = ctx.output(0, x.dtype(), x.shape());
  const size_t es = dtype_size(x.dtype()), bytes = static_cast<size_t>(inner) * es;
  const auto* in = static_cast<const uint8_t*>(x.raw());
  auto* out = static_cast<uint8_t*>(y.raw());
  // Row (b, t) starts at element ((b, t) in the dims-0/1 order) * inner.
  auto row = [&](int64_t b, int64_t t) { return static_cast<size_t>(a.batch == 0 ? b * T + t : t * B + b); };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t src = t < lens[b] ? lens[b] - 1 - t : t;
      std::memcpy(out + row(b, t) * bytes, in + row(b, src) * bytes, bytes);
    }
}

}  // namespace

/// Registers Compress, Unique and ReverseSequence.
void register_selection(Registry& r) {
  r.add({"", "Compress", infer_compress, kernel_compress});
  r.add({"", "Unique", infer_unique, kernel_unique});
  r.add({"", "ReverseSequence", infer_reverse_sequence, kernel_reverse_sequence});
}

}  // namespace kiln::ops
