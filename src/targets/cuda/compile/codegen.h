// Shared pieces of the cuda target's lowering (compile side): the lowering
// state, kernel-node construction, C types and index arithmetic for the
// generated CUDA C++ (one kernel family per gen_*.cpp file).
//
// Every generated kernel is `extern "C" __global__`, named uniquely in the
// program's single translation unit, takes one pointer per input then one
// per output, and has every shape baked in as a constant (a cuda program has
// static shapes only).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "targets/cuda/compile/tuning.h"
#include "ir/graph.h"

namespace kiln::targets::cuda {

/// The state of one lowering: the model being rewritten, the CUDA C++ source
/// of every generated kernel so far, and the device facts codegen uses.
struct Lowering {
  ir::Model& model;
  std::string source;   ///< the program's kernels (after the prelude), appended to by the gen_* functions
  int sm_count = 132;   ///< multiprocessors of the target GPU (grid sizing)
  int next_kernel = 0;
  TuningStats tuning;   ///< what lower_gemm / lower_conv decided (tuning.h)

  /// A fresh kernel name "k<N>_<op>" (op lower-cased, letters and digits only).
  std::string kernel_name(const std::string& op);
  /// The static dims of a value. Throws Error(unsupported) naming `n` and
  /// "cuda" when the value has an unknown rank or a symbolic dim.
  std::vector<int64_t> dims(const ir::Node& n, ir::ValueId v) const;
  /// A kiln.cuda.Kernel node named like `from`, launching `fn` on grid x
  /// block threads with `smem` dynamic shared bytes, reading `inputs` and
  /// writing `outputs` (kernel parameters in that order).
  ir::Node kernel_node(const ir::Node& from, const std::string& fn, std::vector<ir::ValueId> inputs,
                       std::vector<ir::ValueId> outputs, int64_t grid, int64_t block, int64_t smem = 0) const;
  /// Grid size for a grid-stride loop over `n` items with `block` threads.
  int64_t grid_for(int64_t n, int64_t block) const;
};

/// Throws Error(unsupported) "<node label> (op_type X) cannot be compiled for
/// target cuda: <why>" — the one way the cuda lowering refuses a node.
[[noreturn]] void refuse(const ir::Node& n, const std::string& why);

/// The CUDA C++ type of a dtype ("float", "long long", "bool", ...), or
/// nullopt for a dtype the cuda target does not compute on (f16, bf16,
/// strings, complex, 4/8-bit floats in this version).
std::optional<std::string> c_type(DType t);
/// True for float16 and bfloat16: stored as 16-bit patterns ("unsigned
/// short") and computed in float by every generated kernel.
bool is_half(DType t);
/// True for the dtypes a float-computing kernel reads and writes: float32,
/// float16, bfloat16 (the precision pass's dtypes).
bool is_float_storage(DType t);
/// The C type an element of dtype t is stored as in device memory: c_type(t),
/// or "unsigned short" for float16 / bfloat16; nullopt for neither.
std::optional<std::string> storage_type(DType t);
/// The device function turning a stored float16 / bfloat16 element into a
/// float ("kl_h2f", "kl_bf2f"); "" for float32 (so "<fn>(e)" is just "(e)").
std::string load_fn(DType t);
/// The device function rounding a float to float16 / bfloat16 bits
/// ("kl_f2h", "kl_f2bf", round to nearest even); "" for float32.
std::string store_fn(DType t);
/// `e` (an element as stored for dtype t) as a float expression.
std::string load_float(DType t, const std::string& e);
/// `e` (a float expression) as stored for dtype t.
std::string store_float(DType t, const std::string& e);
/// The unsigned CUDA type of an element of `bytes` bytes (1, 2, 4, 8), for
/// kernels that only move data.
std::string raw_type(size_t bytes);
/// The CUDA type that moves `bytes` bytes (1, 2, 4, 8 or 16) in one access
/// ("unsigned char", "unsigned short", "unsigned int", "uint2", "uint4"), for
/// vectorized loads and stores; an access of that type needs `bytes` alignment.
std::string vector_type(size_t bytes);
/// A run-time condition (CUDA C++ expression) true when every pointer
/// expression `p.first` is aligned to `p.second` bytes (a power of two), e.g.
/// "((((unsigned long long)(x)) & 15ull) | (((unsigned long long)(y)) & 7ull)) == 0ull";
/// "true" for an empty list. Vectorized kernels test it (a uniform branch)
/// and fall back to scalar accesses for caller memory of unknown alignment.
std::string aligned_condition(const std::vector<std::pair<std::string, size_t>>& ptrs);
/// Element count of dims (1 for rank 0).
int64_t numel(const std::vector<int64_t>& dims);
/// Row-major strides (elements) of dims.
std::vector<int64_t> strides_of(const std::vector<int64_t>& dims);
/// "unsigned" when every index below `n` fits in 31 bits (a grid-stride
/// loop cannot wrap), else "unsigned long long".
std::string index_type(int64_t n);
/// C++ statements computing `var` = the flat index into an input of shape
/// `in` broadcast (numpy rules, right-aligned) to `out`, from the flat output
/// index `i` (an expression of index type). `in` may have a lower rank.
std::string broadcast_index(const std::string& var, const std::string& i, const std::vector<int64_t>& in,
                            const std::vector<int64_t>& out);
/// An exact float literal for CUDA C++ (via __int_as_float), NaN and inf included.
std::string float_literal(float f);
/// The normalised axis (0..rank-1) of `axis`; refuses the node when out of range.
int64_t norm_axis(const ir::Node& n, int64_t axis, int64_t rank);
/// The int64 values of constant input `i` of `n`, or nullopt when it is
/// absent; refuses the node when it is present but not a constant.
std::optional<std::vector<int64_t>> const_ints(const ir::Model& m, const ir::Node& n, size_t i);

/// Begin and end pads of a sliding window (Conv, MaxPool, AveragePool) per
/// spatial dim, from `pads` or `auto_pad` (SAME_UPPER / SAME_LOWER / VALID)
/// and the input / output spatial dims. Refuses an unknown auto_pad.
std::pair<std::vector<int64_t>, std::vector<int64_t>> window_pads(const ir::Node& n, const std::vector<int64_t>& in,
                                                                    const std::vector<int64_t>& out,
                                                                    const std::vector<int64_t>& kernel,
                                                                    const std::vector<int64_t>& strides,
                                                                    const std::vector<int64_t>& dilations);

/// The device helpers every program's source starts with (math overloads,
/// warp and block reductions).
const char* kernel_prelude();

// ---- kernel families (one per gen_*.cpp): each returns the lowered nodes, or
// an empty vector when it does not handle the node's op_type; it refuses
// (Error(unsupported)) a node it handles but cannot compile.

/// True when `n` is an element-wise operator the cuda target generates code
/// for, on dtypes it computes on, with static shapes (gen_elementwise.cpp):
/// unary math and activations, binary arithmetic and comparisons with numpy
/// broadcasting, Where, Clip, Cast, Expand, Identity, Sum/Mean/Max/Min.
bool is_elementwise(const Lowering& L, const ir::Node& n);
/// True when Concat `n` can be a member of an element-wise chain (as the
/// producer of one of its inputs): static shapes, every input of the
/// output's dtype and rank, a float storage dtype (gen_elementwise.cpp).
bool is_gatherable_concat(const Lowering& L, const ir::Node& n);
/// True when Slice `n` can be a member of an element-wise chain (as the
/// producer of one of its inputs): constant starts / ends / axes, steps of
/// 1, one axis cut, static shapes, a float storage dtype: each output row
/// (the dims from the cut axis on) is one contiguous window of an input row
/// (gen_elementwise.cpp). pad_matmul_n's compaction + Cast is one.
bool is_gatherable_slice(const Lowering& L, const ir::Node& n);
/// True when Pad `n` can be a member of an element-wise chain: constant
/// mode with the default 0 (no value or axes input), constant non-negative
/// int64 pads on at most one axis, static shapes, a float storage dtype:
/// each output row (the dims from the padded axis on) is an input row with
/// zeros before and after it (gen_elementwise.cpp). pad_stem_channels' Pad.
bool is_gatherable_pad(const Lowering& L, const ir::Node& n);
/// True when Transpose `n` (an explicit perm, static shapes, a float storage
/// dtype) may be read through by a gatherable Pad of the same chain: the Pad
/// maps each of its elements to the Transpose's input, so the transposed
/// tensor is never stored (gen_elementwise.cpp).
bool is_gatherable_transpose(const Lowering& L, const ir::Node& n);
/// One kernel computing a fused chain of element-wise nodes: `members` in
/// topological order, the last one the root whose output is written; every
/// other member's output is read only by later members (and has the root's
/// shape). Inputs not produced inside the chain are loaded with broadcasting.
/// A member may be a Concat (is_gatherable_concat): its value at each
/// element is read from the input that holds it, so the concatenation is
/// never stored (DenseNet's Concat -> BatchNormalization -> Relu). A member
/// may be a Slice (is_gatherable_slice) likewise: the slice is never stored.
/// A Pad (is_gatherable_pad) likewise, zero outside its input's window,
/// possibly reading through a Transpose member (is_gatherable_transpose)
/// whose output only it reads: pad_stem_channels' Transpose -> Pad -> Cast
/// of a model's NCHW float32 image into padded NHWC 16-bit is one kernel. A
/// chain may be one such gather alone (its root).
ir::Node gen_elementwise(Lowering& L, const std::vector<const ir::Node*>& members);

/// Transpose, Gather, GatherElements, Concat, Slice, Split, Tile, Trilu,
/// CumSum, Pad (constant / reflect / edge / wrap), DepthToSpace,
/// SpaceToDepth, GatherND, ScatterElements / ScatterND (reduction none, add),
/// EyeLike, OneHot, Dropout with its mask (inference); Reshape / Flatten / Squeeze /
/// Unsqueeze / Dropout (inference) become kiln.cuda.Copy.
std::vector<ir::Node> gen_data(Lowering& L, const ir::Node& n);
/// Resize: nearest (any dtype), linear and cubic (float32), scales or sizes
/// constant, optional axes, every coordinate transformation but
/// tf_crop_and_resize, stretch policy only. Taps are computed at compile time
/// into two constant tables (input indices, weights) the kernel reads.
std::vector<ir::Node> gen_resize(Lowering& L, const ir::Node& n);
/// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (float32 scores and
/// weights, int32/int64 targets, every reduction, ignore_index; the second is
/// a LogSoftmax kernel followed by the first). Targets outside [0, C) are
/// clamped (the reference kernel reports them; a kernel cannot).
std::vector<ir::Node> gen_loss(Lowering& L, const ir::Node& n);
/// LSTM (float32; every direction, layout, optional input and output,
/// activation, clip and input_forget of ONNX LSTM): one recurrence kernel per
/// node, a block per (direction, batch entry), preceded by an input
/// projection kernel when the sequence has more than one step
/// (gen_recurrent.cpp). Refuses GRU and RNN (no kernel yet), other dtypes,
/// and sizes whose step needs more than 200 KiB of shared memory.
std::vector<ir::Node> gen_recurrent(Lowering& L, const ir::Node& n);
/// QuantizeLinear / DequantizeLinear, per tensor or per axis, 8/16-bit integers.
std::vector<ir::Node> gen_quant(Lowering& L, const ir::Node& n);
/// MaxPool (one output), AveragePool and LpPool, any number of spatial dims
/// (2-D channels-last when the node has kiln_nhwc = 1: to_nhwc).
std::vector<ir::Node> gen_pool(Lowering& L, const ir::Node& n);
/// Largest head dim (D and Dv) of the fused attention kernel.
constexpr int64_t kMaxAttentionHeadDim = 128;

/// One operand of the fused attention kernel as it lies in memory: the value
/// read (or written) and the element strides of its logical dims [batch,
/// head, row, column] (0 for a broadcast dim). Folding a Transpose into a
/// view only permutes strides, so the kernel reads the Transpose's input.
struct AttentionView {
  ir::ValueId value = ir::kNoValue;
  std::array<int64_t, 4> strides{0, 0, 0, 0};
  /// Elements from the start of `value` to element [0, 0, 0, 0]: a view of
  /// one slice of a larger value (Q, K and V as parts of one fused QKV
  /// matmul's output, read through a Split / Gather / Slice that is folded).
  int64_t offset = 0;
};

/// softmax(scale * Q K^T + mask_scale * mask) V per (batch, head): Q [b, h, sq, d],
/// K [b, h, skv, d], V [b, h, skv, dv], optional additive mask broadcast to
/// [b, h, sq, skv], output [b, h, sq, dv]; Q, K, V and the output of `dtype`
/// (float16 or bfloat16), the mask of mask_dtype (any float storage).
struct AttentionSpec {
  DType dtype = DType::f16;
  int64_t b = 1, h = 1, sq = 0, skv = 0, d = 0, dv = 0;
  float scale = 1.f;
  AttentionView q, k, v, out;
  std::optional<AttentionView> mask;
  DType mask_dtype = DType::f32;
  /// The mask's factor: scores are scale * Q K^T + mask_scale * mask (a
  /// scaling after the mask Add, (Q K^T + mask) * c, scales both).
  float mask_scale = 1.f;
  /// Rows whose softmax is undefined (every score -inf, or a NaN) give 0
  /// instead of NaN (torch's Where(IsNaN(P), 0, P) after the Softmax).
  bool nan_to_zero = false;
};

/// The fused attention kernel (gen_attention.cpp; FlashAttention-2's
/// online softmax on mma.sync tensor cores, float32 accumulation), one block
/// of 128 threads per (batch, head, 64 query rows). Refuses dtypes other than
/// float16 / bfloat16 and head dims above kMaxAttentionHeadDim.
ir::Node gen_attention(Lowering& L, const ir::Node& from, const AttentionSpec& s);

/// Softmax, LogSoftmax, Hardmax, LayerNormalization, InstanceNormalization,
/// GroupNormalization, BatchNormalization (inference), ArgMax, ArgMin, Reduce*
/// (Sum, Mean, Max, Min, Prod, SumSquare, L1, L2, LogSum, LogSumExp),
/// GlobalAveragePool, GlobalMaxPool.
std::vector<ir::Node> gen_reduce(Lowering& L, const ir::Node& n);

}  // namespace kiln::targets::cuda
