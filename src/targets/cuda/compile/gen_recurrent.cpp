// ONNX LSTM on the cuda target (codegen.h: gen_recurrent), the semantics of
// src/ops/recurrent.cpp (the ref target's kernel, the oracle): gate order
// i, o, f, c; peepholes i, o, f; direction forward / reverse /
// bidirectional; layout 0 and 1; optional B, sequence_lens, initial_h,
// initial_c, P; outputs Y, Y_h, Y_c in any subset; every activation of
// ops/rnn_activation.h with its alpha / beta; clip; input_forget.
//
// One kernel per LSTM node, one block per (direction, batch entry): batch
// entries and directions are independent, and the recurrence of one of them
// is a serial loop over time that a block runs with block-wide barriers (two
// per step), its h, c, x_t and gate pre-activations in shared memory. Each
// step is one matrix-vector product [W | R] (4H x (I + H)) * [x_t; h_prev]
// (a warp per gate row, lanes over the columns, coalesced weight reads from
// L2, 4 rows in flight per warp), then the cell update by one thread per
// hidden unit. A one-step LSTM has no recurrence to carry: its block per
// (direction, batch entry) is split into blocks of kUnitsPerBlock hidden
// units (their 4 gate rows each), so Silero VAD's streaming step (seq 1,
// hidden 128: 16 blocks) is one short launch inside the captured CUDA graph,
// with nothing on the host.
//
// When the sequence is longer than kFusedMaxSteps steps, a first kernel
// computes the input projection X * W^T + Wb + Rb for every step at once (a
// shared-memory tiled product over all blocks of the GPU, into a scratch
// value [dirs, rows, 4H]) and the recurrence then multiplies by R only: the
// part that does not depend on h leaves the serial loop.
//
// Precision: float32 only. In a --precision fp16 / bf16 program the LSTM is a
// float32 island (cuda/compile/precision.cpp gives LSTM no 16-bit role): the
// precision pass casts its activations to float32 before it and its results
// are cast back by their readers, so state, gates and accumulation stay
// float32 over every time step (a 16-bit h / c would accumulate rounding
// along the sequence).
//
// Not lowered (the node runs on the host, the reason named): float64,
// GRU / RNN, and a step whose shared memory would exceed 200 KiB.
// sequence_lens values outside [0, seq] are clamped (the ref target reports
// them as invalid input; a kernel cannot).
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "ops/rnn_activation.h"
#include "support/error.h"
#include "targets/cuda/compile/codegen.h"

