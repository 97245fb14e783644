// cuBLASLt algorithm choice per matmul at compile time (tuning.h: tune_gemm).
// The heuristic ranks the candidates; fast / exhaustive time the best few on
// the device, because the heuristic's first pick is often not the fastest
// for the small-m matmuls of batch-1 inference.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>

#include "support/error.h"
#include "support/log.h"
#include "targets/cuda/compile/tuning.h"
#include "targets/cuda/run/driver.h"

namespace kiln::targets::cuda {

namespace {

constexpr size_t kMaxWorkspace = size_t{32} << 20;

std::string problem_key(const GemmSpec& s, Tuning mode, int device) {
  return fmt::format("{}|{}|m{} n{} k{} b{} ta{} tb{} sa{} sb{} al{} be{} bias{} c{} epi{} {}>{} tf32 {}", tuning_name(mode),
                     device, s.m, s.n, s.k, s.batch, s.trans_a, s.trans_b, s.stride_a, s.stride_b, s.alpha, s.beta,
                     s.has_bias, s.has_c, s.epilogue, dtype_name(s.dtype), dtype_name(s.d_type()), s.tf32);
}

/// Device buffers for timing one matmul (zeros; fp32-sized, enough for any dtype).
struct GemmBuffers {
  DeviceBuffer a, b, c, d, bias, ws;
  explicit GemmBuffers(const GemmSpec& s, size_t workspace) {
    auto bytes = [](int64_t n) { return static_cast<size_t>(n) * 4; };
    a = DeviceBuffer(bytes(std::max(s.m * s.k, s.batch * s.stride_a)), "a matmul tuning buffer");
    b = DeviceBuffer(bytes(std::max(s.k * s.n, s.batch * s.stride_b)), "a matmul tuning buffer");
    c = DeviceBuffer(bytes(s.batch * s.m * s.n), "a matmul tuning buffer");
    d = DeviceBuffer(bytes(s.batch * s.m * s.n), "a matmul tuning buffer");
    bias = DeviceBuffer(bytes(s.n), "a matmul tuning buffer");
    ws = DeviceBuffer(workspace, "the tuning workspace");
    const DriverApi& drv = driver();
    for (auto* buf : {&a, &b, &c, &d, &bias})
      check(drv.cuMemsetD8Async(buf->get(), 0, buf->bytes(), nullptr), "cuMemsetD8Async");
    check(drv.cuCtxSynchronize(), "cuCtxSynchronize");
  }
};

GemmAlgo time_candidates(const GemmSpec& s, const std::vector<GemmAlgo>& cands, int reps, const std::string& where,
                         TuningStats& st) {
  size_t ws = 0;
  for (auto& c : cands) ws = std::max(ws, c.workspace);
  GemmBuffers buf(s, ws);
  TimingStream stream;
  GemmAlgo best = cands.front();
  float best_ms = -1;
  size_t best_i = 0;
  for (size_t i = 0; i < cands.size(); ++i) {
    const GemmAlgo& c = cands[i];
    std::optional<GemmPlan> plan;
    try {
      plan.emplace(s, c.words, c.workspace, s.has_bias ? buf.bias.get() : 0, where);
    } catch (const Error&) {
      continue;  // a candidate AlgoCheck refuses is skipped, not fatal
    }
    float ms = time_median_ms(
        stream.get(),
        [&](CUstream str) { plan->run(str, buf.a.get(), buf.b.get(), buf.c.get(), buf.d.get(), buf.ws.get(), buf.ws.bytes()); },
        1, reps);
    ++st.timed;
    if (best_ms < 0 || ms < best_ms) best_ms = ms, best = c, best_i = i;
  }
  log().debug("{}: cuBLASLt m={} n={} k={} batch={}: {} candidates, best #{} {:.4f} ms", where, s.m, s.n, s.k, s.batch,
              cands.size(), best_i, best_ms);
  return best;
}

/// Whether split-K forms are timed (KILN_CUDA_GEMM_SPLIT_K=0: not, for
/// measuring; part of the memo key so one process can compare both).
bool split_k_enabled() {
  const char* e = std::getenv("KILN_CUDA_GEMM_SPLIT_K");
  return !(e && std::string(e) == "0");
}

/// Output tiles of 128 x 128 (a typical Hopper cuBLASLt tile) over all batches.
int64_t output_tiles(const GemmSpec& s) { return ((s.m + 127) / 128) * ((s.n + 127) / 128) * s.batch; }

/// The split-K forms worth timing for `s`: only when its output tiles fill
/// fewer than the device's multiprocessors (batch-1 projections, small-spatial
/// 1x1 convolutions) and k is long enough to split; the first `bases`
/// heuristic candidates, each split in 2, 4, 8 and 16 (exhaustive: 3, 6 and 12 too).
std::vector<GemmAlgo> split_k_candidates(const GemmSpec& s, const GemmDescs& descs, const std::vector<GemmAlgo>& cands,
                                         Tuning mode, int device) {
  if (mode == Tuning::heuristic || !split_k_enabled() || s.k < 256) return {};
  int sm = 0;
  CUdevice dev = 0;
  const DriverApi& drv = driver();
  check(drv.cuDeviceGet(&dev, device), "cuDeviceGet");
  check(drv.cuDeviceGetAttribute(&sm, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), "cuDeviceGetAttribute");
  if (output_tiles(s) >= sm) return {};
  const size_t bases = mode == Tuning::fast ? 2 : cands.size();
  const std::vector<int> splits =
      mode == Tuning::fast ? std::vector<int>{2, 4, 8, 16} : std::vector<int>{2, 3, 4, 6, 8, 12, 16};
  std::vector<GemmAlgo> out;
  for (size_t i = 0; i < std::min(bases, cands.size()); ++i)
    for (auto& v : gemm_split_k_variants(descs, s, cands[i], splits, kMaxWorkspace)) out.push_back(v);
  return out;
}

}  // namespace

GemmAlgo tune_gemm(const GemmSpec& s, Tuning mode, int device, const std::string& where, TuningStats& st) {
  const std::string key = problem_key(s, mode, device) + (split_k_enabled() ? "" : " nosplitk");
  return memoized<GemmAlgo>(key, st, [&] {
    use_device(device);
    GemmDescs descs(s, s.has_bias ? CUdeviceptr{256} : 0);
    int count = mode == Tuning::heuristic ? 1 : mode == Tuning::fast ? 4 : 24;
    auto cands = gemm_heuristic(descs, kMaxWorkspace, count);
    if (cands.empty())
      fail(ErrorCode::unsupported, "{}: cuBLASLt has no algorithm for this {} matmul (m={} n={} k={} batch={})", where,
           dtype_name(s.dtype), s.m, s.n, s.k, s.batch);
    const size_t heuristic = cands.size();
    for (auto& v : split_k_candidates(s, descs, cands, mode, device)) cands.push_back(v);
    if (cands.size() > heuristic)
      log().debug("{}: cuBLASLt m={} n={} k={} batch={}: {} split-K forms timed besides the heuristic's {}", where, s.m,
                  s.n, s.k, s.batch, cands.size() - heuristic, heuristic);
    return cands.size() == 1 ? cands.front() : time_candidates(s, cands, mode == Tuning::fast ? 5 : 20, where, st);
  });
}

}  // namespace kiln::targets::cuda
