// Conditional nodes of CUDA graphs (CUDA 12.3+: IF and WHILE; IF with an
// else body since 12.8): control flow (ONNX If / Loop) inside a cuda
// program's captured graph, its condition computed and set on the device.
//
// How a program uses them, while its stream is capturing (run side):
//  1. create_conditional_handle(): a handle in the graph being captured;
//  2. a generated kernel (set_conditional_kernel(), compiled by NVRTC into the
//     program's cubin) reads the condition tensor and calls the device
//     builtin cudaGraphSetConditional(handle, value);
//  3. add_conditional_node(): the IF / WHILE node after everything captured
//     so far, its body graphs empty, later captured work after it;
//  4. capture_into(): each body filled by replaying nodes on a second stream
//     captured into the body graph (cuStreamBeginCaptureToGraph).
// cuda.h's limits: a body holds only kernel, empty, child-graph, memset,
// memcpy and conditional nodes (no host nodes, no event nodes), all of one
// context; a graph holding conditional nodes cannot be a child graph node,
// is instantiated once and cannot be cloned.
#pragma once
#include <cuda.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace kiln::targets::cuda {

/// Kiln's own declaration of the device builtin cudaGraphSetConditional for
/// NVRTC-compiled source (NVRTC has no cuda_device_runtime_api.h): the cubin
/// refers to it as an undefined function that the driver resolves when the
/// module is loaded (cuModuleLoadData; proved on an H200 with driver 580 by
/// tests/cuda/test_cuda_conditional_gpu.cpp, from the cubin and from PTX).
/// The handle is a CUgraphConditionalHandle (64 bits).
inline constexpr std::string_view kSetConditionalDecl =
    "extern \"C\" __device__ void cudaGraphSetConditional(unsigned long long handle, unsigned int value);\n";

/// CUDA C++ (after kSetConditionalDecl) of `extern "C" __global__ void
/// name(unsigned long long handle, const T* cond)` with T = `cond_ctype`
/// ("bool", "int64_t", ...): one thread sets the conditional to
/// (*cond != 0). Launch it with grid and block (1, 1, 1).
std::string set_conditional_kernel(const std::string& name, const std::string& cond_ctype);

/// CUDA C++ (after kSetConditionalDecl) of the control kernel of a
/// kiln.cuda.Loop: `extern "C" __global__ void name(unsigned long long
/// handle, long long* iter, bool* cond_in, const long long* max_trip, const
/// bool* cond, bool* more, int first)`, one thread. It sets *iter to 0
/// (`first`) or *iter + 1, copies the condition (*cond, or true when `cond`
/// is null: a Loop without a condition input) to *cond_in (the body's
/// condition input) and decides whether the body runs (again): the
/// condition, i < *max_trip (unless `max_trip` is null) and i < `limit`
/// (unless negative: a Scan's static trip count). With a handle it sets the
/// conditional (cudaGraphSetConditional); with handle 0 (outside a capture)
/// it stores the decision in *more.
std::string loop_control_kernel(const std::string& name, int64_t limit);

/// A conditional handle in the graph that `stream` is capturing (its
/// context current on this thread). `default_value` is assigned at every
/// launch of the graph when `assign_default` (CU_GRAPH_COND_ASSIGN_DEFAULT);
/// otherwise the value set last stays. Throws Error(internal) naming the
/// driver call when the stream is not capturing or the driver refuses.
CUgraphConditionalHandle create_conditional_handle(CUstream stream, unsigned default_value, bool assign_default);

/// Adds a conditional node of `type` with handle `h` to the graph `stream`
/// is capturing, after all work captured on it so far; work captured on it
/// afterwards runs after the node. `bodies`: 1 or 2 for IF (body 1: the
/// else branch, CUDA 12.8+), 1 for WHILE. Returns the node's empty body
/// graphs (owned by the node: never destroy them). Throws Error(internal) /
/// Error(unsupported) naming the driver call.
std::vector<CUgraph> add_conditional_node(CUstream stream, CUgraphConditionalHandle h,
                                          CUgraphConditionalNodeType type, unsigned bodies);

