// Tuning of the cuda target's library calls at compile time (--tuning):
// which cuBLASLt algorithm each matmul and which cuDNN algorithm each
// convolution uses. The decisions are stored in the lowered nodes; a load
// replays them (run/blaslt.h, run/cudnn_conv.h) and never tunes again.
#pragma once
#include <cuda.h>

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kiln/options.h"
#include "targets/cuda/run/blaslt.h"
#include "targets/cuda/run/cudnn_conv.h"
#include "targets/cuda/run/cudnn_graph.h"

namespace kiln::targets::cuda {

/// Most workspace a convolution may take, legacy or graph API (bytes).
inline constexpr size_t kMaxConvWorkspace = size_t{256} << 20;

/// Bytes of a float32 tensor of `dims`: tuning buffers are sized so, which
/// is enough for every dtype a convolution takes.
inline size_t fp32_bytes(const std::vector<int64_t>& dims) {
  size_t n = 4;
  for (auto d : dims) n *= static_cast<size_t>(d);
  return n;
}

/// Counters of one compile's tuning, for the log and reports.
struct TuningStats {
  int tuned = 0;        ///< problems decided (heuristic asked or candidates timed)
  int reused = 0;       ///< problems equal to one decided before in this process
  int timed = 0;        ///< candidate runs measured on the device
  double ms = 0;        ///< wall time spent deciding (ms)
};

/// Chooses the cuBLASLt algorithm of `s` on `device` (current context):
///  - heuristic: the heuristic's first algorithm;
///  - fast: the fastest of the heuristic's best 4, each timed 5 times after a warm-up;
///  - exhaustive: the fastest of the heuristic's best 24, each timed 20 times (median).
/// Workspace at most 32 MiB. Equal problems (same spec, mode and device) are
/// decided once per process. Throws Error(unsupported) naming `where` when
/// cuBLASLt has no algorithm.
GemmAlgo tune_gemm(const GemmSpec& s, Tuning mode, int device, const std::string& where, TuningStats& st);

/// Chooses the cuDNN algorithm of `s` on `device`:
///  - heuristic: cuDNN's heuristic's first supported algorithm (nothing runs);
///  - fast: cuDNN's own measurement (cudnnFind: every algorithm once);
///  - exhaustive: every algorithm cudnnFind found usable, timed 10 times here (median).
/// Workspace at most 256 MiB. Memoized like tune_gemm. Throws
/// Error(unsupported) naming `where` when cuDNN has no algorithm.
ConvAlgo tune_conv(const ConvSpec& s, Tuning mode, int device, const std::string& where, TuningStats& st);

/// Chooses the cuDNN graph-API engine of convolution `s` (forward) with
/// epilogue `ep` (cudnn_graph.h) on `device`, among cuDNN's heuristic
/// configurations that build within 256 MiB of workspace:
///  - heuristic: the first precompiled one (a runtime-compiled one only when
///    there is no precompiled one);
///  - fast: the best 4 precompiled and best 2 runtime-compiled, timed 5 times each (median);
///  - exhaustive: every precompiled one and the best 4 runtime-compiled
///    (and the fallback heuristic's), timed 10 times each.
/// A runtime-compiled engine (100 ms - 1.5 s of NVRTC inside cuDNN to
/// build) is taken only when it is at least 10% faster than the best
/// precompiled one, or there is none; its serialized plan is then stored.
/// nullopt when cuDNN has no usable engine (the caller keeps the
/// unfused form). Memoized like tune_gemm. Logs each candidate's build
/// (finalize) and run times at debug level. With `avoid_cublaslt`
/// (KILN_CUDA_POINTWISE=cudnn) engines that run cuBLASLt inside cuDNN
/// (GraphEngine::cublaslt) are dropped while another one is left.
std::optional<GraphEngine> tune_conv_graph(const ConvSpec& s, const ConvEpilogue& ep, Tuning mode, int device,
                                           const std::string& where, TuningStats& st, bool avoid_cublaslt = false);

/// The decision for `key` from a process-wide memo (one per call site), or
/// `decide()` run once and remembered; counts st.reused, or st.tuned and
/// st.ms (wall time of the decision). Thread-safe; decide() runs unlocked.
template <typename T, typename Decide>
T memoized(const std::string& key, TuningStats& st, Decide&& decide) {
  static std::mutex mu;
  static std::map<std::string, T> memo;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = memo.find(key); it != memo.end()) {
      ++st.reused;
      return it->second;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  T chosen = decide();
  ++st.tuned;
  st.ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::lock_guard<std::mutex> lock(mu);
  memo.emplace(key, chosen);
  return chosen;
}

/// A non-blocking CUDA stream for timing candidates, destroyed with the object.
/// Throws Error(internal) when cuStreamCreate fails.
class TimingStream {
 public:
  TimingStream();
  ~TimingStream();
  TimingStream(const TimingStream&) = delete;
  TimingStream& operator=(const TimingStream&) = delete;
  CUstream get() const { return stream_; }

 private:
  CUstream stream_ = nullptr;
};

/// Median time (ms) of one run of `enqueue` on `stream`, after `warmup`
/// untimed runs: `reps` samples, each CUDA events around a CUDA graph of 16
/// captured runs (divided by 16), so that the host's submission of a short
/// kernel is not measured as its time; single launches between events when
/// the calls cannot be captured or KILN_CUDA_TUNE_GRAPH=0 (the earlier
/// timing, for measuring). Throws Error(internal) when a driver call fails.
float time_median_ms(CUstream stream, const std::function<void(CUstream)>& enqueue, int warmup, int reps);

/// False when KILN_CUDA_TUNE_GRAPH=0 (tuning times single launches).
bool graph_timing_enabled();

}  // namespace kiln::targets::cuda
