// kiln.cpu.SkinnyMatMul: C[M, N] = A[M, K] x W[K, N] (+ bias, then the
// node's post-ops) for a few rows (a decode step: M = the batch) and
// constant weights, kiln's own kernel.
//
// Why: with 2-6 rows the product is bound by reading W once from memory.
// oneDNN 2.6 without AVX-512 runs it on its sgemm, which copies panels of
// the plain weights on every call (three passes over W), or as a 1x1
// convolution (matmul_as_conv.cpp) that streams packed weights at ~28 GB/s
// on the 2-core EPYC, where its single-row GEMV reaches ~36 GB/s. Here W is
// packed at compile time into panels of 16 columns, each K x 16 contiguous
// (pack_skinny_weights), and every panel is read once, sequentially, by one
// thread that keeps all M x 16 accumulators in registers (AVX2 + FMA; a
// portable loop elsewhere). The post-ops then run as one oneDNN binary
// primitive (dst + 0, the node's post-op chain attached) in place.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <unordered_map>

#include "support/error.h"
#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets::cpu {

namespace {

constexpr int64_t kPanel = 16;  ///< columns per packed panel (two AVX2 registers)

/// Rows r0..r0+R of panel p: C = A W_p (+ bias). R <= kMaxSkinnyRows.
template <int R>
__attribute__((target("avx2,fma"))) void panel_avx2(const float* a, int64_t K, const float* wp, const float* bias,
                                                    int64_t col0, int64_t cols, float* c, int64_t N) {
  __m256 acc0[R], acc1[R];
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const __m256 w0 = _mm256_loadu_ps(wp + k * kPanel), w1 = _mm256_loadu_ps(wp + k * kPanel + 8);
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_broadcast_ss(a + r * K + k);
      acc0[r] = _mm256_fmadd_ps(x, w0, acc0[r]);
      acc1[r] = _mm256_fmadd_ps(x, w1, acc1[r]);
    }
  }
  alignas(32) float out[kPanel];
  for (int r = 0; r < R; ++r) {
    _mm256_store_ps(out, acc0[r]);
    _mm256_store_ps(out + 8, acc1[r]);
    float* row = c + r * N + col0;
    for (int64_t j = 0; j < cols; ++j) row[j] = out[j] + (bias ? bias[col0 + j] : 0.f);
  }
}

/// The portable form of panel_avx2 (any x86-64 without AVX2 / FMA).
void panel_plain(int R, const float* a, int64_t K, const float* wp, const float* bias, int64_t col0, int64_t cols,
                 float* c, int64_t N) {
  for (int r = 0; r < R; ++r) {
    float acc[kPanel] = {};
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < kPanel; ++j) acc[j] += a[r * K + k] * wp[k * kPanel + j];
    for (int64_t j = 0; j < cols; ++j) c[r * N + col0 + j] = acc[j] + (bias ? bias[col0 + j] : 0.f);
  }
}

using PanelFn = void (*)(const float*, int64_t, const float*, const float*, int64_t, int64_t, float*, int64_t);

PanelFn avx2_panel(int64_t rows) {
  switch (rows) {
    case 1: return panel_avx2<1>;
    case 2: return panel_avx2<2>;
    case 3: return panel_avx2<3>;
    case 4: return panel_avx2<4>;
    case 5: return panel_avx2<5>;
    default: return panel_avx2<6>;
  }
}

bool has_avx2_fma() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

struct SkinnyState {
  int64_t M = 0, K = 0, N = 0;
  bool bias = false, single = false;
  bool fast = false;  ///< AVX2 + FMA here (decided at load)
  std::vector<int64_t> out_shape;
  /// dst + 0 with the node's post-ops, in place; absent without post-ops.
  std::optional<dnnl::binary> post;
  md_t dst_md, zero_md, scratch;
  std::vector<std::pair<size_t, md_t>> post_inputs;  ///< (node input, its descriptor) per binary post-op, in order
  std::vector<int> post_args;

  void product(const float* a, const float* w, const float* b, float* c) const {
    const int64_t panels = (N + kPanel - 1) / kPanel;
#pragma omp parallel for schedule(static) if (!single && panels > 1)
    for (int64_t p = 0; p < panels; ++p) {
      const int64_t col0 = p * kPanel, cols = std::min(kPanel, N - col0);
      const float* wp = w + p * K * kPanel;
      for (int64_t r0 = 0; r0 < M; r0 += kMaxSkinnyRows) {
        const int64_t rows = std::min(kMaxSkinnyRows, M - r0);
        if (fast) avx2_panel(rows)(a + r0 * K, K, wp, b, col0, cols, c + r0 * N, N);
        else panel_plain(static_cast<int>(rows), a + r0 * K, K, wp, b, col0, cols, c + r0 * N, N);
      }
    }
  }

