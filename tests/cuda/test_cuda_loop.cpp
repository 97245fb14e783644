// WHILE conditional nodes of the cuda target, compile side (label `unit`,
// no GPU needed: cross-compiled for sm_90 with heuristic tuning): an ONNX
// Scan or Loop becomes one kiln.cuda.Loop node whose body is lowered like the
// main graph, with no host segment; kiln inspect lists it as WHILE; a Loop
// whose scan outputs would need a data-dependent trip count stays on the
// host with its reason. Running them on a GPU: test_cuda_loop_gpu.cpp.
#include <gtest/gtest.h>

#include <set>

#include "artifact/artifact.h"
#include "cuda_models.h"
#include "kiln/compile.h"
#include "kiln/errors.h"
#include "runtime/inspect.h"
#include "targets/cuda/run/cuda_ops.h"

namespace kiln::testing {
namespace {

using targets::cuda::kCudaDomain;

SessionOptions cross() {
  SessionOptions o = cross_options();
  o.fallback = Fallback::error;  // any host node fails the compile
  return o;
}

/// Compiles `b` for sm_90 without a GPU and returns the artifact's program.
artifact::CompiledProgram compile_model(const ModelBuilder& b, const TempDir& dir) {
  b.save(dir / "m.onnx");
  CompileResult r = compile(dir / "m.onnx", dir / "m.kiln", cross());
  EXPECT_TRUE(r.notes.empty()) << r.notes.at(0);
  return artifact::read_file(dir / "m.kiln");
}

/// Compiles dir/m.onnx with --fallback error, expecting a refusal naming
/// `why`, then with host fallback; returns the host-fallback program.
artifact::CompiledProgram refused_then_on_host(const TempDir& dir, const std::string& why) {
  try {
    compile(dir / "m.onnx", dir / "err.kiln", cross());
    ADD_FAILURE() << "compiled with --fallback error; expected a refusal naming: " << why;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
  SessionOptions o = cross();
  o.fallback = Fallback::host;
  compile(dir / "m.onnx", dir / "host.kiln", o);
  return artifact::read_file(dir / "host.kiln");
}

/// The program's one kiln.cuda.Loop node (a test failure when not one).
const ir::Node* the_loop(const ir::Model& m) {
  const ir::Node* found = nullptr;
  int count = 0;
  for (auto& n : m.main.nodes)
    if (n.domain == kCudaDomain && n.op_type == "Loop") found = &n, ++count;
  EXPECT_EQ(count, 1);
  return found;
}

std::multiset<std::string> body_kernels(const ir::Node& loop) {
  std::multiset<std::string> fns;
  for (auto& n : loop.graph("body").nodes) {
    EXPECT_EQ(n.domain, kCudaDomain) << n.label();
    if (n.op_type == "Kernel") {
      std::string fn = n.s("fn", "");
      fns.insert(fn.substr(fn.find('_') + 1));  // "k3_scanread" -> "scanread"
    } else {
      fns.insert(n.op_type);
    }
  }
  return fns;
}

TEST(CudaLoop, ScanBecomesAWhileNodeWithSliceKernels) {
  TempDir dir;
  auto cp = compile_model(scan_cumsum_model(6, 8, /*reverse=*/true, /*out_axis=*/1), dir);
  const ir::Model& m = cp.model;
  EXPECT_TRUE(m.segments.empty()) << "no host segment: the Scan runs in the CUDA graph";
  const ir::Node* loop = the_loop(m);
  ASSERT_NE(loop, nullptr);
  EXPECT_EQ(loop->s("source_op", ""), "Scan");
  EXPECT_EQ(loop->i("trip_count"), 6);
  EXPECT_EQ(loop->i("carried"), 1);
  // Body: the slice of x read at the iteration, the Add, the row of cum written.
  EXPECT_EQ(body_kernels(*loop), (std::multiset<std::string>{"scanread", "add", "scanwrite"}));
  const ir::Graph& body = loop->graph("body");
  ASSERT_EQ(body.inputs.size(), 3u);  // iteration, condition, sum_in
  EXPECT_EQ(m.value(body.inputs[0]).dtype, DType::i64);
  // The control kernel and the reversed read are in the program's source.
  auto bundle = targets::cuda::decode_bundle(cp.kernels, "test");
  const std::string fn = loop->s("control_fn", "");
  EXPECT_NE(bundle.source.find("void " + fn + "(unsigned long long handle"), std::string::npos) << fn;
  EXPECT_NE(bundle.source.find("6ll - 1 - i"), std::string::npos) << "scan_input_directions = 1";
  EXPECT_NE(bundle.source.find("extern \"C\" __device__ void cudaGraphSetConditional"), std::string::npos);
  for (auto& n : body.nodes) EXPECT_EQ(n.s("cubin", ""), targets::cuda::cubin_digest(bundle)) << n.label();
  // kiln inspect shows it as a WHILE node.
  auto j = conditionals_json(m);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["type"], "WHILE");
  EXPECT_EQ(j[0]["source_op"], "Scan");
  EXPECT_EQ(j[0]["trip_count"], 6);
  EXPECT_EQ(j[0]["body"]["nodes"], 3);
}

TEST(CudaLoop, ScanOutputsFeedDeviceNodesThroughInferredShapes) {
  TempDir dir;
  auto cp = compile_model(scan_cumsum_model(6, 8, false, 1, /*relu_after=*/true), dir);
  const ir::Model& m = cp.model;
  EXPECT_TRUE(m.segments.empty()) << "the Relus after the Scan run on the device";
  const ir::Node* loop = the_loop(m);
  ASSERT_NE(loop, nullptr);
  EXPECT_EQ(ir::to_sizes(*m.value(loop->outputs.at(0)).shape), (std::vector<int64_t>{8}));
  EXPECT_EQ(ir::to_sizes(*m.value(loop->outputs.at(1)).shape), (std::vector<int64_t>{8, 6}));
}

TEST(CudaLoop, StaticLoopWithScanOutputBecomesAWhileNode) {
  TempDir dir;
  auto cp = compile_model(loop_static_model(5, 4, 32), dir);
  const ir::Model& m = cp.model;
  EXPECT_TRUE(m.segments.empty());
  const ir::Node* loop = the_loop(m);
  ASSERT_NE(loop, nullptr);
  EXPECT_EQ(loop->s("source_op", ""), "Loop");
  EXPECT_EQ(loop->i("trip_count"), 5);
  EXPECT_EQ(m.value(loop->inputs.at(0)).name, "M");
  EXPECT_EQ(loop->inputs.at(1), ir::kNoValue) << "no cond input";
  auto ops = body_kernels(*loop);
  EXPECT_EQ(ops.count("Gemm"), 1u) << "the MatMul is a cuBLASLt call captured into the body";
  EXPECT_EQ(ops.count("scanwrite"), 1u);
  EXPECT_EQ(ops.count("scanread"), 0u);
  // The scan output keeps its declared [trips, B] shape.
  ASSERT_EQ(loop->outputs.size(), 2u);
  EXPECT_EQ(ir::to_sizes(*m.value(loop->outputs[1]).shape), (std::vector<int64_t>{5, 4}));
}

TEST(CudaLoop, UntypedLoopBodyIsTypedFromTheInitialValues) {
  TempDir dir;
  auto cp = compile_model(loop_static_model(5, 4, 32, /*typed_body=*/false), dir);
  const ir::Model& m = cp.model;
  EXPECT_TRUE(m.segments.empty());
  const ir::Node* loop = the_loop(m);
  ASSERT_NE(loop, nullptr);
  const ir::Graph& body = loop->graph("body");
  ASSERT_EQ(body.inputs.size(), 3u);
  EXPECT_EQ(ir::to_sizes(*m.value(body.inputs[2]).shape), (std::vector<int64_t>{4, 32})) << "x_in typed as x0";
  EXPECT_EQ(body_kernels(*loop).count("Gemm"), 1u);
}

TEST(CudaLoop, SwapOfCarriedValuesCompilesWithTheBodyInputAsOutput) {
  TempDir dir;
  auto cp = compile_model(loop_swap_model(6, 8), dir);
  const ir::Node* loop = the_loop(cp.model);
  ASSERT_NE(loop, nullptr);
  const ir::Graph& body = loop->graph("body");
  ASSERT_EQ(body.outputs.size(), 3u);
  EXPECT_EQ(body.outputs[1], body.inputs[3]) << "next a = b_in: the runtime stages it (a swap)";
}

TEST(CudaLoop, CarriedValueChangingShapeStaysOnTheHostAsItCame) {
  // Each iteration concatenates: x grows by one row, so the body's output
  // is not the initial value's shape; the Loop runs on the host, its body
  // left untyped as it came.
  TempDir dir;
  loop_growing_model().save(dir / "m.onnx");
  auto cp = refused_then_on_host(dir, "loop-carried output 'x_out' is float32 [2,4] in the body");
  int loops = 0;
  for (auto& node : cp.model.main.nodes)
    if (node.op_type == "Loop") {
      ++loops;
      EXPECT_TRUE(node.domain.empty());
      const ir::Value& x_in = cp.model.value(node.graph("body").inputs.at(2));
      EXPECT_FALSE(x_in.shape && ir::is_static(*x_in.shape)) << "the host's body keeps its open shape";
    }
  EXPECT_EQ(loops, 1);
}

TEST(CudaLoop, DataDependentConditionWithoutScanOutputsRunsOnTheDevice) {
  TempDir dir;
  auto cp = compile_model(loop_while_model(16, false), dir);
  const ir::Model& m = cp.model;
  EXPECT_TRUE(m.segments.empty());
  const ir::Node* loop = the_loop(m);
  ASSERT_NE(loop, nullptr);
  EXPECT_EQ(loop->i("trip_count"), -1) << "decided on the device at run time";
  EXPECT_EQ(m.value(loop->inputs.at(0)).name, "max_trips");
  EXPECT_EQ(m.value(loop->inputs.at(1)).name, "cond");
  EXPECT_EQ(loop->i("carried"), 2);
  auto j = conditionals_json(m);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["condition"], "cond");
  EXPECT_EQ(j[0]["max_trip"], "max_trips");
}

TEST(CudaLoop, DataDependentScanOutputFallsBackToTheHostWithTheReason) {
  TempDir dir;
  loop_while_model(16, true).save(dir / "m.onnx");
  auto cp = refused_then_on_host(dir, "scan output(s) need a trip count known at compile time");
  ASSERT_FALSE(cp.model.segments.empty());
  bool host_loop = false;
  for (auto& n : cp.model.main.nodes) host_loop |= n.domain.empty() && n.op_type == "Loop";
  EXPECT_TRUE(host_loop) << "the ONNX Loop stays, in a host segment";
  EXPECT_TRUE(conditionals_json(cp.model).empty());
}

TEST(CudaLoop, ConditionalNodesOffSendLoopAndScanToTheHost) {
  TempDir dir;
  scan_cumsum_model(4, 8).save(dir / "m.onnx");
  setenv("KILN_CUDA_CONDITIONAL", "0", 1);
  try {
    compile(dir / "m.onnx", dir / "off.kiln", cross());
    ADD_FAILURE() << "compiled with conditional nodes off and --fallback error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KILN_CUDA_CONDITIONAL=0): Scan runs on the host"), std::string::npos)
        << e.what();
  }
  unsetenv("KILN_CUDA_CONDITIONAL");
}

}  // namespace
}  // namespace kiln::testing
