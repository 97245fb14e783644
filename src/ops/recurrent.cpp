// Recurrent layers: RNN, GRU and LSTM (https://onnx.ai/onnx/operators/
// onnx__RNN.html, onnx__GRU.html, onnx__LSTM.html, opset 14 forms; older
// opsets differ only in the missing `layout` attribute, which defaults to 0).
//
// Inputs (absent optional ones allowed): X, W, R, B, sequence_lens,
// initial_h, and for LSTM initial_c and P. Outputs: Y, Y_h (and Y_c).
// Layout 0: X [seq, batch, input], Y [seq, dirs, batch, hidden], states
// [dirs, batch, hidden]; layout 1: X [batch, seq, input], Y [batch, seq, dirs,
// hidden], states [batch, dirs, hidden]. Gate order in W/R/B: RNN i; GRU z, r,
// h; LSTM i, o, f, c; LSTM peepholes P: i, o, f.
//
// Semantics kiln implements (ONNX spec; where it is silent, as ONNX Runtime):
// - `clip` bounds every gate's pre-activation to [-clip, clip].
// - activations: per direction f (RNN), f, g (GRU), f, g, h (LSTM); a list of
//   only one direction's functions is used for both. activation_alpha/beta
//   with one value per activation are positional (as ONNX Runtime reads
//   them); a shorter list is consumed in order by the functions that take the
//   value; a function left without one uses its ONNX operator's default.
// - sequence_lens: batch entry b runs len_b steps (the reverse direction
//   starts at step len_b - 1); Y is 0 at steps >= len_b and Y_h/Y_c hold the
//   state after the last valid step (the initial state when len_b is 0).
// - LSTM input_forget = 1 couples the gates: f = 1 - i.
// float32 and float64.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/gemm_kernel.h"
#include "ops/rnn_activation.h"
#include "ops/util.h"

