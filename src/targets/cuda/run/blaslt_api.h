// cuBLASLt opened with dlopen instead of linked: the library is ~500 MB and
// its ~590,000 relocations cost ~60 ms at every process start (measured here:
// dlopen of libcublasLt.so.13, 59 ms). Opened on first use (a cuda load's
// compatibility facts, while the CUDA context is created), so cpu-only runs
// never pay it. preload_blaslt opens it on a background thread instead; not
// during cuInit, which it slows (cuda::prewarm).
#pragma once
#include <cublasLt.h>

#include <string>

namespace kiln::targets::cuda {

/// The cuBLASLt entry points kiln calls, with their header's signatures.
struct BlasLtApi {
#define KILN_BLASLT_FN(name) decltype(&::name) name = nullptr;
  KILN_BLASLT_FN(cublasLtCreate)
  KILN_BLASLT_FN(cublasLtGetVersion)
  KILN_BLASLT_FN(cublasLtMatmul)
  KILN_BLASLT_FN(cublasLtMatmulAlgoCapGetAttribute)
  KILN_BLASLT_FN(cublasLtMatmulAlgoCheck)
  KILN_BLASLT_FN(cublasLtMatmulAlgoConfigGetAttribute)
  KILN_BLASLT_FN(cublasLtMatmulAlgoConfigSetAttribute)
  KILN_BLASLT_FN(cublasLtMatmulAlgoGetHeuristic)
  KILN_BLASLT_FN(cublasLtMatmulDescCreate)
  KILN_BLASLT_FN(cublasLtMatmulDescDestroy)
  KILN_BLASLT_FN(cublasLtMatmulDescSetAttribute)
  KILN_BLASLT_FN(cublasLtMatmulPreferenceCreate)
  KILN_BLASLT_FN(cublasLtMatmulPreferenceDestroy)
  KILN_BLASLT_FN(cublasLtMatmulPreferenceSetAttribute)
  KILN_BLASLT_FN(cublasLtMatrixLayoutCreate)
  KILN_BLASLT_FN(cublasLtMatrixLayoutDestroy)
  KILN_BLASLT_FN(cublasLtMatrixLayoutSetAttribute)
#undef KILN_BLASLT_FN
};

/// A cuBLASLt library opened by open_blaslt_library: its entry points, or
/// why it could not be used.
struct BlasLtLibrary {
  BlasLtApi api;
  std::string error;  ///< "cannot open <lib>: <dlerror>" or "<lib> has no symbol <name>"; empty when usable
};

/// dlopen(`lib`) (RTLD_NOW | RTLD_LOCAL) and every BlasLtApi entry point;
/// never throws (blaslt_api() turns `error` into Error(unsupported)).
/// Used once per process for libcublasLt.so.<CUBLAS_VER_MAJOR>.
BlasLtLibrary open_blaslt_library(const std::string& lib);

/// libcublasLt.so.<CUBLAS_VER_MAJOR> opened once (thread-safe) and its entry
/// points. Throws Error(unsupported) naming the library (dlerror's reason)
/// when it cannot be opened or lacks one of them; every later call throws the
/// same error.
const BlasLtApi& blaslt_api();

/// Whether libcublasLt.so.<CUBLAS_VER_MAJOR> is mapped in this process
/// (by kiln or by cuDNN), without opening it (dlopen RTLD_NOLOAD).
bool blaslt_library_mapped();

/// Starts blaslt_api() on a background thread, once per process, so that
/// opening the library overlaps other start-up work; blaslt_api() callers
/// then wait only for what is left. Never throws.
void preload_blaslt();

/// Waits until a preload_blaslt() started earlier has finished opening the
/// library (returns at once if none was started). Library initialisers
/// still running when the process exits crash (its exit handlers have torn
/// down what they use), so every path that started a preload waits here
/// before it may return or throw (cuda::settle_prewarm).
void await_blaslt_preload();

}  // namespace kiln::targets::cuda
