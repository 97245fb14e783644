// Tests for src/ops/control_flow.cpp. Bodies are tiny hand-built ir::Graphs
// made of this project's own data-movement ops; a small interpreter below
// plays the part of the runtime's subgraph runner.
#include <map>
#include <memory>

#include "kiln/errors.h"
#include "onnx/parser.h"
#include "op_test_util.h"

namespace kiln::testing {
namespace {

using ir::AttrValue;
using ir::ValueId;
using I = std::vector<int64_t>;

Tensor ints(std::vector<int64_t> shape, I v) { return make<int64_t>(std::move(shape), std::move(v)); }

template <class Fn>
ErrorCode code_of(Fn&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::internal;  // "did not throw" reads as a mismatch below
}

/// Records the constants a parser adds (ids from 1000 up).
struct FakeParseContext : onnx_import::ParseContext {
  std::vector<ir::Value> added;
  ir::ValueId add_constant(const std::string& name, Tensor t) override {
    ir::Value v;
    v.name = name;
    v.dtype = t.dtype();
    v.constant = t;
    added.push_back(v);
    return static_cast<ir::ValueId>(999 + added.size());
  }
  const ir::Value& value(ir::ValueId id) const override { return added.at(static_cast<size_t>(id - 1000)); }
};

void parse(ir::Node& n, FakeParseContext& ctx) {
  const auto* e = onnx_import::parsers().find(n.domain, n.op_type);
  ASSERT_NE(e, nullptr) << n.op_type;
  if (e->parse) e->parse(n, ctx);
}

ir::Node node(const std::string& op, std::vector<ValueId> in, std::vector<ValueId> out,
              std::map<std::string, AttrValue> attrs = {}) {
  ir::Node n;
  n.op_type = op;
  n.name = op + "_" + std::to_string(out.at(0));
  n.opset = 21;
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.attrs = std::move(attrs);
  return n;
}

/// Evaluates a graph node by node with the reference kernels; `outer` holds
/// the values a body reads from the enclosing scope.
struct Interpreter {
  std::map<ValueId, Tensor> outer;
  int calls = 0;

