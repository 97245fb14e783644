// Kernel resolution per target (run side): how the executor finds the code of
// a node, including the target-private operators a lowering pass produced
// (e.g. domain "kiln.cpu").
#pragma once
#include <functional>
#include <string>
#include <string_view>

#include "ir/graph.h"
#include "ops/registry.h"

namespace kiln::targets {

/// A node's kernel, bound once when a Program is built (at load). It may hold
/// per-node state made at bind time (oneDNN primitives, the packed constants
/// it reads); calling it must be thread-safe (Session::run is).
using BoundKernel = std::function<void(ops::KernelContext&)>;

/// Builds the BoundKernel of one node of `model` (a node of the target's
/// private domain). Throws Error naming the node when its attributes are
/// inconsistent or this machine cannot build it.
using KernelFactory = BoundKernel (*)(const ir::Node& node, const ir::Model& model);

/// Domain of the cpu target's lowered operators.
inline constexpr std::string_view kCpuDomain = "kiln.cpu";

/// The target-specific factory for (domain, op_type) on target `target`
/// ("cpu", "ref", ...), or null when the target has none.
KernelFactory find_factory(std::string_view target, std::string_view domain, std::string_view op_type);

/// The kernel of `node` for `target`: the target's factory when it has one
/// for the node's (domain, op_type), else the reference kernel of
/// ops::registry(). Throws Error(unsupported) naming the node, domain and
/// target when neither knows the operator.
BoundKernel bind_kernel(std::string_view target, const ir::Node& node, const ir::Model& model);

}  // namespace kiln::targets