  void run(ops::KernelContext& ctx) const {
    const Tensor& a = ctx.in(0);
    const Tensor& w = ctx.in(1);
    if (a.dtype() != DType::f32 || a.numel() != M * K)
      fail(ErrorCode::invalid_input, "{}: input 0 is {}, {} float32 values expected", ctx.node.label(), a.describe(),
           M * K);
    if (w.dtype() != DType::f32 || w.numel() != skinny_packed_size(K, N))
      fail(ErrorCode::corrupt_artifact, "{}: packed weights are {}, {} float32 values expected",
           ctx.node.label(), w.describe(), skinny_packed_size(K, N));
    const float* b = bias ? ctx.in(2).data<float>() : nullptr;
    Tensor& y = ctx.output(0, DType::f32, out_shape);
    with_threads(single, [&] { product(a.data<float>(), w.data<float>(), b, y.data<float>()); });
    if (!post) return;
    static const float zero = 0.f;
    std::unordered_map<int, dnnl::memory> args;
    try {
      args[DNNL_ARG_SRC_0] = wrap(dst_md, y.raw());
      args[DNNL_ARG_SRC_1] = wrap(zero_md, &zero);
      args[DNNL_ARG_DST] = wrap(dst_md, y.raw());
      if (md_bytes(scratch)) args[DNNL_ARG_SCRATCHPAD] = wrap(scratch, thread_scratch(md_bytes(scratch)));
      for (size_t i = 0; i < post_inputs.size(); ++i)
        args[post_args[i]] = wrap(post_inputs[i].second, ctx.in(post_inputs[i].first).raw());
      with_threads(single, [&] {
        post->execute(stream(), args);
        stream().wait();
      });
    } catch (const dnnl::error& e) {
      fail(ErrorCode::internal, "{}: oneDNN post-ops failed: {}", ctx.node.label(), e.what());
    }
  }
};

}  // namespace

int64_t skinny_packed_size(int64_t K, int64_t N) { return (N + kPanel - 1) / kPanel * kPanel * K; }

Tensor pack_skinny_weights(const float* w, int64_t K, int64_t N, int64_t k_stride, int64_t n_stride) {
  Tensor out(DType::f32, {skinny_packed_size(K, N)});
  float* dst = out.data<float>();
  std::memset(dst, 0, static_cast<size_t>(out.nbytes()));
  for (int64_t p = 0; p * kPanel < N; ++p)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < kPanel && p * kPanel + j < N; ++j)
        dst[(p * K + k) * kPanel + j] = w[k * k_stride + (p * kPanel + j) * n_stride];
  return out;
}

dnnl::binary::primitive_desc skinny_post_pd(const ir::Node& n) {
  const md_t dst = plain_md({n.i("M", 0), n.i("N", 0)}), zero = plain_md({1, 1});
  return guarded(n, "post-op binary primitive descriptor", [&] {
    return dnnl::binary::primitive_desc(dnnl::binary::desc(dnnl::algorithm::binary_add, dst, zero, dst), make_attr(n),
                                        engine());
  });
}

BoundKernel make_skinny_matmul(const ir::Node& n, const ir::Model& m) {
  auto st = std::make_shared<SkinnyState>();
  st->M = n.i("M", 0);
  st->K = n.i("K", 0);
  st->N = n.i("N", 0);
  st->bias = n.has("md.bias");
  if (st->M < 1 || st->K < 1 || st->N < 1 || n.inputs.size() < (st->bias ? 3u : 2u) || n.outputs.size() != 1)
    fail(ErrorCode::corrupt_artifact, "{}: a SkinnyMatMul needs M, K, N >= 1, inputs (A, packed W[, bias]), one output",
         n.label());
  const ir::Value& y = m.value(n.outputs[0]);
  if (!y.shape || !ir::is_static(*y.shape) || y.dtype != DType::f32)
    fail(ErrorCode::corrupt_artifact, "{}: output '{}' must be a float32 tensor of static shape", n.label(), y.name);
  st->out_shape = ir::to_sizes(*y.shape);
  int64_t elems = 1;
  for (auto d : st->out_shape) elems *= d;
  if (elems != st->M * st->N)
    fail(ErrorCode::corrupt_artifact, "{}: output '{}' does not hold {} x {} values", n.label(), y.name, st->M, st->N);
  const ir::Value& w = m.value(n.inputs[1]);
  if (w.dtype != DType::f32 || (w.constant && w.constant->numel() != skinny_packed_size(st->K, st->N)))
    fail(ErrorCode::corrupt_artifact, "{}: packed weights '{}' do not hold {} x {} values in 16-column panels",
         n.label(), w.name, st->K, st->N);
  st->single = 2.0 * static_cast<double>(st->M * st->N * st->K) < 1e6;
  st->fast = has_avx2_fma();
  auto post = read_post_ops(n);
  if (!post.empty()) {
    st->dst_md = plain_md({st->M, st->N});
    st->zero_md = plain_md({1, 1});
    auto pd = with_threads(st->single, [&] { return skinny_post_pd(n); });
    st->scratch = pd.scratchpad_desc();
    for (size_t i = 0; i < post.size(); ++i)
      if (post[i].kind == PostOp::binary) {
        st->post_inputs.push_back({static_cast<size_t>(post[i].input), md_attr(n, "md.post" + std::to_string(post[i].input))});
        st->post_args.push_back(DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i)) | DNNL_ARG_SRC_1);
      }
    st->post = with_threads(st->single, [&] { return guarded(n, "post-op binary primitive", [&] { return dnnl::binary(pd); }); });
  }
  return [st](ops::KernelContext& ctx) { st->run(ctx); };
}

}  // namespace kiln::targets::cpu
