// The 16-bit share as notes and JSON (precision_share.h).
#include "runtime/precision_share.h"

#include <fmt/format.h>

namespace kiln {

nlohmann::json precision_share_json(const targets::PrecisionShare& s, const std::string& precision) {
  nlohmann::json f = nlohmann::json::array();
  for (auto& n : s.fp32) f.push_back({{"node", n.node}, {"op", n.op}, {"why", n.why}});
  return {{"precision", precision},
          {"float_nodes", s.float_nodes},
          {"nodes_16bit", s.nodes_16bit},
          {"share", s.float_nodes ? static_cast<double>(s.nodes_16bit) / s.float_nodes : 1.0},
          {"clamped_constants", s.clamped_constants},
          {"fp32", f}};
}

std::string precision_share_note(const targets::PrecisionShare& s, const std::string& precision) {
  const double pct = s.float_nodes ? 100.0 * s.nodes_16bit / s.float_nodes : 100.0;
  std::string t = fmt::format("16-bit share ({}): {} of {} float nodes store their values in 16 bits ({:.1f} %)",
                              precision, s.nodes_16bit, s.float_nodes, pct);
  if (!s.fp32.empty()) {
    std::string list;
    for (size_t i = 0; i < s.fp32.size() && i < 3; ++i)
      list += fmt::format("{}{} ({}): {}", i ? "; " : "", s.fp32[i].node, s.fp32[i].op, s.fp32[i].why);
    if (s.fp32.size() > 3) list += fmt::format("; ... ({} more)", s.fp32.size() - 3);
    t += fmt::format("; {} float32: {} (`kiln inspect` lists each)", s.fp32.size(), list);
  }
  if (s.clamped_constants)
    t += fmt::format("; {} constant(s) with finite values beyond the {} range clamped to it", s.clamped_constants,
                     precision);
  return t;
}

}  // namespace kiln
