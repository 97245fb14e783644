// A loaded, ready-to-run compiled program (internal to the runtime).
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "artifact/artifact.h"
#include "kiln/session.h"
#include "ops/registry.h"
#include "targets/kernels.h"

namespace kiln {

/// Executes a CompiledProgram: main-graph nodes in order through their
/// kernels, intermediates in the static arena (when the plan has one) or on
/// the heap, subgraphs (If/Loop/Scan) by recursion. Immutable after
/// construction; run() is thread-safe (each call takes its own arena).
class Program {
 public:
  /// Resolves every node's kernel for the artifact's target
  /// (targets::bind_kernel: the target's own kernels first, e.g. the cpu
  /// target's oneDNN primitives, created here once; then the reference
  /// kernels). Throws Error(unsupported) naming the node when this build lacks
  /// an operator the artifact uses, or the error of a kernel that cannot be
  /// built on this machine.
  /// `device`: the device index a device target (cuda) loads the program on
  /// (SessionOptions::target.device); host targets ignore it.
  explicit Program(artifact::CompiledProgram cp, int device = 0);
  ~Program();

  /// See Session::run. `threads` > 0 limits the OpenMP threads of this call;
  /// a run never uses more threads than OpenMP offered when the Program was
  /// built (oneDNN sizes per-thread scratch space when a primitive is made).
  /// With `profile` non-null, every main-graph node's wall time is recorded.
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& inputs, int threads,
                                    RunProfile* profile = nullptr) const;

  /// See Session::run_into: the outputs are written into the caller's
  /// tensors (checked first against the program's output types). Host
  /// targets: each main-graph node computing an output allocates it in the
  /// caller's buffer when dtype and shape match; the rest is copied once.
  void run_into(const std::map<std::string, Tensor>& inputs, const std::map<std::string, Tensor>& outputs,
                int threads) const;
  /// See Session::output_shapes (for this program alone).
  std::map<std::string, std::vector<int64_t>> output_shapes(const std::map<std::string, Tensor>& inputs) const;

  /// run() for `kiln verify`: calls `observe` after every main-graph node
  /// for each output it wrote (targets::ValueObserver). Host targets run
  /// without the arena (every value in its own buffer, none reused); device
  /// targets run node by node and copy each output back as soon as its node
  /// has run. Normal runs are untouched (a separate path). Throws what run()
  /// throws and what `observe` throws.
  std::map<std::string, Tensor> run_observed(const std::map<std::string, Tensor>& inputs, int threads,
                                             const targets::ValueObserver& observe) const;

  /// See Session::run_device. Throws Error(invalid_option) for host targets.
  void run_device(const std::map<std::string, DeviceTensor>& inputs,
                  const std::map<std::string, DeviceTensor>& outputs) const;

  const std::vector<TensorInfo>& inputs() const { return inputs_; }
  const std::vector<TensorInfo>& outputs() const { return outputs_; }
  const artifact::CompiledProgram& compiled() const { return cp_; }
  /// Frees the arenas kept for later runs (those in use are untouched). A
  /// bucketed session calls it on a program it stops using, so it keeps
  /// scratch memory for one bucket, not for every bucket it has run.
  void release_arenas() const;

 private:
  struct Arena;
  class Run;
  class HostSide;
  void validate_inputs(const std::map<std::string, Tensor>& inputs) const;
  std::unique_ptr<Arena> take_arena() const;
  void give_back(std::unique_ptr<Arena> a) const;

  artifact::CompiledProgram cp_;
  std::vector<TensorInfo> inputs_, outputs_;  ///< of the main graph (made once: run_into checks against them)
  /// Binds `nodes` (default: every node of every graph) into kernels_ (in
  /// parallel: bind_all in executor.cpp).
  void bind_all(std::vector<const ir::Node*> nodes = {});
  std::unordered_map<const ir::Node*, targets::BoundKernel> kernels_;
  /// Runs the host segments of a device program (host fallback); declared
  /// before device_, which calls it, so that it is destroyed after it.
  std::unique_ptr<targets::HostSegments> host_side_;
  std::unique_ptr<targets::DeviceProgram> device_;  ///< the whole program, for device targets (cuda)
  std::vector<std::vector<ir::ValueId>> free_after_;  ///< per main node: heap values dead after it
  std::vector<Tensor> base_env_;                      ///< constants bound by value id
  int build_threads_ = 1;                             ///< omp_get_max_threads() when the kernels were bound
  mutable std::mutex pool_mu_;
  mutable std::vector<std::unique_ptr<Arena>> pool_;
};

/// TensorInfo of a value.
TensorInfo tensor_info(const ir::Value& v);

}  // namespace kiln
