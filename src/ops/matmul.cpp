// Matrix products: MatMul (numpy matmul semantics, ONNX MatMul-13) and Gemm
// (ONNX Gemm-13). float32 runs on the packed GEMM of gemm_kernel.h; float64
// (and int32/int64 for MatMul) on a plain loop.
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "ops/gemm_kernel.h"
#include "ops/util.h"

namespace kiln::ops {

namespace {

bool matmul_dtype_ok(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::i32 || t == DType::i64; }
bool gemm_dtype_ok(DType t) { return t == DType::f32 || t == DType::f64; }

/// Two dims that must agree (the contraction size): equal when both static.
void check_same_dim(const ir::Node& n, const ir::Dim& a, const ir::Dim& b, const char* what) {
  if (a.is_static() && b.is_static() && a.value != b.value)
    fail(ErrorCode::invalid_model, "{}: {} mismatch: {} vs {}", n.label(), what, a.value, b.value);
}

/// MatMul shape inference (numpy matmul): a 1-D A is [1,K] and a 1-D B is
/// [K,1] with that dim dropped from the result; batch dims broadcast.
std::vector<OutType> infer_matmul(const InferContext& c) {
  const InType& a = c.in(0);
  const InType& b = c.in(1);
  if (a.dtype != b.dtype)
    fail(ErrorCode::invalid_model, "{}: inputs have different dtypes {} and {}", c.node.label(), dtype_name(a.dtype),
         dtype_name(b.dtype));
  if (!matmul_dtype_ok(a.dtype)) unsupported_dtype(c.node, a.dtype, "input A");
  if (!a.shape || !b.shape) return {OutType{a.dtype, std::nullopt}};
  ir::Shape sa = *a.shape, sb = *b.shape;
  if (sa.empty() || sb.empty())
    fail(ErrorCode::invalid_model, "{}: MatMul inputs must have rank >= 1 (got {} and {})", c.node.label(),
         ir::shape_str(sa), ir::shape_str(sb));
  const bool a_vec = sa.size() == 1, b_vec = sb.size() == 1;
  if (a_vec) sa.insert(sa.begin(), ir::Dim::known(1));
  if (b_vec) sb.push_back(ir::Dim::known(1));
  check_same_dim(c.node, sa.back(), sb[sb.size() - 2], "inner dimension (K)");
  ir::Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  ir::Shape out = *broadcast_shapes(c.node, ba, bb);
  if (!a_vec) out.push_back(sa[sa.size() - 2]);
  if (!b_vec) out.push_back(sb.back());
  return {OutType{a.dtype, out}};
}

/// One batched product: out[b] = A[ia(b)] x B[ib(b)] with broadcast batch
/// offsets precomputed; runs the batches in parallel when each is small.
template <class T>
void matmul_batches(const T* A, const T* B, T* Y, int64_t M, int64_t N, int64_t K,
                    const std::vector<int64_t>& a_off, const std::vector<int64_t>& b_off) {
  const int64_t batches = static_cast<int64_t>(a_off.size());
  auto one = [&](int64_t i) {
    if constexpr (std::is_same_v<T, float>)
      sgemm(false, false, M, N, K, 1.f, A + a_off[i], K, B + b_off[i], N, 0.f, Y + i * M * N, N);
    else
      gemm_simple<T>(false, false, M, N, K, T(1), A + a_off[i], K, B + b_off[i], N, T(0), Y + i * M * N, N);
  };
  // Many small products (attention heads): one product per thread. Few big
  // ones: let each product use every thread.
  const bool per_batch = batches >= 2 && (batches >= 2 * omp_get_max_threads() || M * N * K < (1 << 20));
  if (per_batch) {
    const SgemmFn gemm = sgemm_override();  // the calling thread's, on every worker
#pragma omp parallel
    {
      SgemmOverride same(gemm);
#pragma omp for schedule(dynamic, 1)
      for (int64_t i = 0; i < batches; ++i) one(i);
    }
  } else {
    for (int64_t i = 0; i < batches; ++i) one(i);
  }
}

/// Offsets (in elements) of each broadcast batch of one operand.
std::vector<int64_t> batch_offsets(const std::vector<int64_t>& out_batch, const std::vector<int64_t>& in_batch,
                                   int64_t matrix_size) {
  const size_t r = out_batch.size();
  std::vector<int64_t> in_full(r, 1);
  std::copy(in_batch.begin(), in_batch.end(), in_full.begin() + static_cast<int64_t>(r - in_batch.size()));
  const std::vector<int64_t> in_strides = strides_of(in_full);
  const int64_t total = prod(out_batch);
  std::vector<int64_t> offs(static_cast<size_t>(total));
  std::vector<int64_t> idx(r, 0);
  for (int64_t t = 0; t < total; ++t) {
    int64_t off = 0;
    for (size_t d = 0; d < r; ++d)
      if (in_full[d] != 1) off += idx[d] * in_strides[d];
    offs[static_cast<size_t>(t)] = off * matrix_size;
    for (size_t d = r; d-- > 0;) {
      if (++idx[d] < out_batch[d]) break;
      idx[d] = 0;
    }
  }
  return offs;
}

template <class T>
void matmul_typed(KernelContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  std::vector<int64_t> sa = a.shape(), sb = b.shape();
  if (sa.empty() || sb.empty())
    fail(ErrorCode::invalid_input, "{}: MatMul inputs must have rank >= 1", ctx.node.label());
  const bool a_vec = sa.size() == 1, b_vec = sb.size() == 1;
  if (a_vec) sa.insert(sa.begin(), 1);
  if (b_vec) sb.push_back(1);
  const int64_t M = sa[sa.size() - 2], K = sa.back(), N = sb.back();
  if (sb[sb.size() - 2] != K)
    fail(ErrorCode::invalid_input, "{}: inner dimensions differ: A {} vs B {}", ctx.node.label(), a.describe(),
         b.describe());
  std::vector<int64_t> ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  std::vector<int64_t> out_batch = broadcast_sizes(ctx.node, ba, bb);
  std::vector<int64_t> out_shape = out_batch;
  if (!a_vec) out_shape.push_back(M);
  if (!b_vec) out_shape.push_back(N);
  Tensor& y = ctx.output(0, a.dtype(), out_shape);
  const T* A = a.data<T>();
  const T* B = b.data<T>();
  T* Y = y.data<T>();
  if (prod(out_batch) == 0 || M == 0 || N == 0) return;
  // B shared by every batch and A contiguous: one tall product [batch*M, K] x [K, N].
  if (prod(bb) == 1 && prod(ba) == prod(out_batch)) {
    matmul_batches<T>(A, B, Y, prod(out_batch) * M, N, K, {0}, {0});
    return;
  }
  matmul_batches<T>(A, B, Y, M, N, K, batch_offsets(out_batch, ba, M * K), batch_offsets(out_batch, bb, K * N));
}

void kernel_matmul(KernelContext& ctx) {
  const DType t = ctx.in(0).dtype();
  if (ctx.in(1).dtype() != t) unsupported_dtype(ctx.node, ctx.in(1).dtype(), "input B differs from A");
  switch (t) {
    case DType::f32: matmul_typed<float>(ctx); break;
    case DType::f64: matmul_typed<double>(ctx); break;
    case DType::i32: matmul_typed<int32_t>(ctx); break;
    case DType::i64: matmul_typed<int64_t>(ctx); break;
    default: unsupported_dtype(ctx.node, t, "input A");
  }
}

/// Gemm shape inference: Y is [M, N] from op(A) [M, K] and op(B) [K, N]; C
/// must broadcast unidirectionally to [M, N].
std::vector<OutType> infer_gemm(const InferContext& c) {
  const InType& a = c.in(0);
  const InType& b = c.in(1);
  if (a.dtype != b.dtype || (c.has(2) && c.in(2).dtype != a.dtype))
    fail(ErrorCode::invalid_model, "{}: inputs must share one dtype", c.node.label());
  if (!gemm_dtype_ok(a.dtype)) unsupported_dtype(c.node, a.dtype, "input A");
  const bool ta = c.node.i("transA", 0) != 0, tb = c.node.i("transB", 0) != 0;
  ir::Shape y{ir::Dim::sym(""), ir::Dim::sym("")};
  ir::Dim ka = ir::Dim::sym(""), kb = ir::Dim::sym("");
  if (a.shape) {
    if (a.shape->size() != 2)
      fail(ErrorCode::invalid_model, "{}: A must be 2-D, got {}", c.node.label(), ir::shape_str(a.shape));
    y[0] = (*a.shape)[ta ? 1 : 0];
    ka = (*a.shape)[ta ? 0 : 1];
  }
  if (b.shape) {
    if (b.shape->size() != 2)
      fail(ErrorCode::invalid_model, "{}: B must be 2-D, got {}", c.node.label(), ir::shape_str(b.shape));
    y[1] = (*b.shape)[tb ? 0 : 1];
    kb = (*b.shape)[tb ? 1 : 0];
  }
  check_same_dim(c.node, ka, kb, "inner dimension (K)");
  if (c.has(2) && c.in(2).shape) {
    const ir::Shape& sc = *c.in(2).shape;
    auto r = broadcast_shapes(c.node, sc, y);
    if (sc.size() > 2 || (r && ir::is_static(*r) && ir::is_static(y) && *r != y))
      fail(ErrorCode::invalid_model, "{}: C {} does not broadcast to Y {}", c.node.label(), ir::shape_str(sc),
           ir::shape_str(y));
  }
  return {OutType{a.dtype, y}};
}

/// Writes C broadcast to [M, N] into Y (C is [], [N], [1,N], [M,1] or [M,N]).
template <class T>
void fill_broadcast_c(const ir::Node& node, const Tensor& c, int64_t M, int64_t N, T* Y) {
  std::vector<int64_t> sc = c.shape();
  while (sc.size() < 2) sc.insert(sc.begin(), 1);
  if (sc.size() != 2 || (sc[0] != 1 && sc[0] != M) || (sc[1] != 1 && sc[1] != N))
    fail(ErrorCode::invalid_input, "{}: C {} does not broadcast to [{}, {}]", node.label(), c.describe(), M, N);
  const T* C = c.data<T>();
  const int64_t rs = sc[0] == 1 ? 0 : sc[1], cs = sc[1] == 1 ? 0 : 1;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) Y[i * N + j] = C[i * rs + j * cs];
}

template <class T>
void gemm_typed(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  if (a.rank() != 2 || b.rank() != 2)
    fail(ErrorCode::invalid_input, "{}: A and B must be 2-D, got {} and {}", n.label(), a.describe(), b.describe());
  const bool ta = n.i("transA", 0) != 0, tb = n.i("transB", 0) != 0;
  const T alpha = static_cast<T>(n.f("alpha", 1.f)), beta_attr = static_cast<T>(n.f("beta", 1.f));
  const int64_t M = ta ? a.dim(1) : a.dim(0), K = ta ? a.dim(0) : a.dim(1);
  const int64_t N = tb ? b.dim(0) : b.dim(1), Kb = tb ? b.dim(1) : b.dim(0);
  if (K != Kb)
    fail(ErrorCode::invalid_input, "{}: inner dimensions differ: A {} (transA={}) vs B {} (transB={})", n.label(),
         a.describe(), ta, b.describe(), tb);
  Tensor& y = ctx.output(0, a.dtype(), {M, N});
  T* Y = y.data<T>();
  T beta = T(0);
  if (ctx.has(2) && beta_attr != T(0)) {
    fill_broadcast_c<T>(n, ctx.in(2), M, N, Y);
    beta = beta_attr;
  }
  if constexpr (std::is_same_v<T, float>)
    sgemm(ta, tb, M, N, K, alpha, a.data<T>(), a.dim(1), b.data<T>(), b.dim(1), beta, Y, N);
  else
    gemm_simple<T>(ta, tb, M, N, K, alpha, a.data<T>(), a.dim(1), b.data<T>(), b.dim(1), beta, Y, N);
}

void kernel_gemm(KernelContext& ctx) {
  const DType t = ctx.in(0).dtype();
  if (ctx.in(1).dtype() != t) unsupported_dtype(ctx.node, ctx.in(1).dtype(), "input B differs from A");
  if (ctx.has(2) && ctx.in(2).dtype() != t) unsupported_dtype(ctx.node, ctx.in(2).dtype(), "input C differs from A");
  switch (t) {
    case DType::f32: gemm_typed<float>(ctx); break;
    case DType::f64: gemm_typed<double>(ctx); break;
    default: unsupported_dtype(ctx.node, t, "input A");
  }
}

}  // namespace

void register_matmul(Registry& r) {
  r.add({"", "MatMul", infer_matmul, kernel_matmul});
  r.add({"", "Gemm", infer_gemm, kernel_gemm});
}

}  // namespace kiln::ops
