#include "targets/kernels.h"

#include <omp.h>

#include "ops/gemm_kernel.h"
#include "support/error.h"
#include "targets/cpu/run/cpu_kernels.h"
#ifdef KILN_WITH_CUDA
#include "targets/cuda/run/program.h"
#endif

namespace kiln::targets {

std::unique_ptr<DeviceProgram> make_device_program(const artifact::CompiledProgram& cp, int device,
                                                   const HostSegments* host) {
  if (cp.compat.target != "cuda") return nullptr;
#ifdef KILN_WITH_CUDA
  return cuda::load_program(cp, device, host);
#else
  (void)device;
  (void)host;
  fail(ErrorCode::unsupported, "the artifact is for target cuda, but this kiln was built without CUDA support");
#endif
}

bool prewarm_device(std::string_view target, int device) {
#ifdef KILN_WITH_CUDA
  return target == "cuda" && cuda::prewarm(device);
#else
  (void)target;
  (void)device;
  return false;
#endif
}

void settle_device_prewarm() {
#ifdef KILN_WITH_CUDA
  cuda::settle_prewarm();
#endif
}

KernelFactory find_factory(std::string_view target, std::string_view domain, std::string_view op_type) {
  if (target == "cpu" && domain == kCpuDomain) return cpu::find_factory(op_type);
  return nullptr;
}

namespace {

/// True when every output of n has a static shape and together they hold
/// less than `limit` bytes.
bool small_outputs(const ir::Node& n, const ir::Model& m, size_t limit) {
  size_t total = 0;
  for (auto id : n.outputs) {
    if (id == ir::kNoValue) continue;
    const ir::Value& v = m.value(id);
    if (!v.shape || !ir::is_static(*v.shape)) return false;
    size_t b = dtype_size(v.dtype);
    for (auto d : ir::to_sizes(*v.shape)) b *= static_cast<size_t>(d);
    total += b;
  }
  return total < limit;
}

bool has_subgraph(const ir::Node& n) {
  for (auto& [k, a] : n.attrs)
    if (std::holds_alternative<std::shared_ptr<ir::Graph>>(a)) return true;
  return false;
}

}  // namespace

BoundKernel bind_kernel(std::string_view target, const ir::Node& node, const ir::Model& model) {
  if (KernelFactory f = find_factory(target, node.domain, node.op_type)) return f(node, model);
  const ops::OpInfo* op = ops::registry().find(node.domain, node.op_type);
  if (!op || !op->kernel)
    fail(ErrorCode::unsupported,
         "the artifact uses operator {} (domain '{}') at node '{}', which this build of kiln lacks for target '{}'",
         node.op_type, node.domain, node.name, target);
  if (target != "cpu") return BoundKernel(op->kernel);
  // On the cpu target (and in a device target's host segments) a reference
  // kernel's products -- MatMul / Gemm whose rows are only known at run time
  // (a detector's per-proposal box head), products inside If / Loop bodies --
  // run on oneDNN's JIT sgemm instead of the portable SSE2 GEMM (~5x slower
  // on AVX2), which the ref target keeps: it is the oracle, and its results
  // must not depend on the CPU's ISA.
  // A reference kernel with a small static output also runs on the calling
  // thread alone: its OpenMP loops would spend more waking the other threads
  // than they save.
  const bool serial = !has_subgraph(node) && small_outputs(node, model, 1 << 20);
  ops::KernelFn k = op->kernel;
  return [k, serial](ops::KernelContext& ctx) {
    const ops::SgemmOverride gemm(library_sgemm);
    if (!serial) return k(ctx);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    try {
      k(ctx);
    } catch (...) {
      omp_set_num_threads(saved);
      throw;
    }
    omp_set_num_threads(saved);
  };
}

}  // namespace kiln::targets
