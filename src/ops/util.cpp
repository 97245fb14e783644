#include "ops/util.h"

#include <fmt/ranges.h>

namespace kiln::ops {

std::vector<int64_t> broadcast_sizes(const ir::Node& n, const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1)
      fail(ErrorCode::invalid_input, "{}: shapes [{}] and [{}] cannot be broadcast together", n.label(),
           fmt::join(a, ","), fmt::join(b, ","));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::optional<ir::Shape> broadcast_shapes(const ir::Node& n, const std::optional<ir::Shape>& a,
                                          const std::optional<ir::Shape>& b) {
  if (!a || !b) return std::nullopt;
  size_t r = std::max(a->size(), b->size());
  ir::Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    ir::Dim da = i < r - a->size() ? ir::Dim::known(1) : (*a)[i - (r - a->size())];
    ir::Dim db = i < r - b->size() ? ir::Dim::known(1) : (*b)[i - (r - b->size())];
    if (da.is_static() && db.is_static()) {
      if (da.value != db.value && da.value != 1 && db.value != 1)
        fail(ErrorCode::invalid_model, "{}: shapes {} and {} cannot be broadcast together", n.label(),
             ir::shape_str(a), ir::shape_str(b));
      out[i] = da.value == 1 ? db : da;
    } else if (da.is_static()) {
      out[i] = da.value == 1 ? db : da;
    } else if (db.is_static()) {
      out[i] = db.value == 1 ? da : db;
    } else {
      out[i] = da == db ? da : ir::Dim::sym("");
    }
  }
  return out;
}

int64_t normalize_axis(const ir::Node& n, int64_t axis, int64_t rank, const char* what) {
  if (axis < -rank || axis >= rank)
    fail(ErrorCode::invalid_model, "{}: {} {} is out of range for rank {}", n.label(), what, axis, rank);
  return axis < 0 ? axis + rank : axis;
}

std::vector<int64_t> to_int64s(const Tensor& t) {
  std::vector<int64_t> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) out[i] = static_cast<int64_t>(element_as_double(t, i));
  if (t.dtype() == DType::i64)
    for (int64_t i = 0; i < t.numel(); ++i) out[i] = t.data<int64_t>()[i];  // exact beyond 2^53
  return out;
}

double element_as_double(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::f32: return t.data<float>()[i];
    case DType::f64: return t.data<double>()[i];
    case DType::f16: return half_to_float(t.data<uint16_t>()[i]);
    case DType::bf16: return bf16_to_float(t.data<uint16_t>()[i]);
    case DType::i8: return t.data<int8_t>()[i];
    case DType::i16: return t.data<int16_t>()[i];
    case DType::i32: return t.data<int32_t>()[i];
    case DType::i64: return static_cast<double>(t.data<int64_t>()[i]);
    case DType::u8: return t.data<uint8_t>()[i];
    case DType::u16: return t.data<uint16_t>()[i];
    case DType::u32: return t.data<uint32_t>()[i];
    case DType::u64: return static_cast<double>(t.data<uint64_t>()[i]);
    case DType::boolean: return t.data<bool>()[i] ? 1.0 : 0.0;
    default: fail(ErrorCode::unsupported, "cannot read an element of a {} tensor", dtype_name(t.dtype()));
  }
}

std::vector<int64_t> strides_of(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}

int64_t prod(const std::vector<int64_t>& sizes, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < std::min(end, sizes.size()); ++i) p *= sizes[i];
  return p;
}

void check_window_bounds(const ir::Node& n, std::initializer_list<const std::vector<int64_t>*> attrs) {
  constexpr int64_t kMax = (int64_t{1} << 31) - 1;
  for (auto* v : attrs)
    for (auto x : *v)
      if (x > kMax)
        fail(ErrorCode::invalid_model, "{}: kernel_shape, strides, dilations and pads must be at most {}, got {}",
             n.label(), kMax, x);
}

void check_window_output(const ir::Node& n, size_t i, int64_t in, int64_t pb, int64_t pe, int64_t span, int64_t out) {
  if (out < 1 && in > 0)
    fail(ErrorCode::invalid_model,
         "{}: spatial dim {} of size {} (pads {} + {}) is smaller than the dilated kernel ({}): the output would be "
         "empty",
         n.label(), i, in, pb, pe, span);
}

void unsupported_dtype(const ir::Node& n, DType t, const char* where) {
  fail(ErrorCode::unsupported, "{}: dtype {} is not supported ({}) at opset {}", n.label(), dtype_name(t), where,
       n.opset);
}

}  // namespace kiln::ops
