// Host segments of a loaded cuda program (host fallback, ir::Segment): the
// boundary copies and the call into the host executor (run side).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/session.h"
#include "targets/cuda/run/driver.h"
#include "targets/kernels.h"

namespace kiln::targets::cuda {

/// One value crossing a device / host boundary: its device address (in the
/// program's arena or own buffers), dtype, static shape, bytes, and where it
/// is staged in its host step's pinned buffer.
struct BoundaryValue {
  ir::ValueId id = ir::kNoValue;
  CUdeviceptr addr = 0;
  DType dtype = DType::undefined;
  std::vector<int64_t> shape;
  size_t bytes = 0;
  size_t offset = 0;  ///< in HostStep::staging (256-byte aligned)
};

/// A host segment as loaded: main-graph nodes [first, first + count), what
/// it reads from the device and what it writes back, and the pinned host
/// memory both cross through. The staging is allocated once, at load (every
/// boundary value has a static shape), and reused by every run: a run's
/// copies out of it finish at that run's final synchronisation, before the
/// next run (runs of one program are serialised) writes it again.
struct HostStep {
  size_t first = 0, count = 0;
  std::vector<BoundaryValue> to_host, to_device;
  std::vector<std::vector<ir::ValueId>> outputs;  ///< each node's outputs (for an observer)
  std::string label;  ///< "host segment 2 (Einsum, TopK)", for profiles
  PinnedBuffer staging;  ///< every to_host and to_device value, at its offset
  /// Views of the staging of the to_device values that the host kernels
  /// write in place (HostSegments::run's `into`): all but the program's
  /// outputs, which the caller keeps after the run.
  std::map<ir::ValueId, Tensor> into;
};

/// The HostStep of segment `s` of `m` (a host segment), with each copied
/// value's device address from `addr` (indexed by value id; 0 for none) and
/// its pinned staging allocated (in the current CUDA context).
/// Throws Error(invalid_model) naming the value when one has no static shape
/// or no device address, Error(unsupported) when pinned memory runs out.
HostStep make_host_step(const ir::Model& m, const ir::Segment& s, size_t index, const std::vector<CUdeviceptr>& addr);

/// `t` itself, or a copy of it when its memory lies in a host step's
/// staging (a program output a host kernel left there, e.g. as a view of its
/// input): what a run returns must outlive the next run.
Tensor detach_from_staging(const std::vector<HostStep>& steps, const Tensor& t);

/// Runs host step `h` of a run: copies its to_host values that `env` does
/// not hold yet from the device into the pinned staging (async on `stream`,
/// then one wait for the stream: every device node before it has
/// finished; `env` gets views of the staging), runs its nodes through
/// `host` (the to_device values written in the staging; node by node,
/// calling `observe` for each output, when `observe` is non-null: then in
/// their own buffers, which the observer may keep, and copied), then issues
/// the to_device copies from the staging on `stream` (the next device
/// segment is ordered after them). With `profile` non-null,
/// appends one entry for the segment: its op "host", its time the
/// device-to-host copies + the host nodes + the copies back (waited for).
void run_host_step(const HostStep& h, const HostSegments& host, std::vector<Tensor>& env, CUstream stream,
                   RunProfile* profile, const ValueObserver* observe);

}  // namespace kiln::targets::cuda
