// Operators that create or rearrange values from attributes, shapes and
// orderings: Constant, ConstantOfShape, Range, Identity, EyeLike, OneHot,
// NonZero, TopK, CumSum, Trilu (https://onnx.ai/onnx/operators/, newest opset
// semantics; onnx/parsers/generator.cpp normalises older forms).
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "ops/util.h"

namespace kiln::ops {
namespace {

using ir::Dim;
using ir::Shape;

std::vector<OutType> one(DType dt, std::optional<Shape> s) { return {OutType{dt, std::move(s)}}; }

/// The one element of a scalar-like input (shape [] or [1]) as int64.
int64_t scalar_int(const ir::Node& n, const Tensor& t, const char* what) {
  if (t.numel() != 1) fail(ErrorCode::invalid_input, "{}: {} must have one element, got {}", n.label(), what, t.describe());
  return to_int64s(t)[0];
}

/// Fills y with copies of the single element held by `value` (same dtype).
void fill_with(const ir::Node& n, Tensor& y, const Tensor& value) {
  by_width(n, y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    std::fill_n(y.data<T>(), y.numel(), value.data<T>()[0]);
  });
}

/// Value `v` stored in dtype dt (16-bit floats converted, not truncated).
Tensor scalar_of(const ir::Node& n, DType dt, double v) {
  Tensor t(dt, {});
  if (dt == DType::f16) t.data<uint16_t>()[0] = float_to_half(static_cast<float>(v));
  else if (dt == DType::bf16) t.data<uint16_t>()[0] = float_to_bf16(static_cast<float>(v));
  else KILN_DISPATCH_ALL(dt, n, "output", { t.data<scalar_t>()[0] = static_cast<scalar_t>(v); });
  return t;
}

// ---- Constant, ConstantOfShape, Identity -------------------------------------------------

/// Constant's value from whichever value* attribute is set (exactly one must be).
Tensor constant_value(const ir::Node& n) {
  for (const char* a : {"value_string", "value_strings", "sparse_value"})
    if (n.has(a)) fail(ErrorCode::unsupported, "{}: attribute '{}' is not supported", n.label(), a);
  int set = 0;
  for (const char* a : {"value", "value_float", "value_floats", "value_int", "value_ints"}) set += n.has(a);
  if (set != 1) fail(ErrorCode::invalid_model, "{}: exactly one value attribute must be set, found {}", n.label(), set);
  if (n.has("value")) return n.tensor("value");
  if (n.has("value_float")) {
    Tensor t(DType::f32, {});
    t.data<float>()[0] = n.f("value_float");
    return t;
  }
  if (n.has("value_int")) {
    Tensor t(DType::i64, {});
    t.data<int64_t>()[0] = n.i("value_int");
    return t;
  }
  if (n.has("value_floats")) {
    auto v = n.floats("value_floats");
    return Tensor::from_bytes(DType::f32, {static_cast<int64_t>(v.size())}, v.data(), v.size() * sizeof(float));
  }
  auto v = n.ints("value_ints");
  return Tensor::from_bytes(DType::i64, {static_cast<int64_t>(v.size())}, v.data(), v.size() * sizeof(int64_t));
}

std::vector<OutType> infer_constant(const InferContext& c) {
  Tensor t = constant_value(c.node);
  return one(t.dtype(), ir::static_shape(t.shape()));
}

void kernel_constant(KernelContext& c) { c.set_output(0, constant_value(c.node)); }

/// ConstantOfShape's fill value: the one-element `value` tensor, default float 0.
Tensor fill_value(const ir::Node& n) {
  if (!n.has("value")) return Tensor(DType::f32, {});
  const Tensor& v = n.tensor("value");
  if (v.numel() != 1) fail(ErrorCode::invalid_model, "{}: value must have one element, got {}", n.label(), v.describe());
  return v;
}

std::vector<int64_t> checked_dims(const ir::Node& n, std::vector<int64_t> dims, ErrorCode code) {
  for (auto d : dims)
    if (d < 0) fail(code, "{}: negative dim {} in shape [{}]", n.label(), d, fmt::join(dims, ","));
  return dims;
}

std::vector<OutType> infer_constant_of_shape(const InferContext& c) {
  DType dt = fill_value(c.node).dtype();
  const InType& s = c.in(0);
  if (s.value) return one(dt, ir::static_shape(checked_dims(c.node, to_int64s(*s.value), ErrorCode::invalid_model)));
  if (s.shape && s.shape->size() == 1 && (*s.shape)[0].is_static())
    return one(dt, Shape(static_cast<size_t>((*s.shape)[0].value), Dim::sym("")));
  return one(dt, std::nullopt);
}

void kernel_constant_of_shape(KernelContext& c) {
  Tensor v = fill_value(c.node);
  Tensor& y = c.output(0, v.dtype(), checked_dims(c.node, to_int64s(c.in(0)), ErrorCode::invalid_input));
  fill_with(c.node, y, v);
}

std::vector<OutType> infer_identity(const InferContext& c) { return one(c.in(0).dtype, c.in(0).shape); }

void kernel_identity(KernelContext& c) {
  if (dtype_size(c.in(0).dtype()) == 0) unsupported_dtype(c.node, c.in(0).dtype(), "input 0");
  c.set_output(0, c.in(0));
}

// ---- Range ---------------------------------------------------------------------------------

/// Number of Range elements: max(ceil((limit - start) / delta), 0), exact for integers.
template <class T>
int64_t range_count(const ir::Node& n, T start, T limit, T delta, ErrorCode code) {
  if (delta == T(0)) fail(code, "{}: delta must not be 0", n.label());
  if constexpr (std::is_integral_v<T>) {
    int64_t diff = static_cast<int64_t>(limit) - static_cast<int64_t>(start), d = delta;
    if ((diff > 0) != (d > 0) || diff == 0) return 0;
    return d > 0 ? (diff + d - 1) / d : (-diff - d - 1) / -d;
  } else {
    double count = std::ceil(static_cast<double>(limit - start) / static_cast<double>(delta));
    if (!std::isfinite(count)) fail(code, "{}: range [{}, {}) step {} is not finite", n.label(), start, limit, delta);
    return std::max<int64_t>(static_cast<int64_t>(count), 0);
  }
}

#define KILN_DISPATCH_RANGE(DT, NODE, ...)              \
  switch (DT) {                                         \
    KILN_DISPATCH_CASE(f32, float, __VA_ARGS__)         \
    KILN_DISPATCH_CASE(f64, double, __VA_ARGS__)        \
    KILN_DISPATCH_CASE(i16, int16_t, __VA_ARGS__)       \
    KILN_DISPATCH_CASE(i32, int32_t, __VA_ARGS__)       \
    KILN_DISPATCH_CASE(i64, int64_t, __VA_ARGS__)       \
    default: ::kiln::ops::unsupported_dtype(NODE, DT, "start"); \
  }

std::vector<OutType> infer_range(const InferContext& c) {
  DType dt = c.in(0).dtype;
  for (size_t i = 1; i < 3; ++i)
    if (c.in(i).dtype != dt)
      fail(ErrorCode::invalid_model, "{}: input {} has dtype {}, start has {}", c.node.label(), i,
           dtype_name(c.in(i).dtype), dtype_name(dt));
  Dim len = Dim::sym("");
  if (c.inputs[0].value && c.inputs[1].value && c.inputs[2].value) {
    const Tensor *s = c.inputs[0].value, *l = c.inputs[1].value, *d = c.inputs[2].value;
    if (s->numel() == 1 && l->numel() == 1 && d->numel() == 1) {
      KILN_DISPATCH_RANGE(dt, c.node, {
        len = Dim::known(range_count<scalar_t>(c.node, s->data<scalar_t>()[0], l->data<scalar_t>()[0],
                                               d->data<scalar_t>()[0], ErrorCode::invalid_model));
      });
    }
  } else {
    KILN_DISPATCH_RANGE(dt, c.node, { (void)sizeof(scalar_t); });  // rejects other dtypes
  }
  return one(dt, Shape{len});
}

void kernel_range(KernelContext& c) {
  const Tensor &s = c.in(0), &l = c.in(1), &d = c.in(2);
  for (const Tensor* t : {&s, &l, &d})
    if (t->numel() != 1 || t->dtype() != s.dtype())
      fail(ErrorCode::invalid_input, "{}: start, limit, delta must be scalars of one dtype, got {}, {}, {}",
           c.node.label(), s.describe(), l.describe(), d.describe());
  KILN_DISPATCH_RANGE(s.dtype(), c.node, {
    scalar_t start = s.data<scalar_t>()[0], delta = d.data<scalar_t>()[0];
    int64_t n = range_count<scalar_t>(c.node, start, l.data<scalar_t>()[0], delta, ErrorCode::invalid_input);
    Tensor& y = c.output(0, s.dtype(), {n});
    for (int64_t i = 0; i < n; ++i) y.data<scalar_t>()[i] = static_cast<scalar_t>(start + static_cast<scalar_t>(i) * delta);
  });
}

#undef KILN_DISPATCH_RANGE

// ---- EyeLike, OneHot ---------------------------------------------------------------------------

/// EyeLike's output dtype: the `dtype` attribute (a TensorProto enum) or the input's.
DType eye_dtype(const ir::Node& n, DType input) {
  if (!n.has("dtype")) return input;
  DType dt = static_cast<DType>(n.i("dtype"));
  if (dtype_size(dt) == 0) unsupported_dtype(n, dt, "attribute dtype");
  return dt;
}

std::vector<OutType> infer_eye_like(const InferContext& c) {
  const InType& x = c.in(0);
  if (x.shape && x.shape->size() != 2)
    fail(ErrorCode::invalid_model, "{}: input must be 2-D, got {}", c.node.label(), ir::shape_str(x.shape));
  return one(eye_dtype(c.node, x.dtype), x.shape ? x.shape : Shape(2, Dim::sym("")));
}

void kernel_eye_like(KernelContext& c) {
  const Tensor& x = c.in(0);
  if (x.rank() != 2) fail(ErrorCode::invalid_input, "{}: input must be 2-D, got {}", c.node.label(), x.describe());
  DType dt = eye_dtype(c.node, x.dtype());
  int64_t k = c.node.i("k", 0), rows = x.dim(0), cols = x.dim(1);
  Tensor& y = c.output(0, dt, x.shape());
  Tensor zero = scalar_of(c.node, dt, 0.0), unit = scalar_of(c.node, dt, 1.0);
  fill_with(c.node, y, zero);
  size_t es = dtype_size(dt);
  for (int64_t i = 0; i < rows; ++i)
    if (i + k >= 0 && i + k < cols) std::memcpy(static_cast<char*>(y.raw()) + (i * cols + i + k) * es, unit.raw(), es);
}

/// OneHot's axis in [0, rank(indices)] (the new depth axis of the output).
int64_t one_hot_axis(const ir::Node& n, int64_t rank) {
  int64_t a = n.i("axis", -1);
  if (a < -rank - 1 || a > rank)
    fail(ErrorCode::invalid_model, "{}: axis {} is out of range for output rank {}", n.label(), a, rank + 1);
  return a < 0 ? a + rank + 1 : a;
}

std::vector<OutType> infer_one_hot(const InferContext& c) {
  const InType& idx = c.in(0);
  DType dt = c.in(2).dtype;
  if (!idx.shape) return one(dt, std::nullopt);
  int64_t axis = one_hot_axis(c.node, static_cast<int64_t>(idx.shape->size()));
  Dim depth = Dim::sym("");
  if (const Tensor* d = c.in(1).value; d && d->numel() == 1) depth = Dim::known(static_cast<int64_t>(element_as_double(*d, 0)));
  Shape out = *idx.shape;
  out.insert(out.begin() + axis, depth);
  return one(dt, out);
}

void kernel_one_hot(KernelContext& c) {
  const Tensor &idx = c.in(0), &dep = c.in(1), &vals = c.in(2);
  if (dep.numel() != 1 || vals.numel() != 2)
    fail(ErrorCode::invalid_input, "{}: depth must have one element and values two, got {} and {}", c.node.label(),
         dep.describe(), vals.describe());
  int64_t depth = static_cast<int64_t>(element_as_double(dep, 0));
  if (depth < 1) fail(ErrorCode::invalid_input, "{}: depth must be positive, got {}", c.node.label(), depth);
  int64_t axis = one_hot_axis(c.node, idx.rank());
  std::vector<int64_t> shape = idx.shape();
  shape.insert(shape.begin() + axis, depth);
  Tensor& y = c.output(0, vals.dtype(), shape);
  int64_t inner = prod(idx.shape(), static_cast<size_t>(axis)), outer = prod(idx.shape(), 0, static_cast<size_t>(axis));
  by_width(c.node, vals.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T off = vals.data<T>()[0], on = vals.data<T>()[1];
    std::fill_n(y.data<T>(), y.numel(), off);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        // Non-integer indices truncate like a cast to int64; negative ones count from the end.
        int64_t v = static_cast<int64_t>(element_as_double(idx, o * inner + i));
        if (v < 0) v += depth;
        if (v >= 0 && v < depth) y.data<T>()[(o * depth + v) * inner + i] = on;
      }
  });
}

