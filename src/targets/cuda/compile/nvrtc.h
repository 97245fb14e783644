// NVRTC: CUDA C++ source -> cubin + PTX at compile time (compile side only;
// the runtime never links NVRTC).
#pragma once
#include <string>

#include "targets/cuda/run/cuda_ops.h"

namespace kiln::targets::cuda {

/// Compiles `source` (one translation unit, no #include) for `arch`
/// ("sm_90"): SASS for that architecture (the cubin a load uses with
/// cuModuleLoadData) and PTX for the matching virtual architecture
/// (compute_90, kept in the artifact for newer GPUs). Options: -std=c++17,
/// no fast-math (results follow the reference kernels). Needs no GPU.
/// Throws Error(internal) with NVRTC's log when the generated source does not
/// compile (a kiln bug), Error(unsupported) when NVRTC does not know `arch`.
KernelBundle nvrtc_compile(const std::string& source, const std::string& arch);

/// NVRTC's version as "13.0".
std::string nvrtc_version();

}  // namespace kiln::targets::cuda
