// Loading and running a cuda program (run side).
#pragma once
#include <memory>

#include "artifact/artifact.h"
#include "targets/kernels.h"

namespace kiln::targets::cuda {

/// Loads a compiled cuda program onto device `device`:
///  - the kernels section's cubin with cuModuleLoadData (no JIT: the cubin's
///    architecture must be the device's, else Error(incompatible_artifact));
///  - one device arena of plan.arena_bytes for every intermediate, buffers
///    for graph inputs and outputs, every constant uploaded once;
///  - each kiln.cuda.Gemm's stored cuBLASLt algorithm checked (never the
///    heuristic), one shared workspace;
///  - the whole node sequence captured once into a CUDA graph (set
///    KILN_CUDA_GRAPH=0 to launch node by node instead, for debugging).
/// A run copies the inputs to the device, replays the graph and copies the
/// outputs back (runs are serialised by a mutex: one stream per program).
/// A program with host segments (ir::Model::segments: host fallback) is one
/// CUDA graph per device segment; between two, the values a host segment
/// reads are copied device -> host, `host` runs its nodes, and the values
/// later device nodes read are copied back. Its outputs computed on the host
/// never go to the device (run()).
/// Throws Error(unsupported) when there is no device, Error(invalid_model)
/// for a device node that is not a kiln.cuda node or a device value without a
/// static shape, Error(invalid_option) for host segments without `host`.
std::unique_ptr<DeviceProgram> load_program(const artifact::CompiledProgram& cp, int device,
                                            const HostSegments* host = nullptr);

/// Starts, once per process and on a background thread, what the first
/// load_program on `device` needs before it can do anything else: the CUDA
/// context (cuInit ~100 ms, then the primary context ~115 ms on an H200) and
/// the cuDNN handle, so that they overlap the model digest and the
/// artifact's read (the cuBLASLt handle is the load's, for a program that
/// has matmuls: KILN_CUDA_POINTWISE=cudnn programs may have none).
/// KILN_CUDA_PRELOAD_CUDNN=1 (a measurement aid) also opens cuDNN's
/// libraries on a thread of their own once cuInit is done (preload_cudnn). cuBLASLt is opened by the caller's compatibility
/// facts once cuInit is done (opening it during cuInit slows cuInit);
/// KILN_CUDA_PRELOAD_BLASLT=early opens it here on a second thread
/// (preload_blaslt, a measurement aid). load_program waits for it. Returns
/// true when this call started that work (then the caller must
/// settle_prewarm() before it returns or throws);
/// false when an earlier call did, or no thread could be started. Never
/// throws: errors are left for the load to report.
bool prewarm(int device);

/// Opens cuDNN 9's sub-libraries (graph, engines, heuristics, ops, cnn)
/// once per process on a background thread, so that their relocations
/// (libcudnn_engines_precompiled alone has ~140,000) are paid while the
/// primary context is created rather than in the first cuDNN plan. Never
/// throws; settle_prewarm waits for it.
void preload_cudnn();

/// Waits for prewarm()'s threads (the context, the handles, opening
/// cuBLASLt and cuDNN's libraries) to finish, if they were started: what a session that started
/// them does before it returns or throws, so that no library initialiser is
/// still running when the process exits. Never throws.
void settle_prewarm();

/// Waits for prewarm()'s context-and-handles thread, if one was started
/// (what a load does first). Never throws.
void await_prewarm();

}  // namespace kiln::targets::cuda
