// The cuda target's lowering pass (compile side): ONNX nodes -> kiln.cuda
// nodes (run/cuda_ops.h), generated kernels compiled by NVRTC into the
// artifact's kernels section, cuBLASLt algorithms chosen and stored.
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "artifact/artifact.h"
#include "targets/cuda/compile/codegen.h"
#include "targets/cuda/compile/precision.h"
#include "targets/cuda/run/blaslt.h"
#include "targets/cuda/run/cuda_ops.h"
#include "targets/cuda/run/cudnn_graph.h"

namespace kiln::targets::cuda {

/// What the lowering is for.
struct LowerOptions {
  std::string arch = "sm_90";  ///< cubin architecture
  int sm_count = 132;          ///< multiprocessors (grid sizing)
  /// CUDA device on which matmul / convolution algorithms are chosen (tuning.h);
  /// -1: none (cross-compiling for `arch`): the nodes record that the
  /// libraries' heuristics choose at load (algo_at_load / algo -1).
  int device = 0;
  Tuning tuning = Tuning::fast;  ///< how the algorithms are chosen on `device`
  /// Element type of the program's float values: float32, or float16 /
  /// bfloat16, for which the precision pass (precision.h) converts the
  /// graph before lowering (SessionOptions::precision).
  DType dtype = DType::f32;
  /// float32 only: matmuls and convolutions may use TF32 tensor cores
  /// (SessionOptions::allow_tf32); recorded in each kiln.cuda.Gemm / Conv.
  bool tf32 = false;
  /// Run 2-D convolution regions channels-last (to_nhwc). nullopt: for
  /// float16 / bfloat16 and TF32 programs (tensor-core convolutions, whose
  /// NCHW forms transpose inside cuDNN), not for strict float32.
  std::optional<bool> nhwc;
  /// 1x1 convolutions and matmuls by constant weights on cuDNN (1x1
  /// convolutions, gemms_to_convs) instead of cuBLASLt, so that a
  /// ResNet-class program loads without starting cuBLASLt. nullopt: the
  /// environment's KILN_CUDA_POINTWISE (pointwise_on_cudnn; default: no).
  std::optional<bool> pointwise_cudnn;
  /// 16-bit programs: called with the graph the precision pass is about to
  /// convert; returns the nodes (precision_node_key) it keeps in float32
  /// (runtime/precision_check.h). Empty: none.
  std::function<std::set<std::string>(const ir::Model&, DType)> precision_check;
  /// A node the cuda target cannot lower runs on the host (a host segment of
  /// the program, ir::Segment) when true; refuses the compile when false
  /// (SessionOptions::fallback).
  bool fallback = true;
};

/// What the lowering did, for reports and tests.
struct LowerStats {
  int kernels = 0;       ///< kiln.cuda.Kernel nodes (generated kernels)
  int fused = 0;         ///< ONNX nodes folded into another node's kernel or matmul epilogue
  int gemms = 0;         ///< kiln.cuda.Gemm nodes
  int convs = 0;         ///< kiln.cuda.Conv nodes
  int copies = 0;        ///< kiln.cuda.Copy nodes
  int attentions = 0;    ///< fused attention kernels (lower_attention)
  int host_nodes = 0;    ///< nodes left to the host (opt.fallback)
  int host_segments = 0; ///< host segments of the program (ir::Segment)
  int conditionals = 0;  ///< kiln.cuda.If nodes (conditional nodes of the CUDA graph)
  int conv_epilogues = 0; ///< convolutions with cuDNN-fused epilogues
  int dwconvs = 0;       ///< depthwise convolutions on kiln's generated kernel (lower_depthwise_convs)
  size_t cubin_bytes = 0;
  size_t ptx_bytes = 0;
  TuningStats tuning;    ///< matmul / convolution algorithm decisions
  PrecisionStats precision;  ///< the precision pass (16-bit programs; zeros for float32)
};

/// Lowers every node of cp.model's main graph (shapes inferred and static),
/// compiles the generated kernels with NVRTC into cp.kernels (KernelBundle)
/// and makes the memory plan (cp.plan). A node the cuda target cannot run (no
/// kernel for its operator or dtypes, a subgraph, a shape that is not
/// static) stays as it is, an ONNX node run on the host, and
/// cp.model.segments records the partition with its copies (opt.fallback);
/// without fallback the compile is Error(unsupported) naming every such
/// node, its op_type and why.
LowerStats lower_for_cuda(artifact::CompiledProgram& cp, const LowerOptions& opt);

/// Lowers the nodes of L.model.main in place (fused attentions, matmuls,
/// convolutions, element-wise groups, every other node through its kernel
/// family, If through lower_if), counting into `st`. A node the cuda target
/// cannot lower stays as it is (ONNX) and `host` gets its index (into the
/// returned list) and why. Returns the graph's nodes before lowering. Used
/// for the main graph and, swapped in as the main graph, for each branch of
/// an If (lower_if).
std::vector<ir::Node> lower_graph_nodes(Lowering& L, const LowerOptions& opt, LowerStats& st,
                                        std::map<int, std::string>& host);

/// Lowers an ONNX If `n` whose condition is one bool on the device to a
/// kiln.cuda.If node (run/cuda_ops.h): its then_branch / else_branch
/// lowered by lower_graph_nodes, each writing the If's outputs, and a
/// generated kernel `cond_fn` that sets the conditional from the condition
/// (run/conditional.h). In a 16-bit, TF32 or channels-last program too:
/// the precision and layout passes leave the If float32 NCHW at its
/// boundary (precision.h, to_nhwc) and its branches are lowered strict
/// float32 NCHW (lower_body). Refuses `n` (it then runs on the host) for
/// branch outputs whose shape or dtype differ from the If's outputs, a
/// value of a branch without a static shape, nested subgraphs, or a branch
/// node the cuda target cannot lower.
ir::Node lower_if(Lowering& L, const ir::Node& n, const LowerOptions& opt, LowerStats& st);

/// Lowers ONNX Loop or Scan `n` to a kiln.cuda.Loop node (run/cuda_ops.h): a
/// WHILE conditional node of the CUDA graph whose body is `body` lowered by
/// lower_graph_nodes, with generated kernels that cut each Scan input's
/// slice and write each scan output's slice at the iteration read from
/// device memory, and a control kernel `control_fn` that counts the
/// iterations and sets the conditional (cond && i < M). Fills in the
/// outputs' shapes when inference left them open. In any program the body
/// is lowered strict float32 NCHW, as an If's branches (lower_if). Refuses `n` (it then runs
/// on the host) for a loop-carried value whose shape is not static or
/// changes between iterations, a body value without a static shape, nested
/// subgraphs, a body node the cuda target cannot lower, scan outputs without a trip count known at compile time (M not a
/// constant, or a condition that may end the loop early), and a Loop
/// without M and condition.
ir::Node lower_loop(Lowering& L, const ir::Node& n, const LowerOptions& opt, LowerStats& st);

/// Refuses conditional node `n` unless every value produced in its body `g`
/// (`which`: "then_branch", "body", ...) has a static shape and no node of
/// it holds a subgraph (nested control flow would need a second capture
/// stream per level; it stays on the host).
void check_body(const ir::Model& m, const ir::Node& n, const ir::Graph& g, const char* which);

/// Body `g` (`which`) of conditional node `n` lowered as a graph of its own:
/// split_conv_bias, expand_matmul_batches and lower_graph_nodes on a main
/// graph swapped for it, with body_options(opt) whatever the program's
/// precision and layout (the precision and layout passes rewrite the main
/// graph only, so a body's values are float32 NCHW as the model wrote
/// them). Refuses `n` when a node of the body would run on the host (a
/// conditional body cannot hold host work). The result keeps g's inputs
/// and outputs.
ir::Graph lower_body(Lowering& L, const ir::Node& n, const ir::Graph& g, const char* which, const LowerOptions& opt,
                     LowerStats& st);

/// The options bodies of conditional nodes are lowered with: `opt` made
/// strict float32 NCHW (dtype float32, no TF32, nhwc false, no precision
/// check). Running bodies in 16-bit or TF32 is a later step (docs/cuda.md).
LowerOptions body_options(const LowerOptions& opt);

/// False when KILN_CUDA_CONDITIONAL=0 (measurement aid: every If then runs
/// on the host, as before conditional nodes).
bool conditional_nodes_enabled();

/// Why node `n` cannot run on the cuda target whatever the lowering tries
/// (a subgraph attribute of a node other than If / Loop / Scan, or any
/// when conditional nodes are off; an input whose shape is not static; an
/// output whose shape is not static, except a Loop's or Scan's, which
/// lower_loop infers), or "" when the lowering should try it (lower_if /
/// lower_loop decide).
std::string host_only_reason(const Lowering& L, const ir::Node& n);

/// Runs `lower` (one attempt at lowering a node) and returns true; when it
/// refuses the node (refuse(): Error(unsupported) "... cannot be compiled
/// for target cuda: ..."), undoes what it appended to the
/// lowering state (kernel source, kernel names, new values), stores the
/// refusal in `why` and returns false. Other errors propagate.
bool try_lower(Lowering& L, std::string& why, const std::function<void()>& lower);

/// Fills st.host_nodes / host_segments from m.segments and logs which nodes
/// (`reasons`: index into `nodes`, the graph before lowering -> why) run on
/// the host.
void report_host_nodes(const ir::Model& m, const std::map<int, std::string>& reasons,
                       const std::vector<ir::Node>& nodes, LowerStats& st);

/// 16-bit programs (precision `half`, DType::f16 or bf16) with host nodes:
/// makes every node of m's main graph left to the host (an ONNX-domain node
/// among the lowered ones) a float32 island, since the host kernels compute
/// in float32 (most have no 16-bit kernel, and an fp32-output op such as
/// Exp would write its input's 16-bit type there). For each host node:
///  - a float input the precision pass made 16-bit (dtype `half`, which
///    `before`, the values' dtypes before that pass, did not have) is read
///    as float32: the float32 constant or model input it was converted from
///    (`st.wide`), else the output of an ONNX Cast to float32 emitted before
///    the node (on the host: the 16-bit value is what crosses the
///    boundary); one per value, shared by its host readers, their If / Loop
///    / Scan bodies included (the node's subgraphs are cloned first). A Cast,
///    Shape or Size reads its input as it is.
///  - an output made 16-bit becomes float32 (a Cast's `to` with it); where
///    a device node reads it, an ONNX Cast to `half` after the node (on the
///    host: the 16-bit value crosses) gives the device readers the 16-bit
///    value they were lowered for. Host readers read the float32 value, so
///    values that stay on the host stay float32; graph outputs keep their
///    dtypes (the pass never makes one 16-bit).
/// A node st counted as 16-bit moves to st.fp32 ("runs on the host ...").
/// Returns the number of Casts added (also added to st.casts).
int fp32_host_nodes(ir::Model& m, DType half, const std::vector<DType>& before, PrecisionStats& st);

/// Error(unsupported) for a compile with fallback off (SessionOptions::fallback
/// = error): "N node(s) cannot be compiled for target cuda: <label> (op_type
/// X): <why>; ..." naming every node in `reasons` (node index -> why).
[[noreturn]] void refuse_host_nodes(const std::vector<ir::Node>& nodes, const std::map<int, std::string>& reasons);

/// The uses of each value by the main graph's nodes (node indices, one entry
/// per reading input; an If / Loop / Scan reading it in its bodies counts
/// once more), and whether it is a graph output.
struct Uses {
  std::vector<std::vector<int>> readers;
  std::vector<bool> is_output;
  std::vector<int> producer;  ///< node index producing each value, -1 if none
};
Uses uses_of(const ir::Model& m);

/// The static dims of value `v`; empty when it has no shape, a symbolic dim,
/// or is kNoValue. (The graph rewrites before the lowering proper use it.)
std::vector<int64_t> static_dims(const ir::Model& m, ir::ValueId v);
/// A new value named `name` of `dtype` and static `dims`, holding `constant`
/// when given (its shape must be `dims`); returns its id.
ir::ValueId new_value(ir::Model& m, const std::string& name, DType dtype, const std::vector<int64_t>& dims,
                      std::optional<Tensor> constant = std::nullopt);
/// A new int64 [dims.size()] constant holding `dims` (a Reshape's shape input).
ir::ValueId shape_constant(ir::Model& m, const std::string& name, const std::vector<int64_t>& dims);

/// A MatMul / Gemm lowered to kiln.cuda.Gemm, with the nodes whose work it
/// absorbed (a following Add of a [n] constant as the bias epilogue, a
/// residual Add as C, then a Relu, or a Gelu as cuBLASLt's tanh-form GELU
/// epilogue: approximate="tanh" always, the erf form in 16-bit programs
/// only, within 4.7e-4 of it): `node` replaces the last of `absorbed`.
struct GemmLowered {
  ir::Node node;
  std::vector<int> absorbed;
};

/// Lowers main-graph node `i` (a MatMul or Gemm whose inputs are all
/// float32, all float16 or all bfloat16; fp32 accumulation) or refuses it.
/// With opt.device >= 0 the algorithm is chosen on that device by
/// tune_gemm(opt.tuning) and stored in the node (algo, workspace); the
/// runtime replays it without asking again. Without a device the node
/// records algo_at_load = 1 and a 32 MiB workspace cap.
/// `taken`: nodes (by index) already absorbed by another matmul, which
/// this one leaves alone.
GemmLowered lower_gemm(Lowering& L, int i, const Uses& uses, const LowerOptions& opt, const std::vector<bool>& taken = {});

/// Rewrites every MatMul whose operands both have batch dims that
/// broadcast against each other only partly (A [1, H, M, K] with B
/// [N, H, K, P]: one strided batch of cuBLASLt cannot read them) to read
/// Expand(operand, broadcast batch dims + its matrix dims) instead, a
/// generated copy, so that lower_gemm sees equal batch dims. Returns the
/// number of MatMuls rewritten. ONNX MatMul follows numpy.matmul's
/// broadcasting (onnx/docs/Broadcasting.md).
int expand_matmul_batches(ir::Model& m);

/// pad_matmul_n's size rule: a matmul is padded when it does at least this
/// many multiply-adds (m * n * k; below it the compaction kernel's launch,
/// 2-3 us in a CUDA graph, is a large part of what padding could save) ...
inline constexpr int64_t kPadNMinMacs = int64_t{1} << 24;
/// ... and its k is at least this (below it the matmul is bound by writing
/// D, whose traffic the compaction pass doubles) ...
inline constexpr int64_t kPadNMinK = 64;
/// ... and padding adds at most n / kPadNMaxWaste columns (a narrow n pads
/// to much more work).
inline constexpr int64_t kPadNMaxWaste = 8;

/// Pads the n of matmuls whose rows are not 16-byte aligned (issue #20):
/// a MatMul (B of one matrix, [k, n] or with batch dims of size 1: a B
/// shared by A's batches) or a Gemm whose B is a constant, whose n times
/// the element size is not a multiple of 16 bytes, while A's rows (and B's
/// when it is stored transposed, transB) are, computes n_pad columns
/// instead (n rounded up to a multiple of 16 / element size): B becomes a
/// constant with zero columns appended (zero rows with transB), the
/// Gemm's C bias vector or a following bias Add's [n] constant gets zeros
/// appended, the bias Add and a Relu / Gelu lower_gemm fuses are moved
/// before the compaction, and an ONNX Slice (axis -1, 0..n) writes the
/// original [.., n] value from the padded one. In a 16-bit program a Cast
/// of that value to float32 joins the Slice in one generated kernel
/// (is_gatherable_slice): it reads the padded 16-bit rows and writes the
/// compact float32 ones. So cuBLASLt gets aligned B and D and its
/// vectorized kernels. Left alone: a matmul with a residual C (a Gemm's
/// full [m, n] C or a residual Add lower_gemm would fuse), a B that is
/// not constant or that differs per batch, n already aligned, A's rows not
/// aligned (padding n cannot help), and sizes under kPadNMinMacs /
/// kPadNMinK / kPadNMaxWaste. KILN_CUDA_GEMM_PAD_N=0 turns the pass off,
/// KILN_CUDA_GEMM_PAD_N=1 pads every matmul it can whatever its size
/// (measurement aids). Float32, TF32, float16 and bfloat16 programs; run
/// after the precision pass (the element size decides n_pad). Returns the
/// number of matmuls padded; each one is logged at debug level.
int pad_matmul_n(ir::Model& m);

/// A scaled-dot-product attention lowered to one fused kernel, with the
/// nodes it absorbed: `node` replaces the last of `absorbed`.
struct AttentionLowered {
  ir::Node node;
  std::vector<int> absorbed;
};

/// Recognizes MatMul(Q, K^T) -> [scalar Mul / Div]* -> [Add mask] ->
/// [scalar Mul / Div]* -> Softmax(last axis) -> [Where(IsNaN(P), 0, P)] ->
/// [Dropout / Identity]* -> MatMul(., V) around main-graph Softmax node
/// `softmax` (`nodes`: the graph's nodes before lowering), float16 / bfloat16
/// Q, K, V of rank 3 or 4 with equal batch dims, head dims <= 128, every
/// intermediate read only by the next node, float Casts anywhere on the
/// scores. Scalings after the Add scale the mask too; scalar Muls on Q or
/// K^T (torch.onnx's scaled_dot_product_attention) fold into the scale;
/// Transposes and no-copy reshapes read only by the pattern fold into
/// strides (gen_attention). nullopt when the pattern is not there; `done`
/// nodes are left alone. The caller only asks for sm_80 and newer (the
/// kernel's mma.sync.m16n8k16).
std::optional<AttentionLowered> lower_attention(Lowering& L, int softmax, const std::vector<ir::Node>& nodes,
                                                const Uses& uses, const std::vector<bool>& done);

/// Launch-configuration tuning of the generated kernels: every
/// kiln.cuda.Kernel node of `m` marked grid_stride = 1 (its loops stride by
/// gridDim.x, so any grid computes the same result; the element-wise chains)
/// and launched with more blocks than `sm_count` is timed on opt.device at
/// its generated grid and at those of 2, 4, 8 (exhaustive: 1, 2, 4, 8,
/// 16) blocks per multiprocessor that are smaller than it, 10 launches per timing, 5 (exhaustive 10) timings
/// (median), from `bundle`'s cubin on zeroed buffers; a grid at least 3%
/// faster replaces the node's. Block sizes are fixed by the generator
/// (__launch_bounds__). Nothing without a device or with heuristic tuning.
/// Returns the number of nodes whose grid changed. Never throws: a failure
/// (a driver error, no memory for the scratch buffer) is logged as a
/// warning and the generated grids stay.
int tune_kernel_grids(ir::Model& m, const KernelBundle& bundle, const LowerOptions& opt, int sm_count, TuningStats& st);

/// Removes the kiln.cuda.Copy nodes (Reshape, Flatten, Squeeze, ...) whose
/// output is not a graph output: their readers read the input's bytes in
/// place (every cuda kernel bakes its shapes into its code, and values are
/// written once, so an alias costs nothing and is never overwritten while
/// read). The memory plan then keeps the input alive for them. Returns the
/// number removed.
int alias_copies(ir::Model& m);

/// Stores the algorithm decision of kiln.cuda.Gemm node `g` (spec `s`,
/// already written with set_gemm_attrs): tune_gemm(opt.tuning) on
/// opt.device, or without a device algo_at_load = 1 and a 32 MiB workspace cap.
void set_gemm_decision(Lowering& L, ir::Node& g, const GemmSpec& s, const LowerOptions& opt, const std::string& where);

/// A Conv that is one matmul: 1x1 kernel, stride 1, no padding, dilation 1,
/// group 1, no bias left (split_conv_bias), 2-D NCHW x [N, C, H, W] and w
/// [K, C, 1, 1] of one dtype. It becomes kiln.cuda.Gemm y[n] (K x HW) =
/// w (K x C) * x[n] (C x HW), batched over N with w shared: cuBLASLt beats
/// cuDNN's legacy NCHW kernels on these by far at small batch (ResNet-50's
/// bottleneck 1x1 convolutions). nullopt when `n` is not such a Conv.
std::optional<ir::Node> lower_pointwise_conv(Lowering& L, const ir::Node& n, const LowerOptions& opt);
/// Whether lower_pointwise_conv takes `n` (it has no side effects).
bool is_pointwise_conv(const ir::Model& m, const ir::Node& n);

/// Rewrites every main-graph Conv / ConvTranspose with a constant bias B [K] into Conv(x, w)
/// followed by an ONNX Add of B as [K, 1, .., 1], so that the bias, and
/// whatever element-wise work follows (Relu, a residual Add), fuse into one
/// generated kernel after the cuDNN convolution. Returns the number split.
int split_conv_bias(ir::Model& m);

/// Rewrites every main-graph inference BatchNormalization (training_mode 0,
/// no running-statistics outputs, x of rank >= 2 with a static shape and a
/// float32 / float16 / bfloat16 dtype, float32 constant scale, B, mean and
/// var of C values each; passes::batch_norm_affine) into Mul(x, s) and
/// Add(., t) with s, t float32 constants [C, 1, .., 1]; the Mul's output is
/// float32 (fused with the Add, never stored), the Add writes the
/// BatchNormalization's output. The element-wise fusion then takes a
/// following Relu into the same kernel and to_nhwc keeps such nodes
/// channels-last. Others stay as they are (gen_reduce's kernel). Returns the
/// number rewritten.
int batch_norm_to_affine(ir::Model& m);

/// Layout assignment: every 2-D Conv with a constant filter (bias already
/// split off) and the element-wise, pooling, Concat and Split nodes that read
/// its results switch to NHWC values ([N, H, W, C]): Conv gets attribute
/// kiln_nhwc = 1 and its filter permuted to [K, R, S, C/group] (cuDNN's NHWC
/// filter layout); a 1x1 unstrided unpadded group-1 Conv becomes MatMul(x
/// [N,H,W,C], w^T [C,K]) so that lower_gemm fuses its bias, residual and Relu
/// as epilogues; pools get kiln_nhwc = 1; GlobalAveragePool / GlobalMaxPool
/// become ReduceMean / ReduceMax over axes 1, 2 ([N,1,1,C]); Concat and Split
/// keep their meaning with the channel axis moved; constants read by the
/// region are permuted (rank <= 4, right-aligned). One Transpose enters the region per
/// NCHW value it reads, one Transpose (a Reshape where only unit dims move)
/// leaves it per value read outside it or output by the graph, whose ids and
/// shapes are unchanged. A model's own Transpose(perm 0,3,1,2) of a rank-4
/// value that a region node reads joins as an Identity (its input is the
/// output's NHWC data). Returns the number of nodes moved.
/// With `pointwise_as_matmul` false (KILN_CUDA_POINTWISE=cudnn) a 1x1
/// convolution stays a channels-last Conv for cuDNN like the others.
int to_nhwc(ir::Model& m, bool pointwise_as_matmul = true);

/// After to_nhwc: the region's entry / exit transposes that meet a model's
/// own (ConvNeXt: Conv -> exit -> Transpose(0,2,3,1)) merge, and a chain
/// that composes to the identity permutation vanishes (passes::
/// simplify_algebra, repeated until nothing changes, at most 4 rounds).
/// Returns the number of rewrites.
int merge_layout_transposes(ir::Model& m);

/// Lowers a Conv or ConvTranspose (x and w both float32, float16 or
/// bfloat16, fp32 accumulation; no bias left, symmetric pads,
/// 1-3 spatial dims, any group; ConvTranspose as cuDNN backward-data, with
/// output_padding below the stride) to kiln.cuda.Conv. With opt.device >= 0 the algorithm is
/// chosen on that device by tune_conv(opt.tuning) (with the spec's math:
/// ConvSpec; at most 256 MiB workspace) and stored in the node (algo,
/// workspace); without a device algo is kConvAlgoAtLoad and workspace the 256 MiB cap.
/// With a device (graph_convs_enabled) a forward convolution is first given
/// to cuDNN's graph API (tune_conv_graph, no epilogue): the node then has
/// api = "graph" and the engine's attributes (set_graph_conv_attrs).
ir::Node lower_conv(Lowering& L, const ir::Node& n, const LowerOptions& opt);

/// The ConvSpec of ONNX Conv / ConvTranspose `n` (its bias already split
/// off), or Error(unsupported) naming `n` and the reason (a dtype other than
/// float32 / float16 / bfloat16, asymmetric pads, a non-constant bias, ...).
ConvSpec conv_spec_for(Lowering& L, const ir::Node& n, const LowerOptions& opt);

/// Whether convolutions go through cuDNN's graph API: with a device
/// (opt.device >= 0), unless KILN_CUDA_CONV_GRAPH=0.
bool graph_convs_enabled(const LowerOptions& opt);

/// The kiln.cuda.Conv (api "graph") replacing ONNX node `n`: spec `s`,
/// epilogue `ep`, engine `e`; inputs (x, w[, bias][, z]), `output` y.
ir::Node graph_conv_node(const ir::Node& n, const ConvSpec& s, const ConvEpilogue& ep, const GraphEngine& e,
                         std::vector<ir::ValueId> inputs, ir::ValueId output);

/// A convolution lowered with the element-wise nodes its cuDNN epilogue
/// absorbed: `node` replaces the last of `absorbed`.
struct ConvLowered {
  ir::Node node;
  std::vector<int> absorbed;
};

/// Recognizes Conv(x, w) -> [Add bias] -> [Add z] -> [Relu] from main-graph
/// node `i` (`nodes`: the graph before lowering; a forward Conv with its bias
/// split off, at least one of the three after it, every intermediate read
/// only by the next node and not a graph output), where bias is a constant
/// of the conv's dtype holding one value per output channel (broadcast like
/// an ONNX Conv's B) and z a value of y's dims and dtype, and lowers it to
/// one graph-API kiln.cuda.Conv when cuDNN has an engine for that fusion
/// (tune_conv_graph). nullopt otherwise (no device, KILN_CUDA_CONV_GRAPH=0,
/// a 1x1 Conv that lower_pointwise_conv makes a matmul, no engine): the
/// unfused path lowers the nodes. `done` nodes are left alone.
std::optional<ConvLowered> lower_conv_fused(Lowering& L, int i, const std::vector<ir::Node>& nodes, const Uses& uses,
                                            const LowerOptions& opt, const std::vector<bool>& done);

/// Whether constant `v` holds one value per output channel of a
/// convolution's output y (`ydims`, channel axis `axis`), of dtype `dt`,
/// broadcasting against y like an ONNX Conv's B: every dim 1 except the
/// channel's, right-aligned (fuse_conv.cpp).
bool is_channel_bias(const ir::Value& v, const std::vector<int64_t>& ydims, size_t axis, DType dt);

/// Estimated time (ms) of the element-wise kernel that an epilogue fused
/// into convolution `s` saves: it reads y (and z with ep.residual) and
/// writes y at ~2.5 TB/s, plus ~3 us of launch and tail (fuse_conv.cpp).
double epilogue_kernel_ms(const ConvSpec& s, const ConvEpilogue& ep);

/// Constant `t` (any element type) permuted like ONNX Transpose(perm)
/// (layout_nhwc.cpp).
Tensor permute_constant(const Tensor& t, const std::vector<int64_t>& perm);

/// A depthwise 2-D convolution (group == C_in == C_out: channel multiplier
/// 1; dilation 1; symmetric pads) with the epilogue fused into it, as
/// gen_dwconv.cpp's kernel computes it, in float:
/// y = act(conv(x, w) + bias). NHWC: x [N, H, W, C], y [N, OH, OW, C], w
/// [R, S, C]; NCHW: x [N, C, H, W], y [N, C, OH, OW], w [C, 1, R, S]; bias [C].
/// x, w, bias and y share `dtype` (float32, float16 or bfloat16).
struct DwConvSpec {
  DType dtype = DType::f32;
  bool nhwc = false;
  int64_t n = 1, c = 1, h = 1, w = 1, oh = 1, ow = 1, r = 1, s = 1;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  bool bias = false;                 ///< a bias input follows w
  bool relu = false;                 ///< Relu after the bias
  std::optional<float> lo, hi;       ///< Clip's bounds after the bias (absent: none)
  int64_t pixels = 1;                ///< NHWC: outputs per thread along W (1, 2 or 4); NCHW: 1

