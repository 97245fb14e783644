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
#include "epcontext_reader.h"
#include "ort_graph.h"

namespace kiln::ort_ep {

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
