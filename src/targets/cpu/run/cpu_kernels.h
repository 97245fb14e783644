// The cpu target's operators (domain "kiln.cpu"): their primitive
// descriptors, built from a node's attributes, and their kernels.
//
// Every kiln.cpu node works on f32 tensors of static shape. Each memory
// argument's layout is a oneDNN memory descriptor stored in an attribute
// "md.<arg>" (dnnl_util.h): "md.src", "md.wei", "md.bias", "md.dst", and
// "md.post<i>" for the second operand of a binary post-op read from node
// input i. A channel-blocked activation (nChw16c, ...) is an IR value of
// shape [bytes/4]: only kiln.cpu nodes read it, and kiln.cpu.Reorder nodes
// convert it at the boundaries with other operators (the layout pass).
//
// The same builders run at compile time, where "md.wei" may be format 'any'
// (the lowering then records the layout oneDNN picked and packs the weights
// into it), and at load, where the stored layout must be the one the
// primitive expects (else Error(incompatible_artifact) naming the node).
#pragma once
#include <omp.h>

#include <optional>
#include <string_view>

#include "targets/cpu/run/dnnl_util.h"
#include "targets/kernels.h"

namespace kiln::targets::cpu {

/// The factory of kiln.cpu operator `op_type`, or null.
KernelFactory find_factory(std::string_view op_type);

/// kiln.cpu.Conv: inputs (src, weights, [bias], post-op operands...);
/// attributes md.src, md.wei, [md.bias], md.dst, strides, dilates (oneDNN's:
/// ONNX dilation - 1), pads_begin, pads_end, [alg] (direct, the default, or
/// winograd), post-ops, [impl] (the oneDNN kernel packed weights are for).
dnnl::convolution_forward::primitive_desc conv_pd(const ir::Node& n);

/// kiln.cpu.MatMul: inputs (src, weights, [bias], post-op operands...);
/// attributes md.src, md.wei, [md.bias], md.dst (any strides: transposes and
/// reshapes are folded into them), [out_scale], post-ops, [impl].
dnnl::matmul::primitive_desc matmul_pd(const ir::Node& n);

/// kiln.cpu.Pool: input src; attributes alg (dnnl::algorithm), kernel,
/// strides, dilates, pads_begin, pads_end, md.src, md.dst.
dnnl::pooling_v2_forward::primitive_desc pool_pd(const ir::Node& n);

/// kiln.cpu.Eltwise: inputs (src, post-op operands...); attributes alg,
/// alpha, beta, md.src (dst has the same layout), post-ops.
dnnl::eltwise_forward::primitive_desc eltwise_pd(const ir::Node& n);

/// kiln.cpu.Binary: inputs (src0, src1, post-op operands...); attributes
/// alg, md.src0, md.src1 (may broadcast), md.dst, post-ops.
dnnl::binary::primitive_desc binary_pd(const ir::Node& n);

/// kiln.cpu.Softmax: input src; attributes axis, md.src (dst the same).
dnnl::softmax_forward::primitive_desc softmax_pd(const ir::Node& n);

/// kiln.cpu.LayerNorm: inputs (src, [scale], [shift]; shift only with a
/// scale); attributes epsilon, md.src (normalised over its last dim; dst the
/// same), md.scale (with a scale).
dnnl::layer_normalization_forward::primitive_desc layernorm_pd(const ir::Node& n);

/// kiln.cpu.Reorder: input src; attributes md.src, md.dst (same dims). A
/// slice (a Split part) reads a sub-memory descriptor of its input (the
/// attributes slice_axis and slice_offset say which, for the layout pass).
dnnl::reorder::primitive_desc reorder_pd(const ir::Node& n);

/// kiln.cpu.Resample: input src; attributes md.src, md.dst, [alg]
/// (dnnl::algorithm: resampling_nearest, the default, for integer upscale
/// factors, or resampling_linear with half-pixel coordinates; the factors
/// are out / in of the dims). Throws Error(corrupt_artifact) for another alg.
dnnl::resampling_forward::primitive_desc resample_pd(const ir::Node& n);

/// kiln.cpu.LSTM: inputs (X [T, N, I], weights_layer ldigo [1, D, I, 4, H],
/// weights_iter ldigo [1, D, H, 4, H], bias ldgo [1, D, 4, H], [initial_h],
/// [initial_c] [D, N, H]); outputs (Y [T, D, N, H], [Y_h], [Y_c]);
/// attributes hidden, direction (dnnl::rnn_direction; bidirectional only
/// with N == 1). Throws Error(corrupt_artifact) for other dims or
/// directions, Error(unsupported) when oneDNN refuses (run/lstm.cpp).
dnnl::lstm_forward::primitive_desc lstm_pd(const ir::Node& n, const ir::Model& m);

/// True when oneDNN's int8 kernels on this machine multiply exactly in int32
/// (VNNI or AMX: avx2_vnni, avx512_core_vnni and up). Without VNNI they sum
/// pairs of u8 x s8 products in saturating int16, which is not exact.
bool int8_exact_isa();
/// oneDNN's data type of a u8 (u8) or i8 (s8) tensor.
dnnl::memory::data_type int8_type(DType t);

/// kiln.cpu.MatMulInteger (run/matmul_integer.cpp): inputs (A u8/s8 of M*K
/// elements, rows of K; B' constant s8 [K, N]; [a_zero_point u8/s8 of 1 or M
/// values]; [b_zero_point constant i32 of 1 or N values, B''s]), output i32
/// of M*N elements; attributes M, K, N. The primitive: u8/s8 [M, K] x s8
/// [K, N] (layout oneDNN picks, packed at load) -> s32 [M, N], no zero points
/// (the kernel applies them). Throws Error(corrupt_artifact) for operands that
/// do not match, Error(unsupported) when oneDNN refuses.
dnnl::matmul::primitive_desc matmul_integer_pd(const ir::Node& n, const ir::Model& m);

/// kiln.cpu.ConvInteger (run/conv_integer.cpp): inputs (x u8/s8 [N, C, sp...]
/// plain; w' constant s8 [O', C/group, k...]; [x_zero_point u8/s8, one value];
/// [w_zero_point constant i32 [O], w''s]), output i32 [N, O, sp...] plain;
/// attributes group, strides, dilates (oneDNN's: ONNX dilation - 1),
/// pads_begin, pads_end. With a weight zero point, w' holds after each
/// group's O/group channels one channel of ones (O' = O + group). The
/// primitive: src zero point at run time, layouts oneDNN picks; with `f32`,
/// the float32 convolution the kernel runs without VNNI (no zero point: the
/// kernel subtracts it). Throws Error(corrupt_artifact) for operands that do
/// not match, Error(unsupported) when oneDNN refuses.
dnnl::convolution_forward::primitive_desc conv_integer_pd(const ir::Node& n, const ir::Model& m, bool f32 = false);

/// kiln.cpu.SkinnyMatMul (run/skinny_matmul.cpp): inputs (A f32 of M * K
/// values, rows of K; W packed by pack_skinny_weights; [bias f32 [N]];
/// post-op operands...), output f32 of M * N values; attributes M, K, N,
/// [md.bias], post-ops with md.post<i> over a plain [M, N] dst. kiln's own
/// kernel for products of a few rows by constant weights. Throws
/// Error(corrupt_artifact) for operands that do not match.
BoundKernel make_skinny_matmul(const ir::Node& n, const ir::Model& m);
/// Rows one pass of the SkinnyMatMul kernel keeps in registers; more rows are
/// taken in groups of this many (each reading the weights again).
constexpr int64_t kMaxSkinnyRows = 6;
/// The primitive that applies a SkinnyMatMul's post-ops in place: dst + 0
/// over its plain [M, N] dst, the node's post-op chain attached. Throws
/// Error(unsupported) naming the node when oneDNN refuses.
dnnl::binary::primitive_desc skinny_post_pd(const ir::Node& n);
/// kiln.cpu.GroupConv (run/group_conv.cpp): a 2-D convolution over groups of
/// `width` (2 or 4) input and output channels; inputs (x, weights packed by
/// pack_group_conv_weights, [bias f32 [C]]), output; x and y channel-blocked
/// (nChw<block>c, block 8 or 16: the flat [bytes/4] values of the layout
/// pass); attributes shape (N, C, H, W, OH, OW, KH, KW), strides, dilations
/// (ONNX's), pads_begin, width, block, relu. Throws Error(corrupt_artifact)
/// for attributes or weights that do not match.
BoundKernel make_group_conv(const ir::Node& n, const ir::Model& m);
/// ONNX Conv weights [C, width, KH, KW] (C output channels, groups of
/// `width`) packed for GroupConv: per 8 output channels, per tap, per
/// in-group input channel j, the 8 channels' weights; C * width * KH * KW values.
Tensor pack_group_conv_weights(const float* w, int64_t C, int64_t width, int64_t KH, int64_t KW);
/// The float32 count of W [K, N] packed for SkinnyMatMul: N rounded up to 16.
int64_t skinny_packed_size(int64_t K, int64_t N);
/// W (element (k, n) at w[k * k_stride + n * n_stride]) packed for
/// SkinnyMatMul: panels of 16 columns, each K x 16 contiguous, the last
/// padded with zeros; a 1-D f32 tensor of skinny_packed_size(K, N) values.
Tensor pack_skinny_weights(const float* w, int64_t K, int64_t N, int64_t k_stride, int64_t n_stride);

/// kiln's own kernel for a kiln.cpu.Pool node that max-pools 2-D activations
/// in matching nChw8c / nChw16c layouts (channels a multiple of the block)
/// or plain NCHW ones, without post-ops (run/max_pool.cpp), else nullopt
/// (oneDNN's pooling).
std::optional<BoundKernel> make_blocked_max_pool(const ir::Node& n);

BoundKernel make_conv(const ir::Node& n, const ir::Model& m);
BoundKernel make_matmul(const ir::Node& n, const ir::Model& m);
BoundKernel make_pool(const ir::Node& n, const ir::Model& m);
BoundKernel make_eltwise(const ir::Node& n, const ir::Model& m);
BoundKernel make_binary(const ir::Node& n, const ir::Model& m);
BoundKernel make_softmax(const ir::Node& n, const ir::Model& m);
BoundKernel make_layernorm(const ir::Node& n, const ir::Model& m);
BoundKernel make_reorder(const ir::Node& n, const ir::Model& m);
BoundKernel make_resample(const ir::Node& n, const ir::Model& m);
BoundKernel make_lstm(const ir::Node& n, const ir::Model& m);
/// Throws Error(incompatible_artifact) where oneDNN has no int8-exact
/// optimised kernel (no VNNI / AMX, or a reference implementation).
BoundKernel make_matmul_integer(const ir::Node& n, const ir::Model& m);
/// Throws Error(incompatible_artifact) like make_matmul_integer.
BoundKernel make_conv_integer(const ir::Node& n, const ir::Model& m);
/// kiln.cpu.DynamicQuantizeLSTM (run/dynamic_quantize_lstm.cpp): the
/// com.microsoft node's inputs, outputs and attributes, W (input 1), R (2)
/// and their zero points (9, 11) constants; the reference computation with
/// the integer products on oneDNN. Throws Error(corrupt_artifact) for
/// non-constant weights, Error(incompatible_artifact) like make_matmul_integer.
BoundKernel make_dynamic_quantize_lstm(const ir::Node& n, const ir::Model& m);
/// kiln.cpu.DynamicQuantizeLinear (run/dynamic_quantize_linear.cpp): ONNX's
/// inputs (x float32) and outputs (y uint8 like x, [y_scale f32], [y_zero_point
/// u8]), bit-exact to the reference kernel. Throws Error(corrupt_artifact)
/// for another signature.
BoundKernel make_dynamic_quantize_linear(const ir::Node& n, const ir::Model& m);
/// kiln.cpu.Concat: inputs src...; attributes axis, md.src<i>, md.dst, and
/// [in_place_offsets] (mark_concat_in_place: every input a contiguous byte
/// range of dst at that offset, in its own layout): then the kernel copies
/// only the inputs the memory plan did not already place there (memcpy).
BoundKernel make_concat(const ir::Node& n, const ir::Model& m);

/// One memory argument of a primitive: node input `input` bound to oneDNN
/// argument `arg` with layout `md`.
struct ArgBinding {
  size_t input;
  int arg;
  md_t md;
};

/// A kernel that runs one primitive: binds the listed inputs and the
/// post-op operands of the node, allocates output 0 with the IR value's shape
/// (checked to hold `dst`), and executes with the primitive's scratchpad;
/// with OpenMP limited to the calling thread when `single`.
BoundKernel primitive_kernel(const ir::Node& n, const ir::Model& m, dnnl::primitive prim, const md_t& scratch,
                             std::vector<ArgBinding> ins, const md_t& dst, bool single = false);

/// True when a kiln.cpu node has so little work that it runs on the calling
/// thread alone (waking the other threads would cost more than it saves, and
/// on a busy machine can cost a scheduler time slice per node): under 1 MFLOP
/// for Conv / MatMul (from the dims in its descriptors), under 1 MiB of
/// destination for the memory-bound operators.
bool node_single_threaded(const ir::Node& n);

/// Runs f (which builds primitive descriptors / primitives) with OpenMP
/// limited to one thread when `single`, restoring the caller's setting: many
/// oneDNN kernels fix their thread count when they are made, so a
/// single-threaded node must also be built single-threaded.
template <class F>
auto with_threads(bool single, F&& f) -> decltype(f()) {
  if (!single) return f();
  struct Restore {
    int saved;
    ~Restore() { omp_set_num_threads(saved); }
  } restore{omp_get_max_threads()};
  omp_set_num_threads(1);
  return f();
}

/// The kernel of a convolution or matmul node (Prim: dnnl::convolution_forward
/// or dnnl::matmul): builds its primitive descriptor with `make_pd()`, checks
/// that this machine picks the weights layout, implementation and src/dst
/// layouts the compile stored (the weights were packed for them), then makes
/// the primitive. Inputs: 0 source, 1 packed weights, 2 bias (when md.bias).
/// Throws Error(incompatible_artifact / corrupt_artifact) naming the node.
template <class Prim, class MakePd>
BoundKernel weighted_primitive_kernel(const ir::Node& n, const ir::Model& m, const char* what, MakePd&& make_pd) {
  bool single = node_single_threaded(n);
  auto pd = with_threads(single, make_pd);
  expect_same_md(n, "weights", pd.weights_desc(), md_attr(n, "md.wei"));
  expect_same_impl(n, pd.impl_info_str());
  expect_same_md(n, "source layout", pd.src_desc(), md_attr(n, "md.src"));
  expect_same_md(n, "destination layout", pd.dst_desc(), md_attr(n, "md.dst"));
  std::vector<ArgBinding> ins{{0, DNNL_ARG_SRC, pd.src_desc()}, {1, DNNL_ARG_WEIGHTS, pd.weights_desc()}};
  if (n.has("md.bias")) ins.push_back({2, DNNL_ARG_BIAS, pd.bias_desc()});
  auto prim = with_threads(single, [&] { return guarded(n, what, [&] { return Prim(pd); }); });
  return primitive_kernel(n, m, prim, pd.scratchpad_desc(), std::move(ins), pd.dst_desc(), single);
}

}  // namespace kiln::targets::cpu
