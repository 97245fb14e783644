// Cross-compilation for the cuda target (label `unit`, no GPU needed): with
// --tuning heuristic a cuda artifact for a named architecture is built on a
// machine without that GPU (or without any); its matmul and convolution
// algorithms are left to the libraries' heuristics at load, and everything
// else (cubin, PTX, memory plan, compatibility block) is complete.
#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "artifact/artifact.h"
#include "cuda_models.h"
#include "kiln/compile.h"
#include "kiln/errors.h"
#include "kiln/session.h"
#include "targets/cuda/run/cuda_ops.h"
#include "targets/cuda/run/driver.h"
#include "targets/host.h"

namespace kiln::testing {
namespace {

/// An architecture that is a cross-compilation here and cannot run here:
/// sm_90 without a GPU, else a newer one than the GPU's (an older one would
/// run through its PTX: targets::runs_through_ptx).
std::string foreign_arch() {
  if (!targets::cuda::device_present()) return "sm_90";
  int here = targets::sm_number(targets::cuda::device_facts(0).arch).value_or(0);
  return here < 100 ? "sm_100" : "sm_120";
}

SessionOptions cross(const std::string& arch) {
  SessionOptions o;
  o.target = Target::cuda();
  o.arch = arch;
  o.tuning = Tuning::heuristic;
  return o;
}

/// mlp (Gemm + Relu, cuBLASLt) followed by nothing else, and the conv net
/// (cuDNN + a Gemm): both library families deferred to the load.
TEST(CudaCross, HeuristicCompileForANamedArchNeedsNoGpu) {
  TempDir dir;
  conv_model().save(dir / "c.onnx");
  std::string arch = foreign_arch();
  CompileResult r = compile(dir / "c.onnx", dir / "c.kiln", cross(arch));
  EXPECT_GT(r.artifact_bytes, 0u);
  auto cp = artifact::read_file(dir / "c.kiln");
  EXPECT_EQ(cp.compat.target, "cuda");
  EXPECT_EQ(cp.compat.device_arch, arch);
  EXPECT_EQ(cp.compat.tuning, "heuristic");
  std::map<std::string, std::string> libs(cp.compat.library_versions.begin(), cp.compat.library_versions.end());
  EXPECT_EQ(libs["cublaslt"], "any (chosen at load)");
  EXPECT_EQ(libs["cudnn"], "any (chosen at load)");
  EXPECT_EQ(libs["cuda_driver"], std::to_string(CUDA_VERSION));

  auto b = targets::cuda::decode_bundle(cp.kernels, "test");
  EXPECT_EQ(b.arch, arch);
  ASSERT_GT(b.cubin.size(), 20u);
  EXPECT_EQ(std::memcmp(b.cubin.data(), "\x7f" "ELF", 4), 0);
  uint16_t machine = 0;
  std::memcpy(&machine, b.cubin.data() + 18, 2);  // ELF e_machine
  EXPECT_EQ(machine, 190) << "EM_CUDA";
  EXPECT_NE(b.ptx.find(".target " + arch), std::string::npos);

  int gemms = 0, convs = 0;
  for (auto& n : cp.model.main.nodes) {
    if (n.op_type == "Gemm") {
      ++gemms;
      EXPECT_FALSE(n.has("algo")) << n.label();
      EXPECT_EQ(n.i("algo_at_load", 0), 1) << n.label();
      EXPECT_EQ(n.i("workspace", 0), int64_t{32} << 20) << n.label();
    }
    if (n.op_type == "Conv") {
      ++convs;
      EXPECT_EQ(n.i("algo", 0), -1) << n.label();
    }
  }
  EXPECT_EQ(gemms, 1);
  EXPECT_EQ(convs, 3);  // stem, residual block, depthwise
}

TEST(CudaCross, UnstridedPointwiseConvolutionsBecomeMatmuls) {
  TempDir dir;
  pointwise_model().save(dir / "p.onnx");
  compile(dir / "p.onnx", dir / "p.kiln", cross(foreign_arch()));
  auto cp = artifact::read_file(dir / "p.kiln");
  std::vector<std::vector<int64_t>> gemms;  // m, n, k, batch, stride_a, stride_b
  int convs = 0;
  for (auto& n : cp.model.main.nodes) {
    if (n.op_type == "Gemm") {
      EXPECT_EQ(n.s("source_op", ""), "Conv");
      gemms.push_back({n.i("m"), n.i("n"), n.i("k"), n.i("batch"), n.i("stride_a"), n.i("stride_b")});
    }
    convs += n.op_type == "Conv";
  }
  std::vector<std::vector<int64_t>> want = {{4, 35, 6, 2, 0, 6 * 35}, {6, 35, 4, 2, 0, 4 * 35}};
  EXPECT_EQ(gemms, want);
  EXPECT_EQ(convs, 1);
}

TEST(CudaCross, ResidualAddAndReluJoinTheMatmul) {
  TempDir dir;
  residual_model().save(dir / "r.onnx");
  compile(dir / "r.onnx", dir / "r.kiln", cross(foreign_arch()));
  auto cp = artifact::read_file(dir / "r.kiln");
  ASSERT_EQ(cp.model.main.nodes.size(), 1u) << "MatMul, bias Add, residual Add and Relu: one Gemm";
  const auto& g = cp.model.main.nodes[0];
  EXPECT_EQ(g.op_type, "Gemm");
  EXPECT_EQ(g.i("has_bias"), 1);
  EXPECT_EQ(g.i("has_c"), 1);
  EXPECT_FLOAT_EQ(g.f("beta"), 1.f);
  EXPECT_EQ(g.i("epilogue"), 1);
  ASSERT_EQ(g.inputs.size(), 4u);
  EXPECT_EQ(cp.model.value(g.inputs[3]).name, "x");
}

TEST(CudaCross, DecomposedLayerNormBecomesOneKernel) {
  // The pipeline's recognize_layernorm runs for cuda too: nine ONNX nodes
  // (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add) become the
  // one row kernel of LayerNormalization.
  TempDir dir;
  ModelBuilder b(13);
  b.input("x", 1, {4, 16, 64});
  b.initializer_i64("axes", {1}, {-1});
  b.initializer("two", {}, {2.f});
  b.initializer("eps", {}, {1e-5f});
  b.initializer("gamma", {64}, std::vector<float>(64, 1.5f));
  b.initializer("beta", {64}, std::vector<float>(64, 0.25f));
  b.node("ReduceMean", {"x", "axes"}, {"mean"});
  b.node("Sub", {"x", "mean"}, {"d"});
  b.node("Pow", {"d", "two"}, {"sq"});
  b.node("ReduceMean", {"sq", "axes"}, {"var"});
  b.node("Add", {"var", "eps"}, {"ve"});
  b.node("Sqrt", {"ve"}, {"sd"});
  b.node("Div", {"d", "sd"}, {"n"});
  b.node("Mul", {"n", "gamma"}, {"ng"});
  b.node("Add", {"ng", "beta"}, {"y"});
  b.output("y", 1, {4, 16, 64});
  b.save(dir / "ln.onnx");
  compile(dir / "ln.onnx", dir / "ln.kiln", cross(foreign_arch()));
  auto cp = artifact::read_file(dir / "ln.kiln");
  ASSERT_EQ(cp.model.main.nodes.size(), 1u);
  const ir::Node& k = cp.model.main.nodes[0];
  EXPECT_EQ(k.op_type, "Kernel");
  EXPECT_EQ(k.s("source_op", ""), "LayerNormalization");
}

// Host fallback partitions cross-compile too (the GPU side runs them:
// test_cuda_fallback_gpu.cpp, TwoHostSegmentsManyRunsMatchRef).
TEST(CudaCross, TwoHostNodesApartAreTwoHostSegments) {
  TempDir dir;
  two_host_segments_model().save(dir / "t.onnx");
  compile(dir / "t.onnx", dir / "t.kiln", cross("sm_90"));
  const ir::Model m = artifact::read_file(dir / "t.kiln").model;
  auto names = [&](const std::vector<ir::ValueId>& ids) {
    std::set<std::string> out;
    for (auto id : ids) out.insert(m.value(id).name);
    return out;
  };
  std::vector<std::string> devices;
  for (auto& s : m.segments) devices.push_back(s.device);
  ASSERT_EQ(devices, (std::vector<std::string>{"cuda", "host", "cuda", "host", "cuda"}));
  EXPECT_EQ(names(m.segments[1].to_host), std::set<std::string>{"a"});
  EXPECT_EQ(names(m.segments[1].to_device), std::set<std::string>{"e"});
  // The second reads the program input x on the host as well (copied down
  // only when the caller gave it on the device: run_device).
  EXPECT_EQ(names(m.segments[3].to_host), (std::set<std::string>{"t", "x"}));
  EXPECT_EQ(names(m.segments[3].to_device), std::set<std::string>{"f"});
}

TEST(CudaCross, TimedTuningWithoutTheGpuIsRefusedNamingTheOption) {
  TempDir dir;
  mlp_model().save(dir / "m.onnx");
  for (Tuning t : {Tuning::fast, Tuning::exhaustive}) {
    SessionOptions o = cross(foreign_arch());
    o.tuning = t;
    o.input_shapes["x"] = {2, 4};
    try {
      compile(dir / "m.onnx", dir / "m.kiln", o);
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_option) << e.what();
      std::string w = e.what();
      EXPECT_EQ(w.rfind("tuning:", 0), 0u) << w;
      EXPECT_NE(w.find("--tuning heuristic"), std::string::npos) << w;
    }
    EXPECT_FALSE(std::filesystem::exists(dir / "m.kiln"));
  }
}

TEST(CudaCross, ACrossCompiledArtifactRunsOnlyOnItsArchitecture) {
  TempDir dir;
  mlp_model().save(dir / "m.onnx");
  SessionOptions o = cross(foreign_arch());
  o.input_shapes["x"] = {2, 4};
  compile(dir / "m.onnx", dir / "m.kiln", o);
  auto mism = targets::check_runnable(artifact::read_compat(dir / "m.kiln"), Target::cuda());
  ASSERT_FALSE(mism.empty());
  EXPECT_EQ(mism[0].field, "device_arch");
  EXPECT_EQ(mism[0].artifact, o.arch);
  try {
    SessionOptions load;
    load.target = Target::cuda();
    Session::load(dir / "m.kiln", load);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::incompatible_artifact) << e.what();
    EXPECT_NE(std::string(e.what()).find("device_arch"), std::string::npos) << e.what();
  }
}

