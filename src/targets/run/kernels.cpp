#include "targets/kernels.h"

#include "support/error.h"
#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets {

KernelFactory find_factory(std::string_view target, std::string_view domain, std::string_view op_type) {
  if (target == "cpu" && domain == kCpuDomain) return cpu::find_factory(op_type);
  return nullptr;
}

BoundKernel bind_kernel(std::string_view target, const ir::Node& node, const ir::Model& model) {
  if (KernelFactory f = find_factory(target, node.domain, node.op_type)) return f(node, model);
  const ops::OpInfo* op = ops::registry().find(node.domain, node.op_type);
  if (!op || !op->kernel)
    fail(ErrorCode::unsupported,
         "the artifact uses operator {} (domain '{}') at node '{}', which this build of kiln lacks for target '{}'",
         node.op_type, node.domain, node.name, target);
  return BoundKernel(op->kernel);
}

}  // namespace kiln::targets