// ---- NonZero -------------------------------------------------------------------------------------

/// Calls f(i) for every flat position i of x whose value is not zero (NaN is
/// not zero, -0.0 is), in order. float32 / float64 / integers / bool are
/// tested in their own type; the 16- and 8-bit floats through
/// element_as_double.
template <class F>
void for_each_nonzero(const Tensor& x, F&& f) {
  const int64_t n = x.numel();
  auto scan = [&](const auto* v) {
    for (int64_t i = 0; i < n; ++i)
      if (v[i] != 0) f(i);
  };
  switch (x.dtype()) {
    case DType::f32: return scan(x.data<float>());
    case DType::f64: return scan(x.data<double>());
    case DType::boolean:
    case DType::u8: return scan(static_cast<const uint8_t*>(x.raw()));
    case DType::i8: return scan(static_cast<const int8_t*>(x.raw()));
    case DType::u16:
    case DType::i16: return scan(static_cast<const uint16_t*>(x.raw()));
    case DType::u32:
    case DType::i32: return scan(static_cast<const uint32_t*>(x.raw()));
    case DType::u64:
    case DType::i64: return scan(static_cast<const uint64_t*>(x.raw()));
    default:
      for (int64_t i = 0; i < n; ++i)
        if (element_as_double(x, i) != 0.0) f(i);
  }
}

