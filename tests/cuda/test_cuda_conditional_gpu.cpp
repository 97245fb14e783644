// Conditional nodes on a GPU (label `cuda`; SKIPPED without a device): the
// probe that control flow inside a captured CUDA graph works the way the
// cuda target uses it. An NVRTC-compiled kernel calls kiln's own declaration
// of the device builtin cudaGraphSetConditional (kSetConditionalDecl; NVRTC
// has no header for it), the driver resolves it when the module is loaded
// (from the cubin, and from PTX: the path of an artifact for an older GPU),
// and an IF node with an else body and a WHILE node, added to a graph while
// it is captured (conditional.h), take the condition set on the device.
// Then programs: an If on a data condition compiled to a kiln.cuda.If node
// matches the ref target on both branches, captured (a CUDA graph),
// profiled (uncaptured: the condition read back) and from an artifact.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "artifact/artifact.h"
#include "cuda_models.h"
#include "kiln/compile.h"
#include "kiln/errors.h"
#include "kiln/session.h"
#include "targets/cuda/compile/nvrtc.h"
#include "targets/cuda/run/conditional.h"
#include "targets/cuda/run/driver.h"

namespace kiln::targets::cuda {
namespace {

/// The probe's kernels: set_if / set_while set a conditional from a device
/// flag, store writes a constant, init / step drive a counted loop whose
/// trip count n is read from device memory (so one graph serves any n).
std::string probe_source() {
  return std::string(kSetConditionalDecl) + set_conditional_kernel("set_if", "bool") +
         set_conditional_kernel("set_while", "int") +
         "extern \"C\" __global__ void store(int* out, int v) { *out = v; }\n"
         "extern \"C\" __global__ void init(int* x, int* more, const int* n) { *x = 0; *more = 0 < *n; }\n"
         "extern \"C\" __global__ void step(int* x, int* more, const int* n) { *x += 1; *more = *x < *n; }\n";
}

/// Device memory of the probe: cond (bool), out, x, more, n (int).
struct Buffers {
  DeviceBuffer cond{1, "cond"}, out{4, "out"}, x{4, "x"}, more{4, "more"}, n{4, "n"};
};

void launch(CUmodule mod, const char* fn, CUstream s, std::initializer_list<void*> args) {
  const DriverApi& d = driver();
  CUfunction f = nullptr;
  check(d.cuModuleGetFunction(&f, mod, fn), fn);
  std::vector<void*> a(args);
  check(d.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, a.data(), nullptr), fn);
}

/// Captures: set_if(cond) -> IF { store(out, 1) } ELSE { store(out, 2) } ->
/// init -> set_while(more) -> WHILE { step; set_while(more) }, and
/// instantiates it. The bodies are captured on `side`.
CUgraphExec build_graph(CUmodule mod, CUstream s, CUstream side, Buffers& b) {
  const DriverApi& d = driver();
  CUdeviceptr cond = b.cond.get(), out = b.out.get(), x = b.x.get(), more = b.more.get(), n = b.n.get();
  check(d.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
  CUgraph g = nullptr;
  try {
    CUgraphConditionalHandle hi = create_conditional_handle(s, 0, true);
    launch(mod, "set_if", s, {&hi, &cond});
    auto if_bodies = add_conditional_node(s, hi, CU_GRAPH_COND_TYPE_IF, 2);
    EXPECT_EQ(if_bodies.size(), 2u);
    int one = 1, two = 2;
    capture_into(side, if_bodies[0], [&](CUstream t) { launch(mod, "store", t, {&out, &one}); }, "then body");
    capture_into(side, if_bodies[1], [&](CUstream t) { launch(mod, "store", t, {&out, &two}); }, "else body");
    CUgraphConditionalHandle hw = create_conditional_handle(s, 0, true);
    launch(mod, "init", s, {&x, &more, &n});
    launch(mod, "set_while", s, {&hw, &more});
    auto loop = add_conditional_node(s, hw, CU_GRAPH_COND_TYPE_WHILE, 1);
    capture_into(side, loop[0], [&](CUstream t) {
      launch(mod, "step", t, {&x, &more, &n});
      launch(mod, "set_while", t, {&hw, &more});
    }, "loop body");
  } catch (...) {
    d.cuStreamEndCapture(s, &g);
    if (g) d.cuGraphDestroy(g);
    throw;
  }
  check(d.cuStreamEndCapture(s, &g), "cuStreamEndCapture");
  CUgraphExec exec = nullptr;
  CUresult r = d.cuGraphInstantiateWithFlags(&exec, g, 0);
  d.cuGraphDestroy(g);
  check(r, "cuGraphInstantiate (a graph with conditional nodes)");
  return exec;
}

/// Runs the graph of `mod` for each (condition, trip count) and checks out
/// (1: then, 2: else) and the loop counter x (== n).
void run_probe(CUmodule mod) {
  const DriverApi& d = driver();
  CUstream s = nullptr, side = nullptr;
  check(d.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  check(d.cuStreamCreate(&side, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  Buffers b;
  CUgraphExec exec = build_graph(mod, s, side, b);
  for (bool c : {true, false, true})
    for (int n : {5, 0, 1, 37}) {
      int out = -1, x = -1, zero = 0;
      check(d.cuMemcpyHtoD(b.cond.get(), &c, 1), "cond");
      check(d.cuMemcpyHtoD(b.n.get(), &n, 4), "n");
      check(d.cuMemcpyHtoD(b.out.get(), &zero, 4), "out");
      check(d.cuGraphLaunch(exec, s), "cuGraphLaunch");
      check(d.cuStreamSynchronize(s), "cuStreamSynchronize");
      check(d.cuMemcpyDtoH(&out, b.out.get(), 4), "out");
      check(d.cuMemcpyDtoH(&x, b.x.get(), 4), "x");
      EXPECT_EQ(out, c ? 1 : 2) << "IF with else body, condition " << c;
      EXPECT_EQ(x, n) << "WHILE, trip count " << n;
    }
  d.cuGraphExecDestroy(exec);
  d.cuStreamDestroy(side);
  d.cuStreamDestroy(s);
}

TEST(CudaConditional, CubinCallingOwnDeclarationLoadsAndDrivesIfElseAndWhile) {
  use_device(0);
  DeviceFacts f = device_facts(0);
  KernelBundle k = nvrtc_compile(probe_source(), f.arch);
  CUmodule mod = nullptr;
  check(driver().cuModuleLoadData(&mod, k.cubin.data()), "cuModuleLoadData (cubin calling cudaGraphSetConditional)");
  run_probe(mod);
  driver().cuModuleUnload(mod);
  std::printf("conditional nodes: %s, driver %s: cubin with its own cudaGraphSetConditional declaration loaded; "
              "IF/else and WHILE ran\n",
              f.name.c_str(), f.libraries.at(0).second.c_str());
}

TEST(CudaConditional, PtxCallingOwnDeclarationJitsAndRuns) {
  use_device(0);
  DeviceFacts f = device_facts(0);
  KernelBundle k = nvrtc_compile(probe_source(), f.arch);
  CUmodule mod = nullptr;
  check(driver().cuModuleLoadData(&mod, k.ptx.c_str()), "cuModuleLoadData (PTX calling cudaGraphSetConditional)");
  run_probe(mod);
  driver().cuModuleUnload(mod);
}

TEST(CudaConditional, NodeOutsideCaptureIsANamedError) {
  use_device(0);
  CUstream s = nullptr;
  check(driver().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  try {
    create_conditional_handle(s, 0, true);
    ADD_FAILURE() << "a handle was created on a stream that is not capturing";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not capturing"), std::string::npos) << e.what();
  }
  driver().cuStreamDestroy(s);
}

SessionOptions options(Target t) {
  SessionOptions o;
  o.target = t;
  o.use_cache = false;
  o.specialize_values = false;
  return o;
}

/// x [b, d] with every element of sign `sign` (so ReduceSum(x) > 0 picks then).
Tensor signed_wave(int64_t b, int64_t d, float sign) {
  Tensor t(DType::f32, {b, d});
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = sign * (0.1f + std::fabs(std::sin(0.37f * static_cast<float>(i))));
  return t;
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  for (int64_t i = 0; i < want.numel(); ++i) {
    double a = got.data<float>()[i], b = want.data<float>()[i];
    ASSERT_LE(std::fabs(a - b), 1e-4 + 1e-3 * std::fabs(b)) << what << "[" << i << "]";  // TF32 off: fp32 matmul
  }
}

TEST(CudaConditionalProgram, DataIfRunsAsAConditionalNodeOnBothBranches) {
  kiln::testing::TempDir dir;
  kiln::testing::data_if_gemm_model(8, 256).save(dir / "if.onnx");
  compile(dir / "if.onnx", dir / "if.kiln", options(Target::cuda()));
  auto cp = artifact::read_file(dir / "if.kiln");
  int ifs = 0;
  for (auto& n : cp.model.main.nodes) ifs += n.domain == kCudaDomain && n.op_type == "If";
  ASSERT_EQ(ifs, 1);
  ASSERT_TRUE(cp.model.segments.empty());
  Session ref(dir / "if.onnx", options(Target::ref()));
  auto gpu = Session::load(dir / "if.kiln", options(Target::cuda()));
  for (float sign : {1.f, -1.f, 1.f}) {
    std::map<std::string, Tensor> in{{"x", signed_wave(8, 256, sign)}};
    auto want = ref.run(in).at("y");
    expect_close(gpu.run(in).at("y"), want, sign > 0 ? "then (graph)" : "else (graph)");
    RunProfile prof;  // steps one by one: the If reads its condition back
    expect_close(gpu.run(in, &prof).at("y"), want, sign > 0 ? "then (profiled)" : "else (profiled)");
  }
}

}  // namespace
}  // namespace kiln::targets::cuda

int main(int argc, char** argv) {
  if (!kiln::targets::cuda::device_present()) {
    std::printf("SKIPPED: no CUDA device on this machine (the cuda tests need one)\n");
    return 77;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
