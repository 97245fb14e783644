// Launch-configuration tuning of the generated kernels at compile time
// (lowering.h: tune_kernel_grids).
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "support/error.h"
#include "support/log.h"
#include "targets/cuda/compile/lowering.h"
#include "targets/cuda/compile/tuning.h"
#include "targets/cuda/run/cuda_ops.h"
#include "targets/cuda/run/driver.h"
#include "targets/cuda/run/node_checks.h"

namespace kiln::targets::cuda {

namespace {

constexpr size_t kAlign = 256;
/// Launches per timed repetition: one launch of a small element-wise kernel
/// (a few microseconds) is near CUDA events' resolution.
constexpr int kLaunchesPerRep = 10;

/// Bytes of the scratch slot for value `v`: its size (at least 16, for the
/// vector paths' alignment test) rounded up to kAlign.
size_t slot(const ir::Model& m, ir::ValueId v) {
  const size_t b = std::max<size_t>(value_bytes(m, v, nullptr), 16);
  return (b + kAlign - 1) / kAlign * kAlign;
}

/// Grid sizes to try for a kernel launched with `g0` blocks (the code
/// generator's choice) on `sm` multiprocessors: fewer, larger-strided blocks.
std::vector<int64_t> candidates(int64_t g0, int64_t sm, Tuning mode) {
  std::vector<int64_t> per_sm = mode == Tuning::exhaustive ? std::vector<int64_t>{1, 2, 4, 8, 16} : std::vector<int64_t>{2, 4, 8};
  std::set<int64_t> out = {g0};
  for (int64_t k : per_sm)
    if (k * sm < g0) out.insert(k * sm);
  return {out.begin(), out.end()};
}

}  // namespace

namespace {
int tune_grids(ir::Model& m, const KernelBundle& bundle, const LowerOptions& opt, int sm_count, TuningStats& st);
}  // namespace

int tune_kernel_grids(ir::Model& m, const KernelBundle& bundle, const LowerOptions& opt, int sm_count, TuningStats& st) {
  // Optional work: a failure (no memory for the scratch buffer, a driver
  // error) keeps the generator's grids instead of failing the compile. The
  // nodes' grids are only written after every timing of a node succeeded.
  try {
    return tune_grids(m, bundle, opt, sm_count, st);
  } catch (const Error& e) {
    log().warn("cuda: kernel grid tuning skipped, the generated grids are kept: {}", e.what());
    return 0;
  }
}

namespace {
int tune_grids(ir::Model& m, const KernelBundle& bundle, const LowerOptions& opt, int sm_count, TuningStats& st) {
  if (opt.device < 0 || opt.tuning == Tuning::heuristic) return 0;
  // Measurement aid (docs/cuda.md): KILN_CUDA_TUNE_GRIDS=0 keeps the generator's grids.
  if (const char* e = std::getenv("KILN_CUDA_TUNE_GRIDS"); e && std::string(e) == "0") return 0;
  std::vector<ir::Node*> tunable;
  size_t scratch = 0;
  for (auto& n : m.main.nodes) {
    if (n.domain != kCudaDomain || n.op_type != "Kernel" || n.i("grid_stride", 0) != 1) continue;
    if (n.ints("grid").at(0) <= sm_count) continue;  // already one wave or less: nothing to gain
    size_t need = 0;
    for (auto v : n.inputs)
      if (v != ir::kNoValue) need += slot(m, v);
    for (auto v : n.outputs)
      if (v != ir::kNoValue) need += slot(m, v);
    scratch = std::max(scratch, need);
    tunable.push_back(&n);
  }
  if (tunable.empty()) return 0;
  Stopwatch sw;
  use_device(opt.device);
  const DriverApi& d = driver();
  CUmodule module = nullptr;
  check(d.cuModuleLoadData(&module, bundle.cubin.data()), "cuModuleLoadData (kernel tuning)");
  struct Unload {
    CUmodule m;
    ~Unload() { driver().cuModuleUnload(m); }
  } unload{module};
  // One zeroed scratch buffer carved into each kernel's operands: element-wise
  // work does not depend on the values (zeros give no denormals or NaN slow paths).
  DeviceBuffer buf(scratch, "the kernel tuning buffer");
  check(d.cuMemsetD8Async(buf.get(), 0, buf.bytes(), nullptr), "cuMemsetD8Async");
  check(d.cuCtxSynchronize(), "cuCtxSynchronize");
  TimingStream stream;
  const int reps = opt.tuning == Tuning::exhaustive ? 10 : 5;
  int changed = 0;
  for (ir::Node* n : tunable) {
    std::string fn = n->s("fn", "");
    CUfunction f;
    check(d.cuModuleGetFunction(&f, module, fn.c_str()), fmt::format("{}: cuModuleGetFunction('{}')", n->label(), fn).c_str());
    std::vector<CUdeviceptr> args;
    CUdeviceptr at = buf.get();
    for (auto v : n->inputs)
      if (v != ir::kNoValue) args.push_back(at), at += slot(m, v);
    for (auto v : n->outputs)
      if (v != ir::kNoValue) args.push_back(at), at += slot(m, v);
    std::vector<void*> params(args.size());
    for (size_t i = 0; i < args.size(); ++i) params[i] = &args[i];
    const auto block = n->ints("block");
    const int64_t g0 = n->ints("grid").at(0);
    int64_t best = g0;
    float best_ms = -1, default_ms = -1;
    for (int64_t g : candidates(g0, sm_count, opt.tuning)) {
      float ms = time_median_ms(
          stream.get(),
          [&](CUstream s) {
            for (int r = 0; r < kLaunchesPerRep; ++r)
              check(d.cuLaunchKernel(f, unsigned(g), 1, 1, unsigned(block.at(0)), 1, 1, 0, s, params.data(), nullptr),
                    "cuLaunchKernel (kernel tuning)");
          },
          2, reps);
      ++st.timed;
      if (g == g0) default_ms = ms;
      if (best_ms < 0 || ms < best_ms) best_ms = ms, best = g;
    }
    // Keep the generator's grid unless another is clearly faster (timing noise
    // of a few percent must not churn artifacts).
    if (best != g0 && best_ms < 0.97f * default_ms) {
      n->attrs["grid"] = std::vector<int64_t>{best, 1, 1};
      ++changed;
      log().debug("{}: grid {} -> {} blocks ({:.4f} -> {:.4f} ms per launch)", n->label(), g0, best,
                  default_ms / kLaunchesPerRep, best_ms / kLaunchesPerRep);
    }
  }
  st.ms += sw.ms();
  log().info("cuda tuning: {} grid-stride kernel(s) timed at several grid sizes, {} given another grid ({:.0f} ms)",
             tunable.size(), changed, sw.ms());
  return changed;
}
}  // namespace

}  // namespace kiln::targets::cuda
