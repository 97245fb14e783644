// Per-operator-family ONNX parsers. The importer (importer.cpp) converts a
// NodeProto generically (inputs/outputs resolved to value ids, every attribute
// converted to ir::AttrValue); the family parser then validates the opset and
// attributes it supports and normalises version differences into one
// canonical IR form (documented at each parser), e.g. Squeeze-11's `axes`
// attribute becomes Squeeze-13's constant `axes` input.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace kiln::onnx_import {

/// What a parser may do besides editing the node.
class ParseContext {
 public:
  virtual ~ParseContext() = default;
  /// Adds a constant value (e.g. an attribute moved to an input) and returns its id.
  virtual ir::ValueId add_constant(const std::string& name_hint, Tensor t) = 0;
  /// The value behind an id (to read an initializer's data, dtype, shape).
  virtual const ir::Value& value(ir::ValueId id) const = 0;
};

/// Validates and normalises `node` in place. Throws Error(unsupported) naming
/// operator, domain, opset, node name and the attribute/value missing, or
/// Error(invalid_model) for a malformed node.
using ParseFn = void (*)(ir::Node& node, ParseContext& ctx);

struct ParserEntry {
  std::string domain;   ///< "" = default ONNX domain
  std::string op_type;
  int min_opset = 1;    ///< opsets outside [min_opset, max_opset] are unsupported
  int max_opset = 1000;
  ParseFn parse = nullptr;  ///< nullptr: nothing to normalise
};

class ParserRegistry {
 public:
  void add(ParserEntry e) { entries_.push_back(std::move(e)); }
  const ParserEntry* find(std::string_view domain, std::string_view op_type) const;

 private:
  std::vector<ParserEntry> entries_;
};

/// Every family's parsers (built once).
const ParserRegistry& parsers();

/// Throws Error(unsupported) "<node>: attribute 'a' = v is not supported (opset N)".
[[noreturn]] void unsupported_attr(const ir::Node& n, const std::string& attr, const std::string& value);

/// Moves an ints attribute into input slot `index` as an int64 constant
/// (no-op when the attribute is absent; the slot is filled with kNoValue padding).
void attr_to_input(ir::Node& n, ParseContext& ctx, const std::string& attr, size_t index);

// One function per family file (src/onnx/parsers/<family>.cpp), matching src/ops/.
void register_elementwise_unary_parsers(ParserRegistry&);
void register_elementwise_binary_parsers(ParserRegistry&);
void register_activation_parsers(ParserRegistry&);
void register_cast_parsers(ParserRegistry&);
void register_reduce_parsers(ParserRegistry&);
void register_softmax_parsers(ParserRegistry&);
void register_conv_parsers(ParserRegistry&);
void register_pool_parsers(ParserRegistry&);
void register_normalization_parsers(ParserRegistry&);
void register_matmul_parsers(ParserRegistry&);
void register_resize_parsers(ParserRegistry&);
void register_shape_ops_parsers(ParserRegistry&);
void register_gather_parsers(ParserRegistry&);
void register_generator_parsers(ParserRegistry&);
void register_control_flow_parsers(ParserRegistry&);
void register_recurrent_parsers(ParserRegistry&);
void register_quantize_parsers(ParserRegistry&);
void register_qlinear_parsers(ParserRegistry&);
void register_loss_parsers(ParserRegistry&);
void register_dropout_parsers(ParserRegistry&);
void register_grid_sample_parsers(ParserRegistry&);
void register_detection_parsers(ParserRegistry&);
void register_einsum_parsers(ParserRegistry&);
void register_selection_parsers(ParserRegistry&);
void register_misc_parsers(ParserRegistry&);
void register_signal_parsers(ParserRegistry&);
void register_spatial_parsers(ParserRegistry&);
void register_deform_conv_parsers(ParserRegistry&);
void register_tfidf_parsers(ParserRegistry&);
void register_dynamic_quantize_lstm_parsers(ParserRegistry&);  // com.microsoft

}  // namespace kiln::onnx_import
