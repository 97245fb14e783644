// ONNX Runtime's contrib operator com.microsoft::DynamicQuantizeLSTM (opset
// 1): an ONNX LSTM (layout 0, gate order i, o, f, c; peepholes i, o, f) whose
// weights are int8/uint8 and whose float inputs to each weight product are
// quantized on the fly. ONNX Runtime's CPU kernel defines the operator (its
// ContribOperators.md gives only the signature); kiln matches onnxruntime
// 1.32.0's arithmetic.
//
// Inputs: X [seq, batch, input] f32; W [dirs, input, 4*hidden] and R [dirs,
// hidden, 4*hidden], int8 or uint8 (transposed relative to ONNX LSTM's W/R);
// optional B [dirs, 8*hidden], sequence_lens [batch] int32, initial_h and
// initial_c [dirs, batch, hidden], P [dirs, 3*hidden] (all f32 but
// sequence_lens); W_scale / W_zero_point and R_scale / R_zero_point: [dirs]
// (per tensor) or [dirs, 4*hidden] (per output column), the zero point of its
// weight's dtype, the scale f32. Outputs (each optional): Y [seq, dirs, batch,
// hidden], Y_h and Y_c [dirs, batch, hidden], f32. Attributes: hidden_size
// (required), direction, activations (3 per direction), activation_alpha /
// activation_beta (consumed in order by the functions that take them), clip,
// input_forget.
//
// Arithmetic, as ONNX Runtime computes it:
// - Every product A * B of a float A (the X rows or the hidden states) with a
//   quantized weight B is integer: qa = the uint8 DynamicQuantizeLinear of the
//   whole of A (one scale sa and zero point za), acc = sum_k (qa - za)(qb - zb)
//   in int32, result float(acc) * (sa * sb[column]). zb is the direction's
//   first zero point: per-column int8 zero points must all be 0, per-column
//   uint8 ones all equal (ONNX Runtime refuses other values; so does kiln).
// - X * W is one product per direction over the rows of the first
//   max(sequence_lens) steps of every batch entry (padding rows included in
//   the range); H * R is one product per step over all batch entries. (With
//   more than one intra-op thread ONNX Runtime splits the batch into one H * R
//   product per thread when batch > 4, or batch >= 2 and hidden <= 256; each
//   part then has its own range. kiln computes the one-thread result.)
// - A batch entry past its length enters the next steps' H * R products as 0
//   when Y is an output (ONNX Runtime reads Y's zeroed row back as the state),
//   as its last hidden state otherwise (for a length of 0 without Y, ONNX
//   Runtime reads an unset buffer; kiln uses initial_h).
// - Gates: g = X*W + H*R (+ P (.) C) + (Wb + Rb), clipped to [-clip, clip]
//   when clip is set; C = f (.) C_prev + i (.) c; H = o (.) h(C); input_forget
//   gives f = 1 - i. sequence_lens: entry b runs len_b steps (the reverse
//   direction from step len_b - 1); Y is 0 past len_b, and Y_h / Y_c are 0
//   where len_b is 0.
#include <algorithm>
#include <cstring>
#include <exception>

#include "ops/dynamic_quantize_lstm.h"
#include "ops/gemm_kernel.h"
#include "ops/quant_common.h"
#include "ops/rnn_activation.h"

