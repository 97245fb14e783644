// cuDNN algorithm choice per convolution at compile time (tuning.h: tune_conv).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <mutex>

#include "support/error.h"
#include "support/log.h"
#include "targets/cuda/compile/tuning.h"
#include "targets/cuda/run/driver.h"

namespace kiln::targets::cuda {

namespace {

std::string problem_key(const ConvSpec& s, Tuning mode, int device) {
  return fmt::format("{}|{}|x{} w{} y{} p{} s{} d{} g{} t{} {} tf32 {} nhwc {}", tuning_name(mode), device, fmt::join(s.x, ","),
                     fmt::join(s.w, ","), fmt::join(s.y, ","), fmt::join(s.pads, ","), fmt::join(s.strides, ","),
                     fmt::join(s.dilations, ","), s.group, s.transposed, dtype_name(s.dtype), s.tf32, s.nhwc);
}

/// Times each of `cands` `reps` times (median) with real buffers and keeps the fastest.
ConvAlgo time_candidates(const ConvSpec& s, const std::vector<ConvAlgo>& cands, int reps, const std::string& where,
                         TuningStats& st) {
  size_t ws = 0;
  for (auto& c : cands) ws = std::max(ws, c.workspace);
  const DriverApi& d = driver();
  DeviceBuffer x(fp32_bytes(s.x), "a convolution tuning buffer"), w(fp32_bytes(s.w), "a convolution tuning buffer"),
      y(fp32_bytes(s.y), "a convolution tuning buffer"), wsb(ws, "the tuning workspace");
  for (auto* b : {&x, &w}) check(d.cuMemsetD8Async(b->get(), 0, b->bytes(), nullptr), "cuMemsetD8Async");
  check(d.cuCtxSynchronize(), "cuCtxSynchronize");
  TimingStream stream;
  ConvAlgo best = cands.front();
  float best_ms = -1;
  for (auto& c : cands) {
    std::optional<ConvPlan> plan;
    try {
      plan.emplace(s, c.algo, c.workspace, where);
    } catch (const Error&) {
      continue;
    }
    float ms = time_median_ms(
        stream.get(), [&](CUstream str) { plan->run(str, x.get(), w.get(), y.get(), wsb.get(), wsb.bytes()); }, 2, reps);
    ++st.timed;
    if (best_ms < 0 || ms < best_ms) best_ms = ms, best = c, best.ms = ms;
  }
  log().debug("{}: cuDNN {} candidates, best algorithm {} {:.4f} ms", where, cands.size(), best.algo, best_ms);
  return best;
}

}  // namespace

ConvAlgo tune_conv(const ConvSpec& s, Tuning mode, int device, const std::string& where, TuningStats& st) {
  return memoized<ConvAlgo>(problem_key(s, mode, device), st, [&] {
    use_device(device);
    ConvDescs d(s);
    std::string why;
    std::vector<ConvAlgo> cands = mode == Tuning::heuristic ? conv_heuristic(d, s.transposed, kMaxConvWorkspace, &why)
                                                            : conv_find(d, s.transposed, kMaxConvWorkspace, &why);
    if (cands.empty())
      fail(ErrorCode::unsupported,
           "{}: cuDNN {} has no algorithm for this {} {}convolution (x [{}], w [{}], group {}; {})", where,
           cudnnGetVersion(), dtype_name(s.dtype), s.transposed ? "transposed " : "", fmt::join(s.x, ","),
           fmt::join(s.w, ","), s.group, why);
    for (auto& c : cands)
      if (auto need = conv_workspace(d, s.transposed, c.algo)) c.workspace = std::max(c.workspace, *need);
    if (mode == Tuning::exhaustive && cands.size() > 1) return time_candidates(s, cands, 10, where, st);
    // fast: cudnnFind runs each algorithm once, and its order was seen to
    // vary between runs on the H200 (ResNet-50 b1 fp32 1.46 vs 2.33 ms), so
    // its best 4 are timed again, 5 times each (median), like the matmuls.
    if (mode == Tuning::fast && cands.size() > 1) {
      st.timed += static_cast<int>(cands.size());
      cands.resize(std::min<size_t>(cands.size(), 4));
      return time_candidates(s, cands, 5, where, st);
    }
    return cands.front();
  });
}

}  // namespace kiln::targets::cuda
