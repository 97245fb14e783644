// Conditional nodes in fp16, bf16, TF32 and channels-last programs, compile
// side (label `unit`, no GPU needed: cross-compiled for sm_90 with
// heuristic tuning and --fallback error, so any host node fails the
// compile): an If or a Loop between convolutions (whose main graph the
// precision and layout passes rewrite) becomes one kiln.cuda.If / Loop with
// no host segment; its bodies are strict float32 NCHW (every float value a
// body reads or writes is float32, no TF32 or channels-last library call in
// them, outer values read as NCHW float32); the precision share lists the
// node as float32 with its reason; the precision check runs it (the If on
// the data bounding the check); Silero VAD (op18, an If on the sample
// rate around its whole body, value specialization off) compiles the same
// way in fp16 when .models/silero_vad.onnx is there.
// Running them on a GPU: test_cuda_control_precision_gpu.cpp.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <set>

#include "artifact/artifact.h"
#include "cuda_models.h"
#include "kiln/compile.h"
#include "kiln/errors.h"
#include "runtime/inspect.h"
#include "targets/cuda/run/cuda_ops.h"

#ifndef KILN_SOURCE_DIR
#define KILN_SOURCE_DIR "."
#endif

namespace kiln::testing {
namespace {

using targets::cuda::kCudaDomain;

/// A program kind the precision or layout pass rewrites.
struct Kind {
  const char* name;
  Precision precision;
  bool tf32;
};
const Kind kKinds[] = {{"fp16", Precision::fp16, false}, {"bf16", Precision::bf16, false}, {"tf32", Precision::fp32, true}};

SessionOptions cross(const Kind& k) {
  SessionOptions o = cross_options();
  o.precision = k.precision;
  o.allow_tf32 = k.tf32;
  o.fallback = Fallback::error;  // any host node fails the compile
  return o;
}

/// The program's kiln.cuda.If / kiln.cuda.Loop nodes.
std::vector<const ir::Node*> conditionals(const ir::Model& m) {
  std::vector<const ir::Node*> out;
  for (auto& n : m.main.nodes)
    if (n.domain == kCudaDomain && (n.op_type == "If" || n.op_type == "Loop")) out.push_back(&n);
  return out;
}

bool is_float(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

/// Checks that every body of conditional node `c` is strict float32 NCHW:
/// each float value its nodes read or write is float32 (outer values
/// included), its cuBLASLt / cuDNN calls record float32 without TF32 and no
/// channels-last convolution, and its rank-4 activations have `nchw` dims
/// (an outer channels-last value would have them permuted; empty: not
/// checked).
void expect_float32_bodies(const ir::Model& m, const ir::Node& c, const std::vector<int64_t>& nchw,
                           const std::string& what) {
  int nodes = 0;
  for (auto& [k, a] : c.attrs) {
    auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a);
    if (!sg) continue;
    for (auto& n : (*sg)->nodes) {
      ++nodes;
      EXPECT_EQ(n.domain, kCudaDomain) << what << " " << k << ": " << n.label();
      if (n.op_type == "Gemm" || n.op_type == "Conv") {
        EXPECT_EQ(n.s("dtype", ""), "float32") << what << " " << k << ": " << n.label();
        EXPECT_EQ(n.i("tf32", -1), 0) << what << " " << k << ": " << n.label() << " uses TF32";
        EXPECT_EQ(n.i("nhwc", 0), 0) << what << " " << k << ": " << n.label() << " is channels-last";
      }
      std::vector<ir::ValueId> vals = n.inputs;
      vals.insert(vals.end(), n.outputs.begin(), n.outputs.end());
      for (auto v : vals) {
        if (v == ir::kNoValue) continue;
        const ir::Value& val = m.value(v);
        if (is_float(val.dtype)) {
          EXPECT_EQ(val.dtype, DType::f32) << what << " " << k << ": " << n.label() << " '" << val.name << "'";
        }
        if (!nchw.empty() && !val.constant && val.shape && val.shape->size() == 4 && ir::is_static(*val.shape)) {
          EXPECT_EQ(ir::to_sizes(*val.shape), nchw) << what << " " << k << ": '" << val.name << "' is not NCHW";
        }
      }
    }
  }
  EXPECT_GT(nodes, 0) << what;
}

/// The precision share's float32 entry for node `name` (metadata JSON), or null.
nlohmann::json share_entry(const artifact::CompiledProgram& cp, const std::string& name) {
  auto meta = nlohmann::json::parse(cp.metadata_json);
  if (!meta.contains("precision_share")) return nullptr;
  for (auto& f : meta["precision_share"].at("fp32"))
    if (f.at("node") == name) return f;
  return nullptr;
}

/// Compiles `b` as kind `k` with --fallback error and checks the result:
/// one conditional node `op` named `name`, no host segment, float32 NCHW
/// bodies, and for 16-bit kinds the node listed float32 for control flow.
artifact::CompiledProgram check_compiles(const ModelBuilder& b, const Kind& k, const char* op, const std::string& name) {
  const std::string what = std::string(k.name) + " " + op;
  TempDir dir;
  b.save(dir / "m.onnx");
  CompileResult r = compile(dir / "m.onnx", dir / "m.kiln", cross(k));
  auto cp = artifact::read_file(dir / "m.kiln");
  const ir::Model& m = cp.model;
  EXPECT_TRUE(m.segments.empty()) << what << ": a host segment";
  auto cs = conditionals(m);
  EXPECT_EQ(cs.size(), 1u) << what;
  if (cs.size() != 1) return cp;
  EXPECT_EQ(cs[0]->op_type, op) << what;
  EXPECT_EQ(cs[0]->name, name) << what;
  expect_float32_bodies(m, *cs[0], {1, 4, 8, 8}, what);
  // kiln inspect lists it as a conditional node.
  auto j = conditionals_json(m);
  EXPECT_EQ(j.size(), 1u) << what;
  if (k.precision != Precision::fp32) {
    auto f = share_entry(cp, name);
    EXPECT_FALSE(f.is_null()) << what << ": not among the float32 nodes: " << cp.metadata_json;
    if (!f.is_null()) {
      EXPECT_NE(f.at("why").get<std::string>().find("control flow: its bodies run in float32"), std::string::npos)
          << f.dump();
    }
    bool noted = false;
    for (auto& n : r.notes) noted |= n.find("control flow") != std::string::npos;
    EXPECT_TRUE(noted) << what << ": the 16-bit share note does not say why the node is float32";
    // The precision check runs the node with its float32 bodies; an If on
    // the data (conv_if_model's ReduceSum(c) > 0) bounds it: the sum
    // deciding the branch is compared, what follows the If is not.
    auto check = nlohmann::json::parse(cp.metadata_json).at("precision_check");
    EXPECT_EQ(check.value("state", ""), "checked") << check.dump();
    EXPECT_EQ(check.value("control_flow", 0), 1) << check.dump();
    if (std::string(op) == "If") {
      const nlohmann::json b = check.value("boundaries", nlohmann::json::array());
      EXPECT_EQ(b.size(), 1u) << check.dump();
      if (b.size() == 1) {
        EXPECT_EQ(b[0].value("node", ""), name) << check.dump();
        EXPECT_EQ(b[0].at("values"), nlohmann::json::array({"s"})) << check.dump();
      }
    } else {
      EXPECT_FALSE(check.contains("boundaries")) << check.dump();
    }
    EXPECT_LT(check.value("output_error_after", 1.0), k.precision == Precision::fp16 ? 1e-2 : 4e-2) << check.dump();
  }
  return cp;
}

/// Whether the main graph has a channels-last convolution or 1x1 matmul
/// (the layout pass ran around the conditional node).
bool has_channels_last(const ir::Model& m) {
  for (auto& n : m.main.nodes) {
    if (n.domain != kCudaDomain) continue;
    if (n.op_type == "Conv" && n.i("nhwc", 0)) return true;
  }
  return false;
}

TEST(CudaControlPrecision, IfBetweenConvolutionsIsAConditionalNodeInEveryProgramKind) {
  for (const Kind& k : kKinds) {
    SCOPED_TRACE(k.name);
    auto cp = check_compiles(conv_if_model(), k, "If", "if");
    EXPECT_TRUE(has_channels_last(cp.model)) << "the layout pass ran in " << k.name << " programs";
    // The then_branch's Conv with a bias: the bias split into an Add (a
    // kernel after the cuDNN call), as in the main graph.
    int convs = 0;
    for (auto& n : conditionals(cp.model).at(0)->graph("then_branch").nodes) convs += n.op_type == "Conv";
    EXPECT_EQ(convs, 1);
  }
}

TEST(CudaControlPrecision, LoopBetweenConvolutionsIsAConditionalNodeInEveryProgramKind) {
  for (const Kind& k : kKinds) {
    SCOPED_TRACE(k.name);
    auto cp = check_compiles(conv_loop_model(3), k, "Loop", "loop");
    EXPECT_TRUE(has_channels_last(cp.model));
    const ir::Node& loop = *conditionals(cp.model).at(0);
    EXPECT_EQ(loop.i("trip_count"), 3);
    // The loop's initial value r enters as float32 NCHW.
    EXPECT_EQ(cp.model.value(loop.inputs.at(2)).dtype, DType::f32);
    EXPECT_EQ(ir::to_sizes(*cp.model.value(loop.inputs.at(2)).shape), (std::vector<int64_t>{1, 4, 8, 8}));
  }
}

TEST(CudaControlPrecision, MatmulIfAndLoopInSixteenBitPrograms) {
  // No convolution: only the precision pass rewrites around them.
  for (const Kind& k : kKinds) {
    SCOPED_TRACE(k.name);
    TempDir dir;
    for (auto [b, op, name] : {std::tuple{data_if_gemm_model(), "If", "if"}, {loop_static_model(4, 4, 32), "Loop", "loop"}}) {
      b.save(dir / "m.onnx");
      compile(dir / "m.onnx", dir / "m.kiln", cross(k));
      auto cp = artifact::read_file(dir / "m.kiln");
      EXPECT_TRUE(cp.model.segments.empty()) << op;
      auto cs = conditionals(cp.model);
      ASSERT_EQ(cs.size(), 1u) << op;
      EXPECT_EQ(cs[0]->op_type, op);
      if (k.precision != Precision::fp32) {
        EXPECT_FALSE(share_entry(cp, name).is_null()) << op;
      }
    }
  }
}

TEST(CudaControlPrecision, BodyReadOfAValueAnotherKernelReadsKeepsItsProducer) {
  // host_fp32_model's If reads q in its branches and u = w - q reads it in
  // the main graph. In fp16 both read q's float32 Cast: with only u counted
  // as its reader, the element-wise fusion folded that Cast into u's kernel
  // and the branches read a value nothing wrote. Host fallback on: the
  // model's NonZero, Gemm, ... run on the host, the If on the device.
  TempDir dir;
  host_fp32_model().save(dir / "h.onnx");
  for (const Kind& k : kKinds) {
    SCOPED_TRACE(k.name);
    SessionOptions o = cross(k);
    o.fallback = Fallback::host;
    compile(dir / "h.onnx", dir / "h.kiln", o);
    auto cp = artifact::read_file(dir / "h.kiln");
    const ir::Model& m = cp.model;
    EXPECT_FALSE(m.segments.empty()) << "the model's host nodes";
    auto cs = conditionals(m);
    ASSERT_EQ(cs.size(), 1u);
    expect_float32_bodies(m, *cs[0], {}, k.name);
    // Each outer value a branch reads is written by a main-graph node
    // before the If (or is a constant or model input).
    std::set<ir::ValueId> written(m.main.inputs.begin(), m.main.inputs.end());
    for (auto& n : m.main.nodes) {
      if (&n == cs[0]) break;
      written.insert(n.outputs.begin(), n.outputs.end());
    }
    int outer = 0;
    for (const char* b : {"then_branch", "else_branch"})
      for (auto& n : cs[0]->graph(b).nodes)
        for (auto v : n.inputs)
          if (v != ir::kNoValue && m.value(v).name.rfind("q", 0) == 0) {
            ++outer;
            EXPECT_TRUE(written.count(v) || m.value(v).constant) << b << " reads '" << m.value(v).name << "'";
          }
    EXPECT_EQ(outer, 2) << "each branch reads q";
  }
}

// The GPU test's compile (CheckedHeadBeforeADataIfMatchesRefInFp16), cross:
// the check keeps the head's subtraction and its convolutions, the If on the
// data bounds it, and the If is a conditional node without a host segment.
TEST(CudaControlPrecision, CheckedHeadBeforeADataIfCompiles) {
  TempDir dir;
  data_if_head_model().save(dir / "m.onnx");
  compile(dir / "m.onnx", dir / "m.kiln", cross(kKinds[0]));
  auto cp = artifact::read_file(dir / "m.kiln");
  EXPECT_TRUE(cp.model.segments.empty());
  ASSERT_EQ(conditionals(cp.model).size(), 1u);
  auto check = nlohmann::json::parse(cp.metadata_json).at("precision_check");
  ASSERT_EQ(check.value("state", ""), "checked") << check.dump();
  std::set<std::string> kept;
  for (auto& k : check.at("kept")) kept.insert(k.at("node").get<std::string>());
  // The pipeline splits each Conv's bias into an Add before the check.
  EXPECT_EQ(kept, (std::set<std::string>{"conv_a", "conv_a_bias", "conv_b", "conv_b_bias", "sub"})) << check.dump();
  ASSERT_EQ(check.value("boundaries", nlohmann::json::array()).size(), 1u) << check.dump();
  EXPECT_EQ(check["boundaries"][0].value("node", ""), "if");
  for (const char* name : {"conv_a", "conv_a_bias", "conv_b", "conv_b_bias", "sub"}) {
    auto f = share_entry(cp, name);
    EXPECT_FALSE(f.is_null()) << name << " is not float32: " << cp.metadata_json;
  }
}

TEST(CudaControlPrecision, SileroVadFp16CompilesWithItsIfOnTheDevice) {
  const std::filesystem::path model = std::filesystem::path(KILN_SOURCE_DIR) / ".models" / "silero_vad.onnx";
  if (!std::filesystem::exists(model))
    GTEST_SKIP() << model << " is not there (tools/models fetches it): Silero VAD not compiled";
  TempDir dir;
  SessionOptions o = cross(kKinds[0]);
  o.input_shapes = {{"input", {1, 576}}, {"state", {2, 1, 128}}};
  CompileResult r = compile(model, dir / "s.kiln", o);  // specialize_values off: the If on sr stays
  auto cp = artifact::read_file(dir / "s.kiln");
  EXPECT_TRUE(cp.model.segments.empty()) << "a host segment in Silero VAD fp16";
  auto cs = conditionals(cp.model);
  ASSERT_EQ(cs.size(), 1u);
  EXPECT_EQ(cs[0]->op_type, "If");
  expect_float32_bodies(cp.model, *cs[0], {}, "silero");
  EXPECT_FALSE(share_entry(cp, cs[0]->name).is_null()) << cp.metadata_json;
  // The precision check runs it; the If is on the integer sample rate (the
  // same branch in both runs): no selection bounds the check.
  auto check = nlohmann::json::parse(cp.metadata_json).at("precision_check");
  EXPECT_EQ(check.value("state", ""), "checked") << check.dump();
  EXPECT_EQ(check.value("control_flow", 0), 1) << check.dump();
  EXPECT_FALSE(check.contains("boundaries")) << check.dump();
  std::printf("silero op18 fp16 precision check: %zu of %d nodes kept, output error %s -> %s, %.0f ms\n",
              check.value("kept", nlohmann::json::array()).size(), check.value("nodes", 0),
              check["output_error_before"].dump().c_str(), check["output_error_after"].dump().c_str(),
              check.value("ms", 0.0));
  // Each branch holds the model's convolutions and its LSTM's matmuls
  // (the exporter wrote the LSTM as Gemm, Sigmoid and Tanh nodes).
  for (const char* b : {"then_branch", "else_branch"}) {
    std::map<std::string, int> ops;
    for (auto& n : cs[0]->graph(b).nodes) ++ops[n.op_type];
    EXPECT_EQ(ops["Conv"], 6) << b;
    EXPECT_EQ(ops["Gemm"], 2) << b;
  }
}

}  // namespace
}  // namespace kiln::testing
