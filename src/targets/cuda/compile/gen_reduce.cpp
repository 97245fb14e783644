// Reduction kernels: Softmax / LogSoftmax, LayerNormalization, Reduce*,
// GlobalAveragePool / GlobalMaxPool (codegen.h: gen_reduce).
//
// Every input and output may be float32, float16 or bfloat16, each with its
// own dtype (the precision pass keeps normalization parameters in float32
// while the data is 16-bit): elements are converted to float as they are
// loaded, every mean, variance, max, exp-sum and accumulator is a float, and
// results are rounded to the output's dtype only when stored.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "support/error.h"
#include "targets/cuda/compile/codegen.h"

namespace kiln::targets::cuda {

namespace {

/// Refuses the node unless its first `count` inputs and its present outputs
/// are float32, float16 or bfloat16 (ArgMax / ArgMin: `outputs` false, their
/// output is int64).
void need_float(const Lowering& L, const ir::Node& n, size_t count = 1, bool outputs = true) {
  auto check = [&](ir::ValueId v, const char* what) {
    if (v != ir::kNoValue && !is_float_storage(L.model.value(v).dtype))
      refuse(n, fmt::format("{} '{}' is {}; this version computes it on float32, float16 or bfloat16 only", what,
                            L.model.value(v).name, dtype_name(L.model.value(v).dtype)));
  };
  for (size_t i = 0; i < count && i < n.inputs.size(); ++i) check(n.inputs[i], "input");
  if (outputs)
    for (auto v : n.outputs) check(v, "output");
}

/// Storage type, load and store function of value v (codegen.h).
struct Io {
  std::string T, ld, st;
};
Io io(const Lowering& L, ir::ValueId v) {
  DType t = L.model.value(v).dtype;
  return {*storage_type(t), load_fn(t), store_fn(t)};
}

/// One warp per row (rows of at most kWarpRowMax elements): each lane keeps
/// its part of the row in registers (read once), warp shuffles reduce, 8 rows
/// per 256-thread block. Lane `lane` holds chunks c = 0..C-1 of P consecutive
/// elements starting at j = (c * 32 + lane) * P; with P > 1 a chunk is one
/// vector access when every vectorized pointer is aligned (checked at run
/// time, `vec`), else P scalar accesses (same registers, same arithmetic).
constexpr int64_t kWarpRowMax = 1024;
struct WarpRow {
  int64_t len, P, C;
  bool guard;  ///< some chunks lie past the row's end (len % (32 P) != 0)
};
/// The layout of a row of `len` elements whose vectorized pointers have
/// elements of at most `widest` bytes: P the largest power of two with
/// P * widest <= 16 bytes that divides len and still gives every lane a chunk
/// (len / P >= 32); 1 when none does.
WarpRow warp_row(int64_t len, size_t widest) {
  int64_t P = 1;
  for (int64_t c = 2; c * static_cast<int64_t>(widest) <= 16; c *= 2)
    if (len % c == 0 && len / c >= 32) P = c;
  int64_t C = (len + 32 * P - 1) / (32 * P);
  return {len, P, C, len % (32 * P) != 0};
}
/// `body` for every chunk of this lane (c, j in scope), skipping chunks past the row's end.
std::string each_chunk(const WarpRow& w, const std::string& body) {
  return fmt::format(
      "  #pragma unroll\n  for (int c = 0; c < {}; ++c) {{\n    const int j = (c * 32 + lane) * {};\n"
      "    {}{{\n{}    }}\n  }}\n",
      w.C, w.P, w.guard ? fmt::format("if (j < {}) ", w.len) : "", body);
}
/// Statements loading chunk j of `ptr` (+ `base`) into floats `dst`[0..P) (`vec` decides the access).
std::string chunk_load(const WarpRow& w, const std::string& ptr, const std::string& base, const Io& io,
                       size_t esize, const std::string& dst) {
  std::string off = base.empty() ? "j" : base + " + j";
  if (w.P == 1) return fmt::format("      {}[0] = {}({}[{}]);\n", dst, io.ld, ptr, off);
  std::string vt = vector_type(esize * static_cast<size_t>(w.P));
  return fmt::format(
      "      if (vec) {{ union {{ {0} u; {1} v[{2}]; }} t; t.u = *reinterpret_cast<const {0}*>({3} + {4});\n"
      "        #pragma unroll\n        for (int p = 0; p < {2}; ++p) {5}[p] = {6}(t.v[p]); }}\n"
      "      else {{\n        #pragma unroll\n        for (int p = 0; p < {2}; ++p) {5}[p] = {6}({3}[{4} + p]); }}\n",
      vt, io.T, w.P, ptr, off, dst, io.ld);
}
/// Statements storing floats `expr(p)` (a format with {} for p) as chunk j of `ptr` (+ `base`).
std::string chunk_store(const WarpRow& w, const std::string& ptr, const std::string& base, const Io& io,
                        size_t esize, const std::string& value) {
  std::string off = base.empty() ? "j" : base + " + j";
  if (w.P == 1) return fmt::format("      {{ const int p = 0; {}[{}] = {}({}); }}\n", ptr, off, io.st, value);
  std::string vt = vector_type(esize * static_cast<size_t>(w.P));
  return fmt::format(
      "      if (vec) {{ union {{ {0} u; {1} v[{2}]; }} t;\n"
      "        #pragma unroll\n        for (int p = 0; p < {2}; ++p) t.v[p] = {6}({5});\n"
      "        kl_stv(reinterpret_cast<{0}*>({3} + {4}), t.u); }}\n"
      "      else {{\n        #pragma unroll\n        for (int p = 0; p < {2}; ++p) {3}[{4} + p] = {6}({5}); }}\n",
      vt, io.T, w.P, ptr, off, value, io.st);
}
/// The kernel's opening: lane, row (8 per block; surplus warps return), base offset b, `vec`.
std::string warp_row_head(int64_t rows, int64_t len, const WarpRow& w, const std::vector<std::pair<std::string, size_t>>& ptrs) {
  std::vector<std::pair<std::string, size_t>> aligned;
  for (auto& [p, s] : ptrs) aligned.emplace_back(p, s * static_cast<size_t>(w.P));
  return fmt::format(
      "  const int lane = threadIdx.x & 31;\n"
      "  const unsigned long long row = (unsigned long long)blockIdx.x * 8u + (threadIdx.x >> 5);\n"
      "  if (row >= {}ull) return;  // whole warps\n"
      "  const unsigned long long b = row * {}ull;\n"
      "  const bool vec = {};\n  (void)vec;\n"
      "  float v[{}][{}];\n",
      rows, len, w.P > 1 ? aligned_condition(aligned) : "false", w.C, w.P);
}

/// Softmax / LogSoftmax / Hardmax: rows of `len` elements `inner` apart.
ir::Node softmax(Lowering& L, const ir::Node& n) {
  need_float(L, n);
  const Io X = io(L, n.inputs[0]), Y = io(L, n.outputs[0]);
  const auto io_args = [&] {
    return fmt::format("const {}* __restrict__ x, {}* __restrict__ y", X.T, Y.T);
  };
  auto x = L.dims(n, n.inputs[0]);
  int64_t r = static_cast<int64_t>(x.size());
  bool log = n.op_type == "LogSoftmax";
  int64_t axis = norm_axis(n, n.i("axis", n.opset < 13 ? 1 : -1), r);
  int64_t outer = 1, len = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x[d];
  if (n.opset < 13) {
    for (int64_t d = axis; d < r; ++d) len *= x[d];  // coerced to 2-D at axis
  } else {
    len = x[axis];
    for (int64_t d = axis + 1; d < r; ++d) inner *= x[d];
  }
  std::string name = L.kernel_name(n.op_type);
  if (n.op_type == "Hardmax") {  // one thread per line: 1 at the first maximum, 0 elsewhere
    int64_t N = outer * inner;
    L.source += fmt::format(
        "\n// {0}\nextern \"C\" __global__ void __launch_bounds__(256) {1}({5}) {{\n"
        "  typedef unsigned long long I; const I S = {3}ull;\n"
        "  for (I t = (I)blockIdx.x * 256 + threadIdx.x; t < {2}ull; t += (I)gridDim.x * 256) {{\n"
        "    I b = (t / S) * S * {4}ull + t % S; int k = 0; float m = {6}(x[b]);\n"
        "    for (int j = 1; j < {4}; ++j) {{ float v = {6}(x[b + (I)j * S]); if (v > m) {{ m = v; k = j; }} }}\n"
        "    for (int j = 0; j < {4}; ++j) y[b + (I)j * S] = {7}(j == k ? 1.f : 0.f);\n  }}\n}}\n",
        n.label(), name, N, inner, len, io_args(), X.ld, Y.st);
    return L.kernel_node(n, name, {n.inputs[0]}, {n.outputs[0]}, L.grid_for(N, 256), 256);
  }
  std::string fin = log ? fmt::format("y[b + (I)j * S] = {}(v - m - logf(s));", Y.st)
                        : fmt::format("y[b + (I)j * S] = {}(expf(v - m) / s);", Y.st);
  if (inner == 1 && len <= kWarpRowMax) {
    // One warp per row, the row in registers: read x once, warp max, warp sum of exp, write once.
    const size_t xs = dtype_size(L.model.value(n.inputs[0]).dtype), ys = dtype_size(L.model.value(n.outputs[0]).dtype);
    const WarpRow w = warp_row(len, std::max(xs, ys));
    std::string k = fmt::format("\n// {} rows {} x {} (warp per row, {} x {} per lane)\n", n.label(), outer, len, w.C, w.P);
    k += fmt::format("extern \"C\" __global__ void __launch_bounds__(256) {}({}) {{\n", name, io_args());
    k += warp_row_head(outer, len, w, {{"x", xs}, {"y", ys}});
    k += each_chunk(w, chunk_load(w, "x", "b", X, xs, "v[c]"));
    k += "  float m = -__int_as_float(0x7f800000);\n";
    k += each_chunk(w, fmt::format("      #pragma unroll\n      for (int p = 0; p < {}; ++p) m = kl_max(m, v[c][p]);\n", w.P));
    k += "  m = kl_warp_max(m);\n  float s = 0.f;\n";
    if (log) {
      k += each_chunk(w, fmt::format("      #pragma unroll\n      for (int p = 0; p < {}; ++p) s += expf(v[c][p] - m);\n", w.P));
      k += "  s = kl_warp_sum(s);\n  const float ls = logf(s);\n";
      k += each_chunk(w, chunk_store(w, "y", "b", Y, ys, "v[c][p] - m - ls"));
    } else {
      k += each_chunk(w, fmt::format(
                             "      #pragma unroll\n      for (int p = 0; p < {}; ++p) {{ v[c][p] = expf(v[c][p] - m); s += v[c][p]; }}\n", w.P));
      k += "  s = kl_warp_sum(s);\n";
      k += each_chunk(w, chunk_store(w, "y", "b", Y, ys, "v[c][p] / s"));
    }
    L.source += k + "}\n";
    return L.kernel_node(n, name, {n.inputs[0]}, {n.outputs[0]}, (outer + 7) / 8, 256);
  }
  if (inner == 1) {
    // One block per row (rows longer than a warp keeps in registers): block max, block sum of exp.
    L.source += fmt::format(
        "\n// {0} rows {1} x {2}\nextern \"C\" __global__ void __launch_bounds__(256) {3}({5}) {{\n"
        "  typedef unsigned long long I; const I S = 1; I b = (I)blockIdx.x * {2}ull;\n"
        "  float m = -__int_as_float(0x7f800000);\n"
        "  for (int j = threadIdx.x; j < {2}; j += 256) m = kl_max(m, {6}(x[b + j]));\n"
        "  m = kl_block_max(m);\n"
        "  float s = 0.f;\n"
        "  for (int j = threadIdx.x; j < {2}; j += 256) s += expf({6}(x[b + j]) - m);\n"
        "  s = kl_block_sum(s);\n"
        "  for (int j = threadIdx.x; j < {2}; j += 256) {{ float v = {6}(x[b + j]); {4} }}\n}}\n",
        n.label(), outer, len, name, fin, io_args(), X.ld);
    return L.kernel_node(n, name, {n.inputs[0]}, {n.outputs[0]}, outer, 256);
  }
  // One thread per (outer, inner) column.
  int64_t N = outer * inner;
  L.source += fmt::format(
      "\n// {0} {1} columns of {2}, stride {3}\nextern \"C\" __global__ void __launch_bounds__(256) {4}({6}) {{\n"
      "  typedef unsigned long long I; const I S = {3}ull;\n"
      "  for (I t = (I)blockIdx.x * 256 + threadIdx.x; t < {1}ull; t += (I)gridDim.x * 256) {{\n"
      "    I b = (t / S) * S * {2}ull + t % S;\n"
      "    float m = -__int_as_float(0x7f800000);\n"
      "    for (int j = 0; j < {2}; ++j) m = kl_max(m, {7}(x[b + (I)j * S]));\n"
      "    float s = 0.f;\n"
      "    for (int j = 0; j < {2}; ++j) s += expf({7}(x[b + (I)j * S]) - m);\n"
      "    for (int j = 0; j < {2}; ++j) {{ float v = {7}(x[b + (I)j * S]); {5} }}\n  }}\n}}\n",
      n.label(), N, len, inner, name, fin, io_args(), X.ld);
  return L.kernel_node(n, name, {n.inputs[0]}, {n.outputs[0]}, L.grid_for(N, 256), 256);
}

/// LayerNormalization over dims [axis, rank): one block per row, two passes.
/// RMSNormalization (opset 23; rms_norm.cpp makes it from a model's
/// decomposed form) is the same kernel with the mean taken as 0 and no bias.
ir::Node layer_norm(Lowering& L, const ir::Node& n) {
  const bool rms = n.op_type == "RMSNormalization";
  need_float(L, n, rms ? 2 : 3);
  auto x = L.dims(n, n.inputs[0]);
  int64_t r = static_cast<int64_t>(x.size());
  int64_t axis = norm_axis(n, n.i("axis", -1), r);
  int64_t rows = 1, D = 1;
  for (int64_t d = 0; d < axis; ++d) rows *= x[d];
  for (int64_t d = axis; d < r; ++d) D *= x[d];
  float eps = n.f("epsilon", 1e-5f);
  auto per_elem = [&](size_t i, const char* what) {
    if (i >= n.inputs.size() || n.inputs[i] == ir::kNoValue) return std::string();
    int64_t c = numel(L.dims(n, n.inputs[i]));
    if (c == D) return std::string("[j]");
    if (c == 1) return std::string("[0]");
    refuse(n, fmt::format("{} with {} elements broadcast over rows of {} is not supported", what, c, D));
  };
  std::string si = per_elem(1, "scale"), bi = rms ? std::string() : per_elem(2, "bias");
  bool has_bias = !bi.empty();
  std::vector<ir::ValueId> ins = {n.inputs[0], n.inputs[1]};
  if (has_bias) ins.push_back(n.inputs[2]);
  std::vector<ir::ValueId> outs = {n.outputs[0]};
  bool stats = !rms && n.outputs.size() > 1 && n.outputs[1] != ir::kNoValue;
  bool inv = !rms && n.outputs.size() > 2 && n.outputs[2] != ir::kNoValue;
  const Io X = io(L, n.inputs[0]), G = io(L, n.inputs[1]), Y = io(L, n.outputs[0]);
  const Io B = has_bias ? io(L, n.inputs[2]) : Io{"float", "", ""};
  std::string params = fmt::format("const {}* __restrict__ x, const {}* __restrict__ g, ", X.T, G.T);
  if (has_bias) params += fmt::format("const {}* __restrict__ bb, ", B.T);
  params += fmt::format("{}* __restrict__ y", Y.T);
  std::string mean_st, inv_st;
  if (stats) {
    const Io M = io(L, n.outputs[1]);
    params += fmt::format(", {}* __restrict__ mean_out", M.T);
    mean_st = M.st;
    outs.push_back(n.outputs[1]);
  }
  if (inv) {
    const Io V = io(L, n.outputs[2]);
    params += fmt::format(", {}* __restrict__ inv_out", V.T);
    inv_st = V.st;
    outs.push_back(n.outputs[2]);
  }
  std::string name = L.kernel_name("layernorm");
  if (D <= kWarpRowMax) {
    // One warp per row, the row in registers: read x once; mean, then the
    // variance of (x - mean) from the registers (two passes over registers).
    auto size_of = [&](ir::ValueId v) { return dtype_size(L.model.value(v).dtype); };
    const size_t xs = size_of(n.inputs[0]), ys = size_of(n.outputs[0]), gs = size_of(n.inputs[1]),
                 bs = has_bias ? size_of(n.inputs[2]) : 1;
    const bool g_vec = si == "[j]", b_vec = has_bias && bi == "[j]";
    size_t widest = std::max(xs, ys);
    std::vector<std::pair<std::string, size_t>> ptrs = {{"x", xs}, {"y", ys}};
    if (g_vec) widest = std::max(widest, gs), ptrs.emplace_back("g", gs);
    if (b_vec) widest = std::max(widest, bs), ptrs.emplace_back("bb", bs);
    const WarpRow w = warp_row(D, widest);
    std::string k = fmt::format("\n// {} rows {} x {} (warp per row, {} x {} per lane)\n", n.label(), rows, D, w.C, w.P);
    k += fmt::format("extern \"C\" __global__ void __launch_bounds__(256) {}({}) {{\n", name, params);
    k += warp_row_head(rows, D, w, ptrs);
    k += each_chunk(w, chunk_load(w, "x", "b", X, xs, "v[c]"));
    if (rms) {
      k += "  const float mean = 0.f;\n  float q = 0.f;\n";
    } else {
      k += "  float s = 0.f;\n";
      k += each_chunk(w, fmt::format("      #pragma unroll\n      for (int p = 0; p < {}; ++p) s += v[c][p];\n", w.P));
      k += fmt::format("  const float mean = kl_warp_sum(s) / (float){};\n  float q = 0.f;\n", D);
    }
    k += each_chunk(w, fmt::format(
                           "      #pragma unroll\n      for (int p = 0; p < {}; ++p) {{ float d = v[c][p] - mean; q += d * d; }}\n", w.P));
    k += fmt::format("  const float inv = 1.f / sqrtf(kl_warp_sum(q) / (float){} + {});\n", D, float_literal(eps));
    if (!g_vec) k += fmt::format("  const float g0 = {}(g[0]);\n", G.ld);
    if (has_bias && !b_vec) k += fmt::format("  const float b0 = {}(bb[0]);\n", B.ld);
    std::string body = fmt::format("      float gv[{}];\n", w.P);
    body += g_vec ? chunk_load(w, "g", "", G, gs, "gv")
                  : fmt::format("      #pragma unroll\n      for (int p = 0; p < {}; ++p) gv[p] = g0;\n", w.P);
    if (has_bias) {
      body += fmt::format("      float bv[{}];\n", w.P);
      body += b_vec ? chunk_load(w, "bb", "", B, bs, "bv")
                    : fmt::format("      #pragma unroll\n      for (int p = 0; p < {}; ++p) bv[p] = b0;\n", w.P);
    }
    body += chunk_store(w, "y", "b", Y, ys, has_bias ? "(v[c][p] - mean) * inv * gv[p] + bv[p]" : "(v[c][p] - mean) * inv * gv[p]");
    k += each_chunk(w, body);
    if (stats) k += fmt::format("  if (lane == 0) mean_out[row] = {}(mean);\n", mean_st);
    if (inv) k += fmt::format("  if (lane == 0) inv_out[row] = {}(inv);\n", inv_st);
    L.source += k + "}\n";
    return L.kernel_node(n, name, ins, outs, (rows + 7) / 8, 256);
  }
  L.source += fmt::format(
      "\n// {0} rows {1} x {2}\nextern \"C\" __global__ void __launch_bounds__(256) {3}({4}) {{\n"
      "  const unsigned long long b = (unsigned long long)blockIdx.x * {2}ull;\n"
      "{13}"
      "  float q = 0.f;\n"
      "  for (int j = threadIdx.x; j < {2}; j += 256) {{ float d = {10}(x[b + j]) - mean; q += d * d; }}\n"
      "  const float inv = 1.f / sqrtf(kl_block_sum(q) / (float){2} + {5});\n"
      "  for (int j = threadIdx.x; j < {2}; j += 256) y[b + j] = {11}(({10}(x[b + j]) - mean) * inv * {12}(g{6}){7});\n"
      "  {8}{9}\n}}\n",
      n.label(), rows, D, name, params, float_literal(eps), si,
      has_bias ? fmt::format(" + {}(bb{})", B.ld, bi) : "",
      stats ? fmt::format("if (threadIdx.x == 0) mean_out[blockIdx.x] = {}(mean); ", mean_st) : "",
      inv ? fmt::format("if (threadIdx.x == 0) inv_out[blockIdx.x] = {}(inv);", inv_st) : "", X.ld, Y.st, G.ld,
      rms ? std::string("  const float mean = 0.f;\n")
          : fmt::format("  float s = 0.f;\n  for (int j = threadIdx.x; j < {0}; j += 256) s += {1}(x[b + j]);\n"
                        "  const float mean = kl_block_sum(s) / (float){0};\n", D, X.ld));
  return L.kernel_node(n, name, ins, outs, rows, 256);
}

/// The reduced axes of a Reduce* whose axes are a run-time input, from the
/// static shapes: with keepdims, the dims that became 1 (reducing a dim of
/// size 1 changes nothing, so those are left alone); without, the one set of
/// removed dims that turns x's shape into y's. Refuses the node when the
/// shapes do not say (several removals fit).
std::vector<bool> axes_from_shapes(const ir::Node& n, const std::vector<int64_t>& x, const std::vector<int64_t>& y) {
  const size_t r = x.size();
  std::vector<bool> red(r, false);
  if (n.i("keepdims", 1) != 0) {
    if (y.size() != r) refuse(n, "the output rank does not match keepdims");
    for (size_t d = 0; d < r; ++d) {
      if (y[d] == x[d]) continue;
      if (y[d] != 1) refuse(n, "the output shape is not a reduction of the input shape");
      red[d] = true;
    }
    return red;
  }
  if (r > 20 || y.size() > r) refuse(n, "run-time axes with this rank");
  int found = 0;
  for (uint32_t mask = 0; mask < (1u << r); ++mask) {
    std::vector<int64_t> kept;
    for (size_t d = 0; d < r; ++d)
      if (!(mask >> d & 1)) kept.push_back(x[d]);
    if (kept != y) continue;
    // Removing a different set of size-1 dims gives the same result: count distinct outcomes.
    bool same = found > 0;
    if (found) {
      for (size_t d = 0; d < r; ++d)
        if (red[d] != static_cast<bool>(mask >> d & 1) && x[d] != 1) same = false;
    }
    if (!found || !same) {
      ++found;
      for (size_t d = 0; d < r; ++d) red[d] = mask >> d & 1;
    }
  }
  if (found != 1)
    refuse(n, "the axes are a run-time input and the static shapes do not say which dims are reduced (keepdims 0)");
  return red;
}

/// A normalisation over rows of D contiguous elements (one block per row, two
/// passes): y = (x - mean) * inv * scale[<scale_idx>] + bias[<bias_idx>],
/// with `row` and `j` (0..D) usable in the index expressions.
ir::Node row_norm(Lowering& L, const ir::Node& n, std::vector<ir::ValueId> ins, int64_t rows, int64_t D, float eps,
                  const std::string& scale_idx, const std::string& bias_idx) {
  std::string name = L.kernel_name(n.op_type);
  const Io X = io(L, ins[0]), G = io(L, ins[1]), B = io(L, ins[2]), Y = io(L, n.outputs[0]);
  L.source += fmt::format(
      "\n// {0} rows {1} x {2}\nextern \"C\" __global__ void __launch_bounds__(256) {3}(const {7}* __restrict__ x, "
      "const {8}* __restrict__ g, const {9}* __restrict__ bb, {10}* __restrict__ y) {{\n"
      "  const unsigned long long row = blockIdx.x, b = row * {2}ull;\n"
      "  float s = 0.f;\n"
      "  for (long long j = threadIdx.x; j < {2}; j += 256) s += {11}(x[b + j]);\n"
      "  const float mean = kl_block_sum(s) / (float){2};\n"
      "  float q = 0.f;\n"
      "  for (long long j = threadIdx.x; j < {2}; j += 256) {{ float d = {11}(x[b + j]) - mean; q += d * d; }}\n"
      "  const float inv = 1.f / sqrtf(kl_block_sum(q) / (float){2} + {4});\n"
      "  for (long long j = threadIdx.x; j < {2}; j += 256) y[b + j] = {14}(({11}(x[b + j]) - mean) * inv * {12}(g[{5}]) + {13}(bb[{6}]));\n}}\n",
      n.label(), rows, D, name, float_literal(eps), scale_idx, bias_idx, X.T, G.T, B.T, Y.T, X.ld, G.ld, B.ld, Y.st);
  return L.kernel_node(n, name, std::move(ins), {n.outputs[0]}, rows, 256);
}

/// InstanceNormalization, GroupNormalization (scale / bias per group before
/// opset 21, per channel from 21) and inference BatchNormalization.
ir::Node other_norm(Lowering& L, const ir::Node& n) {
  need_float(L, n, n.inputs.size());
  auto x = L.dims(n, n.inputs[0]);
  if (x.size() < 2) refuse(n, "input rank below 2");
  int64_t N = x[0], C = x[1], S = numel(x) / (N * C > 0 ? N * C : 1);
  float eps = n.f("epsilon", 1e-5f);
  if (n.op_type == "InstanceNormalization")
    return row_norm(L, n, {n.inputs[0], n.inputs[1], n.inputs[2]}, N * C, S, eps, "row % " + std::to_string(C),
                    "row % " + std::to_string(C));
  if (n.op_type == "GroupNormalization") {
    int64_t G = n.i("num_groups");
    if (G <= 0 || C % G) refuse(n, "num_groups does not divide the channels");
    int64_t per = numel(L.dims(n, n.inputs[1]));
    std::string idx = per == G ? fmt::format("row % {}", G)
                               : fmt::format("(row % {}) * {} + j / {}", G, C / G, S);
    if (per != G && per != C) refuse(n, "scale is neither per group nor per channel");
    return row_norm(L, n, {n.inputs[0], n.inputs[1], n.inputs[2]}, N * G, (C / G) * S, eps, idx, idx);
  }
  // BatchNormalization (inference): one thread per element.
  if (n.i("training_mode", 0) != 0) refuse(n, "training mode");
  for (size_t k = 1; k < n.outputs.size(); ++k)
    if (n.outputs[k] != ir::kNoValue) refuse(n, "the running statistics outputs");
  int64_t T = numel(x);
  std::string name = L.kernel_name("batchnorm");
  const Io X = io(L, n.inputs[0]), SC = io(L, n.inputs[1]), BI = io(L, n.inputs[2]), MU = io(L, n.inputs[3]),
           VA = io(L, n.inputs[4]), Y = io(L, n.outputs[0]);
  L.source += fmt::format(
      "\n// {0}\nextern \"C\" __global__ void __launch_bounds__(256) {1}(const {6}* __restrict__ x, const {7}* __restrict__ sc, "
      "const {8}* __restrict__ bi, const {9}* __restrict__ mu, const {10}* __restrict__ va, {11}* __restrict__ y) {{\n"
      "  for (unsigned long long i = (unsigned long long)blockIdx.x * 256 + threadIdx.x; i < {2}ull; i += (unsigned long long)gridDim.x * 256) {{\n"
      "    const unsigned long long c = (i / {3}ull) % {4}ull;\n"
      "    y[i] = {17}(({12}(x[i]) - {15}(mu[c])) / sqrtf({16}(va[c]) + {5}) * {13}(sc[c]) + {14}(bi[c]));\n  }}\n}}\n",
      n.label(), name, T, S, C, float_literal(eps), X.T, SC.T, BI.T, MU.T, VA.T, Y.T, X.ld, SC.ld, BI.ld, MU.ld, VA.ld,
      Y.st);
  return L.kernel_node(n, name, {n.inputs[0], n.inputs[1], n.inputs[2], n.inputs[3], n.inputs[4]}, {n.outputs[0]},
                       L.grid_for(T, 256), 256);
}

/// Reduce* and global pools: the reduced axes of x, and the op's accumulate / finish code.
ir::Node reduce(Lowering& L, const ir::Node& n) {
  const std::string& op = n.op_type;
  need_float(L, n);
  const Io X = io(L, n.inputs[0]), Y = io(L, n.outputs[0]);
  auto x = L.dims(n, n.inputs[0]);
  int64_t r = static_cast<int64_t>(x.size());
  std::vector<bool> red(r, false);
  if (op == "GlobalAveragePool" || op == "GlobalMaxPool") {
    for (int64_t d = 2; d < r; ++d) red[d] = true;
  } else if (n.inputs.size() > 1 && n.inputs[1] != ir::kNoValue && !L.model.value(n.inputs[1]).constant) {
    red = axes_from_shapes(n, x, L.dims(n, n.outputs[0]));
  } else {
    auto axes = const_ints(L.model, n, 1);
    bool noop = n.i("noop_with_empty_axes", 0) != 0;
    if (!axes || axes->empty()) {
      if (!noop) red.assign(r, true);
    } else {
      for (auto a : *axes) red[norm_axis(n, a, r)] = true;
    }
  }
  std::vector<int64_t> kept, reduced;
  for (int64_t d = 0; d < r; ++d) (red[d] ? reduced : kept).push_back(x[d]);
  int64_t N = numel(kept), R = numel(reduced);
  auto st = strides_of(x);
  // init, accumulate (acc, v), combine for the block reduction, finish (acc -> result)
  std::string init = "0.f", acc = "a += v;", block = "kl_block_sum", fin = "a";
  if (op == "ReduceMean" || op == "GlobalAveragePool") fin = fmt::format("a / (float){}", R);
  else if (op == "ReduceMax" || op == "GlobalMaxPool") init = "-__int_as_float(0x7f800000)", acc = "a = kl_max(a, v);", block = "kl_block_max";
  else if (op == "ReduceMin") init = "__int_as_float(0x7f800000)", acc = "a = kl_min(a, v);", block = "kl_block_min";
  else if (op == "ReduceProd") init = "1.f", acc = "a *= v;", block = "kl_block_prod";
  else if (op == "ReduceSumSquare") acc = "a += v * v;";
  else if (op == "ReduceL1") acc = "a += fabsf(v);";
  else if (op == "ReduceL2") acc = "a += v * v;", fin = "sqrtf(a)";
  else if (op == "ReduceLogSum") fin = "logf(a)";
  else if (op == "ReduceLogSumExp") acc = "a += expf(v);", fin = "logf(a)";  // see the note below
  else if (op != "ReduceSum") refuse(n, "this reduction is not generated");
  // Base offset of output element o (kept coords) and offset of reduced element t.
  auto offset = [&](const std::string& var, const std::string& from, bool of_reduced) {
    std::string s = fmt::format("unsigned long long {} = 0; {{ unsigned long long q = {};", var, from);
    for (int64_t d = r - 1; d >= 0; --d)
      if (red[d] == of_reduced && x[d] != 1) s += fmt::format(" {} += (q % {}ull) * {}ull; q /= {}ull;", var, x[d], st[d], x[d]);
    return s + " }";
  };
  std::string name = L.kernel_name(op);
  std::string comment = fmt::format("{} {} outputs x {} reduced", n.label(), N, R);
  if (R >= 64) {
    L.source += fmt::format(
        "\n// {0}\nextern \"C\" __global__ void __launch_bounds__(256) {1}(const {9}* __restrict__ x, {10}* __restrict__ y) {{\n"
        "  {2}\n  float a = {3};\n"
        "  for (unsigned long long t = threadIdx.x; t < {4}ull; t += 256) {{ {5} float v = {11}(x[base + off]); {6} }}\n"
        "  a = {7}(a);\n  if (threadIdx.x == 0) y[blockIdx.x] = {12}({8});\n}}\n",
        comment, name, offset("base", "blockIdx.x", false), init, R, offset("off", "t", true), acc, block, fin, X.T, Y.T,
        X.ld, Y.st);
    return L.kernel_node(n, name, {n.inputs[0]}, {n.outputs[0]}, N, 256);
  }
  L.source += fmt::format(
      "\n// {0}\nextern \"C\" __global__ void __launch_bounds__(256) {1}(const {9}* __restrict__ x, {10}* __restrict__ y) {{\n"
      "  for (unsigned long long o = (unsigned long long)blockIdx.x * 256 + threadIdx.x; o < {2}ull; o += (unsigned long long)gridDim.x * 256) {{\n"
      "    {3}\n    float a = {4};\n"
      "    for (unsigned long long t = 0; t < {5}ull; ++t) {{ {6} float v = {11}(x[base + off]); {7} }}\n"
      "    y[o] = {12}({8});\n  }}\n}}\n",
      comment, name, N, offset("base", "o", false), init, R, offset("off", "t", true), acc, fin, X.T, Y.T, X.ld, Y.st);
  return L.kernel_node(n, name, {n.inputs[0]}, {n.outputs[0]}, L.grid_for(N, 256), 256);
}

/// ArgMax / ArgMin along one axis: one thread per output, int64 indices.
ir::Node arg_reduce(Lowering& L, const ir::Node& n) {
  need_float(L, n, 1, /*outputs=*/false);
  const Io X = io(L, n.inputs[0]);
  auto x = L.dims(n, n.inputs[0]);
  int64_t r = static_cast<int64_t>(x.size());
  int64_t axis = norm_axis(n, n.i("axis", 0), r);
  int64_t outer = 1, len = x[axis], inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x[d];
  for (int64_t d = axis + 1; d < r; ++d) inner *= x[d];
  bool last = n.i("select_last_index", 0) != 0, mx = n.op_type == "ArgMax";
  std::string cmp = std::string(mx ? ">" : "<") + (last ? "=" : "");
  int64_t N = outer * inner;
  std::string name = L.kernel_name(n.op_type);
  L.source += fmt::format(
      "\n// {0}\nextern \"C\" __global__ void __launch_bounds__(256) {1}(const {7}* __restrict__ x, long long* __restrict__ y) {{\n"
      "  for (unsigned long long t = (unsigned long long)blockIdx.x * 256 + threadIdx.x; t < {2}ull; t += (unsigned long long)gridDim.x * 256) {{\n"
      "    unsigned long long b = (t / {3}ull) * {4}ull + t % {3}ull;\n"
      "    float best = {8}(x[b]); long long k = 0;\n"
      "    for (long long j = 1; j < {5}; ++j) {{ float v = {8}(x[b + j * {3}ull]); if (v {6} best) {{ best = v; k = j; }} }}\n"
      "    y[t] = k;\n  }}\n}}\n",
      n.label(), name, N, inner, len * inner, len, cmp, X.T, X.ld);
  return L.kernel_node(n, name, {n.inputs[0]}, {n.outputs[0]}, L.grid_for(N, 256), 256);
}

}  // namespace

std::vector<ir::Node> gen_reduce(Lowering& L, const ir::Node& n) {
  if (!n.domain.empty()) return {};
  const std::string& op = n.op_type;
  if (op == "Softmax" || op == "LogSoftmax" || op == "Hardmax") return {softmax(L, n)};
  if (op == "LayerNormalization" || op == "RMSNormalization") return {layer_norm(L, n)};
  if (op == "ArgMax" || op == "ArgMin") return {arg_reduce(L, n)};
  if (op == "InstanceNormalization" || op == "GroupNormalization" || op == "BatchNormalization") return {other_norm(L, n)};
  static const std::set<std::string> reductions = {"ReduceSum",    "ReduceMean",      "ReduceMax",      "ReduceMin",
                                                   "ReduceProd",   "ReduceSumSquare", "ReduceL1",       "ReduceL2",
                                                   "ReduceLogSum", "ReduceLogSumExp", "GlobalAveragePool", "GlobalMaxPool"};
  if (reductions.count(op)) return {reduce(L, n)};
  return {};
}

}  // namespace kiln::targets::cuda
