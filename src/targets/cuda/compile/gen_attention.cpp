// Fused scaled-dot-product attention kernel (codegen.h: gen_attention):
// softmax(scale * Q K^T + mask_scale * mask) V for one (batch, head) and 64
// query rows per block, on tensor cores through mma.sync m16n8k16 (float16 /
// bfloat16 inputs, float32 accumulation and softmax).
//
// The algorithm is FlashAttention-2's (Dao, "FlashAttention-2: Faster
// Attention with Better Parallelism and Work Partitioning", 2023, Alg. 1):
// keys and values are read in chunks of 64 rows; each warp keeps its 16 query
// rows' running maximum m, running sum l and output accumulator O in
// registers, rescales them by exp(m_old - m_new) when the maximum grows, and
// divides by l once at the end. The scores never reach global memory.
//
// Fragment layouts are the PTX ISA's for mma.m16n8k16 with .f16 / .bf16
// (section "Matrix Fragments for mma.m16n8k16 with floating point type"):
// lane = 4 * g + t; A (16x16, row-major) holds rows g and g+8, columns
// 2t..2t+1 and 2t+8..2t+9; B (16x8) holds rows 2t..2t+1 and 2t+8..2t+9 of
// column g; C (16x8, float) holds rows g and g+8, columns 2t..2t+1. A score
// tile's C fragments are therefore, two by two, the A fragments of P V; V's
// B fragments come from row-major V through ldmatrix .trans (section "Warp
// Level Matrix Load Instruction: ldmatrix").
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "support/error.h"
#include "targets/cuda/compile/codegen.h"