  std::vector<Tensor> operator()(const ir::Graph& g, const std::vector<Tensor>& in) {
    ++calls;
    std::map<ValueId, Tensor> env = outer;
    for (size_t i = 0; i < g.inputs.size() && i < in.size(); ++i) env[g.inputs[i]] = in[i];
    for (const auto& n : g.nodes) {
      std::vector<const Tensor*> ptrs;
      for (ValueId v : n.inputs) ptrs.push_back(v == ir::kNoValue ? nullptr : &env.at(v));
      ops::KernelContext ctx(n, ptrs, nullptr);
      ops::run_kernel(ctx);
      for (size_t j = 0; j < n.outputs.size(); ++j) env[n.outputs[j]] = ctx.outputs()[j];
    }
    std::vector<Tensor> out;
    for (ValueId v : g.outputs) out.push_back(env.at(v));
    return out;
  }
};

/// Runs node n (its inputs given as tensors) with an Interpreter as subgraph runner.
std::vector<Tensor> run_with_bodies(const ir::Node& n, std::vector<Tensor> inputs, Interpreter& interp) {
  std::vector<const Tensor*> ptrs;
  for (auto& t : inputs) ptrs.push_back(t.defined() ? &t : nullptr);
  ops::KernelContext ctx(n, ptrs, nullptr, [&](const ir::Graph& g, const std::vector<Tensor>& in) { return interp(g, in); });
  ops::run_kernel(ctx);
  return ctx.outputs();
}

std::shared_ptr<ir::Graph> constant_branch(ValueId out, Tensor value) {
  auto g = std::make_shared<ir::Graph>();
  g->name = "branch";
  g->nodes.push_back(node("Constant", {}, {out}, {{"value", value}}));
  g->outputs = {out};
  return g;
}

// ---- If -------------------------------------------------------------------------------------

TEST(If, ChoosesEachBranch) {
  ir::Node n = node("If", {0}, {1});
  n.attrs["then_branch"] = constant_branch(10, ints({2}, {1, 2}));
  n.attrs["else_branch"] = constant_branch(20, ints({1}, {3}));
  Interpreter interp;
  auto t = run_with_bodies(n, {make<bool>({}, {true})}, interp);
  EXPECT_EQ(values<int64_t>(t.at(0)), (I{1, 2}));
  auto e = run_with_bodies(n, {make<bool>({1}, {false})}, interp);
  EXPECT_EQ(values<int64_t>(e.at(0)), (I{3}));
  EXPECT_EQ(interp.calls, 2);
}

TEST(If, BranchReadsOuterValue) {
  // then: Identity(outer value 5); else: Constant.
  auto then_g = std::make_shared<ir::Graph>();
  then_g->nodes.push_back(node("Identity", {5}, {11}));
  then_g->outputs = {11};
  ir::Node n = node("If", {0}, {1});
  n.attrs["then_branch"] = then_g;
  n.attrs["else_branch"] = constant_branch(20, ints({1}, {3}));
  Interpreter interp;
  interp.outer[5] = make<float>({2}, {0.5f, -1.5f});
  auto t = run_with_bodies(n, {make<bool>({}, {true})}, interp);
  EXPECT_EQ(values<float>(t.at(0)), (std::vector<float>{0.5f, -1.5f}));
}

TEST(If, Errors) {
  ir::Node n = node("If", {0}, {1});
  n.attrs["then_branch"] = constant_branch(10, ints({1}, {1}));
  n.attrs["else_branch"] = constant_branch(20, ints({1}, {3}));
  Interpreter interp;
  EXPECT_EQ(code_of([&] { run_with_bodies(n, {make<bool>({2}, {true, false})}, interp); }), ErrorCode::invalid_input);
  ir::Node two = node("If", {0}, {1, 2});
  two.attrs = n.attrs;
  EXPECT_EQ(code_of([&] { run_with_bodies(two, {make<bool>({}, {true})}, interp); }), ErrorCode::invalid_model);
  // Without a runner the kernel reports an internal error instead of crashing.
  Tensor c = make<bool>({}, {true});
  ops::KernelContext ctx(n, {&c}, nullptr);
  EXPECT_EQ(code_of([&] { ops::run_kernel(ctx); }), ErrorCode::internal);
}

TEST(If, InferenceLeavesOutputsToTheGraphPass) {
  ir::Node n = node("If", {0}, {1, 2});
  auto o = ops::infer(n, {ops::InType{DType::boolean, ir::Shape{}, nullptr}});
  ASSERT_EQ(o.size(), 2u);
  EXPECT_EQ(o[0].dtype, DType::undefined);
  EXPECT_FALSE(o[1].shape.has_value());
}

// ---- Loop -------------------------------------------------------------------------------------

/// Body (iter 20, cond 21, acc 22) -> (cond 31, acc ++ [iter] 33, iter 34).
/// The next condition is table[iter] (a Gather from an outer bool tensor, value 7).
std::shared_ptr<ir::Graph> loop_body() {
  auto g = std::make_shared<ir::Graph>();
  g->name = "body";
  g->inputs = {20, 21, 22};
  g->nodes.push_back(node("Unsqueeze", {20, 23}, {32}));
  g->nodes.push_back(node("Concat", {22, 32}, {33}, {{"axis", int64_t{0}}}));
  g->nodes.push_back(node("Gather", {7, 20}, {31}));
  g->nodes.push_back(node("Identity", {20}, {34}));
  g->outputs = {31, 33, 34};
  return g;
}

TEST(Loop, TripCountCarriedAndScanOutputs) {
  ir::Node n = node("Loop", {0, 1, 2}, {3, 4});
  n.attrs["body"] = loop_body();
  Interpreter interp;
  interp.outer[7] = make<bool>({5}, {true, true, true, true, true});
  interp.outer[23] = ints({1}, {0});
  // M = 3, cond = true, acc = [7]
  auto o = run_with_bodies(n, {ints({}, {3}), make<bool>({}, {true}), ints({1}, {7})}, interp);
  EXPECT_EQ(values<int64_t>(o.at(0)), (I{7, 0, 1, 2}));
  EXPECT_EQ(o.at(1).shape(), (I{3}));
  EXPECT_EQ(values<int64_t>(o.at(1)), (I{0, 1, 2}));
}

TEST(Loop, ConditionStopsEarlyAndForFormIgnoresIt) {
  ir::Node n = node("Loop", {0, 1, 2}, {3, 4});
  n.attrs["body"] = loop_body();
  Interpreter interp;
  interp.outer[7] = make<bool>({5}, {true, false, true, true, true});  // iteration 1 returns false
  interp.outer[23] = ints({1}, {0});
  auto o = run_with_bodies(n, {ints({}, {10}), make<bool>({}, {true}), ints({0}, {})}, interp);
  EXPECT_EQ(values<int64_t>(o.at(0)), (I{0, 1}));
  // Initial cond false: no iteration, the carried value passes through.
  o = run_with_bodies(n, {ints({}, {10}), make<bool>({}, {false}), ints({1}, {9})}, interp);
  EXPECT_EQ(values<int64_t>(o.at(0)), (I{9}));
  // No cond input: a plain for loop of M iterations.
  o = run_with_bodies(n, {ints({}, {4}), Tensor(), ints({0}, {})}, interp);
  EXPECT_EQ(values<int64_t>(o.at(0)), (I{0, 1, 2, 3}));
  EXPECT_EQ(code_of([&] { run_with_bodies(n, {Tensor(), Tensor(), ints({0}, {})}, interp); }), ErrorCode::unsupported);
}

// ---- Scan ---------------------------------------------------------------------------------------

/// Body (state 40, x_t 41) -> (state ++ x_t 42, x_t 43): the state collects the
/// elements in visiting order; the scan output restacks them.
std::shared_ptr<ir::Graph> scan_body() {
  auto g = std::make_shared<ir::Graph>();
  g->inputs = {40, 41};
  g->nodes.push_back(node("Concat", {40, 41}, {42}, {{"axis", int64_t{0}}}));
  g->nodes.push_back(node("Identity", {41}, {43}));
  g->outputs = {42, 43};
  return g;
}

TEST(Scan, ForwardAndReverse) {
  // x = [[1,2],[3,4],[5,6]] scanned along axis 0: elements [1,2], [3,4], [5,6].
  Tensor x = ints({3, 2}, {1, 2, 3, 4, 5, 6});
  ir::Node n = node("Scan", {0, 1}, {2, 3}, {{"num_scan_inputs", int64_t{1}}});
  n.attrs["body"] = scan_body();
  Interpreter interp;
  auto o = run_with_bodies(n, {ints({0}, {}), x}, interp);
  EXPECT_EQ(values<int64_t>(o.at(0)), (I{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(o.at(1).shape(), (I{3, 2}));
  EXPECT_EQ(values<int64_t>(o.at(1)), (I{1, 2, 3, 4, 5, 6}));
  // Reverse input: visits [5,6], [3,4], [1,2]; the output stacked along axis 1.
  n.attrs["scan_input_directions"] = I{1};
  n.attrs["scan_output_axes"] = I{-1};
  o = run_with_bodies(n, {ints({0}, {}), x}, interp);
  EXPECT_EQ(values<int64_t>(o.at(0)), (I{5, 6, 3, 4, 1, 2}));
  EXPECT_EQ(o.at(1).shape(), (I{2, 3}));
  EXPECT_EQ(values<int64_t>(o.at(1)), (I{5, 3, 1, 6, 4, 2}));
}

TEST(Scan, InputAxisAndReversedOutput) {
  // Scan along axis 1 of x: elements [1,3,5], [2,4,6]; output reversed: [[2,4,6],[1,3,5]].
  Tensor x = ints({3, 2}, {1, 2, 3, 4, 5, 6});
  ir::Node n = node("Scan", {0, 1}, {2, 3},
                    {{"num_scan_inputs", int64_t{1}}, {"scan_input_axes", I{1}}, {"scan_output_directions", I{1}}});
  n.attrs["body"] = scan_body();
  Interpreter interp;
  auto o = run_with_bodies(n, {ints({0}, {}), x}, interp);
  EXPECT_EQ(values<int64_t>(o.at(0)), (I{1, 3, 5, 2, 4, 6}));
  EXPECT_EQ(values<int64_t>(o.at(1)), (I{2, 4, 6, 1, 3, 5}));
}

TEST(ControlFlowParsers, BodyArityIsChecked) {
  FakeParseContext ctx;
  ir::Node n = node("If", {0}, {1, 2});
  n.attrs["then_branch"] = constant_branch(10, ints({1}, {1}));  // one output for two
  n.attrs["else_branch"] = constant_branch(20, ints({1}, {3}));
  EXPECT_EQ(code_of([&] { parse(n, ctx); }), ErrorCode::invalid_model);
  ir::Node ok = node("If", {0}, {1});
  ok.attrs = n.attrs;
  parse(ok, ctx);
  ir::Node loop = node("Loop", {0, 1, 2}, {3, 4});
  loop.attrs["body"] = loop_body();
  parse(loop, ctx);
  ir::Node bad = node("Loop", {0, 1, 2, 5}, {3, 4});  // two carried values, body takes one
  bad.attrs["body"] = loop_body();
  EXPECT_EQ(code_of([&] { parse(bad, ctx); }), ErrorCode::invalid_model);
  EXPECT_EQ(onnx_import::parsers().find("", "Scan")->min_opset, 9);  // Scan-8 (batched) is not normalised
}

}  // namespace
}  // namespace kiln::testing
