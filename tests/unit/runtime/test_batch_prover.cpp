// The batch prover (runtime/batch_prover.h): the symbolic rules, and the same
// rules decided after the shape arithmetic is folded (exporters' Shape ->
// Gather -> Concat -> Reshape chains), never at the price of a wrong padding.
#include <gtest/gtest.h>

#include "../onnx/model_builder.h"
#include "kiln/session.h"
#include "onnx/importer.h"
#include "passes/passes.h"
#include "runtime/batch_prover.h"
#include "runtime/session_internal.h"

namespace kiln::testing {
namespace {

/// x[B,6,4] -> Reshape to [Shape(x)[gather_index], -1] (the exporter's
/// Shape -> Gather -> Unsqueeze -> Concat chain) -> ReduceSum over axis 1 ->
/// y[B,1]. gather_index 0 keeps the batch at axis 0 (row-wise); 1 makes the
/// target [6, -1], which merges the batch into axis 1.
ModelBuilder reshape_chain(int64_t gather_index) {
  ModelBuilder b;
  b.input("x", 1, {-1, 6, 4}, "N");  // the output is declared [N,1] too
  b.initializer_i64("idx", {}, {gather_index}).initializer_i64("minus1", {1}, {-1}).initializer_i64("zero", {1}, {0});
  b.node("Shape", {"x"}, {"shape"});
  auto& g = b.node("Gather", {"shape", "idx"}, {"first"});
  ModelBuilder::attr_int(g, "axis", 0);
  b.node("Unsqueeze", {"first", "zero"}, {"first1"});
  auto& c = b.node("Concat", {"first1", "minus1"}, {"target"});
  ModelBuilder::attr_int(c, "axis", 0);
  b.node("Reshape", {"x", "target"}, {"flat"});
  b.initializer_i64("axes", {1}, {1});
  b.node("ReduceSum", {"flat", "axes"}, {"y"});
  b.output("y", 1, {-1, 1});
  return b;
}

ir::Model imported(const ModelBuilder& b, const TempDir& dir) {
  auto path = dir / "m.onnx";
  b.save(path);
  return onnx_import::import_file(path);
}

std::optional<ir::Model> inferred(const ir::Model& m) {
  ir::Model probe = m;
  passes::infer_and_fold(probe, 0);
  return probe;
}

TEST(BatchProver, FoldedShapeArithmeticKeepingTheBatchIsRowWise) {
  TempDir dir;
  ir::Model m = imported(reshape_chain(0), dir);
  // The symbolic rules stop at Shape (it reads the batch)...
  EXPECT_FALSE(batch_rows_independent(inferred(m), "N"));
  // ...after folding, the Reshape target is [N, -1]: rows stay apart.
  EXPECT_TRUE(batch_rows_independent_bound(m, "N", {"N"}));
}

TEST(BatchProver, AReshapeThatMovesTheBatchIsNot) {
  TempDir dir;
  // Target [6, -1]: the batch is merged into axis 1.
  ir::Model m = imported(reshape_chain(1), dir);
  EXPECT_FALSE(batch_rows_independent_bound(m, "N", {"N"}));
}

TEST(BatchProver, TheBatchSizeAsAnOutputOrAsDataIsNot) {
  TempDir dir;
  {
    // y = Shape(x): padding would report the bucket's size.
    ModelBuilder b;
    b.input("x", 1, {-1, 4}, "B");
    b.node("Shape", {"x"}, {"y"});
    b.output("y", 7, {2});
    EXPECT_FALSE(batch_rows_independent_bound(imported(b, dir), "B", {"B"}));
  }
  {
    // y = x * float(B): the batch's value used as data.
    ModelBuilder b;
    b.input("x", 1, {-1, 4}, "B");
    b.initializer_i64("idx", {}, {0});
    b.node("Shape", {"x"}, {"s"});
    auto& g = b.node("Gather", {"s", "idx"}, {"n"});
    ModelBuilder::attr_int(g, "axis", 0);
    auto& c = b.node("Cast", {"n"}, {"nf"});
    ModelBuilder::attr_int(c, "to", 1);
    b.node("Mul", {"x", "nf"}, {"y"});
    b.output("y", 1, {-1, 4});
    EXPECT_FALSE(batch_rows_independent_bound(imported(b, dir), "B", {"B"}));
  }
  {
    // Softmax over the batch mixes rows.
    ModelBuilder b;
    b.input("x", 1, {-1, 4}, "B");
    auto& s = b.node("Softmax", {"x"}, {"y"});
    ModelBuilder::attr_int(s, "axis", 0);
    b.output("y", 1, {-1, 4});
    EXPECT_FALSE(batch_rows_independent_bound(imported(b, dir), "B", {"B"}));
  }
}

// End to end: a specialized session runs such a model's batch from its third
// size on by padding, by splitting it into row parts over the programs held,
// or on a new power-of-two bucket, as the (here: given) run times make
// cheapest; the real rows never change.
class SpecializedBatch : public ::testing::Test {
 protected:
  void SetUp() override {
    reshape_chain(0).save(dir_ / "m.onnx");
    SessionOptions opt;
    opt.use_cache = false;
    s_ = std::make_unique<Session>(dir_ / "m.onnx", opt);
  }
  // Runs `batch` rows and checks every row against the sum it must be.
  void run(int64_t batch) {
    Tensor x(DType::f32, {batch, 6, 4});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 7) - 3.f;
    Tensor y = s_->run({{"x", x}}).at("y");
    ASSERT_EQ(y.shape(), (std::vector<int64_t>{batch, 1}));
    for (int64_t r = 0; r < batch; ++r) {
      float want = 0;
      for (int64_t j = 0; j < 24; ++j) want += static_cast<float>((r * 24 + j) % 7) - 3.f;
      ASSERT_FLOAT_EQ(y.data<float>()[r], want) << "batch " << batch << " row " << r;
    }
  }
  // Run time per call: `fixed` plus `per_row` per row of the program.
  void cost(double fixed, double per_row) {
    SessionAccess::programs(*s_).set_row_cost(
        [=](const std::vector<int64_t>& sizes) { return fixed + per_row * static_cast<double>(sizes[0]); });
  }
  TempDir dir_;
  std::unique_ptr<Session> s_;
};

TEST_F(SpecializedBatch, RowBoundRunsSplitOverTheProgramsHeld) {
  cost(1, 1);  // a CPU: time grows with the rows
  run(2);
  run(7);      // two exact programs
  run(9);      // 7 + 2 (cost 11) beats compiling 16 (17)
  run(16);     // 7 + 7 + 2 (19) is within 1.25 x 16's 17: still no compile
  EXPECT_EQ(s_->buckets().programs, (std::vector<std::vector<int64_t>>{{2}, {7}}));
  EXPECT_EQ(s_->buckets().split_runs, 2);
  run(1);      // padding to 2 (3) is over 1.25 x a 1-row program (2): compile 1
  run(5);      // 2 + 2 + 1 (8) or 7 padded (8): held
  const BucketStats st = s_->buckets();
  EXPECT_EQ(st.programs, (std::vector<std::vector<int64_t>>{{2}, {7}, {1}}));
  EXPECT_EQ(st.compiled_by_run, 3);
  EXPECT_NE(st.modes[0].find("split into row parts"), std::string::npos) << st.modes[0];
}

TEST_F(SpecializedBatch, CallBoundRunsPadToAPowerOfTwoBucket) {
  cost(10, 0.1);  // a GPU: a call costs about the same whatever its rows
  run(2);
  run(7);
  run(9);   // 7 + 2 (20.9) is far over 16's 11.6: compile 16, pad
  run(5);   // padded to the held 7
  run(12);  // padded to the held 16
  const BucketStats st = s_->buckets();
  EXPECT_EQ(st.programs, (std::vector<std::vector<int64_t>>{{2}, {7}, {16}}));
  EXPECT_EQ(st.split_runs, 0);
}

TEST_F(SpecializedBatch, MeasuredTimesKeepEveryRowRight) {
  // No cost model: real (noisy) timings decide; whatever they choose, every
  // row is right and only power-of-two sizes are compiled after the first two.
  for (int64_t b : {3, 6, 5, 1, 8, 13, 2, 17, 4, 11}) run(b);
  const BucketStats st = s_->buckets();
  ASSERT_GE(st.programs.size(), 2u);
  for (size_t i = 2; i < st.programs.size(); ++i) {
    int64_t n = st.programs[i][0];
    EXPECT_EQ(n & (n - 1), 0) << "program " << i << " has " << n << " rows";
  }
}

}  // namespace
}  // namespace kiln::testing
