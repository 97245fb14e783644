// Device partition of a program's main graph (graph.h: Segment).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <set>

#include "ir/graph.h"
#include "support/error.h"

namespace kiln::ir {

namespace {

/// Calls f(v) for every value node `n` reads, including the values read by
/// the nodes (and outputs) of its subgraphs, in order, possibly repeated.
template <class F>
void each_read(const Node& n, F&& f) {
  for (auto v : n.inputs)
    if (v != kNoValue) f(v);
  for (auto& [k, a] : n.attrs)
    if (auto* sg = std::get_if<std::shared_ptr<Graph>>(&a))
      for_each_graph(**sg, [&](Graph& g) {
        for (auto& inner : g.nodes)
          for (auto v : inner.inputs)
            if (v != kNoValue) f(v);
        for (auto v : g.outputs)
          if (v != kNoValue) f(v);
      });
}

/// The copies of host segment `s` given which nodes are on the host.
void fill_copies(const Model& m, Segment& s, const std::vector<bool>& host) {
  const auto& nodes = m.main.nodes;
  std::vector<int> producer(m.values.size(), -1);
  for (size_t i = 0; i < nodes.size(); ++i)
    for (auto v : nodes[i].outputs)
      if (v != kNoValue) producer[static_cast<size_t>(v)] = static_cast<int>(i);
  std::vector<bool> is_input(m.values.size(), false);
  for (auto v : m.main.inputs) is_input[static_cast<size_t>(v)] = true;
  std::set<ValueId> seen;
  for (size_t i = s.first; i < s.first + s.count; ++i)
    each_read(nodes[i], [&](ValueId v) {
      const size_t id = static_cast<size_t>(v);
      if (id >= m.values.size() || m.values[id].constant) return;
      // On the device: a main-graph input (device programs take their inputs
      // there) or the result of a device node. Values of earlier host
      // segments stay on the host; subgraph-local values have no producer here.
      const bool on_device = is_input[id] || (producer[id] >= 0 && !host[static_cast<size_t>(producer[id])]);
      if (on_device && seen.insert(v).second) s.to_host.push_back(v);
    });
  std::set<ValueId> produced, sent;
  for (size_t i = s.first; i < s.first + s.count; ++i)
    for (auto v : nodes[i].outputs)
      if (v != kNoValue) produced.insert(v);
  for (size_t i = s.first + s.count; i < nodes.size(); ++i) {
    if (host[i]) continue;
    each_read(nodes[i], [&](ValueId v) {
      if (produced.count(v) && sent.insert(v).second) s.to_device.push_back(v);
    });
  }
}

std::vector<Segment> partition_from(const Model& m, const std::string& device, const std::vector<bool>& host) {
  std::vector<Segment> out;
  bool any = false;
  for (bool h : host) any |= h;
  if (!any) return out;
  const auto& nodes = m.main.nodes;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const std::string dev = host[i] ? "host" : device;
    if (out.empty() || out.back().device != dev) out.push_back(Segment{dev, i, 0, {}, {}});
    ++out.back().count;
  }
  for (auto& s : out)
    if (s.device == "host") fill_copies(m, s, host);
  return out;
}

}  // namespace

std::vector<Segment> partition_segments(const Model& m, const std::string& device,
                                        const std::function<bool(const Node&)>& on_host) {
  std::vector<bool> host(m.main.nodes.size(), false);
  for (size_t i = 0; i < host.size(); ++i) host[i] = on_host(m.main.nodes[i]);
  return partition_from(m, device, host);
}

void check_segments(const Model& m, const std::string& device) {
  if (m.segments.empty()) return;
  const size_t n = m.main.nodes.size();
  std::vector<bool> host(n, false);
  size_t next = 0;
  for (size_t k = 0; k < m.segments.size(); ++k) {
    const Segment& s = m.segments[k];
    if (s.device != "host" && s.device != device)
      fail(ErrorCode::invalid_model, "segment {}: device '{}' (a {} program has segments on 'host' and '{}')", k,
           s.device, device, device);
    if (k && s.device == m.segments[k - 1].device)
      fail(ErrorCode::invalid_model, "segment {}: follows another segment on '{}' (segments alternate)", k, s.device);
    if (s.first != next || s.count == 0 || s.count > n - next)
      fail(ErrorCode::invalid_model, "segment {}: nodes [{}, +{}) do not continue the previous segment at node {} of {}",
           k, s.first, s.count, next, n);
    if (s.device != "host" && (!s.to_host.empty() || !s.to_device.empty()))
      fail(ErrorCode::invalid_model, "segment {}: a '{}' segment with copies (only host segments copy)", k, s.device);
    for (size_t i = s.first; i < s.first + s.count; ++i) host[i] = s.device == "host";
    next = s.first + s.count;
  }
  if (next != n) fail(ErrorCode::invalid_model, "segments cover {} of the {} main-graph nodes", next, n);
  const std::vector<Segment> want = partition_from(m, device, host);
  for (size_t k = 0; k < want.size(); ++k) {
    const Segment& s = m.segments[k];
    if (s.to_host != want[k].to_host)
      fail(ErrorCode::invalid_model, "segment {}: copies to the host [{}], the nodes read [{}] from the device", k,
           fmt::join(s.to_host, ","), fmt::join(want[k].to_host, ","));
    if (s.to_device != want[k].to_device)
      fail(ErrorCode::invalid_model, "segment {}: copies to the device [{}], later device nodes read [{}] from it", k,
           fmt::join(s.to_device, ","), fmt::join(want[k].to_device, ","));
  }
}

}  // namespace kiln::ir