namespace kiln::targets::cuda {

namespace {

using ops::ActFn;
using ops::Activation;

/// Most dynamic shared memory one recurrence block may use.
constexpr int64_t kMaxSmem = 200 * 1024;
/// Longest sequence whose input projection stays inside the recurrence (one
/// launch; each step then reads W too). Longer ones get the projection kernel
/// first, whose launch costs less than the serial steps it saves.
constexpr int64_t kFusedMaxSteps = 8;
/// Hidden units (4 gate rows each) per block of a one-step LSTM.
constexpr int64_t kUnitsPerBlock = 8;

/// CUDA C++ of activation `a` applied to float expression `x`.
std::string act_expr(const Activation& a, const std::string& x) {
  const std::string al = float_literal(static_cast<float>(a.alpha)), be = float_literal(static_cast<float>(a.beta));
  switch (a.fn) {
    case ActFn::relu: return fmt::format("fmaxf({}, 0.f)", x);
    case ActFn::tanh: return fmt::format("tanhf({})", x);
    case ActFn::sigmoid: return fmt::format("kl_sigmoid({})", x);
    case ActFn::affine: return fmt::format("({} * {} + {})", al, x, be);
    case ActFn::leaky_relu: return fmt::format("({0} >= 0.f ? {0} : {1} * {0})", x, al);
    case ActFn::thresholded_relu: return fmt::format("({0} > {1} ? {0} : 0.f)", x, al);
    case ActFn::scaled_tanh: return fmt::format("({} * tanhf({} * {}))", al, be, x);
    case ActFn::hard_sigmoid: return fmt::format("fminf(fmaxf({} * {} + {}, 0.f), 1.f)", al, x, be);
    case ActFn::elu: return fmt::format("({0} >= 0.f ? {0} : {1} * (expf({0}) - 1.f))", x, al);
    case ActFn::softsign: return fmt::format("({0} / (1.f + fabsf({0})))", x);
    case ActFn::softplus: return fmt::format("log1pf(expf({}))", x);
  }
  return x;
}

/// Sizes and options of one LSTM node, read and checked.
struct LstmSpec {
  int64_t seq = 0, batch = 0, input = 0, hidden = 0, dirs = 1, layout = 0;
  bool reverse_only = false, input_forget = false;
  float clip = 0;  ///< 0: none
  std::vector<Activation> acts;  ///< f, g, h per direction
  ir::ValueId x, w, r, b = ir::kNoValue, lens = ir::kNoValue, h0 = ir::kNoValue, c0 = ir::kNoValue, p = ir::kNoValue;
  ir::ValueId y = ir::kNoValue, yh = ir::kNoValue, yc = ir::kNoValue;
};

ir::ValueId opt_input(const ir::Node& n, size_t i) { return i < n.inputs.size() ? n.inputs[i] : ir::kNoValue; }
ir::ValueId opt_output(const ir::Node& n, size_t i) { return i < n.outputs.size() ? n.outputs[i] : ir::kNoValue; }

LstmSpec read_spec(Lowering& L, const ir::Node& n) {
  const ir::Model& m = L.model;
  LstmSpec s;
  s.x = n.inputs.at(0), s.w = n.inputs.at(1), s.r = n.inputs.at(2);
  s.b = opt_input(n, 3), s.lens = opt_input(n, 4), s.h0 = opt_input(n, 5), s.c0 = opt_input(n, 6), s.p = opt_input(n, 7);
  s.y = opt_output(n, 0), s.yh = opt_output(n, 1), s.yc = opt_output(n, 2);
  for (ir::ValueId v : {s.x, s.w, s.r, s.b, s.h0, s.c0, s.p, s.y, s.yh, s.yc})
    if (v != ir::kNoValue && m.value(v).dtype != DType::f32)
      refuse(n, fmt::format("value '{}' is {}: the cuda LSTM kernel computes float32 only", m.value(v).name,
                            dtype_name(m.value(v).dtype)));
  if (s.lens != ir::kNoValue && m.value(s.lens).dtype != DType::i32) refuse(n, "sequence_lens must be int32");
  const std::string dir = n.s("direction", "forward");
  s.dirs = dir == "bidirectional" ? 2 : 1;
  s.reverse_only = dir == "reverse";
  s.layout = n.i("layout", 0);
  if (s.layout != 0 && s.layout != 1) refuse(n, fmt::format("layout {}", s.layout));
  s.clip = n.has("clip") ? n.f("clip") : 0.f;
  s.input_forget = n.i("input_forget", 0) != 0;
  const auto xd = L.dims(n, s.x), wd = L.dims(n, s.w), rd = L.dims(n, s.r);
  if (xd.size() != 3 || wd.size() != 3 || rd.size() != 3) refuse(n, "X, W and R must be 3-D");
  s.seq = xd[s.layout == 0 ? 0 : 1];
  s.batch = xd[s.layout == 0 ? 1 : 0];
  s.input = xd[2];
  s.hidden = rd[2];
  const int64_t G = 4 * s.hidden;
  if (wd != std::vector<int64_t>{s.dirs, G, s.input} || rd != std::vector<int64_t>{s.dirs, G, s.hidden})
    refuse(n, "W / R shapes do not match X, direction and hidden_size");
  auto expect = [&](ir::ValueId v, std::vector<int64_t> want, const char* what) {
    if (v != ir::kNoValue && L.dims(n, v) != want) refuse(n, fmt::format("{} has an unexpected shape", what));
  };
  const std::vector<int64_t> state = s.layout == 0 ? std::vector<int64_t>{s.dirs, s.batch, s.hidden}
                                                   : std::vector<int64_t>{s.batch, s.dirs, s.hidden};
  expect(s.b, {s.dirs, 2 * G}, "B");
  expect(s.lens, {s.batch}, "sequence_lens");
  expect(s.h0, state, "initial_h");
  expect(s.c0, state, "initial_c");
  expect(s.p, {s.dirs, 3 * s.hidden}, "P");
  try {
    s.acts = ops::read_activations(n, {"Sigmoid", "Tanh", "Tanh"}, s.dirs, ops::ActParams::positional_if_full);
  } catch (const Error& e) {
    refuse(n, e.what());
  }
  return s;
}

/// A device function `name`(d, x) applying activation `which` (0 f, 1 g, 2 h) of direction d.
std::string act_function(const LstmSpec& s, const std::string& name, int which) {
  std::string e0 = act_expr(s.acts[static_cast<size_t>(which)], "x");
  std::string body = e0;
  if (s.dirs == 2) {
    std::string e1 = act_expr(s.acts[static_cast<size_t>(3 + which)], "x");
    if (e1 != e0) body = fmt::format("(d == 0 ? {} : {})", e0, e1);
  }
  return fmt::format("KL_D float {}(int d, float x) {{ (void)d; return {}; }}\n", name, body);
}

/// Input projection P[dir, row, g] = sum_k X[row, k] W[dir, g, k] + Wb[g] + Rb[g]
/// for every row of X (its memory order: row = t * batch + b in layout 0,
/// b * seq + t in layout 1), a 64 x 64 tile per block of 256 threads (4 x 4
/// outputs each), K in steps of 16 through shared memory.
ir::Node projection_kernel(Lowering& L, const ir::Node& n, const LstmSpec& s, ir::ValueId proj) {
  const int64_t M = s.seq * s.batch, N = 4 * s.hidden, K = s.input;
  const std::string name = L.kernel_name("lstm_proj");
  const bool bias = s.b != ir::kNoValue;
  L.source += fmt::format(R"(
// {label}: input projection X W^T (+ Wb + Rb), M {M} x N {N} x K {K}, {D} direction(s)
extern "C" __global__ void __launch_bounds__(256) {name}(const float* __restrict__ X, const float* __restrict__ W{bparam}, float* __restrict__ P) {{
  __shared__ float xs[16][65];
  __shared__ float ws[16][65];
  const int dir = blockIdx.z, m0 = blockIdx.y * 64, n0 = blockIdx.x * 64;
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  const float* w = W + (size_t)dir * {N} * {K};
  float acc[4][4] = {{}};
  for (int k0 = 0; k0 < {K}; k0 += 16) {{
    for (int e = threadIdx.x; e < 1024; e += 256) {{
      const int rr = e >> 4, kk = e & 15, k = k0 + kk;
      xs[kk][rr] = (m0 + rr < {M} && k < {K}) ? X[(size_t)(m0 + rr) * {K} + k] : 0.f;
      ws[kk][rr] = (n0 + rr < {N} && k < {K}) ? w[(size_t)(n0 + rr) * {K} + k] : 0.f;
    }}
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < 16; ++kk) {{
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = xs[kk][ty + 16 * i], b[i] = ws[kk][tx + 16 * i];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }}
    __syncthreads();
  }}
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {{
      const int m = m0 + ty + 16 * i, g = n0 + tx + 16 * j;
      if (m < {M} && g < {N}) P[((size_t)dir * {M} + m) * {N} + g] = acc[i][j]{badd};
    }}
}}
)",
                          fmt::arg("label", n.label()), fmt::arg("M", M), fmt::arg("N", N), fmt::arg("K", K),
                          fmt::arg("D", s.dirs), fmt::arg("name", name),
                          fmt::arg("bparam", bias ? ", const float* __restrict__ B" : ""),
                          fmt::arg("badd", bias ? fmt::format(" + B[dir * {0} + g] + B[dir * {0} + {1} + g]", 2 * N, N)
                                                : std::string()));
  std::vector<ir::ValueId> ins = {s.x, s.w};
  if (bias) ins.push_back(s.b);
  ir::Node k = L.kernel_node(n, name, ins, {proj}, (N + 63) / 64, 256);
  k.attrs["grid"] = std::vector<int64_t>{(N + 63) / 64, (M + 63) / 64, s.dirs};
  return k;
}

