// Softmax, LogSoftmax and Hardmax (https://onnx.ai/onnx/operators/).
//
// The meaning changed at opset 13 and the kernel branches on node.opset (the
// parser leaves these nodes as they are, since rewriting would need extra
// Flatten/Reshape nodes):
// - opset >= 13: the function is applied along one axis (default -1); every
//   other position is independent.
// - opset < 13: the input is coerced to 2-D [prod(dims[:axis]), prod(dims[axis:])]
//   (default axis 1) and the function is applied along the second dim, i.e.
//   jointly over all trailing dims from `axis` on.
// Both cases reduce to a view [outer, n, inner] of the input (inner = 1 for
// the old form). Softmax/LogSoftmax subtract the maximum first so exp never
// overflows; sums accumulate in double. Hardmax puts 1 at the first maximum.
// dtypes: float32, float64; float16 / bfloat16 computed in float32 and
// rounded back. Output dtype and shape = input's.
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "ops/registry.h"
#include "ops/util.h"

namespace kiln::ops {

// Defined in elementwise_unary.cpp (see there).
bool is_16bit_float(DType t);
void run_widened_16(KernelContext& ctx, KernelFn kernel);

namespace {

enum class S { softmax, log_softmax, hardmax };

/// The axis attribute, normalised, with the default of the node's opset.
int64_t softmax_axis(const ir::Node& n, int64_t rank) {
  const int64_t def = n.opset >= 13 ? -1 : 1;
  if (rank == 0) fail(ErrorCode::invalid_model, "{}: input must have rank >= 1", n.label());
  return normalize_axis(n, n.i("axis", def), rank);
}

std::vector<OutType> infer_softmax(const InferContext& ctx) {
  if (ctx.num_inputs() != 1)
    fail(ErrorCode::invalid_model, "{}: expects 1 input, got {}", ctx.node.label(), ctx.num_inputs());
  const InType& x = ctx.in(0);
  if (x.dtype != DType::f32 && x.dtype != DType::f64 && !is_16bit_float(x.dtype)) unsupported_dtype(ctx.node, x.dtype, "input 0");
  if (x.shape) softmax_axis(ctx.node, static_cast<int64_t>(x.shape->size()));
  return {OutType{x.dtype, x.shape}};
}

/// One [n, inner] slab: x and y point at its first element; element (k, j) is at k*inner + j.
template <S OP, class T>
void slab(const T* x, T* y, int64_t n, int64_t inner, std::vector<T>& mx, std::vector<double>& sum) {
  mx.assign(x, x + inner);
  for (int64_t k = 1; k < n; ++k)
    for (int64_t j = 0; j < inner; ++j) {
      const T v = x[k * inner + j];
      if (mx[j] < v) mx[j] = v;
    }
  if constexpr (OP == S::hardmax) {
    std::vector<bool> done(static_cast<size_t>(inner), false);
    for (int64_t k = 0; k < n; ++k)
      for (int64_t j = 0; j < inner; ++j) {
        const bool hit = !done[j] && x[k * inner + j] == mx[j];
        if (hit) done[j] = true;
        y[k * inner + j] = hit ? T(1) : T(0);
      }
  } else {
    sum.assign(static_cast<size_t>(inner), 0.0);
    for (int64_t k = 0; k < n; ++k)
      for (int64_t j = 0; j < inner; ++j) {
        const T e = std::exp(x[k * inner + j] - mx[j]);
        if constexpr (OP == S::softmax) y[k * inner + j] = e;
        sum[j] += static_cast<double>(e);
      }
    for (int64_t j = 0; j < inner; ++j) {
      if constexpr (OP == S::softmax) {
        const T inv = static_cast<T>(1.0 / sum[j]);
        for (int64_t k = 0; k < n; ++k) y[k * inner + j] *= inv;
      } else {
        // (x - max) first: folding log(sum) into max would round it away for large max.
        const T log_sum = static_cast<T>(std::log(sum[j]));
        for (int64_t k = 0; k < n; ++k) y[k * inner + j] = (x[k * inner + j] - mx[j]) - log_sum;
      }
    }
  }
}

template <S OP, class T>
void run_typed(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const auto& s = x.shape();
  const int64_t axis = softmax_axis(ctx.node, x.rank());
  const bool coerce_2d = ctx.node.opset < 13;
  const int64_t outer = prod(s, 0, axis);
  const int64_t n = coerce_2d ? prod(s, axis) : s[axis];
  const int64_t inner = coerce_2d ? 1 : prod(s, axis + 1);
  Tensor& out = ctx.output(0, x.dtype(), s);
  if (out.numel() == 0) return;
  const T* px = x.data<T>();
  T* py = out.data<T>();
#pragma omp parallel if (x.numel() >= (1 << 15) && outer > 1)
  {
    std::vector<T> mx;
    std::vector<double> sum;
#pragma omp for schedule(static)
    for (int64_t o = 0; o < outer; ++o) slab<OP, T>(px + o * n * inner, py + o * n * inner, n, inner, mx, sum);
  }
}

template <S OP>
void softmax_kernel(KernelContext& ctx) {
  switch (ctx.in(0).dtype()) {
    case DType::f16: case DType::bf16: return run_widened_16(ctx, softmax_kernel<OP>);
    case DType::f32: return run_typed<OP, float>(ctx);
    case DType::f64: return run_typed<OP, double>(ctx);
    default: unsupported_dtype(ctx.node, ctx.in(0).dtype(), "input 0");
  }
}

}  // namespace

/// Registers Softmax, LogSoftmax and Hardmax (see the file comment for the opset < 13 form).
void register_softmax(Registry& r) {
  r.add({"", "Softmax", infer_softmax, softmax_kernel<S::softmax>});
  r.add({"", "LogSoftmax", infer_softmax, softmax_kernel<S::log_softmax>});
  r.add({"", "Hardmax", infer_softmax, softmax_kernel<S::hardmax>});
}

}  // namespace kiln::ops