/// Flat positions of the non-zero elements (NaN counts as non-zero, -0 as zero).
std::vector<int64_t> nonzero_positions(const Tensor& x) {
  std::vector<int64_t> pos;
  for_each_nonzero(x, [&](int64_t i) { pos.push_back(i); });
  return pos;
}

std::vector<OutType> infer_nonzero(const InferContext& c) {
  const InType& x = c.in(0);
  if (dtype_size(x.dtype) == 0) unsupported_dtype(c.node, x.dtype, "input 0");
  // A scalar behaves as a one-element vector (one coordinate row), as ONNX Runtime does.
  Dim rank = x.shape ? Dim::known(std::max<int64_t>(1, static_cast<int64_t>(x.shape->size()))) : Dim::sym("");
  Dim count = x.value ? Dim::known(static_cast<int64_t>(nonzero_positions(*x.value).size())) : Dim::sym("");
  return one(DType::i64, Shape{rank, count});
}

void kernel_nonzero(KernelContext& c) {
  const Tensor& x = c.in(0);
  if (dtype_size(x.dtype()) == 0) unsupported_dtype(c.node, x.dtype(), "input 0");
  std::vector<int64_t> dims = x.rank() == 0 ? std::vector<int64_t>{1} : x.shape();
  int64_t n = 0;
  for_each_nonzero(x, [&](int64_t) { ++n; });
  const int64_t r = static_cast<int64_t>(dims.size());
  Tensor& y = c.output(0, DType::i64, {r, n});
  if (n == 0) return;
  // Coordinates from a running multi-index (no divisions per element): the
  // positions come in increasing order, so the index advances from the last.
  int64_t* out = y.data<int64_t>();
  std::vector<int64_t> coord(static_cast<size_t>(r), 0);
  int64_t at = 0, j = 0;
  for_each_nonzero(x, [&](int64_t i) {
    for (; at < i; ++at)
      for (int64_t d = r - 1; d >= 0; --d) {
        if (++coord[static_cast<size_t>(d)] < dims[static_cast<size_t>(d)]) break;
        coord[static_cast<size_t>(d)] = 0;
      }
    for (int64_t d = 0; d < r; ++d) out[d * n + j] = coord[static_cast<size_t>(d)];
    ++j;
  });
}

