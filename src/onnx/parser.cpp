#include "onnx/parser.h"

#include "support/error.h"

namespace kiln::onnx_import {

const ParserEntry* ParserRegistry::find(std::string_view domain, std::string_view op_type) const {
  if (domain == "ai.onnx") domain = "";
  for (auto& e : entries_)
    if (e.domain == domain && e.op_type == op_type) return &e;
  return nullptr;
}

const ParserRegistry& parsers() {
  static const ParserRegistry r = [] {
    ParserRegistry reg;
    register_elementwise_unary_parsers(reg);
    register_elementwise_binary_parsers(reg);
    register_activation_parsers(reg);
    register_cast_parsers(reg);
    register_reduce_parsers(reg);
    register_softmax_parsers(reg);
    register_conv_parsers(reg);
    register_pool_parsers(reg);
    register_normalization_parsers(reg);
    register_matmul_parsers(reg);
    register_resize_parsers(reg);
    register_shape_ops_parsers(reg);
    register_gather_parsers(reg);
    register_generator_parsers(reg);
    register_control_flow_parsers(reg);
    register_recurrent_parsers(reg);
    register_quantize_parsers(reg);
    register_qlinear_parsers(reg);
    register_loss_parsers(reg);
    register_dropout_parsers(reg);
    register_grid_sample_parsers(reg);
    register_detection_parsers(reg);
    register_einsum_parsers(reg);
    register_selection_parsers(reg);
    register_misc_parsers(reg);
    register_signal_parsers(reg);
    register_spatial_parsers(reg);
    register_deform_conv_parsers(reg);
    register_tfidf_parsers(reg);
    register_dynamic_quantize_lstm_parsers(reg);
    return reg;
  }();
  return r;
}

void unsupported_attr(const ir::Node& n, const std::string& attr, const std::string& value) {
  fail(ErrorCode::unsupported, "{}: attribute '{}' = {} is not supported (opset {})", n.label(), attr, value, n.opset);
}

void attr_to_input(ir::Node& n, ParseContext& ctx, const std::string& attr, size_t index) {
  if (!n.has(attr)) return;
  auto vals = n.ints(attr);
  Tensor t(DType::i64, {static_cast<int64_t>(vals.size())});
  for (size_t i = 0; i < vals.size(); ++i) t.data<int64_t>()[i] = vals[i];
  ir::ValueId id = ctx.add_constant(n.name + "_" + attr, t);
  if (n.inputs.size() <= index) n.inputs.resize(index + 1, ir::kNoValue);
  n.inputs[index] = id;
  n.attrs.erase(attr);
}

}  // namespace kiln::onnx_import
