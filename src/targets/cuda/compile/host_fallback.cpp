// Host fallback of the cuda lowering (lowering.h): which nodes cannot be
// lowered, undoing a refused attempt, and the refusal when fallback is off.
#include <fmt/format.h>

#include <string_view>

#include "support/error.h"
#include "support/log.h"
#include "targets/cuda/compile/lowering.h"

namespace kiln::targets::cuda {

std::string host_only_reason(const Lowering& L, const ir::Node& n) {
  // If, Loop and Scan are tried as conditional nodes (lower_if, lower_loop);
  // with those off they run on the host.
  const bool control = n.domain.empty() && (n.op_type == "If" || n.op_type == "Loop" || n.op_type == "Scan");
  const bool conditional = control && conditional_nodes_enabled();
  for (auto& [k, a] : n.attrs)
    if (std::holds_alternative<std::shared_ptr<ir::Graph>>(a) && !conditional)
      return control ? fmt::format("conditional nodes are off (KILN_CUDA_CONDITIONAL=0): {} runs on the host", n.op_type)
                     : fmt::format("{} has a subgraph the cuda target does not lower", n.op_type);
  auto dynamic = [&](ir::ValueId v) {
    if (v == ir::kNoValue) return false;
    const ir::Value& val = L.model.value(v);
    return !val.shape || !ir::is_static(*val.shape);
  };
  for (auto v : n.inputs)
    if (dynamic(v))
      return fmt::format("input '{}' has shape {}; the cuda target needs static shapes", L.model.value(v).name,
                         ir::shape_str(L.model.value(v).shape));
  // lower_loop gives a Loop's / Scan's outputs their shapes (inference
  // leaves them open), or refuses it naming why.
  const bool loop = conditional && n.op_type != "If";
  for (auto v : n.outputs)
    if (!loop && dynamic(v))
      return fmt::format("output '{}' has shape {} (its size depends on tensor values); the cuda target needs static "
                         "shapes",
                         L.model.value(v).name, ir::shape_str(L.model.value(v).shape));
  return {};
}

bool try_lower(Lowering& L, std::string& why, const std::function<void()>& lower) {
  const size_t source = L.source.size(), values = L.model.values.size();
  const int next_kernel = L.next_kernel;
  try {
    lower();
    return true;
  } catch (const Error& e) {
    // Only a refusal of the node (refuse(): "... cannot be compiled for
    // target cuda: ...") sends it to the host; a device or library error
    // (no GPU for timed tuning, a driver failure) stays an error.
    if (e.code() != ErrorCode::unsupported ||
        std::string_view(e.what()).find("cannot be compiled for target cuda") == std::string_view::npos)
      throw;
    // A refusal may come after a generator appended part of its kernel or
    // added values: none of it is referenced by the program, but a partial
    // kernel would not compile.
    L.source.resize(source);
    L.next_kernel = next_kernel;
    L.model.values.resize(values);
    why = e.what();
    return false;
  }
}

void refuse_host_nodes(const std::vector<ir::Node>& nodes, const std::map<int, std::string>& reasons) {
  std::string list;
  for (auto& [i, why] : reasons) {
    const ir::Node& n = nodes.at(static_cast<size_t>(i));
    // A refusal from the lowering already names the node and "cuda".
    std::string text = why.find(n.label()) != std::string::npos
                           ? why
                           : fmt::format("{} (op_type {}): {}", n.label(), n.op_type, why);
    list += (list.empty() ? "" : "; ") + text;
  }
  fail(ErrorCode::unsupported,
       "{} node(s) cannot be compiled for target cuda and host fallback is off (--fallback error): {}", reasons.size(),
       list);
}

void report_host_nodes(const ir::Model& m, const std::map<int, std::string>& reasons,
                       const std::vector<ir::Node>& nodes, LowerStats& st) {
  st.host_nodes = static_cast<int>(reasons.size());
  st.host_segments = 0;
  size_t copies = 0;
  for (auto& s : m.segments)
    if (s.device == "host") ++st.host_segments, copies += s.to_host.size() + s.to_device.size();
  if (reasons.empty()) return;
  std::string list;
  for (auto& [i, why] : reasons) list += fmt::format("\n  {}: {}", nodes.at(static_cast<size_t>(i)).label(), why);
  log().info("cuda: {} node(s) run on the host in {} host segment(s) with {} boundary copies:{}", reasons.size(),
             st.host_segments, copies, list);
}

}  // namespace kiln::targets::cuda