namespace kiln::ops {
namespace {

constexpr int64_t kGates = 4;
const std::vector<std::string> kDefaultActs = {"Sigmoid", "Tanh", "Tanh"};

// Input slots.
enum Slot : size_t { kX, kW, kR, kB, kLens, kH0, kC0, kP, kWScale, kWZero, kRScale, kRZero };

struct Attrs {
  int64_t dirs = 1;
  bool reverse_only = false;
  int64_t hidden = 0;
  float clip = 0;  ///< 0: no clipping
  bool input_forget = false;
};

Attrs read_attrs(const ir::Node& n) {
  Attrs a;
  const std::string dir = n.s("direction", "forward");
  if (dir == "bidirectional") a.dirs = 2;
  else if (dir == "reverse") a.reverse_only = true;
  else if (dir != "forward")
    fail(ErrorCode::invalid_model, "{}: direction '{}' is not forward, reverse or bidirectional", n.label(), dir);
  if (!n.has("hidden_size")) fail(ErrorCode::invalid_model, "{}: attribute 'hidden_size' is required", n.label());
  a.hidden = n.i("hidden_size");
  if (a.hidden <= 0) fail(ErrorCode::invalid_model, "{}: hidden_size must be positive, got {}", n.label(), a.hidden);
  if (n.i("layout", 0) != 0)
    fail(ErrorCode::unsupported, "{}: attribute 'layout' = {} is not supported (DynamicQuantizeLSTM is layout 0 only)",
         n.label(), n.i("layout", 0));
  if (n.has("clip")) {
    a.clip = n.f("clip");
    if (!(a.clip > 0)) fail(ErrorCode::invalid_model, "{}: clip must be positive, got {}", n.label(), a.clip);
  }
  a.input_forget = n.i("input_forget", 0) != 0;
  return a;
}

std::vector<Activation> read_acts(const ir::Node& n, const Attrs& a) {
  return read_activations(n, kDefaultActs, a.dirs, ActParams::in_order, /*repeat_single=*/false);
}

bool is_8bit(DType t) { return t == DType::i8 || t == DType::u8; }

// ---------------------------------------------------------------- shape inference

ir::Dim dim_or_unknown(const std::optional<ir::Shape>& s, size_t i) {
  return s && s->size() > i ? (*s)[i] : ir::Dim::sym("");
}

void check_dtype(const InferContext& ctx, size_t i, DType want, const char* what) {
  if (ctx.has(i) && ctx.inputs[i].dtype != want)
    fail(ErrorCode::invalid_model, "{}: {} must be {}, got {}", ctx.node.label(), what, dtype_name(want),
         dtype_name(ctx.inputs[i].dtype));
}

void check_rank(const InferContext& ctx, size_t i, size_t rank, const char* what) {
  if (ctx.has(i) && ctx.inputs[i].shape && ctx.inputs[i].shape->size() != rank)
    fail(ErrorCode::invalid_model, "{}: {} must be {}-D, got {}", ctx.node.label(), what, rank,
         ir::shape_str(ctx.inputs[i].shape));
}

std::vector<OutType> infer_dq_lstm(const InferContext& ctx) {
  const ir::Node& n = ctx.node;
  const Attrs a = read_attrs(n);
  read_acts(n, a);  // validates names and counts
  if (ctx.num_outputs > 3) fail(ErrorCode::invalid_model, "{}: has {} outputs, at most 3", n.label(), ctx.num_outputs);
  for (Slot i : {kX, kW, kR, kWScale, kWZero, kRScale, kRZero}) ctx.in(i);  // required
  if (ctx.in(kX).dtype != DType::f32) unsupported_dtype(n, ctx.in(kX).dtype, "input 0 (X)");
  for (size_t i : {size_t{kW}, size_t{kR}})
    if (!is_8bit(ctx.in(i).dtype)) unsupported_dtype(n, ctx.in(i).dtype, i == kW ? "input 1 (W)" : "input 2 (R)");
  check_dtype(ctx, kB, DType::f32, "B");
  check_dtype(ctx, kLens, DType::i32, "sequence_lens");
  check_dtype(ctx, kH0, DType::f32, "initial_h");
  check_dtype(ctx, kC0, DType::f32, "initial_c");
  check_dtype(ctx, kP, DType::f32, "P");
  check_dtype(ctx, kWScale, DType::f32, "W_scale");
  check_dtype(ctx, kRScale, DType::f32, "R_scale");
  check_dtype(ctx, kWZero, ctx.in(kW).dtype, "W_zero_point (W's dtype)");
  check_dtype(ctx, kRZero, ctx.in(kR).dtype, "R_zero_point (R's dtype)");
  check_rank(ctx, kX, 3, "X");
  check_rank(ctx, kW, 3, "W");
  check_rank(ctx, kR, 3, "R");
  const std::optional<ir::Shape>& xs = ctx.in(kX).shape;
  const ir::Dim seq = dim_or_unknown(xs, 0), batch = dim_or_unknown(xs, 1);
  const ir::Dim dirs = ir::Dim::known(a.dirs), hidden = ir::Dim::known(a.hidden);
  std::vector<OutType> out(ctx.num_outputs);
  for (size_t i = 0; i < ctx.num_outputs; ++i) {
    out[i].dtype = DType::f32;
    out[i].shape = i == 0 ? ir::Shape{seq, dirs, batch, hidden} : ir::Shape{dirs, batch, hidden};
  }
  return out;
}

// ---------------------------------------------------------------- quantized weights

/// One direction's quantized weight as the integer product uses it.
struct QuantWeight {
  std::vector<int32_t> w;    ///< [K, N] row-major, zero point subtracted (empty with a products hook)
  std::vector<float> scale;  ///< 1 (per tensor) or N (per column) values
  int64_t N = 0;
  bool recurrent = false;  ///< R (else W), for the hook
  int64_t dir = 0;
  const DqLstmProducts* hook = nullptr;  ///< computes the product instead of w
};

void expect_shape(const ir::Node& n, const Tensor& t, const std::vector<int64_t>& want, const char* what) {
  if (t.shape() != want)
    fail(ErrorCode::invalid_input, "{}: {} has shape [{}], expected [{}]", n.label(), what,
         shape_to_string(t.shape()), shape_to_string(want));
}

/// Checks a scale / zero-point pair of a weight with N columns: [dirs] or
/// [dirs, N], the zero point shaped like the scale and typed like the weight,
/// per-column zero points as ONNX Runtime accepts them. Returns the number
/// of scales per direction (1 or N).
int64_t check_quant_params(const ir::Node& n, const Tensor& weight, const Tensor& scale, const Tensor& zp, int64_t dirs,
                           int64_t N, const char* what) {
  const bool per_column = scale.rank() == 2;
  if (!((scale.rank() == 1 && scale.dim(0) == dirs) || (per_column && scale.dim(0) == dirs && scale.dim(1) == N)))
    fail(ErrorCode::invalid_input, "{}: {}_scale has shape [{}], expected [{}] (per tensor) or [{}, {}] (per column)",
         n.label(), what, shape_to_string(scale.shape()), dirs, dirs, N);
  if (scale.dtype() != DType::f32) unsupported_dtype(n, scale.dtype(), what);
  if (zp.shape() != scale.shape())
    fail(ErrorCode::invalid_input, "{}: {}_zero_point has shape [{}], {}_scale [{}]; they must match", n.label(), what,
         shape_to_string(zp.shape()), what, shape_to_string(scale.shape()));
  if (zp.dtype() != weight.dtype())
    fail(ErrorCode::invalid_input, "{}: {}_zero_point is {}, its weight {}", n.label(), what, dtype_name(zp.dtype()),
         dtype_name(weight.dtype()));
  if (per_column) {
    const bool is_signed = zp.dtype() == DType::i8;
    const uint8_t* z = zp.data<uint8_t>();
    for (int64_t i = 0; i < zp.numel(); ++i)
      if (is_signed ? z[i] != 0 : z[i] != z[0])
        fail(ErrorCode::unsupported, "{}: per-column {}_zero_point must be {} (element {} is {})", n.label(), what,
             is_signed ? "0 for int8 weights" : "one value for uint8 weights", i,
             is_signed ? static_cast<int>(static_cast<int8_t>(z[i])) : static_cast<int>(z[i]));
  }
  return per_column ? N : 1;
}

/// Direction `dir` of weight [dirs, K, N] minus its zero point (the
/// direction's first one), with its scales; only the scales when `hook`
/// computes the products.
QuantWeight load_weight(const Tensor& weight, const Tensor& scale, const Tensor& zp, int64_t dir, int64_t per_dir,
                        bool recurrent, const DqLstmProducts* hook) {
  const int64_t K = weight.dim(1), N = weight.dim(2);
  QuantWeight q;
  q.N = N;
  q.recurrent = recurrent;
  q.dir = dir;
  q.hook = hook;
  q.scale.assign(scale.data<float>() + dir * per_dir, scale.data<float>() + (dir + 1) * per_dir);
  if (hook) return q;
  q.w.resize(static_cast<size_t>(K * N));
  const bool is_signed = weight.dtype() == DType::i8;
  const int64_t off = dir * K * N;
  const int32_t z = is_signed ? zp.data<int8_t>()[dir * per_dir] : zp.data<uint8_t>()[dir * per_dir];
  for (int64_t i = 0; i < K * N; ++i)
    q.w[static_cast<size_t>(i)] =
        (is_signed ? int32_t{weight.data<int8_t>()[off + i]} : int32_t{weight.data<uint8_t>()[off + i]}) - z;
  return q;
}

/// out[M, N] = float(sum_k (qa[m, k] - za) * w[k, n]) * (sa * w.scale[n]),
/// (qa, sa, za) the dynamic uint8 quantization of all of A [M, K].
void quant_product(const float* a, int64_t M, int64_t K, const QuantWeight& w, float* out) {
  const int64_t N = w.N;
  const DynamicU8Params p = dynamic_u8_params(a, M * K);
  const int32_t za = static_cast<int32_t>(p.zero_point);
  std::vector<int32_t> acc(static_cast<size_t>(M * N));
  if (w.hook) {
    std::vector<uint8_t> qa(static_cast<size_t>(M * K));
    for (int64_t i = 0; i < M * K; ++i) qa[static_cast<size_t>(i)] = quantize_u8(a[i], p);
    w.hook->product(w.recurrent, w.dir, qa.data(), za, M, K, acc.data());
  } else {
    std::vector<int32_t> qa(static_cast<size_t>(M * K));
    for (int64_t i = 0; i < M * K; ++i) qa[static_cast<size_t>(i)] = int32_t{quantize_u8(a[i], p)} - za;
    gemm_simple<int32_t>(false, false, M, N, K, 1, qa.data(), K, w.w.data(), N, 0, acc.data(), N);
  }
  std::vector<float> mult(w.scale.size());
  for (size_t s = 0; s < w.scale.size(); ++s) mult[s] = p.scale * w.scale[s];
  const bool per_column = mult.size() > 1;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t j = 0; j < N; ++j)
      out[m * N + j] = static_cast<float>(acc[static_cast<size_t>(m * N + j)]) * mult[per_column ? j : 0];
}

// ---------------------------------------------------------------- recurrence

/// Sizes of one call, checked against every input.
struct Dims {
  int64_t seq, batch, input, hidden, dirs;
};

Dims check_inputs(const KernelContext& ctx, const Attrs& a) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(kX);
  if (x.dtype() != DType::f32) unsupported_dtype(n, x.dtype(), "input 0 (X)");
  if (x.rank() != 3) fail(ErrorCode::invalid_input, "{}: X must be 3-D, got {}", n.label(), x.describe());
  Dims d{x.dim(0), x.dim(1), x.dim(2), a.hidden, a.dirs};
  const int64_t GH = kGates * d.hidden;
  expect_shape(n, ctx.in(kW), {d.dirs, d.input, GH}, "W");
  expect_shape(n, ctx.in(kR), {d.dirs, d.hidden, GH}, "R");
  for (size_t i : {size_t{kW}, size_t{kR}})
    if (!is_8bit(ctx.in(i).dtype())) unsupported_dtype(n, ctx.in(i).dtype(), i == kW ? "input 1 (W)" : "input 2 (R)");
  for (size_t i : {size_t{kB}, size_t{kH0}, size_t{kC0}, size_t{kP}})
    if (ctx.has(i) && ctx.in(i).dtype() != DType::f32) unsupported_dtype(n, ctx.in(i).dtype(), "a float input");
  if (ctx.has(kB)) expect_shape(n, ctx.in(kB), {d.dirs, 2 * GH}, "B");
  if (ctx.has(kLens)) {
    expect_shape(n, ctx.in(kLens), {d.batch}, "sequence_lens");
    if (ctx.in(kLens).dtype() != DType::i32) unsupported_dtype(n, ctx.in(kLens).dtype(), "sequence_lens");
    const int32_t* len = ctx.in(kLens).data<int32_t>();
    for (int64_t b = 0; b < d.batch; ++b)
      if (len[b] < 0 || len[b] > d.seq)
        fail(ErrorCode::invalid_input, "{}: sequence_lens[{}] = {} is outside [0, {}]", n.label(), b, len[b], d.seq);
  }
  if (ctx.has(kH0)) expect_shape(n, ctx.in(kH0), {d.dirs, d.batch, d.hidden}, "initial_h");
  if (ctx.has(kC0)) expect_shape(n, ctx.in(kC0), {d.dirs, d.batch, d.hidden}, "initial_c");
  if (ctx.has(kP)) expect_shape(n, ctx.in(kP), {d.dirs, 3 * d.hidden}, "P");
  return d;
}

