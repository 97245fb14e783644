// Conditional nodes of the cuda target, compile side (label `unit`, no GPU
// needed: cross-compiled for sm_90 with heuristic tuning): an If whose
// condition comes from tensor data becomes a kiln.cuda.If node whose
// branches are lowered like the main graph and write the If's outputs; the
// artifact keeps it (in 16-bit programs too); an If the lowering refuses
// stays on the host with its reason. Running them on a GPU: test_cuda_conditional_gpu.cpp.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

#include "artifact/artifact.h"
#include "cuda_models.h"
#include "kiln/compile.h"
#include "kiln/errors.h"
#include "targets/cuda/run/cuda_ops.h"

namespace kiln::testing {
namespace {

using targets::cuda::kCudaDomain;

SessionOptions cross() { return cross_options(); }

/// The program's kiln.cuda.If nodes.
std::vector<const ir::Node*> conditionals(const ir::Model& m) {
  std::vector<const ir::Node*> out;
  for (auto& n : m.main.nodes)
    if (n.domain == kCudaDomain && n.op_type == "If") out.push_back(&n);
  return out;
}

TEST(CudaConditional, DataIfBecomesAConditionalNodeWithLoweredBranches) {
  TempDir dir;
  data_if_gemm_model().save(dir / "if.onnx");
  CompileResult r = compile(dir / "if.onnx", dir / "if.kiln", cross());
  EXPECT_TRUE(r.notes.empty()) << r.notes.at(0);  // nothing on the host
  auto cp = artifact::read_file(dir / "if.kiln");
  const ir::Model& m = cp.model;
  EXPECT_TRUE(m.segments.empty()) << "no host segment: the If runs in the CUDA graph";
  auto ifs = conditionals(m);
  ASSERT_EQ(ifs.size(), 1u);
  const ir::Node& c = *ifs[0];
  EXPECT_EQ(m.value(c.inputs.at(0)).name, "cond");
  ASSERT_EQ(c.outputs.size(), 1u);
  EXPECT_EQ(m.value(c.outputs[0]).name, "branch");
  const std::string fn = c.s("cond_fn", "");
  EXPECT_NE(fn.find("setif"), std::string::npos) << fn;
  // Its kernel is in the program's cubin, calling kiln's own declaration.
  auto bundle = targets::cuda::decode_bundle(cp.kernels, "test");
  EXPECT_NE(bundle.source.find("void " + fn + "(unsigned long long handle, const bool* cond)"), std::string::npos);
  EXPECT_NE(bundle.source.find("extern \"C\" __device__ void cudaGraphSetConditional"), std::string::npos);
  // then: a cuBLASLt matmul and a kernel; else: one fused Tanh * 3 kernel.
  // Every body node is a kiln.cuda node and each branch writes 'branch'.
  std::map<std::string, std::multiset<std::string>> ops;
  for (const char* b : {"then_branch", "else_branch"}) {
    const ir::Graph& g = c.graph(b);
    ASSERT_EQ(g.outputs, c.outputs) << b;
    bool writes = false;
    for (auto& n : g.nodes) {
      EXPECT_EQ(n.domain, kCudaDomain) << b << ": " << n.label();
      ops[b].insert(n.op_type);
      for (auto v : n.outputs) writes |= v == c.outputs[0];
      if (n.op_type == "Kernel") EXPECT_EQ(n.s("cubin", ""), targets::cuda::cubin_digest(bundle)) << n.label();
    }
    EXPECT_TRUE(writes) << b << " writes the If's output itself (no copy)";
  }
  EXPECT_EQ(ops["then_branch"].count("Gemm"), 1u);
  EXPECT_EQ(ops["else_branch"], (std::multiset<std::string>{"Kernel"}));
  // The memory plan gives the then branch's MatMul result a slot of its own.
  ir::ValueId mm = -1;
  for (auto& n : c.graph("then_branch").nodes)
    if (n.op_type == "Gemm") mm = n.outputs.at(0);
  ASSERT_GE(mm, 0);
  if (m.value(mm).name != "branch") EXPECT_GE(cp.plan.offsets.at(static_cast<size_t>(mm)), 0);
}

TEST(CudaConditional, OffTheIfRunsOnTheHostAndFallbackErrorRefusesIt) {
  TempDir dir;
  data_if_model().save(dir / "if.onnx");
  setenv("KILN_CUDA_CONDITIONAL", "0", 1);
  SessionOptions o = cross();
  o.fallback = Fallback::error;
  try {
    compile(dir / "if.onnx", dir / "off.kiln", o);
    ADD_FAILURE() << "compiled with conditional nodes off and --fallback error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KILN_CUDA_CONDITIONAL=0"), std::string::npos) << e.what();
  }
  unsetenv("KILN_CUDA_CONDITIONAL");
  // On (the default): the same compile succeeds, wholly on the device.
  compile(dir / "if.onnx", dir / "on.kiln", o);
  auto cp = artifact::read_file(dir / "on.kiln");
  EXPECT_EQ(conditionals(cp.model).size(), 1u);
  EXPECT_TRUE(cp.model.segments.empty());
}

TEST(CudaConditional, SixteenBitProgramsRunTheIfAsAConditionalNode) {
  // The precision pass keeps the If float32 and its branches are lowered
  // strict float32 (test_cuda_control_precision.cpp has the details).
  TempDir dir;
  data_if_model().save(dir / "if.onnx");
  SessionOptions o = cross();
  o.precision = Precision::fp16;
  o.fallback = Fallback::error;
  compile(dir / "if.onnx", dir / "h.kiln", o);
  auto cp = artifact::read_file(dir / "h.kiln");
  EXPECT_EQ(conditionals(cp.model).size(), 1u);
  EXPECT_TRUE(cp.model.segments.empty());
}

}  // namespace
}  // namespace kiln::testing
