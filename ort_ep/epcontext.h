// EPContext nodes: kiln's compiled partition stored in (embed_mode 1) or
// beside (embed_mode 0) an ONNX model that ORT writes with
// ep.context_enable=1, and read back by a later session without compiling.
#pragma once
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "ep.h"
#include "ort_graph.h"

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

/// The EPContext node of `g` when `g` is a kiln EPContext node alone (what
/// ORT hands to Compile for a node of an EPContext model); nullopt otherwise.
std::optional<EpContextNode> find_epcontext(const OrtGraph* g);

/// Whether a node is an EPContext node written by kiln (GetCapability claims those).
bool is_kiln_epcontext(const NodeInfo& n);

/// Loads an EPContext node's artifact, never compiling. Checks, before the
/// program: the kiln version (field 'kiln_version'), the format, the target
/// and machine (kiln's own check) and the precision option. Throws
/// Error(incompatible_artifact / corrupt_artifact / invalid_option) naming the field.
std::unique_ptr<Session> load_epcontext(const EpContextNode& ctx, const EpOptions& o, const OrtGraph* g);

/// Loads an explicit .kiln (load_model_path) with the same checks; `what` names the source in messages.
std::unique_ptr<Session> load_artifact(const std::filesystem::path& path, const EpOptions& o, const std::string& what);

/// The EPContext node for a compiled partition (ORT takes ownership).
OrtNode* make_epcontext_node(KilnEp& ep, const Partition& part, const OrtNode* fused);

/// kiln's compatibility string: "kiln=<version>;format=<N>;target=<t>;precision=<p>".
std::string compatibility_string(const EpOptions& o);

/// Judges a compatibility string against this kiln: "" when it can load it,
/// else the reason naming the field.
std::string compatibility_problem(const std::string& info);

}  // namespace kiln::ort_ep