namespace kiln::ops {
namespace {

enum class Cell { rnn, gru, lstm };

Cell cell_of(const ir::Node& n) {
  if (n.op_type == "RNN") return Cell::rnn;
  if (n.op_type == "GRU") return Cell::gru;
  return Cell::lstm;
}

/// Gates per cell: RNN 1, GRU 3, LSTM 4.
int64_t num_gates(Cell c) { return c == Cell::rnn ? 1 : c == Cell::gru ? 3 : 4; }

/// Activation functions per direction: RNN 1, GRU 2, LSTM 3.
size_t acts_per_dir(Cell c) { return c == Cell::rnn ? 1 : c == Cell::gru ? 2 : 3; }

/// Default activations of one direction.
std::vector<std::string> default_activations(Cell c) {
  if (c == Cell::rnn) return {"Tanh"};
  if (c == Cell::gru) return {"Sigmoid", "Tanh"};
  return {"Sigmoid", "Tanh", "Tanh"};
}

/// The node's activations for `dirs` directions (dirs * acts_per_dir entries),
/// defaults filled in; see read_activations in ops/rnn_activation.h.
std::vector<Activation> read_cell_activations(const ir::Node& n, Cell cell, int64_t dirs) {
  return read_activations(n, default_activations(cell), dirs, ActParams::positional_if_full);
}

// ---------------------------------------------------------------- attributes

struct RnnAttrs {
  Cell cell;
  int64_t dirs = 1;
  bool reverse_only = false;  ///< direction == "reverse"
  int64_t layout = 0;
  int64_t hidden = -1;        ///< hidden_size attribute, -1 when absent
  float clip = 0;             ///< 0: no clipping
  bool input_forget = false;
  bool linear_before_reset = false;
};

RnnAttrs read_attrs(const ir::Node& n) {
  RnnAttrs a;
  a.cell = cell_of(n);
  const std::string dir = n.s("direction", "forward");
  if (dir == "bidirectional") a.dirs = 2;
  else if (dir == "reverse") a.reverse_only = true;
  else if (dir != "forward")
    fail(ErrorCode::invalid_model, "{}: direction '{}' is not forward, reverse or bidirectional", n.label(), dir);
  a.layout = n.i("layout", 0);
  if (a.layout != 0 && a.layout != 1)
    fail(ErrorCode::invalid_model, "{}: layout must be 0 or 1, got {}", n.label(), a.layout);
  a.hidden = n.i("hidden_size", -1);
  if (n.has("hidden_size") && a.hidden <= 0)
    fail(ErrorCode::invalid_model, "{}: hidden_size must be positive, got {}", n.label(), a.hidden);
  if (n.has("clip")) {
    a.clip = n.f("clip");
    if (!(a.clip > 0)) fail(ErrorCode::invalid_model, "{}: clip must be positive, got {}", n.label(), a.clip);
  }
  a.input_forget = n.i("input_forget", 0) != 0;
  a.linear_before_reset = n.i("linear_before_reset", 0) != 0;
  return a;
}

// ---------------------------------------------------------------- shape inference

/// Dim i of an optional shape, or an anonymous symbol.
ir::Dim dim_or_unknown(const std::optional<ir::Shape>& s, size_t i) {
  return s && s->size() > i ? (*s)[i] : ir::Dim::sym("");
}

std::vector<OutType> infer_recurrent(const InferContext& ctx) {
  const ir::Node& n = ctx.node;
  const RnnAttrs a = read_attrs(n);
  read_cell_activations(n, a.cell, a.dirs);  // validates names and counts
  const size_t max_out = a.cell == Cell::lstm ? 3 : 2;
  if (ctx.num_outputs > max_out)
    fail(ErrorCode::invalid_model, "{}: has {} outputs, at most {}", n.label(), ctx.num_outputs, max_out);
  const InType& x = ctx.in(0);
  const InType& w = ctx.in(1);
  const InType& r = ctx.in(2);
  if (x.dtype != DType::f32 && x.dtype != DType::f64) unsupported_dtype(n, x.dtype, "input 0 (X)");
  for (size_t i : {size_t{1}, size_t{2}, size_t{3}, size_t{5}, size_t{6}, size_t{7}})
    if (ctx.has(i) && ctx.inputs[i].dtype != x.dtype)
      fail(ErrorCode::invalid_model, "{}: input {} has dtype {}, X has {}", n.label(), i,
           dtype_name(ctx.inputs[i].dtype), dtype_name(x.dtype));
  if (ctx.has(4) && ctx.in(4).dtype != DType::i32)
    fail(ErrorCode::invalid_model, "{}: sequence_lens must be int32, got {}", n.label(), dtype_name(ctx.in(4).dtype));
  if (x.shape && x.shape->size() != 3)
    fail(ErrorCode::invalid_model, "{}: X must be 3-D, got {}", n.label(), ir::shape_str(x.shape));
  if (w.shape && w.shape->size() != 3)
    fail(ErrorCode::invalid_model, "{}: W must be 3-D, got {}", n.label(), ir::shape_str(w.shape));
  if (r.shape && r.shape->size() != 3)
    fail(ErrorCode::invalid_model, "{}: R must be 3-D, got {}", n.label(), ir::shape_str(r.shape));
  ir::Dim hidden = a.hidden > 0 ? ir::Dim::known(a.hidden) : dim_or_unknown(r.shape, 2);
  if (a.hidden > 0 && r.shape && (*r.shape)[2].is_static() && (*r.shape)[2].value != a.hidden)
    fail(ErrorCode::invalid_model, "{}: hidden_size {} does not match R {}", n.label(), a.hidden,
         ir::shape_str(r.shape));
  const ir::Dim seq = dim_or_unknown(x.shape, a.layout == 0 ? 0 : 1);
  const ir::Dim batch = dim_or_unknown(x.shape, a.layout == 0 ? 1 : 0);
  const ir::Dim dirs = ir::Dim::known(a.dirs);
  std::vector<OutType> out(ctx.num_outputs);
  for (size_t i = 0; i < ctx.num_outputs; ++i) {
    out[i].dtype = x.dtype;
    if (i == 0)
      out[i].shape = a.layout == 0 ? ir::Shape{seq, dirs, batch, hidden} : ir::Shape{batch, seq, dirs, hidden};
    else
      out[i].shape = a.layout == 0 ? ir::Shape{dirs, batch, hidden} : ir::Shape{batch, dirs, hidden};
  }
  return out;
}

// ---------------------------------------------------------------- kernel

/// Sizes of one call, checked against every input.
struct Dims {
  int64_t seq, batch, input, hidden, gates, dirs;
};

void expect_shape(const ir::Node& n, const Tensor& t, const std::vector<int64_t>& want, const char* what) {
  if (t.shape() != want)
    fail(ErrorCode::invalid_input, "{}: {} has shape [{}], expected [{}]", n.label(), what,
         shape_to_string(t.shape()), shape_to_string(want));
}

Dims check_inputs(const KernelContext& ctx, const RnnAttrs& a) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  const Tensor& w = ctx.in(1);
  const Tensor& r = ctx.in(2);
  if (x.rank() != 3 || w.rank() != 3 || r.rank() != 3)
    fail(ErrorCode::invalid_input, "{}: X, W and R must be 3-D, got {}, {}, {}", n.label(), x.describe(),
         w.describe(), r.describe());
  Dims d;
  d.seq = x.dim(a.layout == 0 ? 0 : 1);
  d.batch = x.dim(a.layout == 0 ? 1 : 0);
  d.input = x.dim(2);
  d.gates = num_gates(a.cell);
  d.dirs = a.dirs;
  d.hidden = a.hidden > 0 ? a.hidden : r.dim(2);
  const int64_t gh = d.gates * d.hidden;
  expect_shape(n, w, {d.dirs, gh, d.input}, "W");
  expect_shape(n, r, {d.dirs, gh, d.hidden}, "R");
  if (ctx.has(3)) expect_shape(n, ctx.in(3), {d.dirs, 2 * gh}, "B");
  if (ctx.has(4)) {
    expect_shape(n, ctx.in(4), {d.batch}, "sequence_lens");
    const int32_t* len = ctx.in(4).data<int32_t>();
    for (int64_t b = 0; b < d.batch; ++b)
      if (len[b] < 0 || len[b] > d.seq)
        fail(ErrorCode::invalid_input, "{}: sequence_lens[{}] = {} is outside [0, {}]", n.label(), b, len[b], d.seq);
  }
  const std::vector<int64_t> state =
      a.layout == 0 ? std::vector<int64_t>{d.dirs, d.batch, d.hidden} : std::vector<int64_t>{d.batch, d.dirs, d.hidden};
  if (ctx.has(5)) expect_shape(n, ctx.in(5), state, "initial_h");
  if (a.cell == Cell::lstm && ctx.has(6)) expect_shape(n, ctx.in(6), state, "initial_c");
  if (a.cell == Cell::lstm && ctx.has(7)) expect_shape(n, ctx.in(7), {d.dirs, 3 * d.hidden}, "P");
  return d;
}

/// C[M, N] = A[M, K] * B[N, K]^T (beta = 0), float32 through the packed GEMM.
template <class T>
void gemm_abt(int64_t M, int64_t N, int64_t K, const T* A, const T* B, T* C) {
  if constexpr (std::is_same_v<T, float>) sgemm(false, true, M, N, K, 1.0f, A, K, B, K, 0.0f, C, N);
  else gemm_simple<T>(false, true, M, N, K, T(1), A, K, B, K, T(0), C, N);
}

/// Everything one direction's recurrence reads and writes.
template <class T>
struct DirectionRun {
  const RnnAttrs& a;
  const Dims& d;
  const Activation* act;      ///< this direction's activations
  const T* w;                 ///< [gates*hidden, input]
  const T* r;                 ///< [gates*hidden, hidden]
  const T* bias;              ///< [2*gates*hidden] (Wb then Rb) or nullptr
  const T* peep;              ///< LSTM [3*hidden] (i, o, f) or nullptr
  const int32_t* lens;        ///< [batch] or nullptr
  bool reverse;
  std::vector<T> h, c;        ///< [batch, hidden] state, set from initial_h/c by the caller
  T* y;                       ///< full Y tensor or nullptr
  int64_t dir_index;

