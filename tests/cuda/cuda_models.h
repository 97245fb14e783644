// Small ONNX models for the cuda target's tests (tests/cuda).
#pragma once
#include "../unit/onnx/model_builder.h"
#include "ir/graph.h"
#include "kiln/options.h"

namespace kiln::testing {

/// `b` imported with its input shapes bound, shapes inferred, constants
/// folded and dead code removed: what the cuda pipeline hands to its
/// passes and lowering (minus the algebraic rewrites).
ir::Model imported_model(const ModelBuilder& b);

/// Sets a float attribute on a node.
void attr_float(onnx::NodeProto& n, const std::string& name, float v);

/// A model touching every cuda kernel family except matmuls (no GPU needed
/// to compile it): x float32[2,4,8], idx int64[3] -> outputs
///   soft  = Softmax(Tanh(x * 0.5 + c8), axis -1)          (fused element-wise chain + softmax)
///   tr    = Transpose(soft, perm 0,2,1)                   [2,8,4]
///   sl    = Slice(Concat(x, Gather(x, idx, axis 1), axis 1), starts 1, ends 6, axis 1)  [2,5,8]
///   ln    = LayerNormalization(x - ReduceMean(x, axis 2, keepdims), g8, b8)   [2,4,8]
///   rs    = Reshape(ReduceSum(x, axis 1, keepdims 0), [16])   [16]
///   wh    = Where(x > 0, x, Exp(x) - 1)                   [2,4,8]
ModelBuilder kernels_model();

/// kernels_model() plus matmuls (cuBLASLt): mm = Relu(MatMul(x, W[8,8]) + b[8])
/// (bias + Relu epilogue), bmm = MatMul(soft, tr) (batched [2,4,4]), and
/// gm = Gemm(Reshape(x,[8,8]), W2[5,8], C[5], transB=1, alpha 0.5) [8,5].
ModelBuilder matmul_model();

/// Pooling windows only (no GPU needed to compile): x float32[1,4,9,9] ->
///   mp = MaxPool(x, kernel 3, strides 2, pads 1)                         [1,4,5,5]
///   ap = AveragePool(x, kernel 3, strides 2, pads 1, count_include_pad 0)  [1,4,5,5]
///   ai = AveragePool(x, kernel 2, strides 2, ceil_mode 1, count_include_pad 1) [1,4,5,5]
ModelBuilder pool_model();

/// A small ResNet-like network (cuDNN convolutions, GPU only): x float32[2,3,16,16] ->
/// Relu(Conv 3x3 + bias) -> MaxPool 3/2 -> residual block (Conv + bias, Add, Relu)
/// -> depthwise Conv stride 2 (group 8) -> GlobalAveragePool -> Flatten ->
/// Gemm(transB) -> y [2,10].
ModelBuilder conv_model();

/// A ResNet-style block with unfolded-looking BatchNormalizations (the cuda
/// pipeline folds them into the convolutions): x float32[2,3,16,16] ->
/// Relu(BN(Conv 3x3)) -> BN(Conv 3x3) + residual -> Relu -> MaxPool 2/2 ->
/// GlobalAveragePool -> Flatten -> Gemm(transB) -> y [2,10].
ModelBuilder conv_bn_model();

/// A pre-norm transformer block (d_model 32, 2 heads of 16, seq 8, batch 2,
/// feed-forward 64): x float32[2,8,32] -> LayerNormalization -> Q/K/V
/// MatMul + bias -> Reshape/Transpose -> scores MatMul * 0.25 -> Softmax ->
/// MatMul -> Transpose/Reshape -> output MatMul + bias -> residual Add ->
/// LayerNormalization -> MatMul + bias -> Relu -> MatMul + bias -> residual
/// Add = y [2,8,32]; and rms = y / Sqrt(ReduceMean(y * y, -1) + 1e-5)
/// [2,8,32] (a decomposed variance-style normalization).
ModelBuilder attention_model();

/// Two attentions the cuda target fuses into its attention kernel (GPU only
/// to run):
///   y [2,100,192]: x float32[2,100,192], mask m float32[2,1,100,100]; Q/K/V =
///     MatMul(x, W*) split into 3 heads of 64 (Reshape, Transpose); torch.onnx's
///     scaled_dot_product_attention form: Q * 0.35355, K^T as onnxscript
///     writes it (Reshape to [6,100,64], Transpose, Reshape to [2,3,64,100])
///     then * 0.35355, + m, Softmax, Where(IsNaN(P), 0, P), Dropout
///     (inference), MatMul V,
///     Transpose / Reshape back.
///   c [6,30,40]: q float32[6,30,40], k / v float32[6,70,40] (rank 3, no
///     mask, Sq != Skv, head dim 40): Softmax(q k^T / sqrt(40)) v.
ModelBuilder attention_mask_model();

/// Self-attention from one packed Q/K/V projection (GPU only to run): x
/// float32[2,10,32] -> P = MatMul(x, W[32,96]) + B[96], then
///   form "gather" (torch's nn.MultiheadAttention as exported):
///     Reshape [2,10,3,2,16], Transpose [2,0,3,1,4] -> [3,2,2,10,16], Q / K / V
///     = Gather(., 0 / 1 / 2, axis 0) (scalar indices);
///   form "split" (GPT-2's c_attn): Split(P, axis 2, [32,32,32]), each
///     Reshape [2,10,2,16] and Transpose [0,2,1,3];
///   form "gather-q-out": "gather" with Q also a graph output "q" [2,2,10,16];
/// then Softmax(Q K^T * 0.25) V, Transpose [0,2,1,3], Reshape -> y [2,10,32].
/// Form "mha" (torch.nn.MultiheadAttention as torch.onnx's dynamo exporter
/// writes it): x transposed to [10,2,32] first, P Reshape [10,2,3,32],
/// Unsqueeze 0, Transpose [3,1,2,0,4], Squeeze -2, Gathers, each Reshape
/// [10,4,16] (heads across the batch) and Transpose [1,0,2], Q and V Reshape
/// [2,2,10,16], K Reshape [4,10,16] / Transpose / Reshape [2,2,16,10]; the
/// context Transpose [2,0,1,3] and Reshape -> y [20,32].
ModelBuilder packed_qkv_attention_model(const std::string& form);

/// Self-attention with a scaling after the mask (fused by the cuda target,
/// GPU only to run): x float32[2,2,70,16] -> Softmax((x x^T * 0.25 + m)
/// <after_op> after) x = y [2,2,70,16], m a [70] constant (0 .. 0.6),
/// after_op "Mul" or "Div": the scaling after the Add scales the mask too.
ModelBuilder scaled_after_mask_model(const std::string& after_op, float after);

/// 1x1 convolutions (GPU only to run): x float32[2,6,5,7] ->
///   s  = Conv1x1(Relu(Conv1x1(x, W1[4,6,1,1]) + B1), W2[6,4,1,1]) + x   [2,6,5,7]  (two cuBLASLt matmuls)
///   c3 = Conv1x1(s, W3[5,6,1,1], strides 2)                              [2,5,3,4]  (cuDNN: strided)
ModelBuilder pointwise_model();

/// A residual matmul (GPU only to run): x float32[1,6,8] ->
///   y = Relu(x + (MatMul(x, W[8,8]) + B[8]))   [1,6,8]: one cuBLASLt matmul (bias epilogue, x as C, Relu)
ModelBuilder residual_model();

/// Channels-last layout (to_nhwc) corner cases: x float32[2,4,9,9], z float32[2,6,4,4] ->
///   r1 = Relu(Conv 3x3 pad 1 + B1)                       [2,8,9,9]  (also an output: leaves the region mid-way)
///   ap = AveragePool(r1 * S[8,1,1], kernel 3, strides 2, pads 1)  [2,8,5,5] (per-channel constant permuted)
///   mp = MaxPool(Conv1x1(ap) + B2, kernel 2, strides 1)  [2,6,4,4]  (1x1 conv as a matmul with bias epilogue)
///   s  = Sigmoid(mp + z)                                  [2,6,4,4]  (z enters the region through a transpose)
///   c4 = Conv1x1(s, W4[1,6,1,1])                          [2,1,4,4]  (one channel: leaves through a reshape)
///   c5 = Conv(r1, W5[4,8,3,3], dilations 2, pads 2)       [2,4,9,9]
///   c6 = Conv(r1, W6[8,4,3,3], group 2, pads 1)           [2,8,9,9]
ModelBuilder nhwc_model();

/// Channels-last beyond convolutions (to_nhwc: global pools, Split, Concat,
/// a rank-4 operand of another shape): x float32[2,8,10,10], z float32[2,1,10,10] ->
///   r1 = Relu(Conv 3x3 pad 1 (8 -> 16) + B1)                               [2,16,10,10]
///   m  = r1 * Sigmoid(Conv1x1(Relu(Conv1x1(GlobalAveragePool(r1)) + Bf1)) + Bf2)   (squeeze-and-excitation)
///   a, b = Split(m, axis 1, [8, 8]);  y = Concat(b, a, axis 1) + z           [2,16,10,10]
///   gm = GlobalMaxPool(m)                                                   [2,16,1,1]
ModelBuilder nhwc_se_model();

/// Symbolic batch (shape buckets): x float32[N, 8] -> y = Sigmoid(Softmax(MatMul(x,
/// W[8,8]) + B[8])) [N, 8]: one cuBLASLt matmul (bias epilogue) and two
/// generated kernels whose loop bounds bake in N.
ModelBuilder batch_model();

/// The row-wise kernels (opset 20; every input float32 with the shape given):
/// for L in softmax_lengths(): input s<L> [13, L] -> sm<L> = Softmax(axis -1),
/// lsm<L> = LogSoftmax(axis -1); s3d [2, 3, 128] -> sm3d; sc [2, 100, 3] ->
/// smc = Softmax(axis 1) (strided rows).
ModelBuilder softmax_rows_model();
std::vector<int64_t> softmax_lengths();  ///< 1, 7, 32, 100, 128, 1000, 1030, 3000

/// LayerNormalization (opset 20): for D in layer_norm_sizes(): input l<D>
/// [7, D], scale g<D> and bias b<D> [D] (initializers) -> ln<D> with Mean
/// lnm<D> and InvStdDev lni<D> [7, 1], lnnb<D> (no bias, y only); l768 ->
/// lns768 (scale of shape [1], no bias); l3 [6, 4, 192] -> ln3 (axis 1, scale
/// and bias [4, 192]).
ModelBuilder layer_norm_rows_model();
std::vector<int64_t> layer_norm_sizes();  ///< 5, 768, 1024, 1500

/// Fused element-wise chains (opset 20), none with a count that is a multiple of 8:
///   ec = Relu(e [2,3,5,7] + c [3,1,1])                     (per-channel constant)
///   es = e2 [3,1001] * 0.75 + 1                            (scalars)
///   ef = Relu(ea [4,1001] + eb [4,1001])                   (two full-shape inputs)
///   gt = Greater(ea, eb)                                   (bool output)
///   ge = Gelu(g [33,3077]); gd = g * 0.5 * (1 + Erf(g / 1.4142135))   (Gelu and its decomposition)
///   gh = Gelu(g, approximate tanh)
///   big = Relu(b1 [3,3000001] + b2 [3,3000001])           (a grid-stride loop)
ModelBuilder elementwise_chains_model();

/// Transposes (opset 20): t1 [2,5,3,8] -> tr1a (0,2,1,3), tr1b (0,3,1,2),
/// tr1c (0,2,3,1); t2 [3,7,5,6] -> tr2a (0,2,1,3), tr2b (0,3,1,2);
/// t3 [33,65] -> tr3 (1,0); t4 [2,3,20,40] -> tr4 (0,3,1,2); t5 [2,40,4,5] ->
/// tr5 (0,2,3,1); t6 [4,1,7,8] -> tr6 (0,2,1,3); ti int64 [3,7,5,6] -> tri (0,2,1,3);
/// t7 [2,3,4,5,6] -> tr7 (4,2,0,3,1).
ModelBuilder transposes_model();

/// The fp16 example (precision check): x float32[1,4,8,8] -> a, b =
/// 1x1 Conv 'conv_a' / 'conv_b' + 100 (b's weights a's plus up to 0.05) ->
/// y = Sigmoid 'sigmoid' (k * (a - b)) ('sub', 'scale') -> out = 1x1 Conv
/// 'conv_out'(y) float32[1,4,8,8].
/// x [1,64] through `steps` steps of the tent map x <- 1 - 2|x| (Abs, Mul,
/// Sub): 16-bit rounding doubles at every step, no node amplifies it 8x (the
/// precision check's accumulation case).
ModelBuilder tent_map_model(int steps);
ModelBuilder sigmoid_head_model(float k = 50.f);

/// Host fallback: one node the cuda target has no kernel for in the middle
/// of a device program: x float32[4,64] -> MatMul(W1[64,64]) -> Relu ->
/// Einsum("bi,ij,j->bj", W2[64,64], ones[64]) -> Tanh -> MatMul(W3[64,32]) =
/// y [4,32] (three operands: the cuda pipeline makes two-operand GEMM-like
/// Einsums MatMuls, and this one must stay without a cuda kernel).
/// With `einsum` false the Einsum is left out (Relu feeds Tanh): the same
/// program without its host node.
ModelBuilder einsum_middle_model(bool einsum = true);

/// Host fallback in two host segments: x float32[4,64] -> MatMul(W1[64,64])
/// -> a; e = Einsum("bi,ij,j->bj", a, W2[64,64], ones) (host segment 1; e is also
/// a program output); t = Tanh(e); f = Einsum("bi,bi,i->bi", t, x, ones) (host segment
/// 2, reading the program input x too); y = Relu(f) + e [4,64]. Outputs y, e.
ModelBuilder two_host_segments_model();

/// Host fallback of control flow: x float32[8]; an If whose condition
/// comes from the data (ReduceSum(x) > 0): then Mul(x, 2), else Neg(x)
/// (both read the outer x), then y = If + x on the device [8].
ModelBuilder data_if_model();

/// A conditional node with library work in a body: x float32[B,D]; cond =
/// ReduceSum(x) > 0; then_branch: Relu(MatMul(x, W[D,D])) (a cuBLASLt
/// matmul captured into the body); else_branch: Tanh(x) * 3 (a fused
/// kernel); y = If + x [B,D]. W is seeded (deterministic).
ModelBuilder data_if_gemm_model(int64_t batch = 4, int64_t dim = 64);

/// Host fallback of a data-dependent shape: x float32[16] -> Relu -> r;
/// idx = NonZero(r) int64 [1, N] (N from the data; a host output) and
/// s = Sigmoid(x) [16] (a device output).
ModelBuilder nonzero_model();

/// Host nodes of every kind in a 16-bit program (host_precision.cpp),
/// opset 17: x float32 [1,4,8,8]; r = Relu(Conv(x, Wc[4,4,3,3], pads 1));
/// (mp, ind) = MaxPool(r, 2x2, stride 2) with its Indices output (host, a
/// static shape; the device reads mp: s = Sigmoid(mp) [1,4,4,4], output);
/// q = ReduceMax(r, axes 2,3) [1,4] (device, r shared with the host);
/// mx = ReduceMean(x, axes 2,3) [1,4]; ids = NonZero(mx > 0)[1] (the
/// channels of positive mean, a data-dependent count N); rows =
/// Gather(Reshape(s, [4,16]), ids) [N,16]; h = Gemm(rows, Wg[16,8], Bg[8]);
/// z = Exp(h) * h [N,8] (output; all host); an If on the data (ReduceSum(mx)
/// > 0) whose branches read the outer q (then q * 2, else -q) -> w; u = w -
/// q [1,4] (output: q or -2q, never 0). Weights seeded (deterministic).
ModelBuilder host_fp32_model();

/// One ONNX LSTM node (gen_recurrent's tests), opset 14; what is present is
/// chosen by the fields. Weights W [D,4H,I], R [D,4H,H], B [D,8H] and P
/// [D,3H] are seeded initializers of magnitude ~1/sqrt(H); sequence_lens an
/// int32 initializer (lens, one per batch entry); X, initial_h and
/// initial_c graph inputs "x", "h0", "c0". Outputs "y", "yh", "yc" (those
/// wanted; an unwanted one is an empty name in the node).
struct LstmConfig {
  std::string direction = "forward";  ///< forward, reverse, bidirectional
  int64_t layout = 0, seq = 1, batch = 1, input = 8, hidden = 16;
  bool bias = true, init_h = false, init_c = false, peepholes = false;
  std::vector<int32_t> lens;  ///< sequence_lens; empty: absent
  bool y = true, yh = true, yc = true;
  float clip = 0.f;  ///< 0: no clip attribute
  bool input_forget = false;
  std::vector<std::string> activations;  ///< empty: the defaults
  std::string label() const;  ///< a short description for test traces
};
ModelBuilder lstm_model(const LstmConfig& c);

/// Options of a cross-compile without a GPU: target cuda for sm_90,
/// heuristic tuning (no timing), value specialization off.
SessionOptions cross_options();

/// Scan (opset 17) as a cumulative sum: init float32 [D], x float32 [T, D];
/// one carried value sum (sum_in + x_t) and one scan output, the running
/// sum, stacked along `out_axis` (cum [T, D], or [D, T] for 1); the scan
/// input is read from its end when `reverse`. Outputs "sum" [D], "cum";
/// with `relu_after` instead "sum_r" = Relu(sum) and "cum_r" = Relu(cum),
/// untyped (the Scan's output shapes then come from inference).
ModelBuilder scan_cumsum_model(int64_t steps, int64_t dim, bool reverse = false, int64_t out_axis = 0,
                               bool relu_after = false);

/// Loop (opset 17) with a static trip count: M = `trips` (an int64
/// initializer), no cond; carries x [B, D] (input "x0"): x = Tanh(x W +
/// 0.1 i) (W [D, D] seeded, i the iteration number, read from the outer
/// scope) and emits each iteration's row sums ReduceSum(x, axis 1) [B] as a
/// scan output. Outputs "x_final" [B, D], "rows" [trips, B]. Without
/// `typed_body` the body's carried input has symbolic dims and its outputs
/// no types (as exporters leave them).
ModelBuilder loop_static_model(int64_t trips = 5, int64_t batch = 4, int64_t dim = 32, bool typed_body = true);

/// Loop (opset 17) swapping its carried values: M = `trips`, (a, b) ->
/// (b, a + b) from inputs a0, b0 float32 [D] (the body's first carried
/// output is its second carried input itself). Outputs "a", "b" [D].
ModelBuilder loop_swap_model(int64_t trips = 6, int64_t dim = 8);

/// Loop (opset 17) whose carried value changes shape: x0 float32 [1, 4], M
/// = 3, x = Concat(x, x) on axis 0 (the body's input [?, 4], its output
/// untyped); y = Relu(x_final).
ModelBuilder loop_growing_model();

/// Loop (opset 17) whose condition comes from the data: x float32 [D],
/// max_trips int64 [] (both inputs); cond = sum|x| < 100; each iteration
/// x = 1.5 x + 0.1, count += 1 (count starts at 0.0) and cond = sum|x| <
/// 100: it runs until the sum reaches 100 or max_trips iterations. Outputs
/// "x_final" [D], "count" [] and, with `scan_output`, "xs" (each
/// iteration's x: as many rows as iterations, a data-dependent shape).
ModelBuilder loop_while_model(int64_t dim = 16, bool scan_output = false);

/// An If between convolutions, for conditional nodes in 16-bit / TF32 /
/// channels-last programs (opset 17): x float32 [1,4,8,8]; c = Conv(x, W1
/// [4,4,3,3], pads 1, no bias: c changes sign with x); r = Relu(c); cond =
/// ReduceSum(c) > 0; If(cond): then Relu(Conv(r, W2, B2, pads 1)) (a Conv
/// with a bias in a branch), else Sigmoid(r) * 3; both read the outer r ->
/// branch [1,4,8,8]; outputs y = Conv(branch, W3 [2,4,1,1]) [1,2,8,8] and z =
/// branch + r [1,4,8,8]. Weights are sine waves (deterministic).
ModelBuilder conv_if_model();

/// A Loop between convolutions (opset 17): x, c and r as conv_if_model's;
/// Loop(M = `trips`, no cond, carried r): x = Tanh(Conv(x, Wb, Bb, pads 1) +
/// r) (the body reads the outer r) with each iteration's ReduceSum(x) [1]
/// as a scan output; outputs y = Conv(x_final, W3 [2,4,1,1]) [1,2,8,8] and
/// rows [trips, 1].
ModelBuilder conv_loop_model(int64_t trips = 3);

/// The precision check's sigmoid head (sigmoid_head_model: a, b = 1x1 Conv
/// 'conv_a' / 'conv_b'(x [1,4,8,8]) + 100, y = Sigmoid 'sigmoid'(50 (a - b))
/// via 'sub', 'scale') before an If on the data: cond = ReduceSum(y) 'ysum'
/// > 256 'positive' (ysum is about 248 for the ramp 0.5 + 0.5 sin(0.37 i),
/// 264 for its negation, 249-254 for uniform [0, 1) samples); then y * 2,
/// else Tanh(y) -> branch [1,8,8,8]; out = 1x1 Conv 'conv_out'(branch, Wc
/// [4,8,1,1]) [1,4,8,8].
ModelBuilder data_if_head_model();

/// The head's subtraction inside the branches of an If 'if' on an integer
/// input (flag int64 []; cond = flag == 1): then Sigmoid(50 (a - b)), else
/// Sigmoid(50 (b - a)), both reading the outer a and b -> branch; out =
/// 'conv_out'(branch) [1,4,8,8].
ModelBuilder flag_if_head_model();

/// The sigmoid head -> out, beside a selection on nearly tied scores:
/// scores = Flatten(GlobalAveragePool(1x1 Conv 'conv_s'(x, Ws [64,4,1,1])))
/// [1,64], Ws's rows equal up to 1e-5 (the 64 scores tie within fp16's
/// rounding); (top, idx) = TopK 'topk'(scores, 4); feats = GatherElements
/// 'pick'(fe, idx, axis 1) [1,4], fe = Flatten(GlobalAveragePool(1x1 Conv
/// 'conv_f'(x, Wf [64,4,1,1]))) with rows far apart. Outputs out, top, feats.
ModelBuilder topk_tie_model();

/// An LM head (opset 17): x float32 [3,5,16] -> logits = MatMul(x, W[16,9])
/// [3,5,9] (n = 9: rows not 16-byte aligned, like GPT-2's vocabulary). In a
/// 16-bit program the Cast of the logits back to float32 is fused into the
/// matmul (out_dtype float32).
ModelBuilder lm_head_model();

}  // namespace kiln::testing
