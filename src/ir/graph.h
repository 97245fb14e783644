// The kiln IR: a model is a table of values plus a main graph whose nodes
// refer to values by index. Subgraphs (If/Loop/Scan bodies) share the model's
// value table, so a subgraph node can read an outer value by its index.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "ir/shape.h"
#include "kiln/tensor.h"

namespace kiln::ir {

using ValueId = int32_t;
constexpr ValueId kNoValue = -1;  ///< an omitted optional input/output (ONNX "")

/// A tensor-valued SSA value: name, dtype, shape (nullopt: unknown rank) and,
/// for initializers and folded constants, the constant data.
struct Value {
  std::string name;
  DType dtype = DType::undefined;
  std::optional<Shape> shape;
  std::optional<Tensor> constant;
};

struct Graph;

/// ONNX attribute payloads. Tensor attributes (Constant's value, ...) are
/// stored as Tensor; graph attributes as a shared subgraph.
using AttrValue = std::variant<int64_t, float, std::string, std::vector<int64_t>, std::vector<float>,
                               std::vector<std::string>, Tensor, std::shared_ptr<Graph>>;

/// One operator application. `opset` is the default-domain opset the model
/// imports (parsers have already normalised version differences, see onnx/).
struct Node {
  std::string op_type;
  std::string domain;  ///< "" for the default ONNX domain
  std::string name;
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  std::map<std::string, AttrValue> attrs;
  int opset = 0;

  bool has(const std::string& a) const { return attrs.count(a) != 0; }
  /// Typed attribute readers. Throw Error(invalid_model) naming the node and
  /// attribute when the attribute has another type, or is missing without a default.
  int64_t i(const std::string& a) const;
  int64_t i(const std::string& a, int64_t def) const;
  float f(const std::string& a, float def) const;
  float f(const std::string& a) const;
  std::string s(const std::string& a, const std::string& def) const;
  std::vector<int64_t> ints(const std::string& a, std::vector<int64_t> def = {}) const;
  std::vector<float> floats(const std::string& a, std::vector<float> def = {}) const;
  const Tensor& tensor(const std::string& a) const;
  const Graph& graph(const std::string& a) const;
  /// "Conv node 'conv1'" for messages.
  std::string label() const;
};

/// A graph: nodes in topological order, its inputs and outputs.
struct Graph {
  std::string name;
  std::vector<Node> nodes;
  std::vector<ValueId> inputs;   ///< for the main graph: inputs that are not initializers
  std::vector<ValueId> outputs;
};

/// A run of consecutive main-graph nodes on one device (heterogeneous
/// programs, DESIGN.md): a device target's program whose nodes are not all
/// lowered for the device is a sequence of segments tiling its main graph,
/// alternating between the device and the host. Values crossing a boundary
/// are copied; nothing else moves.
struct Segment {
  std::string device;              ///< "host", or the target's device ("cuda")
  size_t first = 0;                ///< index of its first main-graph node
  size_t count = 0;                ///< number of nodes (>= 1)
  /// Host segments: values computed on the device (or main-graph inputs)
  /// that its nodes read, subgraphs included: copied device -> host before it
  /// runs. Empty for device segments.
  std::vector<ValueId> to_host;
  /// Host segments: values its nodes produce that a later device node reads:
  /// copied host -> device after it runs. Empty for device segments.
  std::vector<ValueId> to_device;
};

/// A whole model.
struct Model {
  std::vector<Value> values;
  Graph main;
  int opset = 0;              ///< default-domain opset
  std::string producer;       ///< producer_name + version, for messages
  /// The device partition of a device target's program (Segment); empty:
  /// every node runs on the program's target (every ref / cpu program, and a
  /// cuda program without host fallback).
  std::vector<Segment> segments;

  ValueId add_value(Value v) {
    values.push_back(std::move(v));
    return static_cast<ValueId>(values.size() - 1);
  }
  Value& value(ValueId id) { return values.at(static_cast<size_t>(id)); }
  const Value& value(ValueId id) const { return values.at(static_cast<size_t>(id)); }
};

/// Whether an input or output of n has a static zero-sized dim (a batch of
/// 0, an empty sequence): the cpu target leaves such nodes to the reference
/// kernels (oneDNN divides by such dims while planning a primitive).
bool has_empty_tensor(const Model& m, const Node& n);

/// A copy of `m` whose subgraphs are copied too. A plain copy of a Model
/// shares its subgraphs (Node attributes hold shared_ptr<Graph>), so a pass
/// run on the copy (a probe) would rewrite the original's If / Loop bodies.
Model deep_copy(const Model& m);

/// Calls f(graph) for the main graph and every nested subgraph, outer first.
template <class F>
void for_each_graph(Graph& g, F&& f) {
  f(g);
  for (auto& n : g.nodes)
    for (auto& [k, a] : n.attrs)
      if (auto* sg = std::get_if<std::shared_ptr<Graph>>(&a)) for_each_graph(**sg, f);
}

/// Checks structural invariants: every used value id exists, each value is
/// produced once, nodes are in topological order (inputs defined before use,
/// with outer-scope values visible in subgraphs). Throws Error(invalid_model)
/// naming the node.
void verify(const Model& m);

/// The segments of main graph of `m` for a program of device `device`
/// ("cuda"): maximal runs of consecutive nodes for which `on_host` is true
/// become host segments, the rest device segments, with the copies each
/// host segment needs (Segment::to_host, to_device; a value the host already
/// holds, a constant or an earlier host segment's result, is not copied).
/// Empty when no node is on the host.
std::vector<Segment> partition_segments(const Model& m, const std::string& device,
                                        const std::function<bool(const Node&)>& on_host);

/// Checks m.segments against m (nothing when empty): they tile the main
/// graph in order, alternate between "host" and `device`, copy only from
/// host segments, and every copied value is what partition_segments would
/// copy (to_host: read in the segment and not produced by it; to_device:
/// produced by it). Throws Error(invalid_model) saying which segment is wrong.
void check_segments(const Model& m, const std::string& device);

/// Human-readable listing of the model (one node per line), for --dump and debugging.
std::string print(const Model& m);

}  // namespace kiln::ir