  T clip(T v) const { return a.clip > 0 ? std::clamp(v, T(-a.clip), T(a.clip)) : v; }
  int64_t len(int64_t b) const { return lens ? lens[b] : d.seq; }
  /// Row of X (and of the precomputed X*W^T) for time t and batch entry b.
  int64_t x_row(int64_t t, int64_t b) const { return a.layout == 0 ? t * d.batch + b : b * d.seq + t; }
  T* y_at(int64_t t, int64_t b) const {
    const int64_t i = a.layout == 0 ? ((t * d.dirs + dir_index) * d.batch + b) : ((b * d.seq + t) * d.dirs + dir_index);
    return y + i * d.hidden;
  }
  T bias_at(int64_t g) const { return bias ? bias[g] + bias[d.gates * d.hidden + g] : T(0); }
  T wbias_at(int64_t g) const { return bias ? bias[g] : T(0); }
  T rbias_at(int64_t g) const { return bias ? bias[d.gates * d.hidden + g] : T(0); }

  void run(const T* x) {
    const int64_t H = d.hidden, GH = d.gates * H;
    std::vector<T> xw(static_cast<size_t>(d.seq * d.batch * GH));
    gemm_abt<T>(d.seq * d.batch, GH, d.input, x, w, xw.data());
    std::vector<T> hr(static_cast<size_t>(d.batch * GH)), rh(static_cast<size_t>(d.batch * H));
    std::vector<T> h_new(h.size());
    for (int64_t s = 0; s < d.seq; ++s) {
      // H_prev * R^T for all batch entries (GRU without linear_before_reset
      // needs only the z and r rows here; its h rows come after the reset).
      const int64_t rows = (a.cell == Cell::gru && !a.linear_before_reset) ? 2 * H : GH;
      gemm_hrt(rows, hr.data());
      if (a.cell == Cell::gru && !a.linear_before_reset) gru_reset_product(s, xw.data(), hr.data(), rh.data());
      for (int64_t b = 0; b < d.batch; ++b) {
        if (s >= len(b)) continue;
        const int64_t t = reverse ? len(b) - 1 - s : s;
        const T* g_x = xw.data() + x_row(t, b) * GH;
        const T* g_h = hr.data() + b * GH;
        T* hb = h_new.data() + b * H;
        switch (a.cell) {
          case Cell::rnn: step_rnn(g_x, g_h, hb); break;
          case Cell::gru: step_gru(g_x, g_h, rh.data() + b * H, h.data() + b * H, hb); break;
          case Cell::lstm: step_lstm(g_x, g_h, c.data() + b * H, hb); break;
        }
        if (y) std::memcpy(y_at(t, b), hb, static_cast<size_t>(H) * sizeof(T));
      }
      for (int64_t b = 0; b < d.batch; ++b)
        if (s < len(b)) std::copy(h_new.begin() + b * H, h_new.begin() + (b + 1) * H, h.begin() + b * H);
    }
  }