// Shape buckets on cuda: one program per bucket, each with its own cubin
// (carried in the program as the kiln.cuda.kernels constant) whose digest its
// Kernel nodes record; the weights stored once.
TEST(CudaCross, ShapeBucketsGiveOneProgramAndCubinPerBucket) {
  TempDir dir;
  batch_model().save(dir / "b.onnx");
  SessionOptions o = cross(foreign_arch());
  o.dims["N"] = DimSpec::parse("1,2,4");
  CompileResult r = compile(dir / "b.onnx", dir / "b.kiln", o);
  EXPECT_EQ(r.programs, 3);
  auto cp = artifact::read_file(dir / "b.kiln");
  ASSERT_EQ(cp.more.size(), 2u);
  std::vector<const ir::Model*> models = {&cp.model};
  for (auto& v : cp.more) models.push_back(&v.model);
  std::set<std::string> digests;
  for (auto* m : models) {
    auto b = targets::cuda::program_bundle(*m, {}, "b.kiln");
    EXPECT_NO_THROW(targets::cuda::check_bundle_matches(*m, b));
    digests.insert(targets::cuda::cubin_digest(b));
    int kernels = 0;
    for (auto& n : m->main.nodes) kernels += n.op_type == "Kernel";
    EXPECT_GE(kernels, 1);
  }
  EXPECT_EQ(digests.size(), 3u) << "each bucket's kernels bake in its own shapes";
  // Every bucket refers to the weights (stored once by the writer).
  size_t w_refs = 0;
  for (auto* m : models)
    for (auto& v : m->values) w_refs += v.constant && v.name == "W";
  EXPECT_EQ(w_refs, 3u);
}

}  // namespace
}  // namespace kiln::testing
