// The cuda target's precision pass (compile side): with precision fp16 or
// bf16 the float32 values inside a program become 16-bit before lowering,
// while the model's inputs and outputs keep their declared dtypes.
//
// Policy (docs/cuda.md, "Precision"), in the style of mixed-precision
// autocasting, node by node in topological order:
//
//  - 16-bit ops (MatMul, Gemm, Conv, ConvTranspose): every float32 input is
//    converted to the 16-bit type and the outputs are 16-bit. cuBLASLt and
//    cuDNN accumulate in fp32.
//  - follow ops (element-wise math, data movement, Softmax / LogSoftmax,
//    Layer/Instance/Group/BatchNormalization, Reduce*, ArgMax/ArgMin, pools,
//    nearest Resize): they compute in the 16-bit type unless one of their
//    float inputs is a float32 activation, in which case they stay float32
//    ("promotion": mixing never rounds a float32 value down). Every
//    generated kernel computes in float internally (loads 16-bit, converts,
//    accumulates means / variances / exp-sums in float, rounds once when it
//    stores), so normalizations and softmax have fp32 internals.
//    Normalization parameters (scale, bias, BatchNormalization's mean and
//    variance) and LayerNormalization's Mean / InvStdDev outputs stay
//    float32; Resize's roi / scales and Dropout's ratio are never touched.
//  - fp32-output ops, fp16 only (Exp, Pow, ReduceSum, ReduceSumSquare,
//    ReduceL1, ReduceL2, ReduceProd): they read their inputs as they are and
//    write float32, since their results can leave fp16's range (65504) when
//    the inputs do not; what follows them is promoted to float32 until the
//    next 16-bit op. bf16 has float32's range, so there they follow.
//  - Cast keeps its `to`: an explicit Cast to float32 stays float32, except
//    from an integer or bool type: that one makes the 16-bit type instead
//    (integer data enters the float program rounded once, as a float32
//    model input does; transformers build their attention mask this way).
//  - nodes the precision check keeps in float32 (ConvertOptions::keep_fp32,
//    runtime/precision_check.h): islands, whatever their op; what follows
//    them is promoted as above.
//  - control flow (If, Loop, Scan): islands with their bodies, which stay
//    float32 as written (the pass converts the main graph only): float
//    inputs cast back to float32, outputs float32, and an activation made
//    16-bit that a body reads from the outer scope is read through a Cast
//    to float32 too. The lowering runs such a node as a conditional node
//    whose bodies are strict float32 NCHW (lowering.h, lower_body).
//  - nodes that run on the host (host fallback, known only once the
//    lowering has tried them) compute in float32 there, whatever their role
//    here: the lowering makes them float32 islands afterwards
//    (fp32_host_nodes, lowering.h).
//  - everything else (losses, Quantize/DequantizeLinear, CumSum, linear /
//    cubic Resize, OneHot, EyeLike, reducing scatters, ...) runs as written
//    in float32: 16-bit inputs are cast back to float32 first.
//
// Constants are converted at compile time (one 16-bit copy per constant; the
// float32 original is dropped when nothing reads it any more). A finite
// constant beyond the 16-bit type's largest finite value (fp16 65504,
// bf16 3.39e38) becomes that value with its sign, not infinity, as ONNX
// Runtime's float16 converter does: float32's lowest (-3.4e38, an
// exporter's "minus infinity" for masks) stays a large finite number, so
// 0 * mask stays 0 instead of NaN. The precision check compares a clamped
// value like any other (given masked sample inputs, the mask's -65504 against
// -3.4e38 is an error of its scale, and the mask chain is kept float32). A model input
// read by a 16-bit or follow op is cast once, where it is first needed; a
// model output computed in 16 bits is produced by a final Cast to float32.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::targets::cuda {

/// A node of the graph that the precision pass left float32, and why.
struct Fp32Node {
  std::string node;  ///< precision_node_key
  std::string op;    ///< ONNX op_type (domain-qualified outside the ONNX domain)
  std::string why;   ///< "kept by the precision check", "promoted: reads the float32 activation 'x'", ...
};

/// A float node the precision pass made 16-bit (see PrecisionStats).
struct HalfNode {
  std::string node;  ///< precision_node_key
  std::string op;    ///< as Fp32Node::op
  std::vector<ir::ValueId> outputs;  ///< its outputs as rewritten (16-bit float outputs among them)
  size_t fp32_at = 0;  ///< PrecisionStats::fp32's size when it was met: its place there in graph order
};

