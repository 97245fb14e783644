// Per-family lowering functions used by lower_ops (lower_ops.cpp). Each takes
// an ONNX node and returns the kiln.cpu node(s) replacing it, or nullopt to
// keep the node (unsupported dtype, dynamic shape, non-constant weight, or a
// primitive oneDNN refuses).
#pragma once
#include <algorithm>
#include <optional>
#include <vector>

#include "targets/cpu/compile/lowering.h"

namespace kiln::targets::cpu {

using LowerFn = std::optional<std::vector<ir::Node>> (*)(ir::Model& m, const ir::Node& n);

std::optional<std::vector<ir::Node>> lower_conv(ir::Model& m, const ir::Node& n);
/// oneDNN's pads_begin / pads_end (pb, pe: ONNX's pads on entry) of one
/// spatial dim reproducing ONNX's output size `out` for auto_pad (NOTSET,
/// SAME_UPPER, SAME_LOWER, VALID), input `in`, kernel k, stride s, dilation d.
/// False when oneDNN's output size rule would not give `out`.
bool conv_pads(const std::string& auto_pad, int64_t in, int64_t out, int64_t k, int64_t s, int64_t d, int64_t& pb,
               int64_t& pe);
/// MatMul and Gemm.
std::optional<std::vector<ir::Node>> lower_matmul(ir::Model& m, const ir::Node& n);
/// MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool.
std::optional<std::vector<ir::Node>> lower_pool(ir::Model& m, const ir::Node& n);
/// Relu, LeakyRelu, Sigmoid, Tanh, Exp, Sqrt, Abs, Neg, Elu, HardSwish,
/// HardSigmoid (two nodes: linear then clip), Clip, Gelu, Round.
std::optional<std::vector<ir::Node>> lower_eltwise(ir::Model& m, const ir::Node& n);
/// Add, Sub, Mul, Div, Max, Min (two inputs, one may broadcast).
std::optional<std::vector<ir::Node>> lower_binary(ir::Model& m, const ir::Node& n);
std::optional<std::vector<ir::Node>> lower_softmax(ir::Model& m, const ir::Node& n);
std::optional<std::vector<ir::Node>> lower_layernorm(ir::Model& m, const ir::Node& n);
/// Concat of f32 tensors of static shape and rank 3 to 5 (blockable).
std::optional<std::vector<ir::Node>> lower_concat(ir::Model& m, const ir::Node& n);
/// Split of a rank 3 to 5 f32 tensor -> one slice Reorder per part.
std::optional<std::vector<ir::Node>> lower_split(ir::Model& m, const ir::Node& n);
/// Inference BatchNormalization with constant statistics (rank 2 to 5) ->
/// Binary x * s with a per-channel add of t (its affine form) as a post-op.
std::optional<std::vector<ir::Node>> lower_batchnorm(ir::Model& m, const ir::Node& n);
/// InstanceNormalization (f32, static, rank 3 to 5) -> LayerNorm without
/// scale over [N*C, spatial], then (unless scale is all ones and B all
/// zeros, torch's GroupNorm export) the per-channel affine as channel_affine.
std::optional<std::vector<ir::Node>> lower_instancenorm(ir::Model& m, const ir::Node& n);
/// y = x * s + t per channel (dim 1 of x [N, C, ...]; s, t of C values) as
/// one kiln.cpu.Binary (multiply, with the add as a binary post-op), named
/// after `from`; nullopt when oneDNN has only a reference kernel for it.
std::optional<ir::Node> channel_affine(ir::Model& m, const ir::Node& from, ir::ValueId x, ir::ValueId y,
                                       const std::vector<int64_t>& xd, const std::vector<float>& s,
                                       const std::vector<float>& t);
/// Resize (nearest with integer upscale, or linear with half-pixel coordinates) -> Resample.
std::optional<std::vector<ir::Node>> lower_resize(ir::Model& m, const ir::Node& n);

/// LSTM in ONNX's default form (sigmoid / tanh, no clip, peepholes or
/// partial sequences; batch 1 when bidirectional) -> LSTM with repacked weights.
std::optional<std::vector<ir::Node>> lower_lstm(ir::Model& m, const ir::Node& n);

/// MatMulInteger with constant 2-D uint8/int8 B -> MatMulInteger on oneDNN's
/// int8 matmul (weights as int8), where its products are exact here.
std::optional<std::vector<ir::Node>> lower_matmul_integer(ir::Model& m, const ir::Node& n);
/// ConvInteger with constant uint8/int8 weights (zero point per tensor or per
/// output channel) -> ConvInteger on oneDNN's int8 convolution.
std::optional<std::vector<ir::Node>> lower_conv_integer(ir::Model& m, const ir::Node& n);
/// com.microsoft::DynamicQuantizeLSTM with constant W, R and zero points ->
/// the same node in the cpu domain (integer products on oneDNN).
std::optional<std::vector<ir::Node>> lower_dynamic_quantize_lstm(ir::Model& m, const ir::Node& n);
/// DynamicQuantizeLinear of float32 -> kiln.cpu.DynamicQuantizeLinear (same inputs and outputs).
std::optional<std::vector<ir::Node>> lower_dynamic_quantize_linear(ir::Model& m, const ir::Node& n);

/// The eltwise algorithm, alpha and beta oneDNN uses for an ONNX activation
/// node (one or two eltwise steps, e.g. HardSigmoid = linear then clip), or
/// nullopt when the node is not one oneDNN has.
struct EltwiseStep {
  dnnl::algorithm alg;
  float alpha = 0, beta = 0;
};
std::optional<std::vector<EltwiseStep>> eltwise_steps(const ir::Model& m, const ir::Node& n);

}  // namespace kiln::targets::cpu
