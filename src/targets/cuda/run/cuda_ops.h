// The cuda target's lowered program: its operators (domain "kiln.cuda") and
// the kernels section of its artifacts. Shared by the compile side (which
// writes them) and the run side (which replays them).
//
// A cuda program's main graph holds only kiln.cuda nodes, every value has a
// static shape, and the memory plan places every intermediate in one device
// arena. Operators:
//
//  - kiln.cuda.Kernel: one launch of a generated kernel of the program's
//    module. Attributes: fn (string, the extern "C" function name), grid
//    (ints[3]), block (ints[3]), smem (int, dynamic shared bytes). The kernel
//    takes one pointer per node input (absent inputs are not passed) followed
//    by one pointer per output, in order; shapes are baked into its code.
//    Optional init_from (int): output 0 is first a copy of that input (the
//    scatters update a copy of their data).
//  - kiln.cuda.Gemm: a cuBLASLt matmul with fp32 accumulation (gemm_spec_from
//    / blaslt.h give the attributes: m, n, k, batch, trans_a, trans_b,
//    stride_a, stride_b, alpha, beta, epilogue, dtype (string "float32",
//    "float16" or "bfloat16": A, B, C, D and the bias), out_dtype (string,
//    optional: C and D's type when it differs, "float32" on a 16-bit matmul,
//    no bias or C; format version 6), tf32 (int 0/1,
//    float32 only: CUBLAS_COMPUTE_32F_FAST_TF32), algo (ints[8], the
//    cublasLtMatmulAlgo_t words), workspace (bytes)). Inputs (A, B, [bias
//    [n]], [C [.., m, n]]). Absent dtype / tf32 (older artifacts): strict float32.
//  - kiln.cuda.Conv: a cuDNN NCHW convolution without bias (cudnn_conv.h:
//    x_dims, w_dims, y_dims, pads (symmetric), strides, dilations, group,
//    transposed, dtype ("float32", "float16", "bfloat16"; fp32 accumulation),
//    tf32 (0/1; float32 only: CUDNN_DEFAULT_MATH instead of CUDNN_FMA_MATH),
//    and the tuning decision algo (cudnnConvolutionFwdAlgo_t) and workspace
//    (bytes)). Inputs (x, w); the bias of an ONNX Conv becomes a following
//    element-wise Add (fused with what follows it).
//    With api = "graph" (cudnn_graph.h) the convolution runs through cuDNN's
//    graph API with an optional fused epilogue y = relu?(conv + bias? + z?):
//    attributes bias / residual / relu (0/1), engine (global index), knobs
//    ((type, value) pairs), workspace, runtime_compiled and plan_json (a
//    runtime-compiled engine's serialized plan); inputs (x, w[, bias][, z]).
//
//  With precision fp16 / bf16 the program's float values are mostly 16-bit
//  (compile/precision.h); its inputs and outputs keep the model's dtypes.
//  - kiln.cuda.Copy: output 0 = input 0 byte for byte (Reshape, Flatten,
//    Squeeze, Unsqueeze, Identity after lowering).
//  - kiln.cuda.If: an ONNX If whose condition is computed on the device,
//    run as a conditional node of the CUDA graph (conditional.h). Input 0:
//    the condition (bool, one element). Attributes: then_branch and
//    else_branch (subgraphs of kiln.cuda nodes, no inputs, outputs = the
//    node's outputs: both branches write the same buffers, planned in the
//    program's arena with every other branch value live for the whole
//    node), cond_fn (string: the generated kernel (handle, const bool*)
//    that sets the conditional with cudaGraphSetConditional) and cubin (the
//    digest, as for Kernel). Outside a capture (profiled runs) the runtime
//    reads the condition back and runs the chosen branch's steps.
//  - kiln.cuda.Loop: an ONNX Loop or Scan run as a WHILE conditional node.
//    Inputs (M or none, cond or none, initial carried values..., a Scan's
//    scan inputs...); outputs (final carried values..., scan outputs...).
//    Attribute body: kiln.cuda nodes with inputs (iteration int64 [], cond
//    bool [], carried values..., each a buffer of its own) and outputs
//    (cond, next carried values..., the scan outputs its scanwrite kernels
//    write at the iteration's row); control_fn (conditional.h:
//    loop_control_kernel), carried (count), trip_count (-1: run time),
//    source_op, cubin.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace kiln::targets::cuda {

/// Domain of the cuda target's lowered operators.
inline constexpr std::string_view kCudaDomain = "kiln.cuda";

/// The compiled device code of one program, as stored in the artifact's
/// kernels section (docs/file-format.md, "Section kernels (cuda)").
struct KernelBundle {
  std::string arch;            ///< "sm_90": the cubin's architecture
  std::vector<uint8_t> cubin;  ///< SASS for `arch`, loaded with cuModuleLoadData
  std::string ptx;             ///< PTX for compute_XX of the same source (kept for newer GPUs; not JIT-ed at load)
  std::string source;          ///< the CUDA C++ the cubin was compiled from (for kiln inspect / debugging)
};

/// XXH3-64 of a bundle's cubin as 16 hex digits: every kiln.cuda.Kernel node
/// records the digest of the cubin its function was compiled into
/// (attribute `cubin`), so a program is never run with another program's
/// kernels (e.g. one kernels section shared by several shape buckets).
std::string cubin_digest(const KernelBundle& b);

/// Throws Error(invalid_model) naming the node when a kiln.cuda.Kernel node of
/// `model` records another cubin digest than `b`'s (its kernels are not in
/// this bundle).
void check_bundle_matches(const ir::Model& model, const KernelBundle& b);

/// Name of the constant value (uint8 [bytes], encode_bundle) through which
/// each cuda program carries its own kernels: the programs of a bucketed
/// artifact (one per shape bucket, each compiled separately) and programs
/// added to a cache entry later each bring their cubin, stored with the
/// other constants. The artifact's kernels section holds the first
/// program's bundle too (kiln inspect; artifacts from before this constant).
inline constexpr std::string_view kKernelsValue = "kiln.cuda.kernels";

/// Index of the value carrying `model`'s own bundle: the last uint8 constant
/// named kKernelsValue (the lowering adds it last, after any model value that
/// happens to share the name); -1 when there is none (older artifacts).
int64_t kernels_value(const ir::Model& model);

/// The bundle program `model` carries in kKernelsValue, else `section` (the
/// artifact's kernels section) decoded. Throws Error(corrupt_artifact) like
/// decode_bundle.
KernelBundle program_bundle(const ir::Model& model, const std::vector<uint8_t>& section, const std::string& what);

/// Bytes of the kernels section: magic "KLNCUDA1", then four length-prefixed
/// (u64, little-endian) fields: arch, cubin, ptx, source.
std::vector<uint8_t> encode_bundle(const KernelBundle& b);

/// Decodes the kernels section. Throws Error(corrupt_artifact) "section
/// 'kernels': ..." when the magic or a length is wrong (`what` names the file).
KernelBundle decode_bundle(const std::vector<uint8_t>& bytes, const std::string& what);

}  // namespace kiln::targets::cuda