  /// out[b, 0:rows] = h[b, :] * r[0:rows, :]^T.
  void gemm_hrt(int64_t rows, T* out) const {
    const int64_t H = d.hidden, GH = d.gates * H;
    if (rows == GH) {
      gemm_abt<T>(d.batch, GH, H, h.data(), r, out);
    } else {
      std::vector<T> tmp(static_cast<size_t>(d.batch * rows));
      gemm_abt<T>(d.batch, rows, H, h.data(), r, tmp.data());
      for (int64_t b = 0; b < d.batch; ++b) std::copy(tmp.begin() + b * rows, tmp.begin() + (b + 1) * rows, out + b * GH);
    }
  }

  /// GRU, linear_before_reset = 0: rh[b] = (r_t (.) H_prev[b]) * Rh^T.
  void gru_reset_product(int64_t s, const T* xw, const T* hr, T* rh) const {
    const int64_t H = d.hidden, GH = d.gates * H;
    std::vector<T> reset_h(static_cast<size_t>(d.batch * H), T(0));
    for (int64_t b = 0; b < d.batch; ++b) {
      if (s >= len(b)) continue;
      const int64_t t = reverse ? len(b) - 1 - s : s;
      const T* g_x = xw + x_row(t, b) * GH;
      for (int64_t j = 0; j < H; ++j) {
        const T rg = act[0](clip(g_x[H + j] + hr[b * GH + H + j] + bias_at(H + j)));
        reset_h[static_cast<size_t>(b * H + j)] = rg * h[static_cast<size_t>(b * H + j)];
      }
    }
    gemm_abt<T>(d.batch, H, H, reset_h.data(), r + 2 * H * H, rh);
  }

