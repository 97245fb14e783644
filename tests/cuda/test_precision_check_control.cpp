// The precision check of models with control flow and discrete selection
// (label `unit`, no GPU): If / Loop / Scan run in the check's executor with
// their float32 bodies; values whose content depends on an index or a
// branch chosen from float data are not compared, and the float values
// deciding the choice bound the check instead (runtime/precision_selection.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>

#include "cuda_models.h"
#include "runtime/precision_check.h"
#include "runtime/precision_check_run.h"
#include "runtime/precision_selection.h"
#include "ops/gemm_kernel.h"
#include "runtime/program.h"
#include "targets/kernels.h"
#include "targets/cuda/compile/precision.h"

namespace kiln::testing {
namespace {

using targets::cuda::convert_precision;
using targets::cuda::emulate_16bit;

std::vector<std::string> kept_names(const PrecisionCheckResult& r) {
  std::vector<std::string> v;
  for (auto& k : r.kept) v.push_back(k.node);
  std::sort(v.begin(), v.end());
  return v;
}

const PrecisionCheckNode* kept_node(const PrecisionCheckResult& r, const std::string& name) {
  for (auto& k : r.kept)
    if (k.node == name) return &k;
  return nullptr;
}

Tensor ramp(const std::vector<int64_t>& shape) {
  Tensor t(DType::f32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = 0.5f + 0.5f * std::sin(0.37f * i);
  return t;
}

/// The values of `m` (float32, or its 16-bit program emulated when
/// `emulate`) on `in`, by name, through the check's executor.
std::map<std::string, Tensor> run_values(ir::Model m, const std::map<std::string, Tensor>& in, bool emulate) {
  std::vector<DType> round;
  if (emulate) {
    convert_precision(m, DType::f16);
    emulate_16bit(m, &round);
  }
  std::map<std::string, Tensor> out;
  run_for_check(m, in, round, 1, [&](ir::ValueId id, const Tensor& t) { out[m.value(id).name] = t.clone(); });
  return out;
}

double rel_error(const Tensor& got, const Tensor& ref) {
  double d = 0, s = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    d = std::max(d, std::fabs(double(got.data<float>()[i]) - ref.data<float>()[i]));
    s = std::max(s, std::fabs(double(ref.data<float>()[i])));
  }
  return s > 0 ? d / s : d;
}

// The check's executor runs If / Loop / Scan as a ref Program does, bit for
// bit (both multiplying through oneDNN's sgemm), both branches of an If.
TEST(PrecisionCheckControl, ExecutorRunsBodiesAsTheRefProgram) {
  Tensor neg = ramp({1, 4, 8, 8});
  for (int64_t i = 0; i < neg.numel(); ++i) neg.data<float>()[i] = -neg.data<float>()[i];
  Tensor trips(DType::i64, {});
  trips.data<int64_t>()[0] = 7;
  for (auto [name, builder, in] : std::vector<std::tuple<std::string, ModelBuilder, std::map<std::string, Tensor>>>{
           {"conv_if +", conv_if_model(), {{"x", ramp({1, 4, 8, 8})}}},
           {"conv_if -", conv_if_model(), {{"x", neg}}},
           {"data_if_head +", data_if_head_model(), {{"x", ramp({1, 4, 8, 8})}}},
           {"data_if_head -", data_if_head_model(), {{"x", neg}}},
           {"conv_loop", conv_loop_model(3), {{"x", ramp({1, 4, 8, 8})}}},
           {"loop_while", loop_while_model(16), {{"x", ramp({16})}, {"max_trips", trips}}},
           {"scan", scan_cumsum_model(6, 8), {{"init", ramp({8})}, {"x", ramp({6, 8})}}}}) {
    ir::Model m = imported_model(builder);
    std::map<std::string, Tensor> want;
    {
      const ops::SgemmOverride gemm(targets::library_sgemm);
      artifact::CompiledProgram cp;
      cp.model = m;
      cp.compat.target = "ref";
      want = Program(std::move(cp)).run(in, 1);
    }
    const auto got = run_values(m, in, false);
    ASSERT_FALSE(want.empty()) << name;
    for (auto& [out, t] : want) {
      ASSERT_TRUE(got.count(out)) << name << ": " << out;
      const Tensor& g = got.at(out);
      ASSERT_EQ(g.shape(), t.shape()) << name << ": " << out;
      EXPECT_EQ(std::memcmp(g.raw(), t.raw(), t.nbytes()), 0) << name << ": " << out;
    }
  }
}

// (a) An If on the data runs through the check: the head's subtraction
// amplifies (kept with the convolutions feeding it, as without the If);
// the If's output and what follows are selection-dependent, and the sum
// deciding the branch is what the check holds within its bound.
TEST(PrecisionCheckControl, DataIfIsCheckedAndBoundsTheCheck) {
  ir::Model m = imported_model(data_if_head_model());
  PrecisionCheckResult r = check_precision(m, DType::f16, {});
  ASSERT_EQ(r.state, "checked") << r.reason;
  EXPECT_EQ(kept_names(r), (std::vector<std::string>{"conv_a", "conv_b", "sub"})) << r.note();
  const PrecisionCheckNode* sub = kept_node(r, "sub");
  ASSERT_NE(sub, nullptr);
  EXPECT_NE(sub->reason.find("amplifies the 16-bit rounding"), std::string::npos) << sub->reason;
  EXPECT_EQ(r.control_flow, 1);
  ASSERT_EQ(r.boundaries.size(), 1u) << r.note();
  EXPECT_EQ(r.boundaries[0].node, "if");
  EXPECT_EQ(r.boundaries[0].op, "If");
  EXPECT_EQ(r.boundaries[0].values, std::vector<std::string>{"ysum"});
  EXPECT_LT(r.boundaries[0].error, 1e-2) << r.note();
  EXPECT_EQ(r.selection_dependent, 2) << r.note();  // branch, out
  EXPECT_LT(r.output_error_after, 1e-2) << r.note();
  EXPECT_NE(r.note().find("bounded by 1 selecting node(s): if (If)"), std::string::npos) << r.note();
  const auto j = r.to_json();
  EXPECT_EQ(j.at("control_flow"), 1);
  EXPECT_EQ(j.at("selection_dependent"), 2);
  ASSERT_EQ(j.at("boundaries").size(), 1u);
  EXPECT_EQ(j["boundaries"][0].at("node"), "if");
  EXPECT_EQ(j["boundaries"][0].at("values"), nlohmann::json::array({"ysum"}));
}

// The GPU test's premise (test_cuda_control_precision_gpu.cpp): the ramp
// and its negation take the two branches, far from the threshold.
TEST(PrecisionCheckControl, DataIfHeadRampsTakeBothBranches) {
  ir::Model m = imported_model(data_if_head_model());
  Tensor neg = ramp({1, 4, 8, 8});
  for (int64_t i = 0; i < neg.numel(); ++i) neg.data<float>()[i] = -neg.data<float>()[i];
  const float up = run_values(m, {{"x", ramp({1, 4, 8, 8})}}, false).at("ysum").data<float>()[0];
  const float down = run_values(m, {{"x", neg}}, false).at("ysum").data<float>()[0];
  EXPECT_LT(up, 250.f);  // 247.7: else (Tanh)
  EXPECT_GT(down, 262.f);  // 264.3: then (* 2)
}

// An If on an integer input chooses the same branch in both runs: no
// selection; its output is compared, and its float32 bodies amplifying the
// rounding of a and b keep the convolutions making them in float32.
TEST(PrecisionCheckControl, IfBodiesAmplifyingKeepWhatTheyRead) {
  ir::Model m = imported_model(flag_if_head_model());
  for (int64_t flag : {1, 0}) {
    Tensor f(DType::i64, {});
    f.data<int64_t>()[0] = flag;
    PrecisionCheckResult r = check_precision(m, DType::f16, {{"flag", f}});
    ASSERT_EQ(r.state, "checked") << r.reason;
    EXPECT_EQ(kept_names(r), (std::vector<std::string>{"conv_a", "conv_b"})) << flag << ": " << r.note();
    for (auto& k : r.kept)
      EXPECT_NE(k.reason.find("feeds 'if' (If), whose float32 bodies amplify"), std::string::npos) << k.reason;
    EXPECT_TRUE(r.boundaries.empty()) << r.note();
    EXPECT_EQ(r.selection_dependent, 0);
    EXPECT_GT(r.output_error_before, 5e-2) << r.note();
    EXPECT_LT(r.output_error_after, 1e-2) << r.note();
    EXPECT_FALSE(r.to_json().contains("boundaries"));
  }
}

// (b) TopK on scores tied within fp16's rounding. Emulated, the picked
// indices flip and the gathered features are off by their whole scale (what
// the check blamed before); the check compares the scores instead, keeps
// exactly what the head's subtraction needs, and names TopK as the boundary.
TEST(PrecisionCheckControl, SelectionOnNearTiesIsABoundaryNotAnAmplifier) {
  ir::Model m = imported_model(topk_tie_model());
  const std::map<std::string, Tensor> in = {{"x", ramp({1, 4, 8, 8})}};
  const auto ref = run_values(m, in, false), emu = run_values(m, in, true);
  EXPECT_GT(rel_error(emu.at("feats"), ref.at("feats")), 0.1) << "no flipped selection: the test shows nothing";
  EXPECT_LT(rel_error(emu.at("scores"), ref.at("scores")), 2e-3);
  EXPECT_LT(rel_error(emu.at("top"), ref.at("top")), 2e-3);  // sorted values: continuous in the scores
  PrecisionCheckResult r = check_precision(m, DType::f16, in);
  ASSERT_EQ(r.state, "checked") << r.reason;
  EXPECT_EQ(kept_names(r), (std::vector<std::string>{"conv_a", "conv_b", "sub"})) << r.note();
  ASSERT_EQ(r.boundaries.size(), 1u) << r.note();
  EXPECT_EQ(r.boundaries[0].node, "topk");
  EXPECT_EQ(r.boundaries[0].op, "TopK");
  EXPECT_EQ(r.boundaries[0].values, std::vector<std::string>{"scores"});
  EXPECT_LT(r.boundaries[0].error, 2e-3);
  EXPECT_EQ(r.selection_dependent, 1) << r.note();  // feats
  EXPECT_EQ(r.control_flow, 0);
  EXPECT_LT(r.output_error_after, 1e-2) << r.note();
  // The same on random inputs.
  PrecisionCheckResult rr = check_precision(m, DType::f16, {});
  EXPECT_EQ(kept_names(rr), kept_names(r)) << rr.note();
}

// The analysis on its own: what is selection-dependent, what is not.
TEST(PrecisionCheckControl, SelectionAnalysisMarksWhatFollowsTheChoice) {
  ir::Model m = imported_model(topk_tie_model());
  SelectionAnalysis s = analyse_selection(m);
  auto dep = [&](const std::string& name) {
    for (size_t v = 0; v < m.values.size(); ++v)
      if (m.values[v].name == name) return static_cast<bool>(s.dependent[v]);
    ADD_FAILURE() << "no value " << name;
    return false;
  };
  EXPECT_TRUE(dep("idx"));
  EXPECT_TRUE(dep("feats"));
  EXPECT_FALSE(dep("top"));
  EXPECT_FALSE(dep("scores"));
  EXPECT_FALSE(dep("fe"));
  EXPECT_FALSE(dep("out"));
  // Element-wise use of a comparison is no selection; an integer If is none.
  for (auto builder : {sigmoid_head_model(50.f), conv_bn_model(), attention_model(), flag_if_head_model(),
                       conv_loop_model(3), loop_static_model(4, 4, 32)}) {
    ir::Model o = imported_model(builder);
    SelectionAnalysis so = analyse_selection(o);
    EXPECT_FALSE(so.any());
    EXPECT_EQ(std::count(so.dependent.begin(), so.dependent.end(), true), 0);
  }
}

// (c) Loops and Scans run in the check; a Loop whose trip count is decided by
// the data bounds the check with the float value it compares.
TEST(PrecisionCheckControl, LoopAndScanModelsAreChecked) {
  for (auto [name, builder] : std::vector<std::pair<std::string, ModelBuilder>>{
           {"conv_loop", conv_loop_model(3)},
           {"loop_static", loop_static_model(4, 4, 32)},
           {"scan", scan_cumsum_model(6, 8, false, 0, true)}}) {
    ir::Model m = imported_model(builder);
    PrecisionCheckResult r = check_precision(m, DType::f16, {});
    ASSERT_EQ(r.state, "checked") << name << ": " << r.reason;
    EXPECT_EQ(r.control_flow, 1) << name;
    EXPECT_TRUE(r.boundaries.empty()) << name << ": " << r.note();
    EXPECT_TRUE(r.kept.empty()) << name << ": " << r.note();
    EXPECT_LT(r.output_error_after, 1e-2) << name << ": " << r.note();
    EXPECT_EQ(r.to_json().at("control_flow"), 1) << name;
  }
  ir::Model m = imported_model(loop_while_model(16));
  PrecisionCheckResult r = check_precision(m, DType::f16, {});
  ASSERT_EQ(r.state, "checked") << r.reason;
  ASSERT_EQ(r.boundaries.size(), 1u) << r.note();
  EXPECT_EQ(r.boundaries[0].node, "loop");
  EXPECT_EQ(r.boundaries[0].op, "Loop");
  std::vector<std::string> values = r.boundaries[0].values;
  std::sort(values.begin(), values.end());
  EXPECT_EQ(values, (std::vector<std::string>{"s", "x"})) << r.note();
  EXPECT_EQ(r.selection_dependent, 2) << r.note();  // x_final, count
  EXPECT_TRUE(r.kept.empty()) << r.note();
}

// (d) Models without control flow or selection: the result and its JSON as
// before (the kept sets of test_precision_check.cpp; no new JSON field).
TEST(PrecisionCheckControl, ModelsWithoutSelectionCheckAsBefore) {
  for (auto [name, builder, kept] : std::vector<std::tuple<std::string, ModelBuilder, size_t>>{
           {"sigmoid_head", sigmoid_head_model(50.f), 3}, {"conv_bn", conv_bn_model(), 0},
           {"attention", attention_model(), 0}, {"matmul", matmul_model(), 0}}) {
    ir::Model m = imported_model(builder);
    PrecisionCheckResult r = check_precision(m, DType::f16, {});
    ASSERT_EQ(r.state, "checked") << name << ": " << r.reason;
    EXPECT_EQ(r.kept.size(), kept) << name << ": " << r.note();
    EXPECT_TRUE(r.boundaries.empty()) << name;
    EXPECT_EQ(r.control_flow, 0) << name;
    const auto j = r.to_json();
    for (const char* k : {"control_flow", "selection_dependent", "boundaries"})
      EXPECT_FALSE(j.contains(k)) << name << ": " << k;
    EXPECT_EQ(r.note().find("selection"), std::string::npos) << r.note();
  }
}

}  // namespace
}  // namespace kiln::testing
