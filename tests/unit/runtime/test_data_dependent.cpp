// Data-dependent dims (runtime/data_dependent.h): which outputs have a size
// known only at run time, and the bound the model puts on each.
#include <gtest/gtest.h>

#include "../onnx/model_builder.h"
#include "onnx/importer.h"
#include "runtime/data_dependent.h"

namespace kiln::testing {
namespace {

ir::Model imported(const ModelBuilder& b) {
  TempDir dir;
  b.save(dir / "m.onnx");
  return onnx_import::import_file(dir / "m.onnx");
}

TEST(DataDependentDims, NmsNonZeroAndTopKWithATensorK) {
  ModelBuilder b(17);
  b.input("boxes", 1, {1, 10, 4}).input("scores", 1, {1, 3, 10}).input("x", 1, {2, 3}).input("k", 7, {1});
  b.initializer_i64("max_out", {1}, {4});
  b.node("NonMaxSuppression", {"boxes", "scores", "max_out"}, {"selected"}, "nms");
  b.node("NonZero", {"x"}, {"nz"}, "nz");
  ModelBuilder::attr_int(b.node("TopK", {"x", "k"}, {"values", "indices"}, "topk"), "axis", 1);
  b.output("selected").output("nz").output("values").output("indices");
  auto dims = data_dependent_dims(imported(b));
  ASSERT_EQ(dims.size(), 4u);
  // NonMaxSuppression: 1 batch x 3 classes x 4 (max_output_boxes_per_class), rows of selected_indices.
  EXPECT_EQ(dims[0].op, "NonMaxSuppression");
  EXPECT_EQ(dims[0].axis, 0);
  EXPECT_EQ(dims[0].max, 12);
  EXPECT_NE(dims[0].bound.find("max_output_boxes_per_class"), std::string::npos) << dims[0].bound;
  // NonZero: [rank, count], the count at most the 6 elements.
  EXPECT_EQ(dims[1].op, "NonZero");
  EXPECT_EQ(dims[1].axis, 1);
  EXPECT_EQ(dims[1].max, 6);
  // TopK with K from an input: at most the 3 entries of axis 1, for both outputs.
  EXPECT_EQ(dims[2].value, "values");
  EXPECT_EQ(dims[2].axis, 1);
  EXPECT_EQ(dims[2].max, 3);
  EXPECT_EQ(dims[3].value, "indices");
}

TEST(DataDependentDims, AConstantKAndFewerBoxesThanTheMaximum) {
  ModelBuilder b(17);
  b.input("boxes", 1, {1, 2, 4}).input("scores", 1, {1, 3, 2}).input("x", 1, {2, 3});
  b.initializer_i64("max_out", {1}, {100}).initializer_i64("k", {1}, {2});
  b.node("NonMaxSuppression", {"boxes", "scores", "max_out"}, {"selected"}, "nms");
  ModelBuilder::attr_int(b.node("TopK", {"x", "k"}, {"values", "indices"}, "topk"), "axis", 1);
  b.output("selected").output("values").output("indices");
  auto dims = data_dependent_dims(imported(b));
  ASSERT_EQ(dims.size(), 1u);  // TopK's K folds to 2: its outputs are [2, 2]
  EXPECT_EQ(dims[0].max, 6);   // 1 x 3 x 2 boxes (fewer than 100)
  EXPECT_NE(dims[0].bound.find("(boxes)"), std::string::npos) << dims[0].bound;
}

TEST(DataDependentDims, AModelWithoutThemHasNone) {
  ModelBuilder b(17);
  b.input("x", 1, {-1, 3}, "batch");
  b.node("Relu", {"x"}, {"y"});
  b.output("y");
  EXPECT_TRUE(data_dependent_dims(imported(b)).empty());
}

}  // namespace
}  // namespace kiln::testing