// ---- TopK -------------------------------------------------------------------------------------

std::vector<OutType> infer_topk(const InferContext& c) {
  const InType& x = c.in(0);
  if (!x.shape) return {OutType{x.dtype, std::nullopt}, OutType{DType::i64, std::nullopt}};
  int64_t axis = normalize_axis(c.node, c.node.i("axis", -1), static_cast<int64_t>(x.shape->size()));
  Shape out = *x.shape;
  out[axis] = Dim::sym("");
  if (const Tensor* k = c.in(1).value; k && k->numel() == 1) {
    int64_t kv = to_int64s(*k)[0];
    if (kv < 0 || ((*x.shape)[axis].is_static() && kv > (*x.shape)[axis].value))
      fail(ErrorCode::invalid_model, "{}: k = {} is out of range for axis size {}", c.node.label(), kv,
           (*x.shape)[axis].str());
    out[axis] = Dim::known(kv);
  }
  return {OutType{x.dtype, out}, OutType{DType::i64, out}};
}

/// a ranks above b: NaN above every number (so it comes first when largest=1).
template <class T>
bool ranks_above(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return !std::isnan(b);
    if (std::isnan(b)) return false;
  }
  return a > b;
}

void kernel_topk(KernelContext& c) {
  const Tensor& x = c.in(0);
  int64_t axis = normalize_axis(c.node, c.node.i("axis", -1), x.rank());
  int64_t k = scalar_int(c.node, c.in(1), "K"), dim = x.dim(axis);
  if (k < 0 || k > dim)
    fail(ErrorCode::invalid_input, "{}: k = {} is out of range for axis {} of size {}", c.node.label(), k, axis, dim);
  bool largest = c.node.i("largest", 1) != 0;
  std::vector<int64_t> shape = x.shape();
  shape[axis] = k;
  int64_t outer = prod(x.shape(), 0, axis), inner = prod(x.shape(), axis + 1);
  KILN_DISPATCH_NUMERIC(x.dtype(), c.node, "input 0", {
    const scalar_t* src = x.data<scalar_t>();
    scalar_t* vals = c.output(0, x.dtype(), shape).data<scalar_t>();
    int64_t* idxs = c.output(1, DType::i64, shape).data<int64_t>();
    std::vector<int64_t> order(dim);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const scalar_t* row = src + o * dim * inner + i;
        // Equal values keep the lower index first, so results are deterministic (sorted=0 sorts too).
        auto before = [&](int64_t a, int64_t b) {
          scalar_t va = row[a * inner], vb = row[b * inner];
          bool ab = largest ? ranks_above(va, vb) : ranks_above(vb, va);
          bool ba = largest ? ranks_above(vb, va) : ranks_above(va, vb);
          return ab || (!ba && a < b);
        };
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
        for (int64_t j = 0; j < k; ++j) {
          vals[(o * k + j) * inner + i] = row[order[j] * inner];
          idxs[(o * k + j) * inner + i] = order[j];
        }
      }
  });
}

