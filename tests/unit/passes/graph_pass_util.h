// Helpers for the graph-pass tests: build a small model with ModelBuilder,
// import it, infer shapes, and look at the result.
#pragma once
#include <string>
#include <vector>

#include "../onnx/model_builder.h"
#include "ir/graph.h"

namespace kiln::testing {

/// Imports the builder's model and runs shape inference + constant folding.
ir::Model import_inferred(const ModelBuilder& b);

/// The op types of the main graph's nodes, in order.
std::vector<std::string> op_types(const ir::Model& m);

/// The main-graph node producing the value named `name` (nullptr when none).
const ir::Node* producer(const ir::Model& m, const std::string& name);

/// The value id named `name` (-1 when none).
ir::ValueId value_named(const ir::Model& m, const std::string& name);

/// The f32 data of a constant value.
std::vector<float> constant_floats(const ir::Model& m, ir::ValueId v);

/// Adds a float attribute to a node.
void attr_float(onnx::NodeProto& n, const std::string& name, float v);
/// Adds a string attribute to a node.
void attr_string(onnx::NodeProto& n, const std::string& name, const std::string& v);

}  // namespace kiln::testing
