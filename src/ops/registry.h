// Operator registry: for each (domain, op_type) a shape-inference function and
// a reference kernel. The reference kernels are the correctness oracle of every
// target (ONNX operator semantics: https://onnx.ai/onnx/operators/).
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "kiln/tensor.h"

namespace kiln::ops {

/// What shape inference knows about one node input.
struct InType {
  DType dtype = DType::undefined;       ///< undefined: the optional input is absent
  std::optional<ir::Shape> shape;       ///< nullopt: unknown rank
  const Tensor* value = nullptr;        ///< the data, when the input is a constant
  bool present() const { return dtype != DType::undefined; }
};

/// What shape inference derives for one node output. Unknown dims may be
/// left symbolic (Dim::sym("")) and unknown rank as nullopt; the runtime then
/// allocates that value at run time instead of in the static arena.
struct OutType {
  DType dtype = DType::undefined;
  std::optional<ir::Shape> shape;
};

struct InferContext {
  const ir::Node& node;
  std::vector<InType> inputs;  ///< same order as node.inputs (absent ones included)
  size_t num_outputs;          ///< node.outputs.size()
  size_t num_inputs() const { return inputs.size(); }
  bool has(size_t i) const { return i < inputs.size() && inputs[i].present(); }
  const InType& in(size_t i) const;  ///< throws Error(invalid_model) naming the node if absent
};

/// Returns one OutType per node output. Throws Error(invalid_model) for
/// inconsistent shapes/dtypes, Error(unsupported) for a dtype or attribute
/// value the kernel does not implement; messages start with node.label().
using InferFn = std::vector<OutType> (*)(const InferContext&);

/// Runs a subgraph (If/Loop/Scan body) with the given graph inputs; returns its outputs.
using SubgraphRunner = std::function<std::vector<Tensor>(const ir::Graph&, const std::vector<Tensor>&)>;

/// Everything a reference kernel sees. Kernels never alias an input in an
/// output: they allocate each output with output() and write into it.
class KernelContext {
 public:
  using Allocator = std::function<Tensor(size_t output_index, DType, const std::vector<int64_t>&)>;
  KernelContext(const ir::Node& node, std::vector<const Tensor*> inputs, Allocator alloc,
                SubgraphRunner subgraphs = {})
      : node(node), inputs_(std::move(inputs)), outputs_(node.outputs.size()), alloc_(std::move(alloc)),
        subgraphs_(std::move(subgraphs)) {}

  const ir::Node& node;
  size_t num_inputs() const { return inputs_.size(); }
  bool has(size_t i) const { return i < inputs_.size() && inputs_[i] != nullptr; }
  /// Input i; throws Error(invalid_model) naming the node when it is absent.
  const Tensor& in(size_t i) const;
  size_t num_outputs() const { return outputs_.size(); }
  /// Allocates output i (contents unspecified, may be a reused arena slot) and returns it.
  Tensor& output(size_t i, DType dtype, const std::vector<int64_t>& shape);
  /// Sets output i to a tensor built elsewhere (copied into the planned slot when there is one).
  void set_output(size_t i, const Tensor& t);
  std::vector<Tensor>& outputs() { return outputs_; }
  /// Runs a subgraph; throws Error(internal) when no runner was given.
  std::vector<Tensor> run_subgraph(const ir::Graph& g, const std::vector<Tensor>& inputs) const;

 private:
  std::vector<const Tensor*> inputs_;
  std::vector<Tensor> outputs_;
  Allocator alloc_;
  SubgraphRunner subgraphs_;
};

/// Computes all outputs of node from its inputs. Throws Error(invalid_input)
/// for run-time shape/value problems (e.g. a Reshape that does not fit),
/// Error(unsupported) for an unimplemented dtype.
using KernelFn = void (*)(KernelContext&);

struct OpInfo {
  std::string domain;   ///< "" = default ONNX domain
  std::string op_type;
  InferFn infer = nullptr;
  KernelFn kernel = nullptr;
};

class Registry {
 public:
  void add(OpInfo info);
  const OpInfo* find(std::string_view domain, std::string_view op_type) const;
  std::vector<std::string> names() const;  ///< "Conv", "com.microsoft.Foo", sorted

 private:
  std::vector<OpInfo> ops_;
};

/// The registry with every operator family registered (built once, thread-safe).
const Registry& registry();

/// Runs shape inference for a node; throws Error(unsupported) naming the
/// operator, domain and opset when it is not registered.
std::vector<OutType> infer(const ir::Node& node, std::vector<InType> inputs);

/// Runs the reference kernel of a node (looked up in registry()).
void run_kernel(KernelContext& ctx);

// One function per operator family file (src/ops/<family>.cpp).
void register_elementwise_unary(Registry&);
void register_elementwise_binary(Registry&);
void register_activation(Registry&);
void register_cast(Registry&);
void register_reduce(Registry&);
void register_softmax(Registry&);
void register_conv(Registry&);
void register_pool(Registry&);
void register_normalization(Registry&);
void register_matmul(Registry&);
void register_resize(Registry&);
void register_shape_ops(Registry&);
void register_pad(Registry&);
void register_space_depth(Registry&);
void register_gather(Registry&);
void register_generator(Registry&);
void register_control_flow(Registry&);
void register_recurrent(Registry&);
void register_quantize(Registry&);
void register_qlinear(Registry&);
void register_loss(Registry&);
void register_dropout(Registry&);
void register_grid_sample(Registry&);
void register_detection(Registry&);
void register_einsum(Registry&);
void register_selection(Registry&);
void register_misc(Registry&);
void register_signal(Registry&);
void register_spatial(Registry&);
void register_deform_conv(Registry&);
void register_tfidf(Registry&);
void register_dynamic_quantize_lstm(Registry&);  // com.microsoft

}  // namespace kiln::ops
