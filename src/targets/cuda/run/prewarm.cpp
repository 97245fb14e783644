// prewarm(): the CUDA context and the library handles started on a thread
// before the first load needs them (program.h).
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <future>
#include <mutex>
#include <string>

#include "support/log.h"
#include "targets/cuda/run/blaslt.h"
#include "targets/cuda/run/blaslt_api.h"
#include "targets/cuda/run/cudnn_conv.h"
#include "targets/cuda/run/driver.h"
#include "targets/cuda/run/program.h"

namespace kiln::targets::cuda {

namespace {

/// prewarm()'s work: the CUDA context and the library handles.
struct Prewarm {
  std::mutex mu;
  std::shared_future<void> done;
};
Prewarm& prewarm_state() {
  static Prewarm p;
  return p;
}

/// KILN_CUDA_PRELOAD_CUDNN=1 (a measurement aid, off by default).
bool preload_cudnn_wanted() {
  const char* e = std::getenv("KILN_CUDA_PRELOAD_CUDNN");
  return e && std::string(e) == "1";
}

std::atomic<bool> cudnn_preload_started{false};
std::shared_future<void>& cudnn_preload() {
  static std::shared_future<void> f;
  return f;
}

}  // namespace

void preload_cudnn() {
  static std::once_flag once;
  std::call_once(once, [] {
    try {
      cudnn_preload() = std::async(std::launch::async, [] {
                          Stopwatch sw;
                          // cuDNN 9 opens these itself at its first graph plan
                          // (engines, heuristics) and legacy call (cnn, ops); its
                          // dlopen of a library already here only counts a reference.
                          int opened = 0;
                          for (const char* lib : {"libcudnn_graph.so.9", "libcudnn_engines_precompiled.so.9",
                                                  "libcudnn_heuristic.so.9", "libcudnn_engines_runtime_compiled.so.9",
                                                  "libcudnn_ops.so.9", "libcudnn_cnn.so.9"})
                            opened += dlopen(lib, RTLD_NOW | RTLD_LOCAL) != nullptr;
                          log().debug("cuda: {} cuDNN libraries opened in {:.1f} ms on the preload thread ({:.0f} ms "
                                      "after the process started)",
                                      opened, sw.ms(), ms_since_process_start());
                        }).share();
      cudnn_preload_started = true;
    } catch (const std::exception& e) {
      log().debug("cuda: cuDNN preload not started: {}", e.what());
    }
  });
}

void await_prewarm() {
  std::shared_future<void> f;
  {
    std::lock_guard<std::mutex> lock(prewarm_state().mu);
    f = prewarm_state().done;
  }
  if (f.valid()) f.wait();
}


bool prewarm(int device) {
  Prewarm& p = prewarm_state();
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.done.valid()) return false;
  bool started = false;
  try {
    // cuBLASLt is not opened here, alongside cuInit: opening it (~60 ms, most
    // of it relocations) slowed cuInit from ~100 to ~160 ms on the H200 (the
    // two contend; likely for the process's memory map), and the context was
    // ready ~55 ms later. The load's compatibility facts open it
    // (cublasLtGetVersion) once cuInit is done, alongside the primary
    // context's creation, which it does not slow
    // (bench/results/cuda/warm_start_20261202.md). KILN_CUDA_PRELOAD_BLASLT=early
    // opens it on its own thread here as before (a measurement aid).
    const char* when = std::getenv("KILN_CUDA_PRELOAD_BLASLT");
    if (when && std::string(when) == "early") {
      preload_blaslt();
      started = true;
    }
  // Measured on the H200 (bench/results/cuda/warm_two_stage_prewarm.log): a first-use
  // matmul here as well made warm starts slower, since its cost is per
  // data type and kernel family and it then delayed the plans.
  p.done = std::async(std::launch::async, [device] {
             try {
               Stopwatch sw;
               (void)device_present();  // libcuda opened, cuInit
               const double init_ms = sw.ms();
               if (preload_cudnn_wanted()) preload_cudnn();  // after cuInit, beside the primary context
               use_device(device);
               const double context_ms = sw.ms();
               const double ready_at = log().should_log(spdlog::level::debug) ? ms_since_process_start() : 0;
               // No cuBLASLt handle here: a program without kiln.cuda.Gemm
               // nodes (KILN_CUDA_POINTWISE=cudnn) never starts cuBLASLt;
               // the load creates the handle when its program has one.
               cudnn_handle();
               log().debug("cuda: prewarm: cuInit {:.1f} ms, primary context {:.1f} ms (ready {:.0f} ms after the "
                           "process started), cuBLASLt / cuDNN handles {:.1f} ms",
                           init_ms, context_ms - init_ms, ready_at, sw.ms() - context_ms);
             } catch (...) {
               // The load itself reports what is wrong (no driver, no such device).
             }
           }).share();
    started = true;
  } catch (const std::exception& e) {  // no thread to be had: the load does it all itself
    log().debug("cuda: prewarm not started: {}", e.what());
  }
  return started;
}

void settle_prewarm() {
  await_prewarm();
  await_blaslt_preload();
  if (cudnn_preload_started) cudnn_preload().wait();  // library initialisers must not run into the exit
}

}  // namespace kiln::targets::cuda
