// Host segments of a loaded cuda program (host_segments.h).
#include "targets/cuda/run/host_segments.h"

#include <fmt/format.h>

#include <cstring>
#include <set>

#include "support/error.h"
#include "support/log.h"
#include "targets/cuda/run/node_checks.h"

namespace kiln::targets::cuda {

namespace {

BoundaryValue boundary(const ir::Model& m, ir::ValueId id, const std::vector<CUdeviceptr>& addr, const char* way) {
  BoundaryValue b;
  b.id = id;
  b.bytes = value_bytes(m, id, nullptr);
  b.dtype = m.value(id).dtype;
  b.shape = ir::to_sizes(*m.value(id).shape);
  b.addr = addr.at(static_cast<size_t>(id));
  if (!b.addr && b.bytes)
    fail(ErrorCode::invalid_model, "the cuda program copies value '{}' {} but it has no device buffer",
         m.value(id).name, way);
  return b;
}

}  // namespace

HostStep make_host_step(const ir::Model& m, const ir::Segment& s, size_t index, const std::vector<CUdeviceptr>& addr) {
  HostStep h;
  h.first = s.first;
  h.count = s.count;
  for (auto id : s.to_host) h.to_host.push_back(boundary(m, id, addr, "to the host"));
  for (auto id : s.to_device) h.to_device.push_back(boundary(m, id, addr, "to the device"));
  std::set<std::string> ops;
  std::string list;
  for (size_t i = s.first; i < s.first + s.count; ++i) {
    const ir::Node& n = m.main.nodes.at(i);
    if (ops.insert(n.op_type).second) list += (list.empty() ? "" : ", ") + n.op_type;
    h.outputs.emplace_back();
    for (auto id : n.outputs)
      if (id != ir::kNoValue) h.outputs.back().push_back(id);
  }
  h.label = fmt::format("host segment {} ({})", index, list);
  // One pinned block for the segment, each value at a 256-byte aligned offset.
  size_t total = 0;
  for (auto* side : {&h.to_host, &h.to_device})
    for (auto& b : *side) b.offset = total, total += (b.bytes + 255) / 256 * 256;
  if (!total) return h;
  h.staging = PinnedBuffer(total, fmt::format("the boundary values of {}", h.label).c_str());
  const std::set<ir::ValueId> outputs(m.main.outputs.begin(), m.main.outputs.end());
  for (auto& b : h.to_device)
    if (!outputs.count(b.id)) h.into.emplace(b.id, Tensor::view(b.dtype, b.shape, h.staging.get() + b.offset, nullptr));
  return h;
}

Tensor detach_from_staging(const std::vector<HostStep>& steps, const Tensor& t) {
  if (!t.defined() || !t.nbytes()) return t;
  for (auto& h : steps)
    if (h.staging.holds(t.raw(), t.nbytes())) return t.clone();
  return t;
}

void run_host_step(const HostStep& h, const HostSegments& host, std::vector<Tensor>& env, CUstream stream,
                   RunProfile* profile, const ValueObserver* observe) {
  const DriverApi& d = driver();
  Stopwatch sw;
  for (auto& b : h.to_host) {
    Tensor& t = env.at(static_cast<size_t>(b.id));
    if (t.defined()) continue;  // a model input the caller gave on the host
    uint8_t* staged = h.staging.get() + b.offset;
    t = Tensor::view(b.dtype, b.shape, staged, nullptr);
    if (b.bytes) check(d.cuMemcpyDtoHAsync(staged, b.addr, b.bytes, stream), "cuMemcpyDtoHAsync (to a host segment)");
  }
  check(d.cuStreamSynchronize(stream), "running the cuda program up to a host segment (cuStreamSynchronize)");
  if (observe) {
    static const std::map<ir::ValueId, Tensor> none;
    for (size_t i = h.first; i < h.first + h.count; ++i) {
      host.run(i, 1, env, none);
      for (auto id : h.outputs[i - h.first]) (*observe)(i, id, env.at(static_cast<size_t>(id)));
    }
  } else {
    host.run(h.first, h.count, env, h.into);
  }
  for (auto& b : h.to_device) {
    const Tensor& t = env.at(static_cast<size_t>(b.id));
    if (t.nbytes() != b.bytes || t.dtype() != b.dtype)
      fail(ErrorCode::internal, "a host segment produced {} bytes of {} for a value the device holds as {} bytes of {}",
           t.nbytes(), dtype_name(t.dtype()), b.bytes, dtype_name(b.dtype));
    if (!b.bytes) continue;
    // A kernel that did not write in place (a program output, an observed
    // run, an output set as a view of an input) is copied into the staging.
    uint8_t* staged = h.staging.get() + b.offset;
    if (t.raw() != staged) std::memcpy(staged, t.raw(), b.bytes);
    check(d.cuMemcpyHtoDAsync(b.addr, staged, b.bytes, stream), "cuMemcpyHtoDAsync (from a host segment)");
  }
  if (profile) {
    // Profiled runs wait for the copies back too, so that the entry holds
    // the whole boundary cost (a normal run overlaps nothing with them either:
    // the next device segment is ordered after them).
    check(d.cuStreamSynchronize(stream), "a host segment's copies back (cuStreamSynchronize)");
    profile->nodes.push_back({h.label, "host", sw.ms()});
  }
}

}  // namespace kiln::targets::cuda