/// The recurrence kernel (see the file comment). With `proj` the input
/// projection (and the biases) come precomputed; else the step multiplies
/// [W | R] by [x_t; h] and adds the biases itself.
ir::Node recurrence_kernel(Lowering& L, const ir::Node& n, const LstmSpec& s, ir::ValueId proj) {
  const int64_t H = s.hidden, G = 4 * H, I = s.input, S = s.seq, B = s.batch, D = s.dirs;
  const bool fused = proj == ir::kNoValue;
  // Hidden units per block: all of them when the loop carries h from step to
  // step; a slice of kUnitsPerBlock (its 4 gate rows each) when there is one
  // step, so that Silero's streaming step spreads over many blocks.
  const int64_t JB = S == 1 ? std::min(H, kUnitsPerBlock) : H, NS = (H + JB - 1) / JB, RB = 4 * JB;
  const int64_t threads = std::clamp<int64_t>(32 * RB, 64, 1024), warps = threads / 32;
  // Shared memory: x_t (fused only), h, c, the block's gate pre-activations.
  const int64_t smem = 4 * ((fused ? I : 0) + 2 * H + RB);
  if (smem > kMaxSmem)
    refuse(n, fmt::format("hidden_size {} and input size {} need {} bytes of shared memory per step (at most {})", H, I,
                          smem, kMaxSmem));
  const std::string name = L.kernel_name("lstm");
  const std::string fa = name + "_f", ga = name + "_g", ha = name + "_h";
  L.source += "\n" + act_function(s, fa, 0) + act_function(s, ga, 1) + act_function(s, ha, 2);
  if (s.clip > 0)
    L.source += fmt::format("KL_D float {0}_clip(float x) {{ return fminf(fmaxf(x, -{1}), {1}); }}\n", name,
                            float_literal(s.clip));
  else
    L.source += fmt::format("KL_D float {}_clip(float x) {{ return x; }}\n", name);

  // Parameters: inputs then outputs, absent ones left out (run/program.cpp).
  std::vector<ir::ValueId> ins, outs;
  std::string params;
  auto param = [&](ir::ValueId v, const char* decl, std::vector<ir::ValueId>& list) {
    if (v == ir::kNoValue) return;
    params += (params.empty() ? "" : ", ") + std::string(decl);
    list.push_back(v);
  };
  param(fused ? s.x : proj, fused ? "const float* __restrict__ X" : "const float* __restrict__ PX", ins);
  if (fused) param(s.w, "const float* __restrict__ W", ins);
  param(s.r, "const float* __restrict__ R", ins);
  if (fused) param(s.b, "const float* __restrict__ Bias", ins);
  param(s.lens, "const int* __restrict__ L", ins);
  param(s.h0, "const float* __restrict__ H0", ins);
  param(s.c0, "const float* __restrict__ C0", ins);
  param(s.p, "const float* __restrict__ P", ins);
  param(s.y, "float* __restrict__ Y", outs);
  param(s.yh, "float* __restrict__ YH", outs);
  param(s.yc, "float* __restrict__ YC", outs);

  // Index expressions (layout 0 / 1) of X's row, Y's element and a state element.
  const std::string x_row = s.layout == 0 ? fmt::format("(t * {} + b)", B) : fmt::format("(b * {} + t)", S);
  const std::string y_at = s.layout == 0 ? fmt::format("(((size_t)t * {} + dir) * {} + b) * {} + j", D, B, H)
                                         : fmt::format("(((size_t)b * {} + t) * {} + dir) * {} + j", S, D, H);
  const std::string st_at =
      s.layout == 0 ? fmt::format("((size_t)dir * {} + b) * {} + j", B, H) : fmt::format("((size_t)b * {} + dir) * {} + j", D, H);
  const bool has_lens = s.lens != ir::kNoValue, has_p = s.p != ir::kNoValue;

  std::string src = fmt::format(
      "\n// {label}: LSTM, {D} direction(s){rev}, layout {layout}, seq {S}, batch {B}, input {I}, hidden {H}{mode}\n"
      "extern \"C\" __global__ void __launch_bounds__({T}) {name}({params}) {{\n"
      "  extern __shared__ float kl_lstm_sm[];\n"
      "  float* hs = kl_lstm_sm; float* cs = hs + {H}; float* gs = cs + {H}; float* xs = gs + {RB};\n"
      "  (void)xs;\n"
      "  const int dir = blockIdx.x / {BN}, b = (blockIdx.x / {NS}) % {B}, j0 = (blockIdx.x % {NS}) * {JB};\n"
      "  const int j1 = min(j0 + {JB}, {H});  // this block's hidden units [j0, j1)\n"
      "  const bool rev = {rev_expr};\n"
      "  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;\n"
      "  const int len = {len_expr};\n",
      fmt::arg("label", n.label()), fmt::arg("D", D), fmt::arg("rev", s.reverse_only ? " (reverse)" : ""),
      fmt::arg("layout", s.layout), fmt::arg("S", S), fmt::arg("B", B), fmt::arg("I", I), fmt::arg("H", H),
      fmt::arg("RB", RB), fmt::arg("BN", B * NS), fmt::arg("NS", NS), fmt::arg("JB", JB),
      fmt::arg("mode", fused ? ", [W|R] per step" : ", X W^T precomputed"), fmt::arg("T", threads),
      fmt::arg("name", name), fmt::arg("params", params),
      fmt::arg("rev_expr", s.reverse_only ? "true" : (D == 2 ? "dir == 1" : "false")),
      fmt::arg("len_expr", has_lens ? fmt::format("min(max(L[b], 0), {})", S) : std::to_string(S)));
  if (fused)
    src += fmt::format("  const float* w = W + (size_t)dir * {} * {};\n", G, I);
  src += fmt::format("  const float* r = R + (size_t)dir * {} * {};\n", G, H);
  // Initial state; Y is 0 at the steps past this entry's length.
  src += fmt::format("  for (int j = threadIdx.x; j < {H}; j += {T}) {{\n"
                     "    hs[j] = {h0}; cs[j] = {c0};\n"
                     "  }}\n",
                     fmt::arg("H", H), fmt::arg("T", threads),
                     fmt::arg("h0", s.h0 != ir::kNoValue ? "H0[" + st_at + "]" : "0.f"),
                     fmt::arg("c0", s.c0 != ir::kNoValue ? "C0[" + st_at + "]" : "0.f"));
  if (s.y != ir::kNoValue)
    src += fmt::format("  for (int j = j0 + threadIdx.x; j < j1; j += {}) for (int t = len; t < {}; ++t) Y[{}] = 0.f;\n",
                       threads, S, y_at);
  if (fused)
    src += fmt::format("  if (len > 0) {{ const int t = rev ? len - 1 : 0; const float* x = X + (size_t){} * {};\n"
                       "    for (int k = threadIdx.x; k < {}; k += {}) xs[k] = x[k]; }}\n",
                       x_row, I, I, threads);
  src += "  __syncthreads();\n  for (int s = 0; s < len; ++s) {\n    const int t = rev ? len - 1 - s : s;\n";
  // Gate pre-activations: a warp per row, 4 rows in flight.
  // Local row lr = gate * JB + (j - j0) of the block is global row gate * H + j.
  src += fmt::format("    for (int q = warp; q < {RB}; q += {W4}) {{\n"
                     "      float acc[4] = {{0.f, 0.f, 0.f, 0.f}};\n"
                     "#pragma unroll\n"
                     "      for (int u = 0; u < 4; ++u) {{\n"
                     "        const int lr = q + u * {NW}, j = j0 + lr % {JB}, row = (lr / {JB}) * {H} + j;\n"
                     "        if (lr < {RB} && j < j1) {{\n",
                     fmt::arg("RB", RB), fmt::arg("W4", 4 * warps), fmt::arg("NW", warps), fmt::arg("JB", JB),
                     fmt::arg("H", H));
  if (fused)
    src += fmt::format("          const float* wr = w + (size_t)row * {0};\n"
                       "          for (int k = lane; k < {0}; k += 32) acc[u] = fmaf(wr[k], xs[k], acc[u]);\n",
                       I);
  src += fmt::format("          const float* rr = r + (size_t)row * {0};\n"
                     "          for (int k = lane; k < {0}; k += 32) acc[u] = fmaf(rr[k], hs[k], acc[u]);\n"
                     "        }}\n      }}\n"
                     "#pragma unroll\n"
                     "      for (int u = 0; u < 4; ++u) acc[u] = kl_warp_sum(acc[u]);\n"
                     "      if (lane == 0)\n"
                     "#pragma unroll\n"
                     "        for (int u = 0; u < 4; ++u) {{\n"
                     "          const int lr = q + u * {NW}, j = j0 + lr % {JB}, row = (lr / {JB}) * {HH} + j;\n"
                     "          if (lr < {RB} && j < j1) gs[lr] = acc[u] + {add};\n"
                     "        }}\n    }}\n    __syncthreads();\n",
                     H, fmt::arg("NW", warps), fmt::arg("RB", RB), fmt::arg("JB", JB), fmt::arg("HH", H),
                     fmt::arg("add", fused ? (s.b != ir::kNoValue
                                                  ? fmt::format("Bias[dir * {0} + row] + Bias[dir * {0} + {1} + row]", 2 * G, G)
                                                  : std::string("0.f"))
                                           : fmt::format("PX[((size_t)dir * {} + {}) * {} + row]", S * B, x_row, G)));
  // Cell update (ref: DirectionRun::step_lstm), then the next step's x_t.
  const std::string pi = has_p ? fmt::format(" + P[dir * {} + j] * c_prev", 3 * H) : "";
  const std::string pf = has_p ? fmt::format(" + P[dir * {} + {} + j] * c_prev", 3 * H, 2 * H) : "";
  const std::string po = has_p ? fmt::format(" + P[dir * {} + {} + j] * c_new", 3 * H, H) : "";
  src += fmt::format(
      "    for (int j = j0 + threadIdx.x; j < j1; j += {T}) {{\n"
      "      const int jj = j - j0;\n"
      "      const float c_prev = cs[j];\n"
      "      const float ig = {f}(dir, {clip}(gs[jj]{pi}));\n"
      "      const float fg = {fg};\n"
      "      const float cg = {g}(dir, {clip}(gs[{J3} + jj]));\n"
      "      const float c_new = fg * c_prev + ig * cg;\n"
      "      const float og = {f}(dir, {clip}(gs[{J1} + jj]{po}));\n"
      "      const float h = og * {hf}(dir, c_new);\n"
      "      cs[j] = c_new; hs[j] = h;\n"
      "{ywrite}"
      "    }}\n",
      fmt::arg("H", H), fmt::arg("T", threads), fmt::arg("f", fa), fmt::arg("g", ga), fmt::arg("hf", ha),
      fmt::arg("clip", name + "_clip"), fmt::arg("pi", pi), fmt::arg("po", po), fmt::arg("J3", 3 * JB),
      fmt::arg("J1", JB),
      fmt::arg("fg", s.input_forget ? std::string("1.f - ig")
                                    : fmt::format("{}(dir, {}(gs[{} + jj]{}))", fa, name + "_clip", 2 * JB, pf)),
      fmt::arg("ywrite", s.y != ir::kNoValue ? fmt::format("      Y[{}] = h;\n", y_at) : std::string()));
  if (fused)
    src += fmt::format("    if (s + 1 < len) {{ const int t = rev ? len - 2 - s : s + 1; const float* x = X + (size_t){} * {};\n"
                       "      for (int k = threadIdx.x; k < {}; k += {}) xs[k] = x[k]; }}\n",
                       x_row, I, I, threads);
  src += "    __syncthreads();\n  }\n";
  if (s.yh != ir::kNoValue || s.yc != ir::kNoValue) {
    src += fmt::format("  for (int j = j0 + threadIdx.x; j < j1; j += {}) {{\n", threads);
    if (s.yh != ir::kNoValue) src += fmt::format("    YH[{}] = hs[j];\n", st_at);
    if (s.yc != ir::kNoValue) src += fmt::format("    YC[{}] = cs[j];\n", st_at);
    src += "  }\n";
  }
  src += "}\n";
  L.source += src;
  return L.kernel_node(n, name, ins, outs, D * B * NS, threads, smem);
}

}  // namespace

