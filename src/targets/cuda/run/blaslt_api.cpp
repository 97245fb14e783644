// cuBLASLt through dlopen (blaslt_api.h).
#include "targets/cuda/run/blaslt_api.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <atomic>
#include <string>
#include <thread>

#include "support/error.h"
#include "support/log.h"

namespace kiln::targets::cuda {

namespace {

using Loaded = BlasLtLibrary;

}  // namespace

BlasLtLibrary open_blaslt_library(const std::string& lib) {
  Loaded l;
  void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    l.error = fmt::format("cannot open {}: {}", lib, e ? e : "unknown error");
    return l;
  }
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
    if (!fn && l.error.empty()) l.error = fmt::format("{} has no symbol {}", lib, name);
  };
#define KILN_BLASLT_SYM(name) sym(l.api.name, #name);
  KILN_BLASLT_SYM(cublasLtCreate)
  KILN_BLASLT_SYM(cublasLtGetVersion)
  KILN_BLASLT_SYM(cublasLtMatmul)
  KILN_BLASLT_SYM(cublasLtMatmulAlgoCapGetAttribute)
  KILN_BLASLT_SYM(cublasLtMatmulAlgoCheck)
  KILN_BLASLT_SYM(cublasLtMatmulAlgoConfigGetAttribute)
  KILN_BLASLT_SYM(cublasLtMatmulAlgoConfigSetAttribute)
  KILN_BLASLT_SYM(cublasLtMatmulAlgoGetHeuristic)
  KILN_BLASLT_SYM(cublasLtMatmulDescCreate)
  KILN_BLASLT_SYM(cublasLtMatmulDescDestroy)
  KILN_BLASLT_SYM(cublasLtMatmulDescSetAttribute)
  KILN_BLASLT_SYM(cublasLtMatmulPreferenceCreate)
  KILN_BLASLT_SYM(cublasLtMatmulPreferenceDestroy)
  KILN_BLASLT_SYM(cublasLtMatmulPreferenceSetAttribute)
  KILN_BLASLT_SYM(cublasLtMatrixLayoutCreate)
  KILN_BLASLT_SYM(cublasLtMatrixLayoutDestroy)
  KILN_BLASLT_SYM(cublasLtMatrixLayoutSetAttribute)
#undef KILN_BLASLT_SYM
  return l;
}

namespace {

const Loaded& loaded() {
  // Thread-safe, once; never destroyed: plans destroyed during exit still call it.
  static const Loaded& l = *new Loaded(open_blaslt_library(fmt::format("libcublasLt.so.{}", CUBLAS_VER_MAJOR)));
  return l;
}

std::atomic<bool> preload_started{false};

}  // namespace

const BlasLtApi& blaslt_api() {
  const Loaded& l = loaded();
  if (!l.error.empty()) fail(ErrorCode::unsupported, "cuBLASLt: {}", l.error);
  return l.api;
}

bool blaslt_library_mapped() {
  void* h = dlopen(fmt::format("libcublasLt.so.{}", CUBLAS_VER_MAJOR).c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (h) dlclose(h);  // RTLD_NOLOAD took a reference
  return h != nullptr;
}

void preload_blaslt() {
  struct Joined {
    std::thread t{[] {
      Stopwatch sw;
      loaded();
      if (log().should_log(spdlog::level::debug))
        log().debug("cuda: cuBLASLt opened in {:.1f} ms on the preload thread ({:.0f} ms after the process started)",
                    sw.ms(), ms_since_process_start());
    }};
    ~Joined() {
      if (t.joinable()) t.join();
    }
  };
  static Joined preload;
  preload_started = true;
}

void await_blaslt_preload() {
  if (preload_started) (void)loaded();  // a static being initialised: waits for the other thread
}

}  // namespace kiln::targets::cuda