  void step_rnn(const T* g_x, const T* g_h, T* out) const {
    for (int64_t j = 0; j < d.hidden; ++j) out[j] = act[0](clip(g_x[j] + g_h[j] + bias_at(j)));
  }

  /// GRU gates z, r, h; `rh` is (r (.) H_prev) * Rh^T when linear_before_reset = 0.
  void step_gru(const T* g_x, const T* g_h, const T* rh, const T* h_prev, T* out) const {
    const int64_t H = d.hidden;
    for (int64_t j = 0; j < H; ++j) {
      const T z = act[0](clip(g_x[j] + g_h[j] + bias_at(j)));
      const T rg = act[0](clip(g_x[H + j] + g_h[H + j] + bias_at(H + j)));
      T pre;
      if (a.linear_before_reset)
        pre = g_x[2 * H + j] + wbias_at(2 * H + j) + rg * (g_h[2 * H + j] + rbias_at(2 * H + j));
      else
        pre = g_x[2 * H + j] + wbias_at(2 * H + j) + rh[j] + rbias_at(2 * H + j);
      const T ht = act[1](clip(pre));
      out[j] = (T(1) - z) * ht + z * h_prev[j];
    }
  }

  /// LSTM gates i, o, f, c; updates the cell state `cb` in place.
  void step_lstm(const T* g_x, const T* g_h, T* cb, T* out) const {
    const int64_t H = d.hidden;
    for (int64_t j = 0; j < H; ++j) {
      const T c_prev = cb[j];
      const T pi = peep ? peep[j] : T(0), po = peep ? peep[H + j] : T(0), pf = peep ? peep[2 * H + j] : T(0);
      const T ig = act[0](clip(g_x[j] + g_h[j] + bias_at(j) + pi * c_prev));
      const T fg = a.input_forget ? T(1) - ig : act[0](clip(g_x[2 * H + j] + g_h[2 * H + j] + bias_at(2 * H + j) + pf * c_prev));
      const T cg = act[1](clip(g_x[3 * H + j] + g_h[3 * H + j] + bias_at(3 * H + j)));
      const T c_new = fg * c_prev + ig * cg;
      const T og = act[0](clip(g_x[H + j] + g_h[H + j] + bias_at(H + j) + po * c_new));
      cb[j] = c_new;
      out[j] = og * act[2](c_new);
    }
  }
};

/// Copies direction `dir` of a state tensor (layout-dependent) into dst [batch, hidden], or zeros.
template <class T>
void load_state(const Tensor* src, const RnnAttrs& a, const Dims& d, int64_t dir, std::vector<T>& dst) {
  dst.assign(static_cast<size_t>(d.batch * d.hidden), T(0));
  if (!src) return;
  for (int64_t b = 0; b < d.batch; ++b) {
    const int64_t row = a.layout == 0 ? dir * d.batch + b : b * d.dirs + dir;
    std::copy_n(src->data<T>() + row * d.hidden, d.hidden, dst.begin() + b * d.hidden);
  }
}

/// Writes dst's direction `dir` of a state output from src [batch, hidden].
template <class T>
void store_state(Tensor& dst, const RnnAttrs& a, const Dims& d, int64_t dir, const std::vector<T>& src) {
  for (int64_t b = 0; b < d.batch; ++b) {
    const int64_t row = a.layout == 0 ? dir * d.batch + b : b * d.dirs + dir;
    std::copy_n(src.begin() + b * d.hidden, d.hidden, dst.data<T>() + row * d.hidden);
  }
}

bool wanted(const KernelContext& ctx, size_t i) {
  return i < ctx.num_outputs() && ctx.node.outputs[i] != ir::kNoValue;
}

template <class T>
void recurrent_typed(KernelContext& ctx, const RnnAttrs& a) {
  const Dims d = check_inputs(ctx, a);
  const std::vector<Activation> acts = read_cell_activations(ctx.node, a.cell, a.dirs);
  const size_t per = acts_per_dir(a.cell);
  const DType dt = ctx.in(0).dtype();
  const std::vector<int64_t> state_shape = a.layout == 0 ? std::vector<int64_t>{d.dirs, d.batch, d.hidden}
                                                         : std::vector<int64_t>{d.batch, d.dirs, d.hidden};
  T* y = nullptr;
  if (wanted(ctx, 0)) {
    Tensor& yt = ctx.output(0, dt, a.layout == 0 ? std::vector<int64_t>{d.seq, d.dirs, d.batch, d.hidden}
                                                 : std::vector<int64_t>{d.batch, d.seq, d.dirs, d.hidden});
    y = yt.data<T>();
    std::fill_n(y, yt.numel(), T(0));  // steps past a sequence's length stay 0
  }
  Tensor* yh = wanted(ctx, 1) ? &ctx.output(1, dt, state_shape) : nullptr;
  Tensor* yc = a.cell == Cell::lstm && wanted(ctx, 2) ? &ctx.output(2, dt, state_shape) : nullptr;
  const int64_t GH = d.gates * d.hidden;
  for (int64_t dir = 0; dir < d.dirs; ++dir) {
    DirectionRun<T> run{a,
                        d,
                        acts.data() + dir * static_cast<int64_t>(per),
                        ctx.in(1).data<T>() + dir * GH * d.input,
                        ctx.in(2).data<T>() + dir * GH * d.hidden,
                        ctx.has(3) ? ctx.in(3).data<T>() + dir * 2 * GH : nullptr,
                        a.cell == Cell::lstm && ctx.has(7) ? ctx.in(7).data<T>() + dir * 3 * d.hidden : nullptr,
                        ctx.has(4) ? ctx.in(4).data<int32_t>() : nullptr,
                        a.reverse_only || dir == 1,
                        {},
                        {},
                        y,
                        dir};
    load_state(ctx.has(5) ? &ctx.in(5) : nullptr, a, d, dir, run.h);
    load_state(a.cell == Cell::lstm && ctx.has(6) ? &ctx.in(6) : nullptr, a, d, dir, run.c);
    run.run(ctx.in(0).data<T>());
    if (yh) store_state(*yh, a, d, dir, run.h);
    if (yc) store_state(*yc, a, d, dir, run.c);
  }
}

void recurrent_kernel(KernelContext& ctx) {
  const RnnAttrs a = read_attrs(ctx.node);
  KILN_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx.node, "input 0 (X)", recurrent_typed<scalar_t>(ctx, a));
}

}  // namespace

/// Registers RNN, GRU and LSTM (float32/float64; see the file comment).
void register_recurrent(Registry& r) {
  r.add({"", "RNN", infer_recurrent, recurrent_kernel});
  r.add({"", "GRU", infer_recurrent, recurrent_kernel});
  r.add({"", "LSTM", infer_recurrent, recurrent_kernel});
}

}  // namespace kiln::ops
