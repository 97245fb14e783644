#include "op_test_util.h"

#include "ir/shape.h"

namespace kiln::testing {

std::vector<Tensor> run_op(const std::string& op_type, std::map<std::string, ir::AttrValue> attrs,
                           std::vector<Tensor> inputs, size_t num_outputs, int opset, const std::string& domain) {
  ir::Node node;
  node.op_type = op_type;
  node.domain = domain;
  node.name = "test_" + op_type;
  node.opset = opset;
  node.attrs = std::move(attrs);
  std::vector<ops::InType> in_types;
  std::vector<const Tensor*> in_ptrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    node.inputs.push_back(inputs[i].defined() ? static_cast<ir::ValueId>(i) : ir::kNoValue);
    ops::InType t;
    if (inputs[i].defined()) {
      t.dtype = inputs[i].dtype();
      t.shape = ir::static_shape(inputs[i].shape());
      t.value = &inputs[i];
    }
    in_types.push_back(t);
    in_ptrs.push_back(inputs[i].defined() ? &inputs[i] : nullptr);
  }
  for (size_t i = 0; i < num_outputs; ++i) node.outputs.push_back(static_cast<ir::ValueId>(100 + i));
  auto predicted = ops::infer(node, in_types);
  ops::KernelContext ctx(node, in_ptrs, nullptr);
  ops::run_kernel(ctx);
  std::vector<Tensor> out = ctx.outputs();
  EXPECT_EQ(predicted.size(), out.size()) << op_type << ": inference predicts another output count";
  for (size_t i = 0; i < std::min(predicted.size(), out.size()); ++i) {
    EXPECT_EQ(predicted[i].dtype, out[i].dtype()) << op_type << " output " << i << " dtype";
    if (predicted[i].shape && ir::is_static(*predicted[i].shape))
      EXPECT_EQ(ir::to_sizes(*predicted[i].shape), out[i].shape()) << op_type << " output " << i << " shape";
  }
  return out;
}

}  // namespace kiln::testing
