// oneDNN plumbing shared by the cpu target's kernels (run side) and its
// lowering passes (compile side): the engine, per-thread streams and
// scratchpads, memory descriptors stored in node attributes, post-op lists.
#pragma once
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::targets::cpu {

using md_t = dnnl::memory::desc;
using tag = dnnl::memory::format_tag;
using dims_t = dnnl::memory::dims;

/// The process-wide CPU engine (created on first use).
const dnnl::engine& engine();

/// This thread's stream on engine(). Streams are not shared between threads,
/// so concurrent Session::run calls never contend on one.
dnnl::stream& stream();

/// The oneDNN version, "2.6.3".
std::string onednn_version();
/// The ISA oneDNN's kernels use on this machine ("avx512_core", "avx2", ...):
/// it decides the packed weight layouts, so it is part of the compatibility block.
std::string onednn_isa();
/// Channel block of the activation layout chosen for this ISA: 16 with
/// AVX-512, 8 otherwise.
int64_t channel_block();

/// A dense row-major f32 descriptor of `dims`.
md_t plain_md(const dims_t& dims);
/// The channel-blocked f32 descriptor (nCw16c / nChw16c / nCdhw16c, or the 8
/// block) of `dims` (rank 3 to 5, channels at index 1), `block` channels per block.
md_t blocked_md(const dims_t& dims, int64_t block);
/// True when md is channel-blocked as blocked_md() makes it.
bool is_blocked(const md_t& md);

/// A memory descriptor stored in a node attribute: the bytes of the oneDNN C
/// struct packed little-endian into int64s (the compatibility block pins the
/// oneDNN version and ISA, so the layout of the struct is the same at load).
std::vector<int64_t> md_to_ints(const md_t& md);
/// Reads md attribute `name` of node n. Throws Error(corrupt_artifact)
/// naming the node and attribute when it is missing, the wrong size or
/// describes an impossible tensor (rank > 12, non-f32/s32, negative dims).
md_t md_attr(const ir::Node& n, const std::string& name);
/// Stores md as attribute `name` of n.
void set_md_attr(ir::Node& n, const std::string& name, const md_t& md);

/// One post-op of a fused node (oneDNN post-op chain order).
struct PostOp {
  enum Kind : int64_t { eltwise = 0, binary = 1 };
  Kind kind = eltwise;
  int64_t alg = 0;  ///< dnnl::algorithm value (eltwise or binary algorithm)
  float alpha = 0, beta = 0, scale = 1;
  /// binary: index of the node input holding the second operand; its
  /// descriptor is attribute "md.post<input>". -1 for eltwise.
  int64_t input = -1;
};

/// Reads the "post_ops" attributes ("post_kinds", "post_algs", "post_alpha",
/// "post_beta", "post_scale", "post_inputs"). Throws Error(corrupt_artifact)
/// naming the node when the lists disagree in length or hold unknown kinds.
std::vector<PostOp> read_post_ops(const ir::Node& n);
void write_post_ops(ir::Node& n, const std::vector<PostOp>& ops);

/// The primitive attributes of a node: its post-ops (binary operand
/// descriptors from "md.post<i>") and user-managed scratchpad mode.
dnnl::primitive_attr make_attr(const ir::Node& n);

/// A buffer of at least `bytes` owned by this thread (reused across calls):
/// the scratchpad of the primitive running now on this thread.
void* thread_scratch(size_t bytes);
/// Buffer `slot` (0 to 4; 0 is thread_scratch's) of at least `bytes` owned
/// by this thread, reused across calls and not cleared: a kernel's temporary
/// tensors (reordered input, output before its last pass) without an
/// allocation, zero fill and page faults per run. Throws Error(internal) for
/// another slot or when the allocation fails.
void* thread_buffer(int slot, size_t bytes);

/// Wraps f32 data as a oneDNN memory of `md` (no copy).
dnnl::memory wrap(const md_t& md, const void* data);

/// Calls f, turning a dnnl::error into Error(unsupported) naming the node and
/// `what` ("convolution primitive descriptor"): a oneDNN that cannot build what
/// the artifact asks for on this machine.
template <class F>
auto guarded(const ir::Node& n, const char* what, F&& f) -> decltype(f());

/// Throws Error(unsupported) "<node>: oneDNN cannot create <what>: <msg>".
[[noreturn]] void dnnl_fail(const ir::Node& n, const char* what, const dnnl::error& e);

template <class F>
auto guarded(const ir::Node& n, const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const dnnl::error& e) {
    dnnl_fail(n, what, e);
  }
}

/// Checks that the primitive's expected descriptor for `arg` equals the one
/// stored on the node (the packed weights in the artifact): a mismatch means
/// the artifact was packed for another oneDNN/ISA. Throws Error(incompatible_artifact)
/// naming the node and argument.
void expect_same_md(const ir::Node& n, const char* arg, const md_t& expected, const md_t& stored);

/// Checks that oneDNN picked the implementation the node's weights were
/// packed for (attribute "impl", when present): with explicit layouts oneDNN
/// may accept packed weights in a slower kernel that was never meant to read
/// them, so a different one means an artifact for another oneDNN/ISA. Throws
/// Error(incompatible_artifact) naming the node and both implementations.
void expect_same_impl(const ir::Node& n, const std::string& impl);

/// Dims of an md as a vector.
dims_t md_dims(const md_t& md);
/// Bytes an md spans (padding included).
size_t md_bytes(const md_t& md);

}  // namespace kiln::targets::cpu
