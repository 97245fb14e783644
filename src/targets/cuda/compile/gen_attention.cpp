// Fused scaled-dot-product attention kernel (codegen.h: gen_attention):
// softmax(scale * Q K^T + mask) V for one (batch, head) and 64 query rows
// per block, on tensor cores through mma.sync m16n8k16 (float16 / bfloat16
// inputs, float32 accumulation and softmax).
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
// tile's C fragments are therefore, two by two, the A fragments of P V.
#include <fmt/format.h>

#include <algorithm>

#include "support/error.h"
#include "targets/cuda/compile/codegen.h"

namespace kiln::targets::cuda {

namespace {

constexpr int kRows = 64;     // query rows per block (4 warps x 16)
constexpr int kChunk = 64;    // key / value rows per iteration
constexpr int kThreads = 128;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/// Statements loading rows [row0, row0 + 64) (clamped to `rows`) and columns
/// [0, cols_padded) of one (b, h) slice of `src` into shared `dst` (row
/// stride `ld` halves), zero outside the tensor. `transpose`: dst[c * ld + r].
/// With `vec` (column stride 1, every other stride and `cols` a multiple of 8)
/// eight halves move per 16-byte access when the base pointer is aligned.
std::string load_tile(const std::string& dst, int64_t ld, const std::string& src, const std::string& base,
                      const std::string& row0, int64_t rows, int64_t cols, int64_t cols_padded,
                      int64_t row_stride, int64_t col_stride, bool transpose, bool vec) {
  std::string store = transpose ? fmt::format("{}[c * {} + r]", dst, ld) : fmt::format("{}[r * {} + c]", dst, ld);
  std::string scalar = fmt::format(
      "for (int e = threadIdx.x; e < {rows_tile} * {cp}; e += {threads}) {{\n"
      "      int r = e / {cp}, c = e % {cp};\n"
      "      long long row = (long long)({row0}) + r;\n"
      "      unsigned short x = 0;\n"
      "      if (row < {rows} && c < {cols}) x = {src}[{base} + row * {rs}ll + (long long)c * {cs}ll];\n"
      "      {store} = x;\n"
      "    }}\n",
      fmt::arg("rows_tile", kRows), fmt::arg("cp", cols_padded), fmt::arg("threads", kThreads), fmt::arg("row0", row0),
      fmt::arg("rows", rows), fmt::arg("cols", cols), fmt::arg("src", src), fmt::arg("base", base),
      fmt::arg("rs", row_stride), fmt::arg("cs", col_stride), fmt::arg("store", store));
  if (!vec) return "    " + scalar;
  // 16-byte path: c steps by 8; the padding columns (cols..cols_padded) are zero-filled.
  std::string vstore = transpose
                           ? fmt::format("for (int j = 0; j < 8; ++j) {}[(c + j) * {} + r] = u.h[j];", dst, ld)
                           : fmt::format("*(uint4*)&{}[r * {} + c] = u.v;", dst, ld);
  return fmt::format(
      "    if ({aligned}) {{\n"
      "      for (int e = threadIdx.x; e < {rows_tile} * {cv}; e += {threads}) {{\n"
      "        int r = e / {cv}, c = (e % {cv}) * 8;\n"
      "        long long row = (long long)({row0}) + r;\n"
      "        union {{ uint4 v; unsigned short h[8]; }} u;\n"
      "        u.v = make_uint4(0u, 0u, 0u, 0u);\n"
      "        if (row < {rows} && c < {cols}) u.v = *(const uint4*)&{src}[{base} + row * {rs}ll + c];\n"
      "        {vstore}\n"
      "      }}\n"
      "    }} else {{\n"
      "      {scalar}"
      "    }}\n",
      fmt::arg("aligned", aligned_condition({{src, 16}})), fmt::arg("rows_tile", kRows),
      fmt::arg("cv", cols_padded / 8), fmt::arg("threads", kThreads), fmt::arg("row0", row0), fmt::arg("rows", rows),
      fmt::arg("cols", cols), fmt::arg("src", src), fmt::arg("base", base), fmt::arg("rs", row_stride),
      fmt::arg("vstore", vstore), fmt::arg("scalar", scalar));
}

bool vectorizable(const AttentionView& v, int64_t cols) {
  return v.strides[3] == 1 && cols % 8 == 0 && v.strides[0] % 8 == 0 && v.strides[1] % 8 == 0 && v.strides[2] % 8 == 0;
}

}  // namespace

ir::Node gen_attention(Lowering& L, const ir::Node& from, const AttentionSpec& s) {
  if (!is_half(s.dtype)) refuse(from, "the fused attention kernel computes on float16 / bfloat16 only");
  if (s.d > kMaxAttentionHeadDim || s.dv > kMaxAttentionHeadDim || s.d < 1 || s.dv < 1)
    refuse(from, fmt::format("attention head dims {} / {} are outside 1..{}", s.d, s.dv, kMaxAttentionHeadDim));
  const std::string fn = L.kernel_name("attention");
  const int64_t dp = round_up(s.d, 16), dvp = round_up(s.dv, 16);
  const int64_t qld = dp + 8, vld = kChunk + 8;  // +8 halves: rows start in different banks
  const int64_t smem = (2 * kRows * qld + dvp * vld) * 2;
  const int64_t tiles = (s.sq + kRows - 1) / kRows;
  const std::string mma = s.dtype == DType::f16 ? "f16" : "bf16";
  const std::string cvt = store_fn(s.dtype);
  auto base = [](const AttentionView& v) { return fmt::format("b * {}ll + h * {}ll", v.strides[0], v.strides[1]); };

  std::string mask_param, mask_add;
  if (s.mask) {
    auto mt = storage_type(s.mask_dtype);
    if (!mt || !is_float_storage(s.mask_dtype)) refuse(from, "the attention mask must be float32, float16 or bfloat16");
    mask_param = fmt::format(", const {}* __restrict__ mask", *mt);
    const auto& m = *s.mask;
    mask_add = fmt::format(
        "x += {}(mask[b * {}ll + h * {}ll + (long long)min(row, {}) * {}ll + (long long)col * {}ll]);",
        load_fn(s.mask_dtype), m.strides[0], m.strides[1], s.sq - 1, m.strides[2], m.strides[3]);
  }
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
extern "C" __global__ void __launch_bounds__({threads}) {fn}(const unsigned short* __restrict__ q,
    const unsigned short* __restrict__ k, const unsigned short* __restrict__ v{mask_param}, unsigned short* __restrict__ o) {{
  extern __shared__ uint4 kl_smem_attn[];
  unsigned short* Qs = (unsigned short*)kl_smem_attn;   // [64][{QLD}]
  unsigned short* Ks = Qs + {ROWS} * {QLD};              // [64][{QLD}]
  unsigned short* Vt = Ks + {ROWS} * {QLD};              // [{DVP}][{VLD}] (transposed)
  const int tile = blockIdx.x % {TILES}, bh = blockIdx.x / {TILES};
  const int b = bh / {H}, h = bh % {H};
  const int q0 = tile * {ROWS};
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int r0 = warp * 16;
{load_q}
  float acc[{DVP} / 8][4];
  for (int i = 0; i < {DVP} / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
  float mrow[2] = {{-__int_as_float(0x7f800000), -__int_as_float(0x7f800000)}}, lrow[2] = {{0.f, 0.f}};
  for (int kv0 = 0; kv0 < {SKV}; kv0 += {CHUNK}) {{
    __syncthreads();
{load_k}
{load_v}
    __syncthreads();
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
      for (int i = 0; i < 4; ++i) {{
        int row = q0 + r0 + g + (i >= 2 ? 8 : 0), col = kv0 + n * 8 + 2 * t + (i & 1);
        float x = s[n][i] * {scale};
        if (col < {SKV}) {{ {mask_add} }} else x = -__int_as_float(0x7f800000);
        s[n][i] = x;
        mx[i >> 1] = fmaxf(mx[i >> 1], x);
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
        {fn}_mma(acc[nd], a, *(const unsigned*)&Vt[(nd * 8 + g) * {VLD} + kk * 16 + 2 * t],
                 *(const unsigned*)&Vt[(nd * 8 + g) * {VLD} + kk * 16 + 2 * t + 8]);
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
      fmt::arg("threads", kThreads), fmt::arg("mask_param", mask_param), fmt::arg("mask_add", mask_add),
      fmt::arg("QLD", qld), fmt::arg("VLD", vld), fmt::arg("ROWS", kRows), fmt::arg("CHUNK", kChunk),
      fmt::arg("DP", dp), fmt::arg("DVP", dvp), fmt::arg("TILES", tiles),
      fmt::arg("load_q", load_tile("Qs", qld, "q", base(s.q), "q0", s.sq, s.d, dp, s.q.strides[2], s.q.strides[3],
                                   false, vectorizable(s.q, s.d))),
      fmt::arg("load_k", load_tile("Ks", qld, "k", base(s.k), "kv0", s.skv, s.d, dp, s.k.strides[2], s.k.strides[3],
                                   false, vectorizable(s.k, s.d))),
      fmt::arg("load_v", load_tile("Vt", vld, "v", base(s.v), "kv0", s.skv, s.dv, dvp, s.v.strides[2],
                                   s.v.strides[3], true, vectorizable(s.v, s.dv))),
      fmt::arg("OSB", s.out.strides[0]), fmt::arg("OSH", s.out.strides[1]), fmt::arg("OSR", s.out.strides[2]),
      fmt::arg("OSC", s.out.strides[3]), fmt::arg("nan_to_zero", s.nan_to_zero ? "true" : "false"),
      fmt::arg("pair_ok", pair_store ? aligned_condition({{"o", 4}}) : std::string("false")));
  L.source += src;
  std::vector<ir::ValueId> inputs{s.q.value, s.k.value, s.v.value};
  if (s.mask) inputs.push_back(s.mask->value);
  ir::Node k = L.kernel_node(from, fn, std::move(inputs), {s.out.value}, s.b * s.h * tiles, kThreads, smem);
  k.attrs["source_op"] = std::string("Attention");
  return k;
}

}  // namespace kiln::targets::cuda