/// One direction's recurrence. Y (when wanted) is the whole [seq, dirs,
/// batch, hidden] output, zero-filled by the caller.
struct Direction {
  const Attrs& a;
  const Dims& d;
  const Activation* act;  ///< f, g, h of this direction
  const float* bias;      ///< Wb + Rb per gate row [4*hidden], or nullptr
  const float* peep;      ///< [3*hidden] (i, o, f) or nullptr
  std::vector<int64_t> lens;
  bool reverse;
  int64_t dir;
  float* y;                    ///< Y or nullptr
  std::vector<float> h, c;     ///< [batch, hidden] state, initial values set by the caller
  std::vector<float> yh, yc;   ///< [batch, hidden] final states

  float clip(float v) const { return a.clip > 0 ? std::clamp(v, -a.clip, a.clip) : v; }

  void run(const float* x, const QuantWeight& w, const QuantWeight& r) {
    const int64_t H = d.hidden, GH = kGates * H;
    const int64_t max_len = lens.empty() ? 0 : *std::max_element(lens.begin(), lens.end());
    yh.assign(static_cast<size_t>(d.batch * H), 0.0f);
    yc = yh;
    if (max_len == 0) return;
    // X * W over the first max_len steps of every batch entry, in X's row order.
    std::vector<float> xw(static_cast<size_t>(max_len * d.batch * GH));
    quant_product(x, max_len * d.batch, d.input, w, xw.data());
    std::vector<float> hr(static_cast<size_t>(d.batch * GH)), h_next(h.size());
    for (int64_t s = 0; s < max_len; ++s) {
      quant_product(h.data(), d.batch, H, r, hr.data());
      for (int64_t b = 0; b < d.batch; ++b) {
        float* hb = h_next.data() + b * H;
        if (s >= lens[b]) {  // finished: see the file comment
          if (y) std::fill_n(hb, H, 0.0f);
          else std::copy_n(h.data() + b * H, H, hb);
          continue;
        }
        const int64_t t = reverse ? lens[b] - 1 - s : s;
        step(xw.data() + (t * d.batch + b) * GH, hr.data() + b * GH, c.data() + b * H, hb);
        if (y) std::copy_n(hb, H, y + ((t * d.dirs + dir) * d.batch + b) * H);
        if (s == lens[b] - 1) {
          std::copy_n(hb, H, yh.data() + b * H);
          std::copy_n(c.data() + b * H, H, yc.data() + b * H);
        }
      }
      h.swap(h_next);
    }
  }

