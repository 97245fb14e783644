// prewarm(): the CUDA context and the library handles started on a thread
// before the first load needs them (program.h).
#include <future>
#include <mutex>

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

}  // namespace

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
    preload_blaslt();  // its own thread: opening the library overlaps the driver's initialisation
    started = true;
  // Measured on the H200 (bench/results/cuda/warm_two_stage_prewarm.log): a first-use
  // matmul here as well made warm starts slower, since its cost is per
  // data type and kernel family and it then delayed the plans.
  p.done = std::async(std::launch::async, [device] {
             try {
               Stopwatch sw;
               use_device(device);
               const double context_ms = sw.ms();
               blaslt_handle();
               cudnn_handle();
               log().debug("cuda: prewarm: CUDA context {:.1f} ms, cuBLASLt / cuDNN handles {:.1f} ms", context_ms,
                           sw.ms() - context_ms);
             } catch (...) {
               // The load itself reports what is wrong (no driver, no such device).
             }
           }).share();
  } catch (const std::exception& e) {  // no thread to be had: the load does it all itself
    log().debug("cuda: prewarm not started: {}", e.what());
  }
  return started;
}

void settle_prewarm() {
  await_prewarm();
  await_blaslt_preload();
}

}  // namespace kiln::targets::cuda
