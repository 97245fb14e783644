// The EPContext reader's pure part (no ORT calls): the attributes of a kiln
// EPContext node, and the checks of its artifact's compatibility block that
// come before any program is loaded. fuzz/fuzz_epcontext_reader.cpp feeds it.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "artifact/artifact.h"

namespace kiln::ort_ep {

/// The attributes of a com.microsoft EPContext node that kiln reads.
struct EpContextNode {
  std::string name;
  int64_t main_context = 1;
  int64_t embed_mode = 1;      ///< 1: `cache` is the .kiln bytes; 0: a path relative to the model's folder
  std::string cache;           ///< ep_cache_context
  std::string source;          ///< the EP that wrote it (kEpName)
  std::string sdk_version;     ///< ep_sdk_version: the kiln version that wrote it
};

/// Checks the attributes of an EPContext node (as name -> INT / STRING
/// values) and returns them. Throws Error(invalid_model) naming the node and
/// the attribute that is missing, of the wrong kind or out of range. Pure
/// (no ORT): the fuzz target's entry.
EpContextNode parse_epcontext(const std::string& node_name, const std::map<std::string, int64_t>& ints,
                              const std::map<std::string, std::string>& strings);

/// The checks of an artifact's compatibility block that the EP makes before
/// loading it: the kiln version (field 'kiln_version'), and, when the
/// precision option was given (`want_precision` not empty), the precision.
/// Throws Error(incompatible_artifact) / Error(invalid_option) naming the
/// field; `what` names the artifact's source in the message.
void check_compat_fields(const artifact::CompatInfo& c, const std::string& want_precision, const std::string& what);

}  // namespace kiln::ort_ep
