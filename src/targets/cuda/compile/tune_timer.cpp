// CUDA-event timing of candidate library calls (tuning.h: time_median_ms).
#include <algorithm>
#include <vector>

#include "targets/cuda/compile/tuning.h"
#include "targets/cuda/run/driver.h"

namespace kiln::targets::cuda {

TimingStream::TimingStream() {
  check(driver().cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate (tuning)");
}

TimingStream::~TimingStream() {
  if (stream_) driver().cuStreamDestroy(stream_);
}

float time_median_ms(CUstream stream, const std::function<void(CUstream)>& enqueue, int warmup, int reps) {
  const DriverApi& d = driver();
  CUevent start = nullptr, stop = nullptr;
  check(d.cuEventCreate(&start, CU_EVENT_DEFAULT), "cuEventCreate");
  struct Free {
    const DriverApi& d;
    CUevent& a;
    CUevent& b;
    ~Free() {
      if (a) d.cuEventDestroy(a);
      if (b) d.cuEventDestroy(b);
    }
  } free_events{d, start, stop};
  check(d.cuEventCreate(&stop, CU_EVENT_DEFAULT), "cuEventCreate");
  for (int i = 0; i < warmup; ++i) enqueue(stream);
  std::vector<float> times;
  for (int i = 0; i < std::max(reps, 1); ++i) {
    check(d.cuEventRecord(start, stream), "cuEventRecord");
    enqueue(stream);
    check(d.cuEventRecord(stop, stream), "cuEventRecord");
    check(d.cuEventSynchronize(stop), "cuEventSynchronize");
    float ms = 0;
    check(d.cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime");
    times.push_back(ms);
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

}  // namespace kiln::targets::cuda