  /// Channels per thread where every pointer is aligned for it (NHWC: 4, 2
  /// or 1 as C allows; NCHW: 1). Misaligned pointers take a one-channel path.
  int64_t vec() const;
  /// Work items of the vectorized loop (one thread's share each).
  int64_t items() const;
  /// Everything the kernel's code depends on, `pixels` included.
  std::string key() const;
};

/// Block size of the depthwise kernel (threads; __launch_bounds__).
inline constexpr int64_t kDwConvBlock = 256;

/// The CUDA C++ of `s`'s kernel, `extern "C" __global__` named `fn`, taking
/// (x, w, [bias], y); a grid-stride loop, so any grid computes the same result.
std::string dwconv_source(const DwConvSpec& s, const std::string& fn);

/// Whether KILN_CUDA_DWCONV lets the lowering use the kernel: "0" never
/// (a measurement aid, like KILN_CUDA_CONV_GRAPH), "1" for every depthwise
/// convolution it takes (tests), anything else or unset: decided
/// (lower_depthwise_convs).
enum class DwConvMode { off, always, decide };
DwConvMode dwconv_mode();

/// One launch of a generated kernel to time: its function, grid and block
/// (x only) and the bytes of each pointer parameter, in order.
struct TimedLaunch {
  std::string fn;
  int64_t grid = 1, block = 1;
  std::vector<size_t> param_bytes;
};

/// Compiles `source` (the kernels only: the prelude is added) with NVRTC for
/// opt.arch and times each launch on opt.device on zeroed buffers (10
/// launches per timing, 5 timings, exhaustive 10; the median): ms per
/// launch, in the order given. Throws Error when NVRTC or a driver call fails.
std::vector<float> time_kernel_launches(const std::string& source, const std::vector<TimedLaunch>& launches,
                                        const LowerOptions& opt);

/// Lowers every depthwise Conv of the main graph (`nodes`, before lowering;
/// ONNX domain, 2-D, group == C == K, dilation 1, symmetric pads, strides 1
/// or 2, kernel at most 15x15, bias split off, NHWC or NCHW, one float
/// dtype, not `done`) to a kiln.cuda.Kernel running dwconv_source, absorbing
/// a following Add of a per-channel constant (the bias) and then a Relu or a
/// Clip with constant bounds (each read only by the next, not a graph
/// output), when kiln's kernel is chosen over cuDNN:
///  - KILN_CUDA_DWCONV=0: never; =1: always;
///  - with a device and fast / exhaustive tuning: the kernel with the rule's
///    outputs per thread and with 4 is timed, and the faster is kept when it beats
///    cuDNN's best time for the convolution (graph and legacy API), plus the
///    estimated element-wise kernel a fused Clip saves (cuDNN fuses no Clip);
///  - otherwise (cross-compiling, heuristic tuning): 16-bit at batch >= 8.
/// Decisions are memoized per problem, device and tuning mode (counted in
/// L.tuning). Returns the lowered nodes, each with the ONNX nodes it absorbed.
std::vector<ConvLowered> lower_depthwise_convs(Lowering& L, const std::vector<ir::Node>& nodes, const Uses& uses,
                                               const LowerOptions& opt, const std::vector<bool>& done);

}  // namespace kiln::targets::cuda
