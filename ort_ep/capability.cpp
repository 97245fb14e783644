// GetCapability: which nodes kiln takes, in fusable groups.
#include <fmt/format.h>

#include <map>
#include <set>

#include "ep.h"
#include "epcontext.h"
#include "onnx/importer.h"
#include "onnx/parser.h"
#include "ort_graph.h"
#include "ort_util.h"

namespace kiln::ort_ep {

namespace {

/// Operators whose work grows beyond their output's size and that the cpu
/// target has no kernel of its own for: kiln would run them on its
/// reference kernels (plain loops), where ORT's CPU EP is faster. Declined
/// unless `reference_nodes=claim`. Cheap ones (shape arithmetic, data
/// movement, small element-wise) are taken: they fold at compile time or
/// cost little, and declining them would cut the graph into pieces.
const std::set<std::string> kReferenceOnlyHeavy = {
    "ConvTranspose", "ConvInteger", "MatMulInteger", "QLinearConv", "QLinearMatMul", "LSTM", "GRU", "RNN",
    "Einsum", "NonMaxSuppression", "RoiAlign", "GridSample", "DeformConv", "STFT", "DFT", "TopK",
    "Loop", "Scan", "TfIdfVectorizer", "LpPool", "MaxRoiPool", "MaxUnpool",
    "DynamicQuantizeLSTM",  // com.microsoft
};

/// Element types kiln's importer takes from ORT tensors.
bool supported_elem(int et) {
  switch (et) {
    case 1: case 2: case 3: case 4: case 5: case 6: case 7: case 9: case 10: case 11: case 12: case 13: case 16:
      return true;
    default:
      return false;
  }
}

/// Why kiln declines `n` ("" when it takes it).
std::string decline_reason(const NodeInfo& n, const std::map<std::string, int64_t>& opsets, const EpOptions& o) {
  if (is_kiln_epcontext(n)) return "";
  auto it = opsets.find(n.domain);
  int64_t opset = it == opsets.end() ? 0 : it->second;
  const auto* p = onnx_import::parsers().find(n.domain, n.op_type);
  if (!p) return fmt::format("kiln has no operator {}{}", n.domain.empty() ? "" : n.domain + "::", n.op_type);
  if (opset < p->min_opset || opset > p->max_opset ||
      (n.domain.empty() && (opset < onnx_import::kMinOpset || opset > onnx_import::kMaxOpset)))
    return fmt::format("opset {} of {} is outside what kiln takes", opset, n.op_type);
  if (!o.claim_reference && kReferenceOnlyHeavy.count(n.op_type))
    return fmt::format("{} runs on kiln's reference kernels on this device (ORT's CPU EP is faster; "
                       "reference_nodes=claim takes it anyway)", n.op_type);
  for (auto* v : n.input_infos)
    if (v) {
      TensorType t = value_type(v);
      if (t.known && (!t.tensor || !supported_elem(t.elem_type)))
        return fmt::format("input '{}' has a type kiln does not take", value_name(v));
    }
  for (auto* v : n.output_infos)
    if (v) {
      TensorType t = value_type(v);
      if (t.known && (!t.tensor || !supported_elem(t.elem_type)))
        return fmt::format("output '{}' has a type kiln does not take", value_name(v));
    }
  // ORT 1.24.4 leaves the outer-scope values a subgraph reads out of the
  // fused node's inputs (1.31.1 and 1.32.0 pass them; 1.25 to 1.30 not
  // checked, taken as 1.24), so a partition could not be given them: such a
  // node stays with ORT there.
  if (g_ort_version < 1031 && n.subgraphs > 0) {
    size_t implicit = 0;
    check(ORT_API(Node_GetNumImplicitInputs)(n.node, &implicit), "Node_GetNumImplicitInputs");
    if (implicit > 0)
      return fmt::format("its subgraphs read {} outer-scope value(s), which ONNX Runtime {}.{} does not pass to a "
                         "fused node", implicit, g_ort_version / 1000, g_ort_version % 1000);
  }
  // A node holding subgraphs is taken only when kiln takes every node inside.
  for (auto& [attr, sub] : node_subgraphs(n.node))
    for (auto* inner : graph_nodes(sub)) {
      std::string why = decline_reason(node_info(inner), opsets, o);
      if (!why.empty()) return fmt::format("its subgraph '{}' holds a node kiln declines: {}", attr, why);
    }
  return "";
}

}  // namespace

std::vector<std::vector<const OrtNode*>> claim_groups(const OrtGraph* g, const EpOptions& o, const OrtLogger* logger) {
  if (is_subgraph(g)) return {};
  auto opsets = graph_opsets(g);
  std::vector<NodeInfo> nodes;
  for (auto* n : graph_nodes(g)) nodes.push_back(node_info(n));
  const size_t n = nodes.size();
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < n; ++i)
    for (auto& out : nodes[i].outputs)
      if (!out.empty()) producer[out] = i;
  // Topological order (Kahn) over the edges inside this graph.
  std::vector<std::vector<size_t>> preds(n), succs(n);
  for (size_t i = 0; i < n; ++i)
    for (auto& in : nodes[i].inputs)
      if (auto it = producer.find(in); !in.empty() && it != producer.end()) {
        preds[i].push_back(it->second);
        succs[it->second].push_back(i);
      }
  std::vector<size_t> order, indeg(n);
  for (size_t i = 0; i < n; ++i) indeg[i] = preds[i].size();
  for (size_t i = 0; i < n; ++i)
    if (!indeg[i]) order.push_back(i);
  for (size_t k = 0; k < order.size(); ++k)
    for (size_t s : succs[order[k]])
      if (--indeg[s] == 0) order.push_back(s);
  std::vector<bool> ok(n);
  size_t declined = 0;
  for (size_t i = 0; i < n; ++i) {
    std::string why = decline_reason(nodes[i], opsets, o);
    ok[i] = why.empty();
    if (!ok[i]) {
      ++declined;
      log_to(logger, ORT_LOGGING_LEVEL_INFO,
             fmt::format("kiln declines node '{}' ({}): {}", nodes[i].name, nodes[i].op_type, why));
    }
  }
  // Group by the set of declined nodes upstream: two claimed nodes with the
  // same set have no declined node between them, so each group is convex.
  std::vector<std::set<size_t>> upstream(n);
  for (size_t i : order)
    for (size_t p : preds[i]) {
      upstream[i].insert(upstream[p].begin(), upstream[p].end());
      if (!ok[p]) upstream[i].insert(p);
    }
  std::map<std::set<size_t>, std::vector<const OrtNode*>> groups;
  std::vector<std::vector<const OrtNode*>> out;
  for (size_t i : order) {
    if (!ok[i]) continue;
    if (is_kiln_epcontext(nodes[i]))
      out.push_back({nodes[i].node});  // each compiled partition is loaded by itself
    else
      groups[upstream[i]].push_back(nodes[i].node);
  }
  for (auto& [key, g2] : groups) out.push_back(std::move(g2));
  log_to(logger, ORT_LOGGING_LEVEL_INFO,
         fmt::format("kiln claims {} of {} nodes in {} partition(s)", n - declined, n, out.size()));
  return out;
}

}  // namespace kiln::ort_ep
