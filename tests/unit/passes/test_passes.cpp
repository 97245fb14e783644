#include <gtest/gtest.h>

#include "../onnx/model_builder.h"
#include "onnx/importer.h"
#include "kiln/errors.h"
#include "passes/passes.h"

namespace kiln::testing {
namespace {

ir::Model import(const ModelBuilder& b) {
  auto bytes = b.bytes();
  return onnx_import::import_bytes(bytes.data(), bytes.size(), ".", "test");
}

// x[N,3,4] -> Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])) -> y[N,12]:
// the shape arithmetic exporters emit for flatten-like reshapes.
ModelBuilder reshape_chain() {
  ModelBuilder b;
  b.input("x", 1, {-1, 3, 4});
  b.initializer_i64("zero", {}, {0});
  b.initializer_i64("axes0", {1}, {0});
  b.initializer_i64("minus1", {1}, {-1});
  b.node("Shape", {"x"}, {"s"});
  b.node("Gather", {"s", "zero"}, {"n"});
  b.node("Unsqueeze", {"n", "axes0"}, {"n1"});
  b.node("Concat", {"n1", "minus1"}, {"shape"}).add_attribute()->CopyFrom([] {
    onnx::AttributeProto a;
    a.set_name("axis");
    a.set_type(onnx::AttributeProto::INT);
    a.set_i(0);
    return a;
  }());
  b.node("Reshape", {"x", "shape"}, {"y"}, "reshape");
  b.output("y");
  return b;
}

TEST(InferAndFold, FoldsShapeArithmeticOnceInputShapesAreBound) {
  ir::Model m = import(reshape_chain());
  passes::bind_input_shapes(m, {{"x", {2, 3, 4}}});
  auto st = passes::infer_and_fold(m);
  EXPECT_EQ(st.folded_nodes, 4);  // Shape, Gather, Unsqueeze, Concat
  ASSERT_EQ(m.main.nodes.size(), 1u);
  EXPECT_EQ(m.main.nodes[0].op_type, "Reshape");
  const ir::Value& shape = m.value(m.main.nodes[0].inputs[1]);
  ASSERT_TRUE(shape.constant.has_value());
  EXPECT_EQ(std::vector<int64_t>(shape.constant->data<int64_t>(), shape.constant->data<int64_t>() + 2),
            (std::vector<int64_t>{2, -1}));
  const ir::Value& y = m.value(m.main.outputs[0]);
  ASSERT_TRUE(y.shape.has_value());
  EXPECT_EQ(ir::to_sizes(*y.shape), (std::vector<int64_t>{2, 12}));
}

TEST(InferAndFold, KeepsSymbolicShapesDynamic) {
  ir::Model m = import(reshape_chain());
  auto st = passes::infer_and_fold(m);
  EXPECT_EQ(st.folded_nodes, 0);
  EXPECT_EQ(m.main.nodes.size(), 5u);
  const ir::Value& y = m.value(m.main.outputs[0]);
  ASSERT_TRUE(y.shape.has_value());
  EXPECT_EQ(y.shape->size(), 2u);
}

TEST(BindInputShapes, RejectsUnknownNamesAndRankOrDimConflicts) {
  ir::Model m = import(reshape_chain());
  EXPECT_THROW(passes::bind_input_shapes(m, {{"nope", {1}}}), Error);
  EXPECT_THROW(passes::bind_input_shapes(m, {{"x", {2, 3}}}), Error);
  EXPECT_THROW(passes::bind_input_shapes(m, {{"x", {2, 5, 4}}}), Error);
  try {
    passes::bind_input_shapes(m, {{"x", {2, 5, 4}}});
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos) << e.what();
  }
}

TEST(DeadCode, RemovesNodesThatReachNoOutput) {
  ModelBuilder b;
  b.input("x", 1, {4});
  b.node("Relu", {"x"}, {"y"});
  b.node("Neg", {"x"}, {"unused"});
  b.node("Abs", {"unused"}, {"unused2"});
  b.output("y");
  ir::Model m = import(b);
  EXPECT_EQ(passes::eliminate_dead_code(m), 2);
  ASSERT_EQ(m.main.nodes.size(), 1u);
  EXPECT_EQ(m.main.nodes[0].op_type, "Relu");
}

TEST(MemoryPlan, ReusesSlotsAndNeverOverlapsLiveValues) {
  ModelBuilder b;
  b.input("x", 1, {1, 1024});
  std::string prev = "x";
  for (int i = 1; i <= 5; ++i) {
    std::string out = i == 5 ? "y" : "r" + std::to_string(i);
    b.node(i % 2 ? "Relu" : "Neg", {prev}, {out});
    prev = out;
  }
  b.output("y");
  ir::Model m = import(b);
  passes::infer_and_fold(m);
  auto plan = passes::plan_memory(m);
  // Four 4 KiB intermediates, each alive for two consecutive nodes: two slots suffice.
  EXPECT_EQ(plan.naive_bytes, 4u * 4096u);
  EXPECT_EQ(plan.arena_bytes, 2u * 4096u);
  // The graph output is never in the arena (it is handed to the caller).
  EXPECT_EQ(plan.offsets[m.main.outputs[0]], -1);
  for (size_t i = 0; i < m.main.nodes.size(); ++i) {
    auto out = m.main.nodes[i].outputs[0];
    auto in = m.main.nodes[i].inputs[0];
    if (plan.offsets[out] >= 0 && plan.offsets[in] >= 0) EXPECT_NE(plan.offsets[out], plan.offsets[in]) << "node " << i;
  }
}

TEST(MemoryPlan, PlacesTheInputsOfAnInPlaceNodeInsideItsOutputForTheGroupsWholeLife) {
  // a, b -> c = Concat(a, b) marked in place (a at byte 0, b at 4096) ->
  // d = Concat(c, e) in place too; g and f are computed while the group is
  // alive (f reads a after d's last reader: the group lives as long as a).
  ModelBuilder b;
  b.input("x", 1, {1, 1024});
  b.node("Relu", {"x"}, {"a"});
  b.node("Neg", {"x"}, {"b"});
  ModelBuilder::attr_int(b.node("Concat", {"a", "b"}, {"c"}), "axis", 1);
  b.node("Abs", {"x"}, {"e"});
  ModelBuilder::attr_int(b.node("Concat", {"c", "e"}, {"d"}), "axis", 1);
  b.node("Neg", {"d"}, {"g"});    // d's last reader
  b.node("Relu", {"a"}, {"f"});  // a part read after it: the whole group lives until here
  ModelBuilder::attr_int(b.node("Concat", {"g", "f"}, {"y"}), "axis", 1);
  b.output("y");
  ir::Model m = import(b);
  passes::infer_and_fold(m);
  auto id = [&](const std::string& name) {
    for (size_t v = 0; v < m.values.size(); ++v)
      if (m.values[v].name == name) return static_cast<ir::ValueId>(v);
    ADD_FAILURE() << "no value " << name;
    return ir::ValueId(0);
  };
  for (auto& n : m.main.nodes) {
    if (n.outputs[0] == id("c")) n.attrs["in_place_offsets"] = std::vector<int64_t>{0, 4096};
    if (n.outputs[0] == id("d")) n.attrs["in_place_offsets"] = std::vector<int64_t>{0, 8192};
  }
  auto plan = passes::plan_memory(m);
  int64_t d = plan.offsets[id("d")];
  ASSERT_GE(d, 0);
  EXPECT_EQ(plan.offsets[id("c")], d);
  EXPECT_EQ(plan.offsets[id("a")], d);
  EXPECT_EQ(plan.offsets[id("b")], d + 4096);
  EXPECT_EQ(plan.offsets[id("e")], d + 8192);
  EXPECT_EQ(plan.sizes[id("a")], 4096u);
  // f and g are computed while the group (12 KiB from d) is alive: elsewhere.
  for (const char* v : {"f", "g"}) {
    int64_t o = plan.offsets[id(v)];
    ASSERT_GE(o, 0) << v;
    EXPECT_TRUE(o + 4096 <= d || o >= d + 12288) << v << " at " << o << " overlaps the group at " << d;
  }
}

}  // namespace
}  // namespace kiln::testing
