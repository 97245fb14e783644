// kiln.cpu.LSTM: oneDNN's LSTM primitive (one layer, forward inference).
//
// Inputs: X [T, N, I] (plain tnc), weights_layer [1, D, I, 4, H] and
// weights_iter [1, D, H, 4, H] (ldigo, oneDNN's gate order i, f, c~, o),
// bias [1, D, 4, H] (ldgo), then optional initial_h and initial_c
// [D, N, H] (kNoValue: zeros). Outputs: Y [T, D, N, H] (written as oneDNN's
// dst_layer [T, N, D * H]: the same bytes, as the lowering only makes this
// node for N == 1 or D == 1), then optional Y_h and Y_c [D, N, H] (dst_iter
// [1, D, N, H]). Attributes: hidden (H), direction (dnnl::rnn_direction).
// oneDNN takes the two states of a side together (src_iter with src_iter_c,
// dst_iter with dst_iter_c): when ONNX gives only one, the other is bound to
// zeros (initial) or to a buffer of this run that is dropped (final).
// The lowering (compile/lower_lstm.cpp) reorders ONNX's i, o, f, c gates and
// sums its two biases.
#include <unordered_map>

#include "support/error.h"
#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets::cpu {

namespace {

/// The dims the descriptors need, from the node's values and attributes.
struct LstmDims {
  int64_t T = 0, N = 0, I = 0, H = 0, D = 1;
  dnnl::rnn_direction dir = dnnl::rnn_direction::unidirectional_left2right;
  bool h0 = false, c0 = false, yh = false, yc = false;
};

bool present(const std::vector<ir::ValueId>& v, size_t i) { return i < v.size() && v[i] != ir::kNoValue; }

LstmDims lstm_dims(const ir::Node& n, const ir::Model& m) {
  if (n.inputs.size() < 4 || n.outputs.empty() || n.outputs[0] == ir::kNoValue)
    fail(ErrorCode::corrupt_artifact, "{}: an LSTM needs X, two weights, a bias and the output Y", n.label());
  const ir::Value& x = m.value(n.inputs[0]);
  if (x.dtype != DType::f32 || !x.shape || !ir::is_static(*x.shape) || x.shape->size() != 3)
    fail(ErrorCode::corrupt_artifact, "{}: X '{}' must be a float32 [T, N, I] tensor of static shape", n.label(), x.name);
  const auto xd = ir::to_sizes(*x.shape);
  LstmDims d;
  d.T = xd[0];
  d.N = xd[1];
  d.I = xd[2];
  d.H = n.i("hidden");
  d.dir = static_cast<dnnl::rnn_direction>(n.i("direction"));
  if (d.dir == dnnl::rnn_direction::bidirectional_concat) d.D = 2;
  else if (d.dir != dnnl::rnn_direction::unidirectional_left2right &&
           d.dir != dnnl::rnn_direction::unidirectional_right2left)
    fail(ErrorCode::corrupt_artifact, "{}: LSTM direction {} is not one kiln makes", n.label(), n.i("direction"));
  if (d.H <= 0 || (d.D == 2 && d.N != 1))
    fail(ErrorCode::corrupt_artifact, "{}: hidden {} with {} directions and batch {} is not an LSTM kiln makes",
         n.label(), d.H, d.D, d.N);
  d.h0 = present(n.inputs, 4);
  d.c0 = present(n.inputs, 5);
  d.yh = present(n.outputs, 1);
  d.yc = present(n.outputs, 2);
  return d;
}

md_t tagged(const dims_t& dims, tag t) { return md_t(dims, dnnl::memory::data_type::f32, t); }

md_t state_md(const LstmDims& d, bool used) { return used ? tagged({1, d.D, d.N, d.H}, tag::ldnc) : md_t(); }

/// oneDNN's descriptors for (h, c) given which of the two ONNX has: both or neither.
md_t pair_md(const LstmDims& d, bool h, bool c) { return state_md(d, h || c); }

/// The primitive and what one execution binds.
struct LstmState {
  dnnl::primitive prim;
  LstmDims d;
  md_t src_layer, src_iter, src_iter_c, wei_layer, wei_iter, bias, dst_layer, dst_iter, dst_iter_c, scratch;
  size_t scratch_bytes = 0;

