// Host segments of a loaded cuda program (host fallback, ir::Segment): the
// boundary copies and the call into the host executor (run side).
#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/session.h"
#include "targets/cuda/run/driver.h"
#include "targets/kernels.h"

namespace kiln::targets::cuda {

/// One value crossing a device / host boundary: its device address (in the
/// program's arena or own buffers), dtype, static shape and bytes.
struct BoundaryValue {
  ir::ValueId id = ir::kNoValue;
  CUdeviceptr addr = 0;
  DType dtype = DType::undefined;
  std::vector<int64_t> shape;
  size_t bytes = 0;
};

/// A host segment as loaded: main-graph nodes [first, first + count), what
/// it reads from the device and what it writes back.
struct HostStep {
  size_t first = 0, count = 0;
  std::vector<BoundaryValue> to_host, to_device;
  std::vector<std::vector<ir::ValueId>> outputs;  ///< each node's outputs (for an observer)
  std::string label;  ///< "host segment 2 (Einsum, TopK)", for profiles
};

/// The HostStep of segment `s` of `m` (a host segment), with each copied
/// value's device address from `addr` (indexed by value id; 0 for none).
/// Throws Error(invalid_model) naming the value when one has no static shape
/// or no device address.
HostStep make_host_step(const ir::Model& m, const ir::Segment& s, size_t index, const std::vector<CUdeviceptr>& addr);

/// Runs host step `h` of a run: copies its to_host values that `env` does
/// not hold yet from the device (async on `stream`, then waits for the
/// stream: every device node before it has finished), runs its nodes
/// through `host` (node by node, calling `observe` for each output, when
/// `observe` is non-null), then issues the to_device copies on `stream` (the
/// next device segment is ordered after them; `env` keeps the host buffers
/// alive until the run's final synchronisation). With `profile` non-null,
/// appends one entry for the segment: its op "host", its time the
/// device-to-host copies + the host nodes + the copies back (waited for).
void run_host_step(const HostStep& h, const HostSegments& host, std::vector<Tensor>& env, CUstream stream,
                   RunProfile* profile, const ValueObserver* observe);

}  // namespace kiln::targets::cuda