// ---- CumSum, Trilu -------------------------------------------------------------------------------

std::vector<OutType> infer_cumsum(const InferContext& c) {
  const InType& x = c.in(0);
  KILN_DISPATCH_NUMERIC(x.dtype, c.node, "input 0", { (void)sizeof(scalar_t); });
  if (x.shape && c.inputs.size() > 1 && c.in(1).value)
    normalize_axis(c.node, to_int64s(*c.in(1).value).at(0), static_cast<int64_t>(x.shape->size()));
  return one(x.dtype, x.shape);
}

void kernel_cumsum(KernelContext& c) {
  const Tensor& x = c.in(0);
  int64_t axis = normalize_axis(c.node, scalar_int(c.node, c.in(1), "axis"), x.rank());
  bool exclusive = c.node.i("exclusive", 0) != 0, reverse = c.node.i("reverse", 0) != 0;
  int64_t outer = prod(x.shape(), 0, axis), dim = x.dim(axis), inner = prod(x.shape(), axis + 1);
  KILN_DISPATCH_NUMERIC(x.dtype(), c.node, "input 0", {
    const scalar_t* src = x.data<scalar_t>();
    scalar_t* dst = c.output(0, x.dtype(), x.shape()).data<scalar_t>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        scalar_t acc = 0;
        for (int64_t s = 0; s < dim; ++s) {
          int64_t j = reverse ? dim - 1 - s : s, at = (o * dim + j) * inner + i;
          if (exclusive) {
            dst[at] = acc;
            acc = static_cast<scalar_t>(acc + src[at]);
          } else {
            acc = static_cast<scalar_t>(acc + src[at]);
            dst[at] = acc;
          }
        }
      }
  });
}

