// The 16-bit share of a 16-bit cuda program as kiln reports it (compile
// notes, the artifact's metadata JSON "precision_share", `kiln inspect`):
// targets::PrecisionShare made text and JSON (docs/cuda.md, "Which nodes are
// 16-bit").
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "targets/pipeline.h"

namespace kiln {

/// The 16-bit share of a 16-bit cuda program (targets::PrecisionShare) as
/// stored in the artifact's metadata JSON ("precision_share"): precision,
/// float_nodes, nodes_16bit, share (nodes_16bit / float_nodes; 1 when there
/// is no float node), clamped_constants, fp32: [{node, op, why}].
nlohmann::json precision_share_json(const targets::PrecisionShare& s, const std::string& precision);

/// One line for notes: "16-bit share (fp16): N of M float nodes store their
/// values in 16 bits (P %)", then how many stay float32 and the first few
/// with why, and the clamped constants.
std::string precision_share_note(const targets::PrecisionShare& s, const std::string& precision);

}  // namespace kiln
