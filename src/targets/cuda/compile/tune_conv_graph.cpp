// cuDNN graph-API engine choice per convolution and epilogue at compile time
// (tuning.h: tune_conv_graph).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "support/error.h"
#include "support/log.h"
#include "targets/cuda/compile/tuning.h"
#include "targets/cuda/run/driver.h"

namespace kiln::targets::cuda {

namespace {

/// A runtime-compiled engine must beat the best precompiled one by this
/// factor: its build costs 100 ms - 1.5 s, and its serialized plan ties the
/// artifact to this GPU and cuDNN more tightly.
constexpr float kRuntimeCompiledMargin = 0.9f;

std::string problem_key(const ConvSpec& s, const ConvEpilogue& ep, Tuning mode, int device, bool avoid_cublaslt) {
  return fmt::format("graph{}|{}|{}|x{} w{} y{} p{} s{} d{} g{} {} tf32 {} nhwc {}|{}", avoid_cublaslt ? "-nolt" : "",
                     tuning_name(mode), device,
                     fmt::join(s.x, ","), fmt::join(s.w, ","), fmt::join(s.y, ","), fmt::join(s.pads, ","),
                     fmt::join(s.strides, ","), fmt::join(s.dilations, ","), s.group, dtype_name(s.dtype), s.tf32,
                     s.nhwc, ep.describe());
}

/// Buffers for timing one problem (float32-sized, so large enough for 16-bit; zeros).
struct Buffers {
  Buffers(const ConvSpec& s)
      : x(fp32_bytes(s.x), "a convolution tuning buffer"),
        w(fp32_bytes(s.w), "a convolution tuning buffer"),
        bias(fp32_bytes({s.y.at(1)}), "a convolution tuning buffer"),
        z(fp32_bytes(s.y), "a convolution tuning buffer"),
        y(fp32_bytes(s.y), "a convolution tuning buffer") {
    const DriverApi& d = driver();
    for (auto* b : {&x, &w, &bias, &z}) check(d.cuMemsetD8Async(b->get(), 0, b->bytes(), nullptr), "cuMemsetD8Async");
    check(d.cuCtxSynchronize(), "cuCtxSynchronize");
  }
  DeviceBuffer x, w, bias, z, y;
};

struct Candidate {
  GraphEngine e;
  std::unique_ptr<GraphConvPlan> plan;
  double build_ms = 0;
};

}  // namespace

std::optional<GraphEngine> tune_conv_graph(const ConvSpec& s, const ConvEpilogue& ep, Tuning mode, int device,
                                           const std::string& where, TuningStats& st, bool avoid_cublaslt) {
  return memoized<std::optional<GraphEngine>>(problem_key(s, ep, mode, device, avoid_cublaslt), st,
                                              [&]() -> std::optional<GraphEngine> {
    use_device(device);
    std::vector<GraphEngine> ranked;
    std::string why;
    try {
      ConvOpGraph g(s, ep);
      ranked = g.heuristic(mode == Tuning::exhaustive, &why);
    } catch (const Error& e) {
      log().debug("{}: cuDNN graph for {}: {}", where, ep.describe(), e.what());
      return std::nullopt;
    }
    if (avoid_cublaslt && std::any_of(ranked.begin(), ranked.end(), [](const GraphEngine& e) { return !e.cublaslt; })) {
      const size_t before = ranked.size();
      ranked.erase(std::remove_if(ranked.begin(), ranked.end(), [](const GraphEngine& e) { return e.cublaslt; }),
                   ranked.end());
      if (ranked.size() != before)
        log().debug("{}: {} cuDNN engine configuration(s) that run cuBLASLt dropped", where, before - ranked.size());
    }
    std::vector<GraphEngine> pre, rtc;
    for (auto& e : ranked) (e.runtime_compiled ? rtc : pre).push_back(e);
    const size_t max_pre = mode == Tuning::heuristic ? 1 : mode == Tuning::fast ? 4 : pre.size();
    const size_t max_rtc = mode == Tuning::heuristic ? (pre.empty() ? 1 : 0) : mode == Tuning::fast ? 2 : 4;

    // Build (finalize) candidates in heuristic order; a configuration that
    // fails to build or needs too much workspace is skipped, not counted.
    std::vector<Candidate> built;
    auto build = [&](const std::vector<GraphEngine>& list, size_t want) {
      size_t got = 0;
      for (const GraphEngine& e : list) {
        if (got >= want) break;
        GraphEngine trial = e;
        trial.workspace = kMaxConvWorkspace;
        Stopwatch sw;
        try {
          auto plan = std::make_unique<GraphConvPlan>(s, ep, trial, kMaxConvWorkspace, where);
          trial.workspace = plan->workspace();
          built.push_back({trial, std::move(plan), sw.ms()});
          ++got;
        } catch (const Error& err) {
          log().debug("{}: cuDNN {} not built: {}", where, e.describe(), err.what());
        }
      }
    };
    build(pre, max_pre);
    build(rtc, max_rtc);
    if (built.empty()) {
      log().debug("{}: cuDNN has no usable graph engine for {} ({})", where, ep.describe(), why);
      return std::nullopt;
    }
    if (mode != Tuning::heuristic) {
      Buffers b(s);
      DeviceBuffer ws(std::max<size_t>(1, std::max_element(built.begin(), built.end(), [](auto& a, auto& c) {
                                             return a.e.workspace < c.e.workspace;
                                           })->e.workspace),
                      "the tuning workspace");
      TimingStream stream;
      const int reps = mode == Tuning::exhaustive ? 10 : 5;
      for (auto& c : built) {
        try {
          c.e.ms = time_median_ms(
              stream.get(),
              [&](CUstream str) { c.plan->run(str, b.x.get(), b.w.get(), b.bias.get(), b.z.get(), b.y.get(), ws.get()); },
              2, reps);
          ++st.timed;
        } catch (const Error& err) {
          log().debug("{}: cuDNN {} failed to run: {}", where, c.e.describe(), err.what());
          c.e.ms = -1;
        }
      }
    }
    const Candidate* best_pre = nullptr;
    const Candidate* best_rtc = nullptr;
    for (auto& c : built) {
      if (c.e.ms < 0) continue;
      const Candidate*& slot = c.e.runtime_compiled ? best_rtc : best_pre;
      if (!slot || c.e.ms < slot->e.ms) slot = &c;
    }
    for (auto& c : built)
      log().debug("{}: cuDNN {}: build {:.1f} ms, run {:.4f} ms", where, c.e.describe(), c.build_ms, c.e.ms);
    const Candidate* chosen = best_pre;
    if (best_rtc && (!best_pre || best_rtc->e.ms < kRuntimeCompiledMargin * best_pre->e.ms)) {
      try {
        GraphEngine e = best_rtc->e;
        e.plan_json = best_rtc->plan->serialize();
        log().debug("{}: {} chosen: runtime-compiled engine, serialized plan {} bytes", where, ep.describe(),
                    e.plan_json.size());
        return e;
      } catch (const Error& err) {
        log().debug("{}: cuDNN {} not serializable: {}", where, best_rtc->e.describe(), err.what());
      }
    }
    if (!chosen) return std::nullopt;
    log().debug("{}: {} chosen: {} ({:.4f} ms)", where, ep.describe(), chosen->e.describe(), chosen->e.ms);
    return chosen->e;
  });
}

}  // namespace kiln::targets::cuda
