// CUDA-event timing of candidate library calls (tuning.h: time_median_ms).
#include <algorithm>
#include <cstdlib>
#include <exception>
#include <string>
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

namespace {

/// Launches per timed graph: enough that a few-microsecond kernel's run,
/// not the event pair around it, is what is measured.
constexpr int kGraphRuns = 16;

/// Owns the events, graph and graph exec of one timing (destroyed in any case).
struct TimingObjects {
  const DriverApi& d = driver();
  CUevent start = nullptr, stop = nullptr;
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  ~TimingObjects() {
    if (exec) d.cuGraphExecDestroy(exec);
    if (graph) d.cuGraphDestroy(graph);
    if (start) d.cuEventDestroy(start);
    if (stop) d.cuEventDestroy(stop);
  }
};

/// `enqueue` kGraphRuns times captured into one CUDA graph on `stream`
/// (thread-local capture: other threads' tuning is unaffected); false, with
/// the capture ended and nothing left behind, when the calls cannot be
/// captured (the caller then times single launches).
bool capture_runs(TimingObjects& t, CUstream stream, const std::function<void(CUstream)>& enqueue) {
  if (t.d.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) != CUDA_SUCCESS) return false;
  bool ok = true;
  try {
    for (int i = 0; i < kGraphRuns; ++i) enqueue(stream);
  } catch (const std::exception&) {
    ok = false;
  }
  CUgraph g = nullptr;
  const CUresult end = t.d.cuStreamEndCapture(stream, &g);
  if (!ok || end != CUDA_SUCCESS || !g) {
    if (g) t.d.cuGraphDestroy(g);
    return false;
  }
  t.graph = g;
  return t.d.cuGraphInstantiateWithFlags(&t.exec, g, 0) == CUDA_SUCCESS;
}

float elapsed_ms(TimingObjects& t, CUstream stream, const std::function<void(CUstream)>& run) {
  check(t.d.cuEventRecord(t.start, stream), "cuEventRecord");
  run(stream);
  check(t.d.cuEventRecord(t.stop, stream), "cuEventRecord");
  check(t.d.cuEventSynchronize(t.stop), "cuEventSynchronize");
  float ms = 0;
  check(t.d.cuEventElapsedTime(&ms, t.start, t.stop), "cuEventElapsedTime");
  return ms;
}

}  // namespace

float time_median_ms(CUstream stream, const std::function<void(CUstream)>& enqueue, int warmup, int reps) {
  TimingObjects t;
  check(t.d.cuEventCreate(&t.start, CU_EVENT_DEFAULT), "cuEventCreate");
  check(t.d.cuEventCreate(&t.stop, CU_EVENT_DEFAULT), "cuEventCreate");
  for (int i = 0; i < warmup; ++i) enqueue(stream);
  check(t.d.cuStreamSynchronize(stream), "cuStreamSynchronize");
  std::vector<float> times;
  if (graph_timing_enabled() && capture_runs(t, stream, enqueue)) {
    // One graph of kGraphRuns launches per sample, as a program replays
    // them: a single launch between two events also measures the host's
    // submission (cuBLASLt's ~5-10 us), which at batch 1 is longer than
    // the kernels being compared, and made their choice noise.
    auto launch = [&](CUstream s) { check(t.d.cuGraphLaunch(t.exec, s), "cuGraphLaunch (tuning)"); };
    launch(stream);  // the graph's own first-launch upload
    for (int i = 0; i < std::max(reps, 1); ++i) times.push_back(elapsed_ms(t, stream, launch) / kGraphRuns);
  } else {
    for (int i = 0; i < std::max(reps, 1); ++i) times.push_back(elapsed_ms(t, stream, enqueue));
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

bool graph_timing_enabled() {
  const char* e = std::getenv("KILN_CUDA_TUNE_GRAPH");
  return !(e && std::string(e) == "0");
}

}  // namespace kiln::targets::cuda
