// Pad (https://onnx.ai/onnx/operators/onnx__Pad.html, opset 18+ semantics:
// pads / constant_value / axes as inputs; onnx/parsers turn the attribute
// forms of older opsets into these). Modes constant, reflect, edge, wrap.
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

#include "ops/data_movement.h"

namespace kiln::ops {
namespace {

using namespace data_movement;

// ---- Pad ------------------------------------------------------------------------------------

/// Pad-18 begin/end amounts for every axis (2*rank entries, begins first),
/// expanding the optional axes input.
std::vector<int64_t> full_pads(const ir::Node& n, const std::vector<int64_t>& pads,
                               const std::optional<std::vector<int64_t>>& axes, int64_t rank, ErrorCode code) {
  std::vector<int64_t> ax = axes ? *axes : first_axes(static_cast<size_t>(rank));
  unique_axes(n, ax, rank);  // rejects repeats; pads follow the given order
  if (pads.size() != 2 * ax.size())
    fail(code, "{}: pads has {} entries, expected {} (2 per padded axis)", n.label(), pads.size(), 2 * ax.size());
  std::vector<int64_t> out(2 * rank, 0);
  for (size_t i = 0; i < ax.size(); ++i) {
    int64_t a = normalize_axis(n, ax[i], rank, "axes entry");
    out[a] = pads[i];
    out[a + rank] = pads[i + ax.size()];
  }
  return out;
}

std::string pad_mode(const ir::Node& n) {
  std::string m = n.s("mode", "constant");
  if (m != "constant" && m != "reflect" && m != "edge" && m != "wrap")
    fail(ErrorCode::unsupported, "{}: mode '{}' is not supported", n.label(), m);
  return m;
}

std::vector<OutType> infer_pad(const InferContext& c) {
  const InType& x = c.in(0);
  c.in(1);
  pad_mode(c.node);
  if (!x.shape) return one(x.dtype, std::nullopt);
  int64_t rank = static_cast<int64_t>(x.shape->size());
  auto pads = const_ints(c, 1);
  auto axes = const_ints(c, 3);
  if (!pads || (c.has(3) && !axes)) return one(x.dtype, unknown_dims(x.shape->size()));
  auto p = full_pads(c.node, *pads, axes, rank, ErrorCode::invalid_model);
  Shape out = *x.shape;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t add = p[d] + p[d + rank];
    if (out[d].is_static()) {
      if (out[d].value + add < 0)
        fail(ErrorCode::invalid_model, "{}: pads {} remove more than axis {} of size {}", c.node.label(),
             fmt::join(*pads, ","), d, out[d].value);
      out[d] = Dim::known(out[d].value + add);
    } else if (add != 0) {
      out[d] = Dim::sym("");
    }
  }
  return one(x.dtype, out);
}

/// Input coordinate for output coordinate o on an axis of size dim padded
/// by `begin` in front; -1 where the constant value goes.
int64_t pad_source(const std::string& mode, int64_t o, int64_t begin, int64_t dim) {
  int64_t i = o - begin;
  if (i >= 0 && i < dim) return i;
  if (mode == "constant") return -1;
  if (mode == "edge") return std::clamp<int64_t>(i, 0, dim - 1);
  if (mode == "wrap") return ((i % dim) + dim) % dim;
  if (dim == 1) return 0;  // reflect: mirror without repeating the edge, period 2*(dim-1)
  int64_t period = 2 * (dim - 1);
  i = ((i % period) + period) % period;
  return i < dim ? i : period - i;
}

/// The constant pad value converted to dt (the spec requires dt already; converting is lenient).
Tensor pad_value(const KernelContext& c, DType dt) {
  Tensor v(dt, {});
  if (!c.has(2) || c.in(2).numel() == 0) return v;
  const Tensor& cv = c.in(2);
  if (cv.dtype() == dt) {
    std::memcpy(v.raw(), cv.raw(), dtype_size(dt));
    return v;
  }
  double d = element_as_double(cv, 0);
  if (dt == DType::f16) v.data<uint16_t>()[0] = float_to_half(static_cast<float>(d));
  else if (dt == DType::bf16) v.data<uint16_t>()[0] = float_to_bf16(static_cast<float>(d));
  else KILN_DISPATCH_ALL(dt, c.node, "input 0", { v.data<scalar_t>()[0] = static_cast<scalar_t>(d); });
  return v;
}

void kernel_pad(KernelContext& c) {
  const Tensor& x = c.in(0);
  std::string mode = pad_mode(c.node);
  int64_t rank = x.rank();
  std::optional<std::vector<int64_t>> axes;
  if (c.has(3)) axes = to_int64s(c.in(3));
  auto p = full_pads(c.node, to_int64s(c.in(1)), axes, rank, ErrorCode::invalid_input);
  std::vector<int64_t> shape(rank);
  std::vector<std::vector<int64_t>> source(rank);  // per axis: output coordinate -> input coordinate
  for (int64_t d = 0; d < rank; ++d) {
    shape[d] = x.dim(d) + p[d] + p[d + rank];
    if (shape[d] < 0)
      fail(ErrorCode::invalid_input, "{}: pads remove more than axis {} of {}", c.node.label(), d, x.describe());
    if (mode != "constant" && x.dim(d) == 0 && shape[d] > 0)
      fail(ErrorCode::invalid_input, "{}: mode '{}' cannot pad the empty axis {} of {}", c.node.label(), mode, d,
           x.describe());
    for (int64_t o = 0; o < shape[d]; ++o) source[d].push_back(pad_source(mode, o, p[d], x.dim(d)));
  }
  Tensor value = pad_value(c, x.dtype());
  Tensor& y = c.output(0, x.dtype(), shape);
  auto st = strides_of(x.shape());
  int64_t total = prod(shape);
  by_width(c.node, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* src = x.data<T>();
    T* dst = y.data<T>();
    T fill = value.data<T>()[0];
    if (total == 0) return;
    if (rank == 0) {
      dst[0] = src[0];
      return;
    }
    // A row (the last axis) at a time: the outer axes decide once whether the
    // row reads the input at all and where; the last axis maps through its
    // source table.
    const int64_t inner = shape[rank - 1];
    const std::vector<int64_t>& last = source[rank - 1];
    std::vector<int64_t> idx(rank - 1, 0);
    for (int64_t o = 0; o < total; o += inner) {
      int64_t base = 0;
      bool inside = true;
      for (int64_t d = 0; d + 1 < rank && inside; ++d) {
        const int64_t s = source[d][idx[d]];
        inside = s >= 0;
        base += s * st[d];
      }
      T* row = dst + o;
      if (!inside) {
        std::fill_n(row, inner, fill);
      } else {
        for (int64_t j = 0; j < inner; ++j) row[j] = last[j] >= 0 ? src[base + last[j]] : fill;
      }
      for (int64_t d = rank - 1; d-- > 0;) {
        if (++idx[d] < shape[d]) break;
        idx[d] = 0;
      }
    }
  });
}

}  // namespace

void register_pad(Registry& r) { r.add({"", "Pad", infer_pad, kernel_pad}); }

}  // namespace kiln::ops