/// What convert_precision did, for logs, notes and tests.
///
/// The 16-bit share (docs/cuda.md, "Which nodes are 16-bit"): a node of the
/// graph as the pass receives it (the Casts it inserts are not counted) is a
/// *float node* when it writes a float32 value in the float32 model; it is
/// *16-bit* when every such output is stored in the 16-bit type, apart from
/// outputs ONNX types as float32 whatever the input (LayerNormalization's
/// Mean / InvStdDev). Kernels may compute in float inside (every generated
/// kernel does; cuBLASLt / cuDNN accumulate in fp32): what counts is what is
/// stored. Nodes writing only integers or bools are outside the count.
struct PrecisionStats {
  int values = 0;     ///< float32 activations now 16-bit (node outputs)
  int constants = 0;  ///< float32 constants given a 16-bit copy
  int clamped = 0;    ///< of those, constants with finite values beyond the 16-bit range, clamped to it
  int casts = 0;      ///< Cast nodes inserted (model inputs and outputs, float32 islands, promotions, host boundaries)
  int fp32_nodes = 0; ///< float nodes left float32 (islands, fp32-output ops, explicit Casts, promoted)
  int float_nodes = 0;       ///< float nodes (see above)
  int nodes_16bit = 0;       ///< float nodes whose float outputs are all 16-bit
  std::vector<Fp32Node> fp32;  ///< the float nodes left float32, in graph order
  std::vector<HalfNode> half;  ///< the 16-bit float nodes, in graph order
  /// 16-bit copies of float32 constants and model inputs -> the float32
  /// value each was made from (what a float32 reader may take instead).
  std::map<ir::ValueId, ir::ValueId> wide;
};

/// How the precision pass treats one node (see the policy above).
enum class PrecisionRole {
  half,      ///< inputs converted to the 16-bit type, outputs 16-bit
  follow,    ///< 16-bit unless a float32 activation is among its inputs
  fp32_out,  ///< inputs as they are, outputs float32
  cast,      ///< an ONNX Cast: input as it is, output as written
  island,    ///< runs as written on float32: 16-bit inputs cast back
};

/// The role of node `n` when converting to `to` (DType::f16 or DType::bf16).
PrecisionRole precision_role(const ir::Node& n, DType to);

/// Constants convert_precision made 16-bit, by (original value id, dtype):
/// the converted tensor and whether a value was clamped to the 16-bit range.
using ConvertedConstants = std::map<std::pair<ir::ValueId, DType>, std::pair<Tensor, bool>>;

/// The name a node is known by to the precision check and in the
/// artifact's notes: its ONNX name, else its first output value's name
/// (unique in a model), else "".
std::string precision_node_key(const ir::Model& m, const ir::Node& n);

/// Rewrites cp.model's main graph (shapes inferred, topologically sorted) so
/// that its float32 values are `to` (DType::f16 or DType::bf16) where the
/// policy says, inserting ONNX Cast nodes (domain "", attribute `to`) and
/// 16-bit constants. Main-graph inputs and outputs keep their dtypes and
/// names. Nodes whose precision_node_key is in `keep_fp32` run as float32
/// islands. Throws Error(internal) for another `to`.
/// `cache` (may be null): constants converted by earlier calls on copies of
/// the same model (keyed by the original value id and the 16-bit type, with
/// whether a value was clamped), reused and added to; the precision check
/// converts the same weights once per round.
PrecisionStats convert_precision(ir::Model& m, DType to, const std::set<std::string>& keep_fp32 = {},
                                 ConvertedConstants* cache = nullptr);

/// The 16-bit program `m` (convert_precision's output) emulated in float32
/// for the ref target: every float16 / bfloat16 value becomes float32 and is
/// rounded to the 16-bit type (nearest even) where it is made, by a pair of
/// Casts (to the 16-bit type, back to float32) after its node; 16-bit
/// constants become float32 copies of their 16-bit values. Every value keeps
/// its name (the node writes "NAME~wide" before the rounding), so values can
/// be compared by name with the float32 model. This models the cuda kernels,
/// which load 16-bit, compute in float and round once per store (a fused
/// group rounds only at its boundary, so this rounds at least as often).
/// Returns the number of rounding points. Throws Error(internal) for a value
/// of another 16-bit use (none is made by convert_precision).
/// With `round_in_place` non-null, only a Cast to a 16-bit type keeps that
/// pair (its own rounding, then the widening Cast); every other 16-bit value
/// is written in float32 by its node, unrounded, and `(*round_in_place)[v]`
/// (one entry per value of the result) is the 16-bit type the caller must
/// round value v to where it is made (DType::undefined: none). The precision
/// check's executor does that in place, without a Cast pair's two buffers.
int emulate_16bit(ir::Model& m, std::vector<DType>* round_in_place = nullptr);

}  // namespace kiln::targets::cuda