std::vector<OutType> infer_trilu(const InferContext& c) {
  const InType& x = c.in(0);
  if (x.shape && x.shape->size() < 2)
    fail(ErrorCode::invalid_model, "{}: input must have rank >= 2, got {}", c.node.label(), ir::shape_str(x.shape));
  return one(x.dtype, x.shape);
}

void kernel_trilu(KernelContext& c) {
  const Tensor& x = c.in(0);
  if (x.rank() < 2) fail(ErrorCode::invalid_input, "{}: input must have rank >= 2, got {}", c.node.label(), x.describe());
  int64_t k = c.has(1) ? scalar_int(c.node, c.in(1), "k") : 0;
  bool upper = c.node.i("upper", 1) != 0;
  int64_t rows = x.dim(x.rank() - 2), cols = x.dim(x.rank() - 1), mats = prod(x.shape(), 0, x.rank() - 2);
  Tensor& y = c.output(0, x.dtype(), x.shape());
  by_width(c.node, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* src = x.data<T>();
    T* dst = y.data<T>();
    // All-zero bits are zero for every dtype (0, 0.0, false).
    for (int64_t m = 0; m < mats; ++m)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          int64_t at = (m * rows + i) * cols + j;
          bool keep = upper ? j - i >= k : j - i <= k;
          dst[at] = keep ? src[at] : T(0);
        }
  });
}

}  // namespace

void register_generator(Registry& r) {
  r.add({"", "Constant", infer_constant, kernel_constant});
  r.add({"", "ConstantOfShape", infer_constant_of_shape, kernel_constant_of_shape});
  r.add({"", "Range", infer_range, kernel_range});
  r.add({"", "Identity", infer_identity, kernel_identity});
  r.add({"", "EyeLike", infer_eye_like, kernel_eye_like});
  r.add({"", "OneHot", infer_one_hot, kernel_one_hot});
  r.add({"", "NonZero", infer_nonzero, kernel_nonzero});
  r.add({"", "TopK", infer_topk, kernel_topk});
  r.add({"", "CumSum", infer_cumsum, kernel_cumsum});
  r.add({"", "Trilu", infer_trilu, kernel_trilu});
}

}  // namespace kiln::ops
