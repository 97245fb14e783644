// The cpu target's lowering passes (compile side): ONNX nodes -> kiln.cpu
// nodes (cpu_kernels.h documents their attributes), post-op fusion, layout
// assignment, view folding into matmul strides, weight packing.
//
// Every pass keeps the model valid for the executor at each step: a node is
// only rewritten when oneDNN accepts the resulting primitive on this machine
// (checked by creating its primitive descriptor), otherwise the ONNX node
// stays and runs on the reference kernel.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "targets/cpu/run/dnnl_util.h"
#include "targets/kernels.h"

namespace kiln::targets::cpu {

/// What the cpu lowering did, for reports and tests.
struct LowerStats {
  int lowered = 0;        ///< ONNX nodes replaced by kiln.cpu nodes
  int fused = 0;          ///< nodes absorbed as bias / post-ops / output scale
  int reorders = 0;       ///< kiln.cpu.Reorder nodes inserted at layout boundaries
  int packed = 0;         ///< weight constants packed into a oneDNN layout
  int views_folded = 0;   ///< Transpose / Reshape nodes folded into matmul strides
  int transposes = 0;     ///< other Transpose nodes run as oneDNN reorders
  int restored = 0;       ///< tiny element-wise nodes given back to the reference kernels
  int concats_in_place = 0;  ///< Concat nodes whose inputs may be produced in place
  int views_in_place = 0;    ///< Reshape-like nodes whose output may alias their input
  int matmuls_as_conv = 0;   ///< MatMul nodes run as 1x1 convolutions (matmuls_as_conv)
  int matmuls_as_skinny = 0; ///< MatMul nodes run as SkinnyMatMul (matmuls_as_skinny)
  int group_convs = 0;       ///< Conv nodes run as GroupConv (group_convs)
};

/// The whole cpu lowering, in order: lower_ops, fuse_post_ops, group_convs, fold_matmul_views,
/// lower_transposes, assign_layouts, mark_concat_in_place, mark_views_in_place, restore_small_elementwise,
/// matmuls_as_skinny, matmuls_as_conv, pack_weights, then dead-code
/// elimination. Shapes must be inferred (infer_and_fold) before.
/// How weights are laid out when a program is one of several sharing constants.
struct LowerOptions {
  /// Another program of the same model (a shape bucket compiled before),
  /// whose packed weight layouts pack_weights reuses where they fit. May be null.
  const ir::Model* layout_reference = nullptr;
  /// Weight layouts must not depend on the input sizes (shape buckets): no
  /// Winograd, whose oneDNN weight layout varies with the minibatch, so every
  /// bucket packs each weight the same way and the artifact stores it once.
  bool size_independent_weights = false;
  /// The batch (dim 0) will vary between programs of the set (a specialized
  /// batch dim): Winograd only where its weight layout runs at any batch size,
  /// so every program packs each weight the same way.
  bool batch_independent_weights = false;
};
LowerStats lower_for_cpu(ir::Model& m, const LowerOptions& options = {});

/// A lowered single-node Eltwise / Binary and the ONNX node it replaced.
struct Lowered {
  ir::Node lowered;
  ir::Node original;
};

/// Replaces every supported ONNX node (f32, static shapes; constant weights
/// for Conv) of every graph with its kiln.cpu node in plain layouts. Records
/// in `elementwise` (when given) each Eltwise / Binary made from one ONNX node.
int lower_ops(ir::Model& m, std::vector<Lowered>* elementwise = nullptr);

/// Puts back the ONNX node of each recorded Eltwise / Binary that is still
/// as lowered (no fusion, plain layout) and has fewer than `max_elems`
/// output elements: on tiny tensors oneDNN's per-call cost exceeds the work,
/// and the reference kernel is faster. Returns the number put back.
int restore_small_elementwise(ir::Model& m, const std::vector<Lowered>& elementwise, int64_t max_elems);

/// Absorbs into a kiln.cpu Conv / MatMul / Binary / Eltwise the single
/// consumer chain that oneDNN can apply as bias, output scale or post-ops:
/// Add of a per-channel constant (bias), element-wise activations (Relu,
/// Sigmoid, SiLU x*Sigmoid(x), Gelu, HardSwish, HardSigmoid, Clip, Tanh...),
/// scaling by a constant, and a residual / broadcast Add / Mul / Sub.
int fuse_post_ops(ir::Model& m);

/// Folds Transpose / Reshape nodes around a kiln.cpu.MatMul into the strides
/// of its source, weights and destination descriptors.
int fold_matmul_views(ir::Model& m);

/// Replaces each ONNX Transpose of an f32 tensor of static shape (at least
/// 16K elements, rank 2 to 6) by a kiln.cpu.Reorder reading its input with
/// permuted strides, where oneDNN has an optimised reorder for it. Run after
/// fold_matmul_views (a transpose next to a MatMul folds away instead).
/// Returns the number replaced.
int lower_transposes(ir::Model& m);

/// Chooses the channel-blocked layout for the spatial regions that contain a
/// convolution and inserts kiln.cpu.Reorder nodes at their boundaries.
/// Returns the number of reorders inserted.
/// `winograd` false: never choose the Winograd algorithm (LowerOptions);
/// `any_batch`: only where its weight layout also runs at other batch sizes.
int assign_layouts(ir::Model& m, bool winograd = true, bool any_batch = false);

/// Sets attribute "in_place_offsets" (byte offset of each input inside the
/// output) on each kiln.cpu.Concat whose inputs are all contiguous ranges of
/// its output in their own layouts (every dim before the axis 1; blocked
/// parts on block boundaries), so that the memory plan may place the inputs
/// there and the concat copies only the ones it did not. Returns the number marked.
int mark_concat_in_place(ir::Model& m);

/// Sets attribute "in_place_offsets" (all 0) on each ONNX Reshape / Flatten /
/// Squeeze / Unsqueeze of the main graph whose input 0 and output have static
/// shapes and whose other inputs are constants: the memory plan may then
/// place the input inside the output, and the reference kernel, finding its
/// output already holding the input, copies nothing. Returns the number marked.
int mark_views_in_place(ir::Model& m);

/// Rewrites each kiln.cpu.MatMul with constant weights, plain 2-D [M, K] source
/// and [M, N] destination, at least 2 rows, that oneDNN runs on its sgemm
/// (gemm:jit: no AVX-512) as a kiln.cpu.Conv: a 1x1 convolution over a width
/// of M in the channels-last layout (the same bytes), with weights packed
/// into the jit 1x1 kernel's blocked layout; bias and post-ops carried over
/// (a residual operand [M, N] as nwc too). Only where oneDNN runs that
/// convolution on its jit 1x1 kernel. With `layout_reference` (another program
/// of the set), a node named like one of its nodes makes the same choice, so
/// both pack the weights alike. Run before pack_weights. Returns the number rewritten.
int matmuls_as_conv(ir::Model& m, const ir::Model* layout_reference = nullptr);

/// Rewrites each 2-D kiln.cpu.Conv with constant weights whose groups are 2 or
/// 4 channels wide on both sides (channels a multiple of the channel block),
/// with no post-op but a ReLU, as a kiln.cpu.GroupConv (kiln's own kernel on
/// blocked activations; weights packed here). Run before assign_layouts.
/// Returns the number rewritten.
int group_convs(ir::Model& m);

/// Rewrites each kiln.cpu.MatMul with constant weights, plain 2-D [M, K] source
/// and [M, N] destination, 2 to kMaxSkinnyRows rows, that oneDNN runs on its
/// sgemm (no AVX-512), as a kiln.cpu.SkinnyMatMul (kiln's own kernel: weights
/// packed in panels of 16 columns, read once per call); bias and post-ops
/// carried over. With `layout_reference`, only nodes whose namesake there is a
/// SkinnyMatMul. Run before matmuls_as_conv. Returns the number rewritten.
int matmuls_as_skinny(ir::Model& m, const ir::Model* layout_reference = nullptr);

/// Reorders each constant weight of Conv / MatMul into the layout its
/// primitive wants (chosen by oneDNN for the final source/destination
/// layouts) and stores that as a new constant. Returns the number packed.
///
/// With `layout_reference` (a program of the same model for other input
/// sizes, e.g. another shape bucket): a node named like one of its Conv /
/// MatMul nodes first tries that node's weight layout (and convolution
/// algorithm); when oneDNN has an optimised kernel for it, the weights are
/// packed the same way, so the bytes equal the reference's and the artifact
/// stores them once. oneDNN otherwise picks layouts by batch size, which
/// would store one packed copy per bucket.
int pack_weights(ir::Model& m, const ir::Model* layout_reference = nullptr);

// ---- helpers shared by the passes (graph_util.cpp) ----

/// One use of a value: node index in its graph and input index (-1: read
/// inside one of the node's subgraphs).
struct Use {
  int node;
  int input;
};

/// Uses of every value by the nodes of g (subgraph reads count as uses by
/// the node that owns the subgraph).
std::vector<std::vector<Use>> uses_of(const ir::Graph& g, size_t nvalues);
/// Index of the node of g producing each value (-1: none in g).
std::vector<int> producers_of(const ir::Graph& g, size_t nvalues);
/// True when v is one of g's outputs.
bool is_output(const ir::Graph& g, ir::ValueId v);

/// The static dims of a value, or nullopt (unknown rank or a symbolic dim).
std::optional<std::vector<int64_t>> static_dims(const ir::Model& m, ir::ValueId v);
/// True for a value that is f32 with a static shape.
bool is_static_f32(const ir::Model& m, ir::ValueId v);
/// The constant data of v, or null.
const Tensor* constant_of(const ir::Model& m, ir::ValueId v);
/// The f32 data of t (laid out as `from`) reordered into layout `to` at
/// compile time (oneDNN zero-fills the padding of a blocked layout): a tensor
/// of shape [bytes of to / 4]. t must hold at least md_bytes(from) bytes.
Tensor reorder_constant(const Tensor& t, const md_t& from, const md_t& to);
/// Adds a value (name made unique by `suffix`) with a static shape.
ir::ValueId add_value(ir::Model& m, const std::string& name, DType dt, const std::vector<int64_t>& shape);

/// A kiln.cpu node named like `from` with op `op`.
ir::Node cpu_node(const ir::Node& from, const std::string& op);
/// True for a kiln.cpu node with op `op` (any op when empty).
bool is_cpu(const ir::Node& n, const std::string& op = "");
/// True for an ONNX (default domain) node with op `op`.
bool is_onnx(const ir::Node& n, const std::string& op);

/// The implementation oneDNN picks for a kiln.cpu node ("jit:avx512_core",
/// "ref:any", ...), or nullopt when it builds none (never throws).
std::optional<std::string> primitive_impl(const ir::Node& n);
/// True when oneDNN accepts the node (and, for a node with post-ops, runs it
/// on an optimised implementation: some reference post-op chains are wrong).
bool primitive_ok(const ir::Node& n);
/// True when oneDNN runs the node on an optimised (not "ref:") implementation:
/// the condition for lowering an ONNX node at all, since kiln's own reference
/// kernels are at least as fast as oneDNN's reference ones.
bool fast_primitive(const ir::Node& n);

/// The format-'any' descriptor of dims (weights whose layout oneDNN chooses).
md_t any_md(const dims_t& dims);

}  // namespace kiln::targets::cpu
