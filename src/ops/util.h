// Helpers shared by operator families: broadcasting (ONNX "Broadcasting in
// ONNX", docs/Broadcasting.md: numpy rules), axis normalisation, dtype dispatch,
// reading constant inputs as int64 lists.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "ir/shape.h"
#include "ops/registry.h"
#include "support/error.h"
#include "support/half.h"

namespace kiln::ops {

/// Multidirectional broadcast of static sizes; throws Error(invalid_input)
/// naming the node when the shapes are incompatible.
std::vector<int64_t> broadcast_sizes(const ir::Node& n, const std::vector<int64_t>& a, const std::vector<int64_t>& b);

/// Broadcast for shape inference: known dims combine as above, a symbolic dim
/// against 1 keeps the symbol, two different symbols give an anonymous dim.
/// nullopt if either rank is unknown.
std::optional<ir::Shape> broadcast_shapes(const ir::Node& n, const std::optional<ir::Shape>& a,
                                          const std::optional<ir::Shape>& b);

/// Maps a possibly negative axis into [0, rank); throws Error(invalid_model)
/// naming the node and attribute when out of range.
int64_t normalize_axis(const ir::Node& n, int64_t axis, int64_t rank, const char* what = "axis");

/// Reads an integer tensor (int32/int64) as int64 values.
std::vector<int64_t> to_int64s(const Tensor& t);

/// Reads any numeric tensor element i as double (for small index/scalar inputs).
double element_as_double(const Tensor& t, int64_t i);

/// Row-major strides of a shape (in elements).
std::vector<int64_t> strides_of(const std::vector<int64_t>& shape);

/// Product of sizes[begin, end).
int64_t prod(const std::vector<int64_t>& sizes, size_t begin = 0, size_t end = SIZE_MAX);

/// Sliding windows (Conv, pools). Throws Error(invalid_model) naming `n` when
/// a kernel_shape / strides / dilations / pads value is above 2^31 - 1, so
/// that output-size arithmetic cannot overflow int64.
void check_window_bounds(const ir::Node& n, std::initializer_list<const std::vector<int64_t>*> attrs);

/// Throws Error(invalid_model) naming `n` when spatial dim `i` of size `in`
/// (pads pb + pe) gives `out` < 1 output positions for a kernel spanning
/// `span` elements once dilated: an empty output (ONNX Runtime refuses it too).
void check_window_output(const ir::Node& n, size_t i, int64_t in, int64_t pb, int64_t pe, int64_t span, int64_t out);

/// Throws Error(unsupported) "<node label>: dtype X is not supported (input i)".
[[noreturn]] void unsupported_dtype(const ir::Node& n, DType t, const char* where);

/// Calls f(T{}) with T an unsigned integer as wide as one element of dt
/// (1, 2, 4 or 8 bytes): data movement (gather, copy, pad) then works for
/// every fixed-size dtype, bool and 16-bit floats included, by moving raw
/// elements. Error(unsupported) naming `n` for other dtypes.
template <class F>
void by_width(const ir::Node& n, DType dt, F&& f) {
  switch (dtype_size(dt)) {
    case 1: f(uint8_t{}); break;
    case 2: f(uint16_t{}); break;
    case 4: f(uint32_t{}); break;
    case 8: f(uint64_t{}); break;
    default: unsupported_dtype(n, dt, "input 0");
  }
}

}  // namespace kiln::ops

/// Calls BODY with `scalar_t` bound to the C++ type of DTYPE for the listed
/// families; anything else is an unsupported-dtype error naming the node.
/// Usage: KILN_DISPATCH_NUMERIC(t.dtype(), node, "input 0", { use<scalar_t>(); });
#define KILN_DISPATCH_CASE(ENUM, TYPE, ...) \
  case ::kiln::DType::ENUM: {               \
    using scalar_t = TYPE;                  \
    __VA_ARGS__;                            \
    break;                                  \
  }
#define KILN_DISPATCH_FLOAT(DT, NODE, WHERE, ...)                          \
  switch (DT) {                                                           \
    KILN_DISPATCH_CASE(f32, float, __VA_ARGS__)                           \
    KILN_DISPATCH_CASE(f64, double, __VA_ARGS__)                          \
    default: ::kiln::ops::unsupported_dtype(NODE, DT, WHERE);             \
  }
#define KILN_DISPATCH_NUMERIC(DT, NODE, WHERE, ...)                        \
  switch (DT) {                                                           \
    KILN_DISPATCH_CASE(f32, float, __VA_ARGS__)                           \
    KILN_DISPATCH_CASE(f64, double, __VA_ARGS__)                          \
    KILN_DISPATCH_CASE(i8, int8_t, __VA_ARGS__)                           \
    KILN_DISPATCH_CASE(i16, int16_t, __VA_ARGS__)                         \
    KILN_DISPATCH_CASE(i32, int32_t, __VA_ARGS__)                         \
    KILN_DISPATCH_CASE(i64, int64_t, __VA_ARGS__)                         \
    KILN_DISPATCH_CASE(u8, uint8_t, __VA_ARGS__)                          \
    KILN_DISPATCH_CASE(u16, uint16_t, __VA_ARGS__)                        \
    KILN_DISPATCH_CASE(u32, uint32_t, __VA_ARGS__)                        \
    KILN_DISPATCH_CASE(u64, uint64_t, __VA_ARGS__)                        \
    default: ::kiln::ops::unsupported_dtype(NODE, DT, WHERE);             \
  }
/// Every fixed-size type, bool and the 16-bit floats as raw storage: for
/// data movement ops (Reshape, Transpose, Gather, Concat, ...).
#define KILN_DISPATCH_ALL(DT, NODE, WHERE, ...)                            \
  switch (DT) {                                                           \
    KILN_DISPATCH_CASE(f32, float, __VA_ARGS__)                           \
    KILN_DISPATCH_CASE(f64, double, __VA_ARGS__)                          \
    KILN_DISPATCH_CASE(f16, uint16_t, __VA_ARGS__)                        \
    KILN_DISPATCH_CASE(bf16, uint16_t, __VA_ARGS__)                       \
    KILN_DISPATCH_CASE(i8, int8_t, __VA_ARGS__)                           \
    KILN_DISPATCH_CASE(i16, int16_t, __VA_ARGS__)                         \
    KILN_DISPATCH_CASE(i32, int32_t, __VA_ARGS__)                         \
    KILN_DISPATCH_CASE(i64, int64_t, __VA_ARGS__)                         \
    KILN_DISPATCH_CASE(u8, uint8_t, __VA_ARGS__)                          \
    KILN_DISPATCH_CASE(u16, uint16_t, __VA_ARGS__)                        \
    KILN_DISPATCH_CASE(u32, uint32_t, __VA_ARGS__)                        \
    KILN_DISPATCH_CASE(u64, uint64_t, __VA_ARGS__)                        \
    KILN_DISPATCH_CASE(boolean, bool, __VA_ARGS__)                        \
    default: ::kiln::ops::unsupported_dtype(NODE, DT, WHERE);             \
  }