  /// Gate pre-activation of row j of gate g (0 i, 1 o, 2 f, 3 c), in ONNX
  /// Runtime's order of float operations.
  float pre(const float* gx, const float* gh, int64_t g, int64_t j, float peep_term) const {
    const int64_t k = g * d.hidden + j;
    float v = gx[k] + gh[k];
    v += peep_term;
    if (bias) v += bias[k];
    return clip(v);
  }

  /// One LSTM cell step for one batch entry; updates cb in place, writes out.
  void step(const float* gx, const float* gh, float* cb, float* out) const {
    const int64_t H = d.hidden;
    for (int64_t j = 0; j < H; ++j) {
      const float c_prev = cb[j];
      const float ig = act[0](pre(gx, gh, 0, j, peep ? c_prev * peep[j] : 0.0f));
      const float fg = a.input_forget ? 1.0f - ig : act[0](pre(gx, gh, 2, j, peep ? c_prev * peep[2 * H + j] : 0.0f));
      const float cg = act[1](pre(gx, gh, 3, j, 0.0f));
      const float c_new = c_prev * fg + ig * cg;
      const float og = act[0](pre(gx, gh, 1, j, peep ? c_new * peep[H + j] : 0.0f));
      cb[j] = c_new;
      out[j] = act[2](c_new) * og;
    }
  }
};