/// Fills body graph `body` with what `record` enqueues on `side` (a stream
/// of the same context that is not capturing): cuStreamBeginCaptureToGraph
/// in relaxed mode (library calls such as cuBLASLt may query the device
/// while captured), `record(side)`, cuStreamEndCapture. A body that would
/// hold a node a conditional body cannot (a host callback) fails at the end
/// of the capture: Error(unsupported) naming `what`.
void capture_into(CUstream side, CUgraph body, const std::function<void(CUstream)>& record, const std::string& what);

/// One step of a cuda program: enqueues its work on the stream.
using Step = std::function<void(CUstream)>;

/// The step of a kiln.cuda.If node. On a stream capturing a CUDA graph: a
/// conditional handle, kernel `set_cond` (set_conditional_kernel) launched
/// on `cond` (one bool on the device), then an IF node with an else body
/// whose bodies are `then_steps` / `else_steps` captured on `side`. On a
/// stream that is not capturing (profiled runs, KILN_CUDA_GRAPH=0, kiln
/// verify): the condition read back (the stream synchronized) and the chosen
/// branch's steps run. Errors name `label`.
Step if_step(CUfunction set_cond, CUdeviceptr cond, std::vector<Step> then_steps, std::vector<Step> else_steps,
             CUstream side, std::string label);

/// Device memory a kiln.cuda.Loop's control kernel (loop_control_kernel)
/// works on: the iteration counter and the body's condition input (both
/// read by the body), the trip count M and the condition before the first
/// iteration (0: the Loop has none), the condition the body computes (what
/// the next iteration's decision reads; 0 for none) and one bool for the
/// decision outside a capture.
struct LoopControl {
  CUfunction fn = nullptr;
  CUdeviceptr iter = 0, cond_in = 0, max_trip = 0, cond0 = 0, cond_out = 0, more = 0;
};

/// One loop-carried value of a kiln.cuda.Loop (device addresses).
struct Carried {
  CUdeviceptr initial = 0;  ///< the node's input, copied to `state` before the loop
  CUdeviceptr state = 0;    ///< the body's input: what each iteration reads
  CUdeviceptr next = 0;     ///< the body's output, copied to `state` after each iteration
  CUdeviceptr final = 0;    ///< the node's output (0: unused), copied from `state` after the loop
  /// Where `next` waits while the states are overwritten, when it is another
  /// carried value's state (a swap); 0 when not needed.
  CUdeviceptr temp = 0;
  size_t bytes = 0;
};

/// The carried values of kiln.cuda.Loop `n` (conditional body "body":
/// inputs iteration, condition, states...; outputs condition, next
/// states...) at the device addresses `at` gives each value (0 for none);
/// `alloc(bytes)` gives device memory of the program's for the staging a
/// swap needs. Sets ctl's addresses too (all but fn and more). Throws
/// Error(invalid_model) naming `n` when its body does not fit its
/// attribute `carried`.
std::vector<Carried> loop_carried(const ir::Model& m, const ir::Node& n, LoopControl& ctl,
                                  const std::function<CUdeviceptr(ir::ValueId)>& at,
                                  const std::function<CUdeviceptr(size_t)>& alloc);

/// The step of a kiln.cuda.Loop node: copies the initial values to the
/// states, then on a stream capturing a CUDA graph a conditional handle, the
/// control kernel (the first decision) and a WHILE node whose body is
/// `body_steps`, the copies of the body's outputs to the states and the
/// control kernel again (the next decision), captured on `side`; on a
/// stream that is not capturing (profiled runs, KILN_CUDA_GRAPH=0, kiln
/// verify) the control kernel with handle 0 and the decision read back
/// after each iteration (the stream synchronized) while the body's steps
/// run. Last, the states are copied to the node's outputs. Errors name `label`.
Step while_step(LoopControl ctl, std::vector<Carried> carried, std::vector<Step> body_steps, CUstream side,
                std::string label);

}  // namespace kiln::targets::cuda