std::vector<ir::Node> gen_recurrent(Lowering& L, const ir::Node& n) {
  if (!n.domain.empty() || (n.op_type != "LSTM" && n.op_type != "GRU" && n.op_type != "RNN")) return {};
  if (n.op_type != "LSTM") refuse(n, "the cuda target has no kernel for GRU / RNN yet (LSTM only)");
  // Measurement aid (the before / after of scripts/device/lstm_session.sh):
  // KILN_CUDA_LSTM=0 sends every LSTM to the host, as before this kernel.
  if (const char* e = std::getenv("KILN_CUDA_LSTM"); e && std::string(e) == "0")
    refuse(n, "the native LSTM kernel is off (KILN_CUDA_LSTM=0)");
  const LstmSpec s = read_spec(L, n);
  if (s.seq * s.batch == 0) refuse(n, "an empty sequence or batch");
  std::vector<ir::Node> out;
  ir::ValueId proj = ir::kNoValue;
  // A few steps: the fused kernel does the whole product in one launch. A
  // longer sequence: X W^T over all steps in parallel first.
  if (s.seq > kFusedMaxSteps) {
    ir::Value v;
    v.name = n.name + "_lstm_x_proj";
    v.dtype = DType::f32;
    v.shape = ir::Shape{ir::Dim::known(s.dirs), ir::Dim::known(s.seq * s.batch), ir::Dim::known(4 * s.hidden)};
    proj = L.model.add_value(std::move(v));
    out.push_back(projection_kernel(L, n, s, proj));
  }
  out.push_back(recurrence_kernel(L, n, s, proj));
  return out;
}

}  // namespace kiln::targets::cuda
