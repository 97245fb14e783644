// Kernel resolution per target (run side): how the executor finds the code of
// a node, including the target-private operators a lowering pass produced
// (e.g. domain "kiln.cpu").
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "artifact/artifact.h"
#include "kiln/session.h"
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

/// Called while a program runs under observation (kiln verify), after
/// main-graph node `node` (index into the program's main-graph nodes) has
/// run, once for each output value `value` it wrote. `t` holds that value in
/// host memory, in the program's own dtype and shape (a cpu blocked value is
/// its raw buffer, a cuda 16-bit value stays 16-bit); it is valid only during
/// the call (the caller copies what it keeps).
using ValueObserver = std::function<void(size_t node, ir::ValueId value, const Tensor& t)>;

/// A whole program run on a device (the cuda target): the host executor
/// hands it the inputs and gets the outputs; it owns device memory, loaded
/// modules and library handles. run() is thread-safe.
class DeviceProgram {
 public:
  virtual ~DeviceProgram() = default;
  /// Runs once. Inputs are validated by the caller (names, dtypes, shapes).
  /// With `profile` non-null the device's time of each node is recorded
  /// (node by node, without the CUDA graph: slower than a normal run).
  virtual std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& inputs,
                                            RunProfile* profile = nullptr) const = 0;
  /// Runs once node by node (outside any CUDA graph), copying each node's
  /// outputs to the host as soon as the node has run and handing them to
  /// `observe` (kiln verify). Slow; the results are those of run(). The
  /// default throws Error(unsupported).
  /// (Inline: DeviceProgram keeps no key function, so its vtable is emitted
  /// wherever it is used, as the static libraries' link order needs.)
  virtual std::map<std::string, Tensor> run_observed(const std::map<std::string, Tensor>& inputs,
                                                     const ValueObserver& observe) const {
    (void)inputs, (void)observe;
    throw Error(ErrorCode::unsupported, "this device program cannot be run node by node with its values read back");
  }
  /// run() writing every output into the caller's host tensor of its name
  /// (Session::run_into; checked by the caller against the program's output
  /// types): the device-to-host copies land there directly.
  virtual void run_into(const std::map<std::string, Tensor>& inputs,
                        const std::map<std::string, Tensor>& outputs) const = 0;
  /// Inputs and outputs in device memory (Session::run_device).
  virtual void run_device(const std::map<std::string, DeviceTensor>& inputs,
                          const std::map<std::string, DeviceTensor>& outputs) const = 0;
};

/// The host side of a heterogeneous device program (ir::Segment, "host"
/// segments): runs main-graph nodes on the host with the host executor's
/// kernels (the cpu target's kernels, reference kernels where cpu has none;
/// If / Loop / Scan with their subgraphs). The runtime owns it and hands it
/// to make_device_program; the device program calls it between its CUDA
/// graphs. Both functions are thread-safe.
class HostSegments {
 public:
  virtual ~HostSegments() = default;
  /// A value environment for one run: one slot per value of the program
  /// (ir::Model::values), constants bound, everything else undefined.
  virtual std::vector<Tensor> environment() const = 0;
  /// Runs main-graph nodes [first, first + count) in order; their inputs are
  /// in `env`, their outputs are written there, each in its own buffer, or,
  /// for a value id in `into` whose tensor has the dtype and shape the
  /// kernel asks for, in that tensor's memory (contents overwritten; a
  /// device program's pinned staging for its copy to the device). A kernel
  /// may still set an output it built elsewhere (a view of an input): the
  /// caller checks where each landed. Throws what a kernel throws, naming the node.
  virtual void run(size_t first, size_t count, std::vector<Tensor>& env,
                   const std::map<ir::ValueId, Tensor>& into) const = 0;
};

/// The DeviceProgram of a compiled program whose target runs on a device
/// ("cuda"), or null for host targets (ref, cpu). `host` runs the program's
/// host segments (ir::Model::segments); it must outlive the DeviceProgram,
/// and a program with host segments and no `host` is Error(invalid_option).
/// Throws Error(unsupported)
/// "this kiln was built without CUDA support" for a cuda program in a build
/// without CUDA, and the device errors of loading (no device, a module or
/// matmul algorithm this machine refuses) otherwise.
std::unique_ptr<DeviceProgram> make_device_program(const artifact::CompiledProgram& cp, int device,
                                                   const HostSegments* host = nullptr);

/// Starts, in the background, the device setup that loading a program of
/// `target` ("cuda") on `device` needs first (cuda::prewarm: the CUDA
/// context and the cuBLASLt / cuDNN handles), so that it overlaps reading
/// the model and the artifact. Nothing for host targets or in a kiln built
/// without CUDA; never throws (the load reports device errors). Returns
/// true when this call started background work, which the caller then
/// settles (DevicePrewarmSettler) before it returns or throws.
bool prewarm_device(std::string_view target, int device);

/// Waits for what prewarm_device started (nothing if it started nothing):
/// called before a session that started it returns or throws, so that no
/// library initialiser runs while the process exits. Never throws.
void settle_device_prewarm();

/// Calls settle_device_prewarm() when it goes out of scope (a session
/// constructor's exit, normal or by exception), when `active`: only the
/// session that started the work waits for it (a cpu session in another
/// thread never does).
struct DevicePrewarmSettler {
  bool active = false;
  ~DevicePrewarmSettler() {
    if (active) settle_device_prewarm();
  }
};

/// oneDNN's sgemm (dnnl_sgemm: JIT-compiled for this CPU's ISA) with
/// ops::sgemm's contract (row-major, beta == 0 never reads C), for
/// ops::SgemmOverride: the precision check's reference runs and the cpu
/// target's reference kernels (bind_kernel). C is computed
/// in fixed tiles, one single-threaded oneDNN call each, spread over OpenMP's
/// threads: the result does not depend on the thread count. Its sums are
/// ordered differently from the built-in kernel's (results differ in the
/// last bits) and may differ between CPU ISAs (oneDNN's AVX2 and AVX-512
/// kernels). Throws Error(internal) when oneDNN refuses a call.
void library_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

/// Domain of the cpu target's lowered operators.
inline constexpr std::string_view kCpuDomain = "kiln.cpu";

/// The target-specific factory for (domain, op_type) on target `target`
/// ("cpu", "ref", ...), or null when the target has none.
KernelFactory find_factory(std::string_view target, std::string_view domain, std::string_view op_type);

/// The kernel of `node` for `target`: the target's factory when it has one
/// for the node's (domain, op_type), else the reference kernel of
/// ops::registry() (on the cpu target, with its products on library_sgemm).
/// Throws Error(unsupported) naming the node, domain and target when neither
/// knows the operator.
BoundKernel bind_kernel(std::string_view target, const ir::Node& node, const ir::Model& model);

}  // namespace kiln::targets