  void run(ops::KernelContext& ctx) const {
    std::unordered_map<int, dnnl::memory> args;
    args[DNNL_ARG_SRC_LAYER] = wrap(src_layer, ctx.in(0).raw());
    args[DNNL_ARG_WEIGHTS_LAYER] = wrap(wei_layer, ctx.in(1).raw());
    args[DNNL_ARG_WEIGHTS_ITER] = wrap(wei_iter, ctx.in(2).raw());
    args[DNNL_ARG_BIAS] = wrap(bias, ctx.in(3).raw());
    // The state ONNX leaves out when it gives the other one: zeros in, dropped out.
    // Per run (not in LstmState): runs of one session may execute at once.
    std::vector<float> zeros, dropped;
    const size_t state_numel = static_cast<size_t>(d.D * d.N * d.H);
    if (d.h0 != d.c0) zeros.assign(state_numel, 0.f);
    if (d.yh != d.yc) dropped.resize(state_numel);
    if (d.h0 || d.c0) {
      args[DNNL_ARG_SRC_ITER] = wrap(src_iter, d.h0 ? ctx.in(4).raw() : zeros.data());
      args[DNNL_ARG_SRC_ITER_C] = wrap(src_iter_c, d.c0 ? ctx.in(5).raw() : zeros.data());
    }
    const std::vector<int64_t> state{d.D, d.N, d.H};
    args[DNNL_ARG_DST_LAYER] = wrap(dst_layer, ctx.output(0, DType::f32, {d.T, d.D, d.N, d.H}).raw());
    if (d.yh || d.yc) {
      args[DNNL_ARG_DST_ITER] = wrap(dst_iter, d.yh ? ctx.output(1, DType::f32, state).raw() : dropped.data());
      args[DNNL_ARG_DST_ITER_C] = wrap(dst_iter_c, d.yc ? ctx.output(2, DType::f32, state).raw() : dropped.data());
    }
    if (scratch_bytes) args[DNNL_ARG_SCRATCHPAD] = wrap(scratch, thread_scratch(scratch_bytes));
    try {
      prim.execute(stream(), args);
      stream().wait();
    } catch (const dnnl::error& e) {
      fail(ErrorCode::internal, "{}: oneDNN LSTM execution failed: {}", ctx.node.label(), e.what());
    }
  }
};

}  // namespace

dnnl::lstm_forward::primitive_desc lstm_pd(const ir::Node& n, const ir::Model& m) {
  const LstmDims d = lstm_dims(n, m);
  return guarded(n, "LSTM", [&] {
    dnnl::lstm_forward::desc desc(
        dnnl::prop_kind::forward_inference, d.dir, tagged({d.T, d.N, d.I}, tag::tnc), pair_md(d, d.h0, d.c0),
        pair_md(d, d.h0, d.c0), tagged({1, d.D, d.I, 4, d.H}, tag::ldigo), tagged({1, d.D, d.H, 4, d.H}, tag::ldigo),
        tagged({1, d.D, 4, d.H}, tag::ldgo), tagged({d.T, d.N, d.D * d.H}, tag::tnc), pair_md(d, d.yh, d.yc),
        pair_md(d, d.yh, d.yc));
    return dnnl::lstm_forward::primitive_desc(desc, make_attr(n), engine());
  });
}

BoundKernel make_lstm(const ir::Node& n, const ir::Model& m) {
  auto st = std::make_shared<LstmState>();
  st->d = lstm_dims(n, m);
  auto pd = lstm_pd(n, m);
  st->src_layer = pd.src_layer_desc();
  st->src_iter = pd.src_iter_desc();
  st->src_iter_c = pd.src_iter_c_desc();
  st->wei_layer = pd.weights_layer_desc();
  st->wei_iter = pd.weights_iter_desc();
  st->bias = pd.bias_desc();
  st->dst_layer = pd.dst_layer_desc();
  st->dst_iter = pd.dst_iter_desc();
  st->dst_iter_c = pd.dst_iter_c_desc();
  st->scratch = pd.scratchpad_desc();
  st->scratch_bytes = md_bytes(st->scratch);
  // The stored weights are plain ldigo / ldgo: the primitive must take them as they are.
  expect_same_md(n, "weights_layer layout", st->wei_layer, tagged({1, st->d.D, st->d.I, 4, st->d.H}, tag::ldigo));
  expect_same_md(n, "weights_iter layout", st->wei_iter, tagged({1, st->d.D, st->d.H, 4, st->d.H}, tag::ldigo));
  st->prim = guarded(n, "LSTM primitive", [&] { return dnnl::lstm_forward(pd); });
  return [st](ops::KernelContext& ctx) { st->run(ctx); };
}

}  // namespace kiln::targets::cpu