namespace kiln::targets::cuda {

namespace {

constexpr int kRows = 64;     // query rows per block (4 warps x 16)
constexpr int kChunk = 64;    // key / value rows per iteration
constexpr int kThreads = 128;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/// The condition under which a view is read 16 bytes at a time: column
/// stride 1 and every other stride and `cols` a multiple of 8 (known here),
/// and the pointer 16-byte aligned (known at run time).
std::string vec_condition(const AttentionView& v, int64_t cols, const std::string& ptr) {
  bool ok = v.strides[3] == 1 && cols % 8 == 0 && v.strides[0] % 8 == 0 && v.strides[1] % 8 == 0 &&
            v.strides[2] % 8 == 0 && v.offset % 8 == 0;
  return ok ? "(" + aligned_condition({{ptr, 16}}) + ")" : std::string("false");
}

}  // namespace

ir::Node gen_attention(Lowering& L, const ir::Node& from, const AttentionSpec& s) {
  if (!is_half(s.dtype)) refuse(from, "the fused attention kernel computes on float16 / bfloat16 only");
  if (s.d > kMaxAttentionHeadDim || s.dv > kMaxAttentionHeadDim || s.d < 1 || s.dv < 1)
    refuse(from, fmt::format("attention head dims {} / {} are outside 1..{}", s.d, s.dv, kMaxAttentionHeadDim));
  const std::string fn = L.kernel_name("attention");
  const int64_t dp = round_up(s.d, 16), dvp = round_up(s.dv, 16);
  const int64_t qld = dp + 8, vld = dvp + 8;  // +8 halves: rows start in different banks

  const int64_t tiles = (s.sq + kRows - 1) / kRows;
  const std::string mma = s.dtype == DType::f16 ? "f16" : "bf16";
  const std::string cvt = store_fn(s.dtype);
  auto base = [](const AttentionView& v) {
    return fmt::format("{}ll + b * {}ll + h * {}ll", v.offset, v.strides[0], v.strides[1]);
  };

  std::string mask_param, mask_add;
  if (s.mask) {
    auto mt = storage_type(s.mask_dtype);
    if (!mt || !is_float_storage(s.mask_dtype)) refuse(from, "the attention mask must be float32, float16 or bfloat16");
    mask_param = fmt::format(", const {}* __restrict__ mask", *mt);
    const auto& m = *s.mask;
    const std::string at = fmt::format("b * {}ll + h * {}ll + (long long)min(row, {}) * {}ll + (long long)col * {}ll",
                                       m.strides[0], m.strides[1], s.sq - 1, m.strides[2], m.strides[3]);
    // Columns 2t and 2t+1 of a row are neighbours: one 32-bit load for both
    // when the mask is 16-bit with column stride 1 (even strides, even Skv).
    const bool pairs = is_half(s.mask_dtype) && m.strides[3] == 1 && m.strides[0] % 2 == 0 &&
                       m.strides[1] % 2 == 0 && m.strides[2] % 2 == 0 && s.skv % 2 == 0;
    const std::string ld = load_fn(s.mask_dtype);
    mask_add = pairs ? fmt::format(
                           "if (col < {skv} && {aligned}) {{ const unsigned u = *(const unsigned*)&mask[{at}]; "
                           "m0 = {ld}((unsigned short)(u & 0xffffu)); m1 = {ld}((unsigned short)(u >> 16)); }} else {{ "
                           "if (col < {skv}) m0 = {ld}(mask[{at}]); if (col + 1 < {skv}) m1 = {ld}(mask[{at} + 1]); }}",
                           fmt::arg("skv", s.skv), fmt::arg("at", at), fmt::arg("ld", ld),
                           fmt::arg("aligned", aligned_condition({{"mask", 4}})))
                     : fmt::format("if (col < {skv}) m0 = {ld}(mask[{at}]); if (col + 1 < {skv}) m1 = {ld}(mask[{at} + {cs}ll]);",
                                   fmt::arg("skv", s.skv), fmt::arg("at", at), fmt::arg("ld", ld),
                                   fmt::arg("cs", m.strides[3]));
  }
  const int64_t smem = (2 * kRows * qld + kChunk * vld) * 2;
  // Head dims up to 64: four blocks per SM (at most 128 registers, no spills
  // at 64): 768 blocks of BERT-base batch 32 then take 1.5 waves instead of
  // 2.9 (Nsight Compute on the H200: 180 registers, 2 blocks per SM). Larger
  // head dims spill under that cap (92 bytes at 80, 732 at 128: nvcc
  // -Xptxas -v), so they get none. KILN_CUDA_ATTN_MIN_BLOCKS=N overrides
  // (0: no cap), for measuring.
  int blocks = dp <= 64 && dvp <= 64 ? 4 : 0;
  if (const char* mb = std::getenv("KILN_CUDA_ATTN_MIN_BLOCKS"); mb && *mb) blocks = std::atoi(mb);
  const std::string min_blocks = blocks > 0 ? fmt::format(", {}", blocks) : std::string();
  const bool pair_store = s.out.strides[3] == 1 && s.dv % 2 == 0 && s.out.strides[0] % 2 == 0 &&
                          s.out.strides[1] % 2 == 0 && s.out.strides[2] % 2 == 0;

  std::string src = fmt::format(
      R"(
// Fused attention '{label}': B {B}, H {H}, Sq {SQ}, Skv {SKV}, D {D}, Dv {DV}, scale {scale_f}
KL_D void {fn}_mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {{
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{mma}.{mma}.f32 {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%0,%1,%2,%3}};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}}
KL_D unsigned {fn}_pack(float lo, float hi) {{ return (unsigned){cvt}(lo) | ((unsigned){cvt}(hi) << 16); }}
// A [64 x 8*CP8] tile (rows row0.. of one (batch, head) slice, zero outside
// rows x cols) into registers, 8 halves per uint4 and ITERS per thread; all
// loads issued before any is used. vec: 16-byte loads (column stride 1).
template <int ITERS, int CP8>
KL_D void {fn}_load(uint4* r, const unsigned short* __restrict__ src, long long base, int row0, int rows, int cols,
                     long long rs, long long cs, bool vec) {{
#pragma unroll
  for (int i = 0; i < ITERS; ++i) {{
    const int e = threadIdx.x + i * {threads}, rr = e / CP8, c = (e % CP8) * 8, row = row0 + rr;
    union {{ uint4 v; unsigned short h[8]; }} u;
    u.v = make_uint4(0u, 0u, 0u, 0u);
    if (row < rows && c < cols) {{
      const unsigned short* p = src + base + (long long)row * rs;
      if (vec) u.v = *(const uint4*)(p + c);
      else
        for (int j = 0; j < 8; ++j)
          if (c + j < cols) u.h[j] = p[(long long)(c + j) * cs];
    }}
    r[i] = u.v;
  }}
}}
template <int ITERS, int CP8, int LD>
KL_D void {fn}_store_rows(unsigned short* dst, const uint4* r) {{
#pragma unroll
  for (int i = 0; i < ITERS; ++i) {{
    const int e = threadIdx.x + i * {threads};
    *(uint4*)&dst[(e / CP8) * LD + (e % CP8) * 8] = r[i];
  }}
}}
extern "C" __global__ void __launch_bounds__({threads}{min_blocks}) {fn}(const unsigned short* __restrict__ q,
    const unsigned short* __restrict__ k, const unsigned short* __restrict__ v{mask_param}, unsigned short* __restrict__ o) {{
  extern __shared__ uint4 kl_smem_attn[];
  unsigned short* Qs = (unsigned short*)kl_smem_attn;   // [64][{QLD}]
  unsigned short* Ks = Qs + {ROWS} * {QLD};              // [64][{QLD}]
  unsigned short* Vs = Ks + {ROWS} * {QLD};              // [64][{VLD}]
  const int tile = blockIdx.x % {TILES}, bh = blockIdx.x / {TILES};
  const int b = bh / {H}, h = bh % {H};
  const int q0 = tile * {ROWS};
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int r0 = warp * 16;
  const long long qb = {qbase}, kb = {kbase}, vb = {vbase};
  const bool qvec = {qvec}, kvec = {kvec}, vvec = {vvec};
  uint4 kr[{DP} / 16], vr[{DVP} / 16];
  {{
    uint4 qr[{DP} / 16];
    {fn}_load<{DP} / 16, {DP} / 8>(qr, q, qb, q0, {SQ}, {D}, {QSR}ll, {QSC}ll, qvec);
    {fn}_load<{DP} / 16, {DP} / 8>(kr, k, kb, 0, {SKV}, {D}, {KSR}ll, {KSC}ll, kvec);
    {fn}_load<{DVP} / 16, {DVP} / 8>(vr, v, vb, 0, {SKV}, {DV}, {VSR}ll, {VSC}ll, vvec);
    {fn}_store_rows<{DP} / 16, {DP} / 8, {QLD}>(Qs, qr);
  }}
  float acc[{DVP} / 8][4];
  for (int i = 0; i < {DVP} / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
  float mrow[2] = {{-__int_as_float(0x7f800000), -__int_as_float(0x7f800000)}}, lrow[2] = {{0.f, 0.f}};
  for (int kv0 = 0; kv0 < {SKV}; kv0 += {CHUNK}) {{
    __syncthreads();  // the previous chunk is consumed
    {fn}_store_rows<{DP} / 16, {DP} / 8, {QLD}>(Ks, kr);
    {fn}_store_rows<{DVP} / 16, {DVP} / 8, {VLD}>(Vs, vr);
    __syncthreads();
    if (kv0 + {CHUNK} < {SKV}) {{  // the next chunk's loads fly while this one is computed
      {fn}_load<{DP} / 16, {DP} / 8>(kr, k, kb, kv0 + {CHUNK}, {SKV}, {D}, {KSR}ll, {KSC}ll, kvec);
      {fn}_load<{DVP} / 16, {DVP} / 8>(vr, v, vb, kv0 + {CHUNK}, {SKV}, {DV}, {VSR}ll, {VSC}ll, vvec);
    }}
    float s[8][4];
    for (int n = 0; n < 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < {DP} / 16; ++kk) {{
      unsigned a[4];
      a[0] = *(const unsigned*)&Qs[(r0 + g) * {QLD} + kk * 16 + 2 * t];
      a[1] = *(const unsigned*)&Qs[(r0 + g + 8) * {QLD} + kk * 16 + 2 * t];
      a[2] = *(const unsigned*)&Qs[(r0 + g) * {QLD} + kk * 16 + 2 * t + 8];
      a[3] = *(const unsigned*)&Qs[(r0 + g + 8) * {QLD} + kk * 16 + 2 * t + 8];
#pragma unroll
      for (int n = 0; n < 8; ++n)
        {fn}_mma(s[n], a, *(const unsigned*)&Ks[(n * 8 + g) * {QLD} + kk * 16 + 2 * t],
                 *(const unsigned*)&Ks[(n * 8 + g) * {QLD} + kk * 16 + 2 * t + 8]);
    }}
    float mx[2] = {{-__int_as_float(0x7f800000), -__int_as_float(0x7f800000)}};
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {{
        const int row = q0 + r0 + g + hf * 8, col = kv0 + n * 8 + 2 * t;
        float m0 = 0.f, m1 = 0.f;
        {mask_add}{mask_scale}
        const float ninf = -__int_as_float(0x7f800000);
        const float x0 = col < {SKV} ? s[n][2 * hf] * {scale} + m0 : ninf;
        const float x1 = col + 1 < {SKV} ? s[n][2 * hf + 1] * {scale} + m1 : ninf;
        s[n][2 * hf] = x0;
        s[n][2 * hf + 1] = x1;
        mx[hf] = fmaxf(mx[hf], fmaxf(x0, x1));
      }}
    float alpha[2], msafe[2];
    for (int r = 0; r < 2; ++r) {{
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      float mnew = fmaxf(mrow[r], mx[r]);
      // A row masked out so far (every score -inf) subtracts 0, not -inf.
      msafe[r] = mnew == -__int_as_float(0x7f800000) ? 0.f : mnew;
      alpha[r] = __expf(mrow[r] - msafe[r]);
      mrow[r] = mnew;
      lrow[r] *= alpha[r];
    }}
    for (int i = 0; i < {DVP} / 8; ++i) {{
      acc[i][0] *= alpha[0]; acc[i][1] *= alpha[0]; acc[i][2] *= alpha[1]; acc[i][3] *= alpha[1];
    }}
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {{
        float p = __expf(s[n][i] - msafe[i >> 1]);
        s[n][i] = p;
        lrow[i >> 1] += p;
      }}
#pragma unroll
    for (int kk = 0; kk < {CHUNK} / 16; ++kk) {{
      unsigned a[4];
      a[0] = {fn}_pack(s[2 * kk][0], s[2 * kk][1]);
      a[1] = {fn}_pack(s[2 * kk][2], s[2 * kk][3]);
      a[2] = {fn}_pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = {fn}_pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int nd = 0; nd < {DVP} / 8; ++nd)
      {{
        // V's B fragments (rows 2t, 2t+1 and 2t+8, 2t+9 of column g) straight
        // from row-major V: ldmatrix .trans, lanes 0-15 naming rows kk*16 + lane.
        unsigned b0, b1;
        const unsigned addr = (unsigned)__cvta_generic_to_shared(&Vs[(kk * 16 + (lane & 15)) * {VLD} + nd * 8]);
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {{%0, %1}}, [%2];" : "=r"(b0), "=r"(b1) : "r"(addr));
        {fn}_mma(acc[nd], a, b0, b1);
      }}
    }}
  }}
  for (int r = 0; r < 2; ++r) {{
    lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 1);
    lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 2);
  }}
  const long long obase = b * {OSB}ll + h * {OSH}ll;
  const bool pairs = {pair_ok};
  for (int nd = 0; nd < {DVP} / 8; ++nd)
    for (int half = 0; half < 2; ++half) {{
      int row = q0 + r0 + g + half * 8, col = nd * 8 + 2 * t;
      if (row >= {SQ} || col >= {DV}) continue;
      float y0 = acc[nd][2 * half] / lrow[half], y1 = acc[nd][2 * half + 1] / lrow[half];
      if ({nan_to_zero} && !(lrow[half] > 0.f)) y0 = y1 = 0.f;
      long long at = obase + (long long)row * {OSR}ll + (long long)col * {OSC}ll;
      if (pairs) {{
        *(unsigned*)&o[at] = {fn}_pack(y0, y1);
      }} else {{
        o[at] = {cvt}(y0);
        if (col + 1 < {DV}) o[at + {OSC}ll] = {cvt}(y1);
      }}
    }}
}}
)",
      fmt::arg("label", from.label()), fmt::arg("B", s.b), fmt::arg("H", s.h), fmt::arg("SQ", s.sq),
      fmt::arg("SKV", s.skv), fmt::arg("D", s.d), fmt::arg("DV", s.dv), fmt::arg("scale_f", s.scale),
      fmt::arg("scale", float_literal(s.scale)), fmt::arg("fn", fn), fmt::arg("mma", mma), fmt::arg("cvt", cvt),
      fmt::arg("threads", kThreads), fmt::arg("min_blocks", min_blocks), fmt::arg("mask_param", mask_param), fmt::arg("mask_add", mask_add),
      fmt::arg("mask_scale", s.mask && s.mask_scale != 1.f
                                 ? fmt::format("\n        m0 *= {0}; m1 *= {0};", float_literal(s.mask_scale))
                                 : std::string()),
      fmt::arg("QLD", qld), fmt::arg("VLD", vld), fmt::arg("ROWS", kRows), fmt::arg("CHUNK", kChunk),
      fmt::arg("DP", dp), fmt::arg("DVP", dvp), fmt::arg("TILES", tiles),
      fmt::arg("qbase", base(s.q)), fmt::arg("kbase", base(s.k)), fmt::arg("vbase", base(s.v)),
      fmt::arg("qvec", vec_condition(s.q, s.d, "q")), fmt::arg("kvec", vec_condition(s.k, s.d, "k")),
      fmt::arg("vvec", vec_condition(s.v, s.dv, "v")), fmt::arg("QSR", s.q.strides[2]), fmt::arg("QSC", s.q.strides[3]),
      fmt::arg("KSR", s.k.strides[2]), fmt::arg("KSC", s.k.strides[3]), fmt::arg("VSR", s.v.strides[2]),
      fmt::arg("VSC", s.v.strides[3]),
      fmt::arg("OSB", s.out.strides[0]), fmt::arg("OSH", s.out.strides[1]), fmt::arg("OSR", s.out.strides[2]),
      fmt::arg("OSC", s.out.strides[3]), fmt::arg("nan_to_zero", s.nan_to_zero ? "true" : "false"),
      fmt::arg("pair_ok", pair_store ? aligned_condition({{"o", 4}}) : std::string("false")));
  L.source += src;
  std::vector<ir::ValueId> inputs{s.q.value, s.k.value, s.v.value};
  if (s.mask) inputs.push_back(s.mask->value);
  ir::Node k = L.kernel_node(from, fn, std::move(inputs), {s.out.value}, s.b * s.h * tiles, kThreads, smem);
  k.attrs["source_op"] = std::string("Attention");
  k.attrs["attention_scale"] = s.scale;  // for reports and tests; the kernel has them baked in
  k.attrs["attention_mask_scale"] = s.mask_scale;
  return k;
}

}  // namespace kiln::targets::cuda
