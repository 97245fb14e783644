// Reading ORT's graph (OrtGraph / OrtNode / OrtValueInfo) into plain C++
// values, and turning a graph ORT hands to the EP into ONNX ModelProto bytes
// that kiln's one importer (src/onnx) reads like any .onnx file.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ort_abi.h"

namespace kiln::ort_ep {

/// Type of a tensor value: ONNX elem_type and dims (-1 where unknown;
/// `symbols` holds the dim_param or "" per dim). `known` false: ORT has no
/// type for the value (or it is not a tensor; then `tensor` is false too).
struct TensorType {
  bool known = false;
  bool tensor = true;
  int elem_type = 0;
  std::vector<int64_t> dims;
  std::vector<std::string> symbols;
  bool has_shape = false;
};

/// One node as kiln needs it. Inputs/outputs: "" for an omitted optional one.
struct NodeInfo {
  const OrtNode* node = nullptr;
  std::string name, op_type, domain;
  std::vector<std::string> inputs, outputs;
  std::vector<const OrtValueInfo*> input_infos, output_infos;
  size_t subgraphs = 0;  ///< GRAPH attributes (If / Loop / Scan bodies)
};

std::string value_name(const OrtValueInfo* v);
TensorType value_type(const OrtValueInfo* v);
NodeInfo node_info(const OrtNode* n);
std::vector<const OrtNode*> graph_nodes(const OrtGraph* g);
std::vector<const OrtValueInfo*> graph_inputs(const OrtGraph* g);
std::vector<const OrtValueInfo*> graph_outputs(const OrtGraph* g);
std::vector<const OrtValueInfo*> graph_initializers(const OrtGraph* g);
/// Opset imports of the model the graph belongs to: domain ("" = ONNX) -> version.
std::map<std::string, int64_t> graph_opsets(const OrtGraph* g);
/// The subgraphs of a node with the attribute name holding each.
std::vector<std::pair<std::string, const OrtGraph*>> node_subgraphs(const OrtNode* n);
/// Whether `g` is a nested graph (an If / Loop / Scan body).
bool is_subgraph(const OrtGraph* g);

/// Serialised ONNX ModelProto of `g`: its inputs (constant initializers
/// excluded), outputs, initializers with their data, nodes with every
/// attribute (subgraphs converted the same way), and the model's opset
/// imports. Throws Error(unsupported) naming the node / value / attribute
/// kiln cannot carry over (string tensors, sparse or non-tensor types).
std::string graph_to_model_bytes(const OrtGraph* g, const std::string& graph_name);

/// XXH3-128 hex of what graph_to_model_bytes would write (the graph and
/// every weight byte), computed without building the weights into a
/// message: hashing runs at memory speed, so a second session finds its
/// partition's .onnx (named by this) without serialising it again.
std::string partition_identity(const OrtGraph* g, const std::string& graph_name);

}  // namespace kiln::ort_ep
