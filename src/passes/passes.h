// Graph passes, one per file. Each takes the model in place.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/memory_plan.h"

namespace kiln::passes {

/// Fixes the dims of main-graph inputs from user-given shapes. Each given
/// shape must have the input's rank and agree with its static dims. A symbol
/// fixed in one input is fixed to the same size in every other input using it.
/// Throws Error(invalid_option) naming the input (and listing the model's
/// inputs for an unknown name).
void bind_input_shapes(ir::Model& m, const std::map<std::string, std::vector<int64_t>>& shapes);

/// Fixes every main-graph input dim whose symbol (dim_param) is a key of
/// `sizes` to that size (one bucket of a bucketed compile). Throws
/// Error(invalid_option) naming "dims" and the symbol when no input has it
/// (listing the symbols the inputs do have).
void bind_symbols(ir::Model& m, const std::map<std::string, int64_t>& sizes);

/// Value specialization: every reader of the main-graph input named in
/// `values` (main graph and subgraphs) reads a constant of the input's dtype
/// and shape holding that value instead; the input stays in the interface
/// (unread), so a request still passes it and the runtime checks it against
/// the program's guard. Throws Error(invalid_option) naming "values" for an
/// input that is not there or does not hold one integer / bool value.
void bind_input_values(ir::Model& m, const std::map<std::string, int64_t>& values);

struct FoldStats {
  int folded_nodes = 0;   ///< nodes evaluated at compile time and removed
  int inferred = 0;       ///< values whose type was inferred
  int inlined_ifs = 0;    ///< If nodes with a constant condition replaced by their taken branch
};

/// Shape inference with constant propagation, in topological order: every
/// node's output dtype/shape from src/ops inference (merged with value_info
/// hints), and every node whose inputs are all constants (or a Shape/Size of a
/// static shape) evaluated by its reference kernel and replaced by constants,
/// as long as each folded output is at most `max_fold_bytes`. An If whose
/// condition is a constant is replaced by the nodes of the branch it takes
/// (and Identity nodes for its outputs) before anything of the other branch
/// is inferred, so a branch that cannot run for these shapes never raises.
/// Other subgraphs are inferred too (not folded); a Loop / Scan gets static
/// output shapes where its body's are static (a carried value that keeps its
/// initial value's shape; scan outputs over a static trip count: a Scan's
/// axis length, a Loop's constant M without cond). Throws the inference error of the first node
/// that fails (invalid_model / unsupported, naming the node).
FoldStats infer_and_fold(ir::Model& m, uint64_t max_fold_bytes = 64ull << 20);

/// Removes nodes none of whose outputs reach a graph output (main graph and
/// subgraphs), and drops constants nobody uses. Returns the number of nodes removed.
int eliminate_dead_code(ir::Model& m);

/// Static memory plan for the main graph: every node output with a static
/// shape that is not a graph output gets an arena slot; slots are reused
/// between values whose lifetimes (producer .. last consumer, in node order)
/// do not overlap. Placement is greedy by size (largest first, lowest offset
/// that fits), the offset-calculation heuristic of Pisarchyk & Lee,
/// "Efficient Memory Management for Deep Neural Net Inference" (2020).
/// Offsets are 64-byte aligned.
/// lowered_bodies: values produced inside the subgraphs of a lowered node
/// (any domain but ONNX's: the cuda target's kiln.cuda.If, whose branches
/// run on the device) get slots too, live for the whole node (a branch's
/// values never share memory with each other or with the node's inputs and
/// outputs). Off: subgraph values are the host executor's (ONNX If / Loop).
/// A main-graph node with attribute "in_place_offsets" (ints, one per input:
/// the byte offset of input i's data inside output 0; the cpu target's Concat,
/// and its Reshape-like views with every offset 0)
/// may have its inputs placed inside its output: where the inputs of later
/// such nodes agree (DenseNet's growing concatenations), a whole chain of
/// them shares one region, live from its first producer to its last reader.
/// A value placed so keeps its exact size; the node must copy the inputs
/// that are not where it expects them (the plan cannot place every input:
/// constants, graph inputs, one value wanted at two places).
ir::MemoryPlan plan_memory(const ir::Model& m, bool lowered_bodies = false);

/// Common subexpression elimination (main graph and subgraphs): constants of
/// at most 64 KiB with equal dtype, shape and bytes become one value; a node
/// with the same operator, domain, opset, inputs and attributes as an earlier
/// node of its graph is removed and its readers read the earlier node's
/// outputs. Nodes with tensor/graph attributes, random generators and nodes
/// producing a graph output are kept. Returns the number of merges.
int eliminate_common_subexpressions(ir::Model& m);

/// Algebraic simplification: bypasses nodes that compute nothing (Identity,
/// inference Dropout, Cast/Reshape/Squeeze/Unsqueeze/Flatten whose output has
/// the input's dtype and static shape, identity Transpose, zero Pad, x+0, x-0,
/// x*1, x/1 with a constant that does not broadcast x) and merges
/// Transpose(Transpose(x)) and Reshape(Reshape(x)) chains whose inner node has
/// no other reader. A node producing a graph output is never bypassed. Leaves
/// dead nodes for eliminate_dead_code. Returns the number of rewrites.
int simplify_algebra(ir::Model& m);

/// Folds an inference BatchNormalization (single output, constant scale,
/// bias, mean, var) into the Conv or Gemm producing its input (constant f32
/// weights, no other reader of the intermediate): the weights are scaled per
/// output channel and the bias becomes s*(b - mean) + bias, s =
/// scale/sqrt(var + epsilon). Returns the number of folded BatchNormalizations.
int fold_batch_norm(ir::Model& m);

/// The per-channel affine form of an inference BatchNormalization with
/// constant f32 scale, bias, mean and var of `channels` elements each:
/// BN(x) = s*x + t per channel, s = scale/sqrt(var + epsilon), t = bias -
/// s*mean. False (s, t untouched) when an input is not such a constant.
bool batch_norm_affine(const ir::Model& m, const ir::Node& bn, int64_t channels, std::vector<float>& s,
                       std::vector<float>& t);

/// Replaces the erf form of Gelu, 0.5 * x * (1 + Erf(x / sqrt 2)) in any
/// association (x / sqrt 2 also as x * 0.7071...), by one Gelu node
/// (ONNX Gelu-20, approximate "none"), and the tanh approximation,
/// 0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * Pow(x, 3)))), by one with
/// approximate "tanh". Intermediates must have no other reader; they are
/// left dead. Returns the number of Gelus made.
int recognize_gelu(ir::Model& m);

/// Replaces the decomposed layer norm over the last axis,
///   d = x - ReduceMean(x, [-1]);  d / Sqrt(ReduceMean(Pow(d, 2) or d*d, [-1]) + eps) [* gamma] [+ beta]
/// (keepdims 1; eps a scalar constant; gamma and beta constants of x's
/// dtype with one value per element of the last axis), by one
/// LayerNormalization (ONNX LayerNormalization-17: axis -1, epsilon eps,
/// Scale gamma or ones, B beta, both as [C] constants). x is float32 with a
/// static last dim. Intermediates must have no other reader; they are left
/// dead. Returns the number of LayerNormalizations made.
int recognize_layernorm(ir::Model& m);

/// Rewrites every two-operand float32 Einsum with static dims that is a
/// (batched) GEMM (each label in both inputs and the output: batch; in one
/// input and the output: M or N; in both inputs only: summed, K) into
/// Transpose / Reshape / MatMul / Reshape / Transpose, each view only where it
/// moves or merges dims ("bhid,bhjd->bhij" becomes MatMul(A, Transpose(B))).
/// Diagonals, labels summed within one input and size-1 broadcasting between
/// the inputs keep the Einsum. Returns the number of Einsums rewritten (the
/// Einsum node is replaced; its output value stays).
int einsum_to_matmul(ir::Model& m);

/// Cuts the kernel of every Conv (constant f32 weights, static dims, explicit
/// pads) to the taps that read the input for at least one output position,
/// per spatial dim from both ends: the weights are sliced, kernel_shape,
/// pads (and the dilation of a dim left with one tap) follow, the output is
/// unchanged. A dilated 3x3 whose dilation reaches past the feature map
/// (DeepLab's atrous pyramid) becomes a 1x1. Returns the number of Convs cut.
int prune_conv_taps(ir::Model& m);

/// Splits a 2-D stride-1 Conv (group 1, constant f32 weights, static dims)
/// whose taps read the input for at most half of the (tap, output position)
/// pairs -- an atrous 3x3 over a map not much larger than its dilation --
/// into one 1x1 Conv per tap over the input rectangle it reads (Slice), each
/// zero-padded to the output (Pad) and summed (Add); the bias on a tap that
/// covers the whole output, else a final Add. Run after prune_conv_taps.
/// Returns the number of Convs split.
int split_conv_taps(ir::Model& m);

/// What recognize_attention found.
struct AttentionStats {
  int blocks = 0;     ///< scaled dot-product attention blocks recognised
  int rewritten = 0;  ///< of them, blocks whose operand scalings moved onto the scores
};

/// Recognises float32 scaled dot-product attention,
///   MatMul(Softmax(MatMul(Q', K') [* or / scalar] [+ mask], last axis), V),
/// (every intermediate read once), and where Q' and / or K' are Q, K scaled
/// by a one-element constant (torch.onnx's scaled_dot_product_attention
/// form; through Transpose / Reshape nodes), bypasses those scalings and
/// applies their product to the scores instead: merged into the scores'
/// scalar Mul / Div, or as a new Mul right after the Q K^T MatMul. The
/// bypassed nodes are left dead. Results change by float32 rounding only.
AttentionStats recognize_attention(ir::Model& m);

}  // namespace kiln::passes
