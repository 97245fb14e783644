// The kiln OrtEp: one per ORT session that selected a kiln device.
#pragma once
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ep_options.h"
#include "kiln/session.h"
#include "ort_abi.h"

namespace kiln::ort_ep {

/// A partition kiln compiled: the Session and how the fused node's inputs
/// and outputs map onto it.
struct Partition {
  std::string fused_name;
  std::unique_ptr<Session> session;
  std::vector<std::string> input_names;   ///< the fused node's inputs, in kernel-context order
  std::vector<bool> input_used;           ///< whether the kiln program takes that input
  std::vector<std::string> output_names;  ///< the fused node's outputs, in order
  std::map<std::string, DType> output_dtypes;  ///< each output's dtype in the program
  /// Every output's shape when the program is static and not bucketed (else
  /// empty: Compute asks Session::output_shapes per run).
  std::map<std::string, std::vector<int64_t>> static_shapes;
  bool copy_outputs = false;  ///< KILN_ORT_EP_COPY_OUTPUTS=1: always run() and copy (measurement aid)
  std::filesystem::path model;            ///< the partition's .onnx (kiln compiles it; specialisations later too)
  std::filesystem::path model_dir;        ///< a temporary folder holding it when there is no cache (removed at release)
  ~Partition();
};

/// OrtNodeComputeInfo with the partition it runs.
struct ComputeInfo : OrtNodeComputeInfo {
  std::shared_ptr<Partition> part;
};

struct KilnEp : OrtEp {
  EpOptions options;
  const OrtLogger* logger = nullptr;
  std::string compat_info;  ///< GetCompiledModelCompatibilityInfo's string (kept alive for ORT)
  KilnEp(EpOptions o, const OrtLogger* l);
};

/// Which nodes of `g` kiln claims, grouped so that each group can be fused
/// (no unclaimed node on a path between two of a group). Empty for nested
/// graphs (If / Loop / Scan bodies: kiln claims the node holding them).
std::vector<std::vector<const OrtNode*>> claim_groups(const OrtGraph* g, const EpOptions& o, const OrtLogger* logger);

/// Fills p.input_names / input_used / output_names from the fused node.
/// Throws Error(invalid_model) when the program lacks an output ORT expects.
void fill_io(Partition& p, const OrtNode* fused);

/// Compiles (or loads) one partition.
std::shared_ptr<Partition> compile_partition(KilnEp& ep, const OrtGraph* g, const OrtNode* fused, size_t count);

}  // namespace kiln::ort_ep