bool wanted(const KernelContext& ctx, size_t i) {
  return i < ctx.num_outputs() && ctx.node.outputs[i] != ir::kNoValue;
}

/// Direction `dir` of an optional [dirs, batch, hidden] state input, or zeros.
std::vector<float> load_state(const KernelContext& ctx, size_t slot, const Dims& d, int64_t dir) {
  const int64_t n = d.batch * d.hidden;
  if (!ctx.has(slot)) return std::vector<float>(static_cast<size_t>(n), 0.0f);
  const float* p = ctx.in(slot).data<float>() + dir * n;
  return std::vector<float>(p, p + n);
}

}  // namespace

void dynamic_quantize_lstm(KernelContext& ctx, const DqLstmProducts* products) {
  const ir::Node& n = ctx.node;
  const Attrs a = read_attrs(n);
  const Dims d = check_inputs(ctx, a);
  const std::vector<Activation> acts = read_acts(n, a);
  const int64_t GH = kGates * d.hidden;
  const int64_t w_per = check_quant_params(n, ctx.in(kW), ctx.in(kWScale), ctx.in(kWZero), d.dirs, GH, "W");
  const int64_t r_per = check_quant_params(n, ctx.in(kR), ctx.in(kRScale), ctx.in(kRZero), d.dirs, GH, "R");
  float* y = nullptr;
  if (wanted(ctx, 0)) {
    Tensor& yt = ctx.output(0, DType::f32, {d.seq, d.dirs, d.batch, d.hidden});
    y = yt.data<float>();
    std::fill_n(y, yt.numel(), 0.0f);
  }
  Tensor* yh = wanted(ctx, 1) ? &ctx.output(1, DType::f32, {d.dirs, d.batch, d.hidden}) : nullptr;
  Tensor* yc = wanted(ctx, 2) ? &ctx.output(2, DType::f32, {d.dirs, d.batch, d.hidden}) : nullptr;
  std::vector<int64_t> lens(static_cast<size_t>(d.batch), d.seq);
  if (ctx.has(kLens))
    for (int64_t b = 0; b < d.batch; ++b) lens[static_cast<size_t>(b)] = ctx.in(kLens).data<int32_t>()[b];
  // Each direction writes its own parts of Y, Y_h and Y_c: with a products
  // hook that allows it, the directions run on threads of their own (an
  // exception cannot leave an OpenMP region: it is kept and rethrown).
  auto one_direction = [&](int64_t dir) {
    std::vector<float> bias;
    if (ctx.has(kB)) {
      const float* bp = ctx.in(kB).data<float>() + dir * 2 * GH;
      bias.resize(static_cast<size_t>(GH));
      for (int64_t k = 0; k < GH; ++k) bias[static_cast<size_t>(k)] = bp[k] + bp[GH + k];  // Wb + Rb, fused first
    }
    Direction run{a,
                  d,
                  acts.data() + dir * 3,
                  bias.empty() ? nullptr : bias.data(),
                  ctx.has(kP) ? ctx.in(kP).data<float>() + dir * 3 * d.hidden : nullptr,
                  lens,
                  a.reverse_only || dir == 1,
                  dir,
                  y,
                  load_state(ctx, kH0, d, dir),
                  load_state(ctx, kC0, d, dir),
                  {},
                  {}};
    const QuantWeight w = load_weight(ctx.in(kW), ctx.in(kWScale), ctx.in(kWZero), dir, w_per, false, products);
    const QuantWeight r = load_weight(ctx.in(kR), ctx.in(kRScale), ctx.in(kRZero), dir, r_per, true, products);
    run.run(ctx.in(kX).data<float>(), w, r);
    const int64_t n_state = d.batch * d.hidden;
    if (yh) std::copy(run.yh.begin(), run.yh.end(), yh->data<float>() + dir * n_state);
    if (yc) std::copy(run.yc.begin(), run.yc.end(), yc->data<float>() + dir * n_state);
  };
  const int threads = products ? static_cast<int>(std::min<int64_t>(d.dirs, products->direction_threads())) : 1;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(d.dirs));
#pragma omp parallel for schedule(static, 1) num_threads(std::max(threads, 1)) if (threads > 1)
  for (int64_t dir = 0; dir < d.dirs; ++dir) {
    try {
      one_direction(dir);
    } catch (...) {
      errors[static_cast<size_t>(dir)] = std::current_exception();
    }
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

namespace {

void dq_lstm_kernel(KernelContext& ctx) { dynamic_quantize_lstm(ctx, nullptr); }

}  // namespace

/// Registers com.microsoft DynamicQuantizeLSTM (see the file comment).
void register_dynamic_quantize_lstm(Registry& r) {
  r.add({"com.microsoft", "DynamicQuantizeLSTM", infer_dq_lstm, dq_lstm_kernel});
}

}  // namespace kiln::ops
