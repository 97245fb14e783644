// The cpu target: lowering to kiln.cpu nodes (fusion, layouts, packing,
// view folding), their oneDNN kernels, and the artifact round trip.
// Expected values are either worked out by hand (stated in comments) or
// computed by the ref target (the plain reference kernels) on the same model.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <thread>

#include "../onnx/model_builder.h"
#include "../passes/graph_pass_util.h"
#include "cpu_test_models.h"
#include "artifact/artifact.h"
#include "kiln/errors.h"
#include "onnx/importer.h"
#include "passes/passes.h"
#include "runtime/program.h"
#include "targets/cpu/run/cpu_kernels.h"
#include "targets/cpu/run/dnnl_util.h"
#include "targets/host.h"
#include "targets/pipeline.h"

namespace kiln::testing {
namespace {

/// `b` through target `t`'s pipeline, with this host's compat block; `bucketed`
/// and `ref` as run_pipeline's (a program of a shape-bucket set and the
/// set's reference program).
artifact::CompiledProgram compile_for(const ModelBuilder& b, const Target& t, bool bucketed = false,
                                      const ir::Model* ref = nullptr) {
  auto bytes = b.bytes();
  artifact::CompiledProgram cp;
  cp.model = onnx_import::import_bytes(bytes.data(), bytes.size(), ".", "test");
  passes::bind_input_shapes(cp.model, {});
  SessionOptions opt;
  opt.target = t;
  targets::run_pipeline(cp, opt, bucketed, ref);
  cp.compat = targets::host_facts(t);
  return cp;
}

std::map<std::string, Tensor> run(artifact::CompiledProgram cp, const std::map<std::string, Tensor>& in, int threads = 0) {
  Program p(std::move(cp));
  return p.run(in, threads);
}

int count(const ir::Model& m, const std::string& op, const std::string& domain = "kiln.cpu") {
  int c = 0;
  for_each_graph(const_cast<ir::Graph&>(m.main), [&](ir::Graph& g) {
    for (auto& n : g.nodes) c += n.op_type == op && n.domain == domain;
  });
  return c;
}

/// Deterministic values in [-1, 1): a fixed linear congruential sequence.
Tensor filled(std::vector<int64_t> shape, uint32_t seed) {
  Tensor t(DType::f32, shape);
  uint32_t s = seed * 2654435761u + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    t.data<float>()[i] = static_cast<float>(s >> 8) / 8388608.0f - 1.0f;
  }
  return t;
}

std::vector<float> floats(std::vector<int64_t> shape, uint32_t seed) {
  Tensor t = filled(shape, seed);
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

/// cpu == ref within rtol 1e-4 / atol 1e-5 for every output.
void expect_matches_ref(const ModelBuilder& b, const std::map<std::string, Tensor>& in) {
  auto ref = run(compile_for(b, Target::ref()), in);
  auto cpu = run(compile_for(b, Target::cpu()), in);
  ASSERT_EQ(ref.size(), cpu.size());
  for (auto& [name, r] : ref) {
    const Tensor& c = cpu.at(name);
    ASSERT_EQ(c.shape(), r.shape()) << name;
    for (int64_t i = 0; i < r.numel(); ++i) {
      float want = r.data<float>()[i], got = c.data<float>()[i];
      ASSERT_NEAR(got, want, 1e-5 + 1e-4 * std::fabs(want)) << name << " element " << i;
    }
  }
}

// y = Relu(Conv1x1(x) + x) with W = 2*I (16 channels) and bias 1, so
// y = max(0, 3x + 1) elementwise.
ModelBuilder residual_block() {
  ModelBuilder b;
  b.input("x", 1, {1, 16, 3, 3});
  std::vector<float> w(16 * 16, 0.f), bias(16, 1.f);
  for (int i = 0; i < 16; ++i) w[i * 16 + i] = 2.f;
  b.initializer("w", {16, 16, 1, 1}, w);
  b.initializer("b", {16}, bias);
  b.node("Conv", {"x", "w", "b"}, {"c"});
  b.node("Add", {"c", "x"}, {"a"});
  b.node("Relu", {"a"}, {"y"});
  b.output("y");
  return b;
}

TEST(CpuTarget, FusesResidualAddAndReluIntoTheConvolution) {
  auto cp = compile_for(residual_block(), Target::cpu());
  EXPECT_EQ(count(cp.model, "Conv"), 1);
  EXPECT_EQ(count(cp.model, "Add", ""), 0);
  EXPECT_EQ(count(cp.model, "Relu", ""), 0);
  // The input is reordered to the blocked layout once (the conv and its
  // residual operand share it), the output back once.
  EXPECT_EQ(count(cp.model, "Reorder"), 2);
  for (auto& n : cp.model.main.nodes)
    if (n.op_type == "Conv") {
      auto post = targets::cpu::read_post_ops(n);
      ASSERT_EQ(post.size(), 2u);
      EXPECT_EQ(post[0].kind, targets::cpu::PostOp::binary);
      EXPECT_EQ(post[1].kind, targets::cpu::PostOp::eltwise);
      EXPECT_EQ(post[1].alg, static_cast<int64_t>(dnnl::algorithm::eltwise_relu));
    }
  Tensor x = filled({1, 16, 3, 3}, 1);
  auto out = run(std::move(cp), {{"x", x}});
  const Tensor& y = out.at("y");
  ASSERT_EQ(y.shape(), (std::vector<int64_t>{1, 16, 3, 3}));
  for (int64_t i = 0; i < y.numel(); ++i)
    EXPECT_NEAR(y.data<float>()[i], std::max(0.f, 3 * x.data<float>()[i] + 1), 1e-6) << i;
}

TEST(CpuTarget, PacksWeightsAtCompileTimeAndChecksTheirLayoutAtLoad) {
  auto cp = compile_for(residual_block(), Target::cpu());
  // The packed weights replace the ONNX ones in the program's constants.
  bool packed = false, original = false;
  for (auto& v : cp.model.values) {
    if (!v.constant) continue;
    packed |= v.name == "w/packed";
    original |= v.name == "w";
  }
  EXPECT_TRUE(packed);
  EXPECT_FALSE(original);
  // Round trip through the artifact format: same results.
  auto bytes = std::make_shared<const std::vector<uint8_t>>(artifact::serialize(cp));
  auto back = artifact::read_bytes(bytes, "test");
  Tensor x = filled({1, 16, 3, 3}, 2);
  auto a = run(cp, {{"x", x}}), b = run(back, {{"x", x}});
  for (int64_t i = 0; i < a.at("y").numel(); ++i) EXPECT_EQ(a.at("y").data<float>()[i], b.at("y").data<float>()[i]);
  // Weights laid out for another oneDNN/ISA (here: plain) are refused by name.
  for (auto& n : back.model.main.nodes)
    if (n.op_type == "Conv") targets::cpu::set_md_attr(n, "md.wei", targets::cpu::plain_md({16, 16, 1, 1}));
  try {
    Program p(std::move(back));
    FAIL() << "a stale weight layout was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::incompatible_artifact);
    EXPECT_NE(std::string(e.what()).find("Conv node"), std::string::npos) << e.what();
  }
}

TEST(CpuTarget, FoldsTransposesIntoMatMulStrides) {
  auto cp = compile_for(transposed_matmul(), Target::cpu());
  EXPECT_EQ(count(cp.model, "MatMul"), 1);
  EXPECT_EQ(count(cp.model, "Transpose", ""), 0);
  expect_matches_ref(transposed_matmul(), {{"a", filled({2, 3, 4}, 3)}, {"b", filled({2, 3, 5}, 4)}});
}

// y = Gelu(Gemm(a, W^T) + c), Gelu in the erf form PyTorch exports.
ModelBuilder gemm_gelu() {
  ModelBuilder b;
  b.input("a", 1, {3, 8});
  b.initializer("w", {6, 8}, floats({6, 8}, 5));
  b.initializer("c", {6}, floats({6}, 6));
  b.initializer("sqrt2", {}, {1.4142135f});
  b.initializer("one", {}, {1.f});
  b.initializer("half", {}, {0.5f});
  ModelBuilder::attr_int(b.node("Gemm", {"a", "w", "c"}, {"g"}), "transB", 1);
  b.node("Div", {"g", "sqrt2"}, {"d"});
  b.node("Erf", {"d"}, {"e"});
  b.node("Add", {"e", "one"}, {"p"});
  b.node("Mul", {"g", "p"}, {"q"});
  b.node("Mul", {"q", "half"}, {"y"});
  b.output("y");
  return b;
}

TEST(CpuTarget, GemmWithBiasAndGeluIsOneMatMul) {
  auto cp = compile_for(gemm_gelu(), Target::cpu());
  EXPECT_EQ(cp.model.main.nodes.size(), 1u);
  // A matmul, or on oneDNN's sgemm path kiln's SkinnyMatMul (3 rows).
  EXPECT_EQ(count(cp.model, "MatMul") + count(cp.model, "SkinnyMatMul"), 1);
  expect_matches_ref(gemm_gelu(), {{"a", filled({3, 8}, 7)}});
}

// GPT-2's MLP as exported (HF Conv1D): Gemm on a 2-D view, Reshape back to
// 3-D, then the activation. The activation commutes with the view, so it
// becomes the product's post-op (fuse_post_ops.cpp) and the Reshape follows
// the fused node: 2 nodes, no separate activation (under 16K elements it
// would otherwise run on the reference kernel).
TEST(CpuTarget, AnActivationAfterAReshapeOfAProductIsItsPostOp) {
  for (const char* act : {"Relu", "Tanh"}) {
    ModelBuilder b;
    b.input("a", 1, {2, 3, 16});
    b.initializer_i64("shape2", {2}, {6, 16});
    b.initializer_i64("shape3", {3}, {2, 3, 24});
    b.initializer("w", {16, 24}, floats({16, 24}, 62));
    b.initializer("c", {24}, floats({24}, 63));
    b.node("Reshape", {"a", "shape2"}, {"a2"});
    b.node("Gemm", {"a2", "w", "c"}, {"g"});
    b.node("Reshape", {"g", "shape3"}, {"g3"});
    b.node(act, {"g3"}, {"y"});
    b.output("y");
    auto cp = compile_for(b, Target::cpu());
    EXPECT_EQ(count(cp.model, "MatMul") + count(cp.model, "SkinnyMatMul"), 1) << act;  // 6 rows
    EXPECT_EQ(count(cp.model, "Eltwise"), 0) << act;
    EXPECT_EQ(count(cp.model, act, ""), 0) << act;
    EXPECT_EQ(cp.model.main.nodes.size(), 2u) << act;  // the product, then the Reshape
    expect_matches_ref(b, {{"a", filled({2, 3, 16}, 64)}});
  }
}

// Plain matmul weights whose rows are a multiple of 256 bytes (128 floats
// here) are stored with 16 floats of zeros after each row (pack_weights.cpp:
// such rows alias in the cache while oneDNN's sgemm copies them). W[k][n] = 1
// where k = n % 64, else 0, so y[i][n] = a[i][n % 64] + c[n] exactly.
TEST(CpuTarget, PadsTheRowsOfPlainMatMulWeights) {
  constexpr int64_t K = 64, N = 128, M = 1;  // one row: a matmul (more: SkinnyMatMul or a 1x1 convolution)
  std::vector<float> w(K * N, 0.f);
  for (int64_t n = 0; n < N; ++n) w[(n % K) * N + n] = 1.f;
  ModelBuilder b;
  b.input("a", 1, {M, K});
  b.initializer("w", {K, N}, w);
  b.initializer("c", {N}, floats({N}, 40));
  b.node("MatMul", {"a", "w"}, {"m"});
  b.node("Add", {"m", "c"}, {"y"});
  b.output("y");
  auto cp = compile_for(b, Target::cpu());
  ASSERT_EQ(cp.model.main.nodes.size(), 1u);
  const ir::Node& mm = cp.model.main.nodes[0];
  ASSERT_EQ(mm.op_type, "MatMul");
  auto wei = targets::cpu::md_attr(mm, "md.wei");
  const auto& blk = wei.data.format_desc.blocking;
  if (blk.inner_nblks == 0) {  // oneDNN's gemm-based kernel (no AVX-512): plain, rows padded
    EXPECT_EQ(blk.strides[0], N + 16);
    EXPECT_EQ(blk.strides[1], 1);
    const Tensor& packed = *cp.model.value(mm.inputs[1]).constant;
    ASSERT_GE(packed.numel(), (K - 1) * (N + 16) + N);
    for (int64_t k = 0; k < K - 1; ++k)  // the padding is zeros: the artifact's bytes do not vary
      for (int64_t j = N; j < N + 16; ++j) ASSERT_EQ(packed.data<float>()[k * (N + 16) + j], 0.f) << k << " " << j;
  } else {
    GTEST_LOG_(INFO) << "oneDNN chose blocked matmul weights here (brgemm): nothing to pad";
  }
  Tensor a = filled({M, K}, 41);
  auto bias = floats({N}, 40);
  const Tensor y = run(cp, {{"a", a}}).at("y");
  ASSERT_EQ(y.shape(), (std::vector<int64_t>{M, N}));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t n = 0; n < N; ++n)
      EXPECT_NEAR(y.data<float>()[i * N + n], a.data<float>()[i * K + n % K] + bias[n], 1e-6) << i << " " << n;
  // Through the artifact format: the load accepts the padded layout and gives the same values.
  auto bytes = std::make_shared<const std::vector<uint8_t>>(artifact::serialize(cp));
  const Tensor back = run(artifact::read_bytes(bytes, "test"), {{"a", a}}).at("y");
  for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(back.data<float>()[i], y.data<float>()[i]) << i;
  // A transposed Gemm (BERT's pooler form) with dense weights, against ref.
  ModelBuilder g;
  g.input("a", 1, {3, 96});
  g.initializer("w", {N, 96}, floats({N, 96}, 42));
  g.initializer("c", {N}, floats({N}, 43));
  ModelBuilder::attr_int(g.node("Gemm", {"a", "w", "c"}, {"y"}), "transB", 1);
  g.output("y");
  expect_matches_ref(g, {{"a", filled({3, 96}, 44)}});
}

// Without AVX-512 oneDNN's only f32 matmul kernel is its sgemm on plain
// weights; a MatMul with constant weights and at least 2 rows then runs as a
// 1x1 convolution over a width of M in the channels-last layout
// (matmul_as_conv.cpp), weights packed blocked, bias and post-ops carried
// over. W[k][n] = 1 where k = n % 64, else 0, so
// y[i][n] = max(0, a[i][n % 64] + c[n]) + r[i][n] exactly.
TEST(CpuTarget, ConstantWeightMatMulsRunAs1x1ConvolutionsOnTheSgemmPath) {
  constexpr int64_t K = 64, N = 96, B = 2, S = 16;
  std::vector<float> w(K * N, 0.f);
  for (int64_t n = 0; n < N; ++n) w[(n % K) * N + n] = 1.f;
  ModelBuilder b;
  b.input("a", 1, {B, S, K});
  b.input("r", 1, {B, S, N});
  b.initializer("w", {K, N}, w);
  b.initializer("c", {N}, floats({N}, 50));
  b.node("MatMul", {"a", "w"}, {"m"});
  b.node("Add", {"m", "c"}, {"p"});
  b.node("Relu", {"p"}, {"q"});
  b.node("Add", {"q", "r"}, {"y"});
  b.output("y");
  auto cp = compile_for(b, Target::cpu());
  ASSERT_EQ(cp.model.main.nodes.size(), 1u);
  const ir::Node& n = cp.model.main.nodes[0];
  ir::Node probe;  // the matmul this machine would run: its implementation decides
  probe.op_type = "MatMul";
  probe.domain = "kiln.cpu";
  targets::cpu::set_md_attr(probe, "md.src", targets::cpu::plain_md({B * S, K}));
  targets::cpu::set_md_attr(probe, "md.wei", targets::cpu::plain_md({K, N}));
  targets::cpu::set_md_attr(probe, "md.dst", targets::cpu::plain_md({B * S, N}));
  const bool sgemm = std::string(targets::cpu::matmul_pd(probe).impl_info_str()).find("gemm") != std::string::npos;
  if (sgemm) {
    ASSERT_EQ(n.op_type, "Conv");
    EXPECT_EQ(count(cp.model, "MatMul"), 0);
    EXPECT_EQ(targets::cpu::md_attr(n, "md.src"),
              targets::cpu::md_t({1, K, B * S}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::nwc));
    EXPECT_GT(targets::cpu::md_attr(n, "md.wei").data.format_desc.blocking.inner_nblks, 0);  // packed blocked
    EXPECT_EQ(n.attrs.count("md.bias"), 1u);
    EXPECT_EQ(n.inputs.size(), 4u);  // a, packed w, c, r: one node, no separate add / relu
  } else {
    ASSERT_EQ(n.op_type, "MatMul");
    GTEST_LOG_(INFO) << "oneDNN runs this matmul on " << targets::cpu::matmul_pd(probe).impl_info_str()
                     << ": it stays a MatMul";
  }
  Tensor a = filled({B, S, K}, 51), r = filled({B, S, N}, 52);
  auto bias = floats({N}, 50);
  const Tensor y = run(cp, {{"a", a}, {"r", r}}).at("y");
  ASSERT_EQ(y.shape(), (std::vector<int64_t>{B, S, N}));
  for (int64_t i = 0; i < B * S; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float want = std::max(0.f, a.data<float>()[i * K + j % K] + bias[j]) + r.data<float>()[i * N + j];
      ASSERT_NEAR(y.data<float>()[i * N + j], want, 1e-6) << i << " " << j;
    }
  // Through the artifact format: the load builds the same convolution.
  auto bytes = std::make_shared<const std::vector<uint8_t>>(artifact::serialize(cp));
  const Tensor back = run(artifact::read_bytes(bytes, "test"), {{"a", a}, {"r", r}}).at("y");
  for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(back.data<float>()[i], y.data<float>()[i]) << i;
  // A transposed Gemm (weights [N, K]) of 12 rows with dense weights, against ref.
  ModelBuilder g;
  g.input("a", 1, {12, 40});
  g.initializer("w", {24, 40}, floats({24, 40}, 53));
  g.initializer("c", {24}, floats({24}, 54));
  ModelBuilder::attr_int(g.node("Gemm", {"a", "w", "c"}, {"y"}), "transB", 1);
  g.output("y");
  EXPECT_EQ(count(compile_for(g, Target::cpu()).model, "Conv"), sgemm ? 1 : 0);
  expect_matches_ref(g, {{"a", filled({12, 40}, 55)}});
  // A single row stays a matmul: the 1x1 kernel is slower there.
  ModelBuilder one;
  one.input("a", 1, {1, 40});
  one.initializer("w", {40, 24}, floats({40, 24}, 56));
  one.node("MatMul", {"a", "w"}, {"y"});
  one.output("y");
  auto cp1 = compile_for(one, Target::cpu());
  EXPECT_EQ(count(cp1.model, "MatMul"), 1);
  EXPECT_EQ(count(cp1.model, "Conv"), 0);
  expect_matches_ref(one, {{"a", filled({1, 40}, 57)}});
  // Seven rows (more than SkinnyMatMul takes: test_cpu_skinny.cpp) already run as a convolution.
  ModelBuilder seven;
  seven.input("a", 1, {7, 40});
  seven.initializer("w", {40, 24}, floats({40, 24}, 58));
  seven.node("MatMul", {"a", "w"}, {"y"});
  seven.output("y");
  EXPECT_EQ(count(compile_for(seven, Target::cpu()).model, "Conv"), sgemm ? 1 : 0);
  expect_matches_ref(seven, {{"a", filled({7, 40}, 59)}});
}

// Programs of one set (shape buckets) follow the reference program's choice
// per node: a 1-row program after a 16-row one runs the product as a 1x1
// convolution too, and a 16-row one after a 1-row one as a matmul, so both
// pack the weights alike (the artifact stores them once).
TEST(CpuTarget, BucketProgramsFollowTheReferenceMatMulOrConvChoice) {
  auto make = [](int64_t rows) {
    ModelBuilder b;
    b.input("a", 1, {rows, 40});
    b.initializer("w", {40, 24}, floats({40, 24}, 60));
    b.node("MatMul", {"a", "w"}, {"y"}, "proj");
    b.output("y");
    return b;
  };
  auto compile_with = [](const ModelBuilder& b, const ir::Model* ref) {
    return compile_for(b, Target::cpu(), /*bucketed=*/true, ref);
  };
  auto big = compile_with(make(16), nullptr), small = compile_with(make(1), nullptr);
  ASSERT_EQ(count(small.model, "MatMul"), 1);  // a single row: a matmul on its own
  if (count(big.model, "Conv") == 0) {
    GTEST_LOG_(INFO) << "this machine's matmul is not the sgemm path: nothing to follow";
    return;
  }
  auto small_after_big = compile_with(make(1), &big.model), big_after_small = compile_with(make(16), &small.model);
  EXPECT_EQ(count(small_after_big.model, "Conv"), 1);
  EXPECT_EQ(count(small_after_big.model, "MatMul"), 0);
  EXPECT_EQ(count(big_after_small.model, "MatMul"), 1);
  EXPECT_EQ(count(big_after_small.model, "Conv"), 0);
  auto packed = [](const artifact::CompiledProgram& cp) {
    const Tensor& t = *cp.model.value(cp.model.main.nodes[0].inputs[1]).constant;
    return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
  };
  EXPECT_EQ(packed(small_after_big), packed(big));
  EXPECT_EQ(packed(big_after_small), packed(small));
  for (auto* cp : {&small_after_big, &big_after_small}) {
    int64_t rows = cp == &small_after_big ? 1 : 16;
    Tensor a = filled({rows, 40}, 61);
    auto ref = run(compile_for(make(rows), Target::ref()), {{"a", a}}).at("y");
    auto got = run(*cp, {{"a", a}}).at("y");
    for (int64_t i = 0; i < ref.numel(); ++i)
      ASSERT_NEAR(got.data<float>()[i], ref.data<float>()[i], 1e-5 + 1e-4 * std::fabs(ref.data<float>()[i])) << rows << " " << i;
  }
}

// Conv -> `act` with a bias: the activation becomes the convolution's oneDNN
// post-op (no separate node), for each activation issue #5 lists that has
// no other test here: HardSwish, Clip (as ReLU6 and with other bounds),
// and a lone Sigmoid.
ModelBuilder conv_then(const std::string& act, float lo = 0.f, float hi = 6.f) {
  ModelBuilder b(13);
  b.input("x", 1, {1, 8, 6, 6});
  b.initializer("w", {16, 8, 3, 3}, floats({16, 8, 3, 3}, 31));
  b.initializer("bias", {16}, floats({16}, 32));
  ModelBuilder::attr_ints(b.node("Conv", {"x", "w", "bias"}, {"c"}), "pads", {1, 1, 1, 1});
  if (act == "Clip") {
    b.initializer("lo", {}, {lo});
    b.initializer("hi", {}, {hi});
    b.node("Clip", {"c", "lo", "hi"}, {"y"});
  } else {
    b.node(act, {"c"}, {"y"});
  }
  b.output("y");
  return b;
}

TEST(CpuTarget, HardSwishClipAndSigmoidBecomeConvPostOps) {
  struct Case {
    const char* act;
    float lo, hi;
  };
  for (const Case& c : {Case{"HardSwish", 0, 0}, Case{"Clip", 0.f, 6.f}, Case{"Clip", -0.5f, 0.25f}, Case{"Sigmoid", 0, 0}}) {
    SCOPED_TRACE(std::string(c.act) + " " + std::to_string(c.lo) + ".." + std::to_string(c.hi));
    ModelBuilder b = conv_then(c.act, c.lo, c.hi);
    auto cp = compile_for(b, Target::cpu());
    EXPECT_EQ(count(cp.model, "Conv"), 1);
    EXPECT_EQ(count(cp.model, "Eltwise"), 0) << "the activation stayed a separate primitive";
    EXPECT_EQ(count(cp.model, c.act, ""), 0) << "the activation stayed a reference kernel";
    expect_matches_ref(b, {{"x", filled({1, 8, 6, 6}, 33)}});
  }
}

// Conv -> Split on channels -> two convs -> Concat: a YOLO C2f-like block,
// all in the blocked layout (split at a multiple of the channel block).
ModelBuilder split_concat() {
  ModelBuilder b;
  b.input("x", 1, {1, 3, 8, 8});
  b.initializer("w0", {32, 3, 3, 3}, floats({32, 3, 3, 3}, 8));
  b.initializer("w1", {16, 16, 3, 3}, floats({16, 16, 3, 3}, 9));
  b.initializer("w2", {16, 16, 1, 1}, floats({16, 16, 1, 1}, 10));
  b.initializer_i64("split", {2}, {16, 16});
  ModelBuilder::attr_ints(b.node("Conv", {"x", "w0"}, {"c0"}), "pads", {1, 1, 1, 1});
  b.node("Sigmoid", {"c0"}, {"s0"});
  b.node("Mul", {"c0", "s0"}, {"a0"});  // SiLU
  ModelBuilder::attr_int(b.node("Split", {"a0", "split"}, {"p0", "p1"}), "axis", 1);
  ModelBuilder::attr_ints(b.node("Conv", {"p0", "w1"}, {"c1"}), "pads", {1, 1, 1, 1});
  b.node("Conv", {"p1", "w2"}, {"c2"});
  ModelBuilder::attr_int(b.node("Concat", {"c1", "c2", "p0"}, {"cat"}), "axis", 1);
  auto& pool = b.node("MaxPool", {"cat"}, {"mp"});
  ModelBuilder::attr_ints(pool, "kernel_shape", {2, 2});
  ModelBuilder::attr_ints(pool, "strides", {2, 2});
  b.initializer("scales", {4}, {1.f, 1.f, 2.f, 2.f});
  auto& rs = b.node("Resize", {"mp", "", "scales"}, {"y"});
  attr_string(rs, "mode", "nearest");
  attr_string(rs, "coordinate_transformation_mode", "asymmetric");
  attr_string(rs, "nearest_mode", "floor");
  b.output("y");
  return b;
}

TEST(CpuTarget, KeepsSplitConcatPoolAndResizeBlocked) {
  auto cp = compile_for(split_concat(), Target::cpu());
  EXPECT_EQ(count(cp.model, "Conv"), 3);
  EXPECT_EQ(count(cp.model, "Sigmoid", ""), 0);  // SiLU fused as swish
  EXPECT_EQ(count(cp.model, "Split", ""), 0);
  EXPECT_EQ(count(cp.model, "Concat"), 1);
  EXPECT_EQ(count(cp.model, "Pool"), 1);
  EXPECT_EQ(count(cp.model, "Resample"), 1);
  // The first conv reads the 3 plain input channels directly; the two split
  // parts are slices of the blocked value; only the output is reordered back.
  EXPECT_EQ(count(cp.model, "Reorder"), 3);
  expect_matches_ref(split_concat(), {{"x", filled({1, 3, 8, 8}, 11)}});
}

/// AveragePool 3x3 stride 2 in floor mode where the last input row is never
/// read: 8 -> 3 without padding (the last window ends at row 6), and 8 -> 4
/// with pads 1 counting them (the last window ends at row 7, short of the end
/// pad). Both are oneDNN poolings (end padding max(need, 0)), not reference
/// kernels (MaxViT's Pad + AveragePool downsampling).
TEST(CpuTarget, LowersFloorModePoolsThatSkipTheLastRow) {
  for (int include : {0, 1}) {
    SCOPED_TRACE(include);
    ModelBuilder b;
    b.input("x", 1, {1, 16, 8, 8});
    auto& pool = b.node("AveragePool", {"x"}, {"y"});
    ModelBuilder::attr_ints(pool, "kernel_shape", {3, 3});
    ModelBuilder::attr_ints(pool, "strides", {2, 2});
    ModelBuilder::attr_ints(pool, "pads", include ? std::vector<int64_t>{1, 1, 1, 1} : std::vector<int64_t>{0, 0, 0, 0});
    ModelBuilder::attr_int(pool, "count_include_pad", include);
    b.output("y");
    auto cp = compile_for(b, Target::cpu());
    EXPECT_EQ(count(cp.model, "Pool"), 1);
    EXPECT_EQ(count(cp.model, "AveragePool", ""), 0);
    Tensor x = filled({1, 16, 8, 8}, 13);
    auto y = run(std::move(cp), {{"x", x}}).at("y");
    ASSERT_EQ(y.shape(), (std::vector<int64_t>{1, 16, include ? 4 : 3, include ? 4 : 3}));
    // By hand: output (0, 0) of channel 0 averages rows and columns 0..2
    // (no padding) or -1..1 counting the 5 padded zeros (divisor 9).
    const float* xp = x.data<float>();
    float sum = 0;
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c) {
        const int rr = r - include, cc = c - include;
        if (rr >= 0 && cc >= 0) sum += xp[rr * 8 + cc];
      }
    EXPECT_NEAR(y.data<float>()[0], sum / 9.f, 1e-6);
    expect_matches_ref(b, {{"x", x}});
  }
}

/// Resize linear with half_pixel coordinates (torch's bilinear upsampling,
/// align_corners=False) is a oneDNN linear resampling. By hand for a row
/// [a, b] doubled: sources -0.25, 0.25, 0.75, 1.25 (clamped to the edges)
/// give a, 0.75a + 0.25b, 0.25a + 0.75b, b. Then odd factors and a
/// downscale against ref, by sizes and by scales, both coordinate modes.
TEST(CpuTarget, LowersLinearResizeWithHalfPixelCoordinates) {
  auto resize = [](std::vector<int64_t> in, std::vector<int64_t> out, const char* ctm, bool by_scales) {
    ModelBuilder b;
    b.input("x", 1, in);
    if (by_scales) {
      std::vector<float> s;
      for (size_t i = 0; i < in.size(); ++i) s.push_back(static_cast<float>(out[i]) / static_cast<float>(in[i]));
      b.initializer("scales", {static_cast<int64_t>(in.size())}, s);
    } else {
      b.initializer_i64("sizes", {static_cast<int64_t>(out.size())}, out);
    }
    auto& rs = b.node("Resize", {"x", "", by_scales ? "scales" : "", by_scales ? "" : "sizes"}, {"y"});
    attr_string(rs, "mode", "linear");
    attr_string(rs, "coordinate_transformation_mode", ctm);
    b.output("y");
    return b;
  };
  ModelBuilder two = resize({1, 1, 1, 2}, {1, 1, 1, 4}, "half_pixel", false);
  auto cp = compile_for(two, Target::cpu());
  EXPECT_EQ(count(cp.model, "Resample"), 1);
  EXPECT_EQ(count(cp.model, "Resize", ""), 0);
  Tensor x(DType::f32, {1, 1, 1, 2});
  x.data<float>()[0] = 1.f;
  x.data<float>()[1] = 5.f;
  auto y = run(std::move(cp), {{"x", x}}).at("y");
  ASSERT_EQ(y.shape(), (std::vector<int64_t>{1, 1, 1, 4}));
  const float want[] = {1.f, 2.f, 4.f, 5.f};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y.data<float>()[i], want[i], 1e-6) << i;
  for (const char* ctm : {"half_pixel", "pytorch_half_pixel"})
    for (bool by_scales : {false, true}) {
      SCOPED_TRACE(std::string(ctm) + (by_scales ? " scales" : " sizes"));
      ModelBuilder up = resize({1, 16, 3, 5}, {1, 16, 12, 15}, ctm, by_scales);
      EXPECT_EQ(count(compile_for(up, Target::cpu()).model, "Resample"), 1);
      expect_matches_ref(up, {{"x", filled({1, 16, 3, 5}, 14)}});
      ModelBuilder down = resize({1, 3, 8, 10}, {1, 3, 4, 4}, ctm, by_scales);
      EXPECT_EQ(count(compile_for(down, Target::cpu()).model, "Resample"), 1);
      expect_matches_ref(down, {{"x", filled({1, 3, 8, 10}, 15)}});
    }
  // pytorch_half_pixel to an output of size 1 samples source 0, not the
  // centre: left to the reference kernel.
  ModelBuilder to_one = resize({1, 2, 4, 4}, {1, 2, 1, 4}, "pytorch_half_pixel", false);
  EXPECT_EQ(count(compile_for(to_one, Target::cpu()).model, "Resample"), 0);
  expect_matches_ref(to_one, {{"x", filled({1, 2, 4, 4}, 16)}});
}

TEST(CpuTarget, ThreadCountChangesOnlyRounding) {
  auto cp = compile_for(split_concat(), Target::cpu());
  Tensor x = filled({1, 3, 8, 8}, 12);
  auto one = run(cp, {{"x", x}}, 1), two = run(cp, {{"x", x}}, 2);
  const Tensor &a = one.at("y"), &b = two.at("y");
  for (int64_t i = 0; i < a.numel(); ++i)
    EXPECT_NEAR(a.data<float>()[i], b.data<float>()[i], 1e-5 + 1e-5 * std::fabs(a.data<float>()[i]));
}

TEST(CpuTarget, ConcurrentRunsOfOneProgramAgree) {
  // Session::run is thread-safe: each call has its own arena, oneDNN stream,
  // scratchpad and memory objects.
  Program p(compile_for(split_concat(), Target::cpu()));
  Tensor x = filled({1, 3, 8, 8}, 27);
  Tensor want = p.run({{"x", x}}, 0).at("y");
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        Tensor got = p.run({{"x", x}}, 0).at("y");
        for (int64_t k = 0; k < got.numel(); ++k)
          if (got.data<float>()[k] != want.data<float>()[k]) ++bad;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(CpuTarget, BatchNormalizationIsFoldedBeforeLowering) {
  ModelBuilder b;
  b.input("x", 1, {1, 16, 4, 4});
  b.initializer("w", {16, 16, 3, 3}, floats({16, 16, 3, 3}, 13));
  b.initializer("s", {16}, floats({16}, 14));
  b.initializer("bb", {16}, floats({16}, 15));
  b.initializer("mean", {16}, floats({16}, 16));
  std::vector<float> var(16, 0.5f);
  b.initializer("var", {16}, var);
  ModelBuilder::attr_ints(b.node("Conv", {"x", "w"}, {"c"}), "pads", {1, 1, 1, 1});
  b.node("BatchNormalization", {"c", "s", "bb", "mean", "var"}, {"bn"});
  b.node("Relu", {"bn"}, {"y"});
  b.output("y");
  auto cp = compile_for(b, Target::cpu());
  EXPECT_EQ(count(cp.model, "BatchNormalization", ""), 0);
  EXPECT_EQ(count(cp.model, "Conv"), 1);
  expect_matches_ref(b, {{"x", filled({1, 16, 4, 4}, 17)}});
}

TEST(CpuTarget, BatchNormalizationBeforeItsConvRunsAsAFusedBinary) {
  // BN -> Relu -> Conv (DenseNet's order): no Conv before the BN to fold it
  // into; it becomes x * s + t per channel with the Relu fused, blocked like
  // its neighbours (no reorder around it). 24 channels: a padded last block.
  ModelBuilder b;
  b.input("x", 1, {1, 24, 5, 5});
  b.initializer("w0", {24, 24, 3, 3}, floats({24, 24, 3, 3}, 40));
  b.initializer("s", {24}, floats({24}, 41));
  b.initializer("bb", {24}, floats({24}, 42));
  b.initializer("mean", {24}, floats({24}, 43));
  std::vector<float> var(24, 0.7f);
  b.initializer("var", {24}, var);
  b.initializer("w1", {16, 24, 1, 1}, floats({16, 24, 1, 1}, 44));
  ModelBuilder::attr_ints(b.node("Conv", {"x", "w0"}, {"c0"}), "pads", {1, 1, 1, 1});
  b.node("Add", {"c0", "x"}, {"r"});  // the conv's output has two readers: nothing folds the BN
  b.node("BatchNormalization", {"r", "s", "bb", "mean", "var"}, {"bn"});
  b.node("Relu", {"bn"}, {"a"});
  b.node("Conv", {"a", "w1"}, {"c1"});
  b.node("Add", {"c1", "c1"}, {"y"});
  b.output("y");
  auto cp = compile_for(b, Target::cpu());
  EXPECT_EQ(count(cp.model, "BatchNormalization", ""), 0);
  EXPECT_EQ(count(cp.model, "Relu", ""), 0);
  EXPECT_EQ(count(cp.model, "Eltwise"), 0);  // the Relu is a post-op of the BN's Binary
  // x in and y out only: the BN's Binary reads and writes the blocked layout.
  EXPECT_EQ(count(cp.model, "Reorder"), 2);
  expect_matches_ref(b, {{"x", filled({1, 24, 5, 5}, 45)}});
}

/// For each kiln.cpu Concat marked in place, the number of its inputs the
/// memory plan put where the concat expects them (inside its output).
std::vector<int> inputs_in_place(const artifact::CompiledProgram& cp) {
  std::vector<int> out;
  for (auto& n : cp.model.main.nodes) {
    if (n.op_type != "Concat" || n.domain != "kiln.cpu" || !n.has("in_place_offsets")) continue;
    auto offs = n.ints("in_place_offsets");
    int64_t y = cp.plan.offsets.at(n.outputs[0]);
    int k = 0;
    for (size_t i = 0; i < n.inputs.size(); ++i)
      k += y >= 0 && cp.plan.offsets.at(n.inputs[i]) == y + offs.at(i);
    out.push_back(k);
  }
  return out;
}

/// floats() scaled by 1/sqrt(fan-in) (dims 1..): convolution weights that
/// keep activations near 1, as trained ones do (so the comparison with ref
/// measures the kernels, not the rounding of huge cancelling sums).
std::vector<float> weights(std::vector<int64_t> shape, uint32_t seed) {
  auto w = floats(shape, seed);
  double fan_in = 1;
  for (size_t i = 1; i < shape.size(); ++i) fan_in *= static_cast<double>(shape[i]);
  for (auto& v : w) v = static_cast<float>(v / std::sqrt(fan_in));
  return w;
}

/// A DenseNet block: every layer reads the concatenation of all earlier
/// feature maps through BN -> Relu -> Conv; the block ends with one more.
ModelBuilder dense_block(int64_t batch) {
  ModelBuilder b;
  b.input("x", 1, {batch, 16, 6, 6});
  b.initializer("w0", {32, 16, 3, 3}, weights({32, 16, 3, 3}, 50));
  ModelBuilder::attr_ints(b.node("Conv", {"x", "w0"}, {"f0"}), "pads", {1, 1, 1, 1});
  std::vector<std::string> feats = {"f0"};
  int64_t ch = 32;
  for (int l = 1; l <= 3; ++l) {
    std::string cat = feats.size() == 1 ? feats[0] : "cat" + std::to_string(l), L = std::to_string(l);
    if (feats.size() > 1) ModelBuilder::attr_int(b.node("Concat", feats, {cat}), "axis", 1);
    b.initializer("s" + L, {ch}, floats({ch}, 51 + l));
    b.initializer("t" + L, {ch}, floats({ch}, 61 + l));
    b.initializer("m" + L, {ch}, floats({ch}, 71 + l));
    b.initializer("v" + L, {ch}, std::vector<float>(static_cast<size_t>(ch), 0.8f));
    b.initializer("w" + L, {16, ch, 3, 3}, weights({16, ch, 3, 3}, 81 + l));
    b.node("BatchNormalization", {cat, "s" + L, "t" + L, "m" + L, "v" + L}, {"bn" + L});
    b.node("Relu", {"bn" + L}, {"r" + L});
    ModelBuilder::attr_ints(b.node("Conv", {"r" + L, "w" + L}, {"f" + L}), "pads", {1, 1, 1, 1});
    feats.push_back("f" + L);
    ch += 16;
  }
  ModelBuilder::attr_int(b.node("Concat", feats, {"block"}), "axis", 1);
  b.initializer("wt", {16, ch, 1, 1}, weights({16, ch, 1, 1}, 90));
  b.node("Conv", {"block", "wt"}, {"y"});
  b.output("y");
  return b;
}

TEST(CpuTarget, DenseBlockConcatenationsAreProducedInPlace) {
  auto cp = compile_for(dense_block(1), Target::cpu());
  EXPECT_EQ(count(cp.model, "BatchNormalization", ""), 0);
  // Each concat's inputs were written by their producers inside its output
  // (the whole block shares one region): none is copied.
  EXPECT_EQ(inputs_in_place(cp), (std::vector<int>{2, 3, 4}));
  expect_matches_ref(dense_block(1), {{"x", filled({1, 16, 6, 6}, 91)}});
  // Batch 2: a channel slice is no contiguous range; the concats copy.
  auto cp2 = compile_for(dense_block(2), Target::cpu());
  EXPECT_TRUE(inputs_in_place(cp2).empty());
  expect_matches_ref(dense_block(2), {{"x", filled({2, 16, 6, 6}, 92)}});
}

TEST(CpuTarget, ConcatsOfInputsConstantsAndSharedProducersCopyWhatIsNotInPlace) {
  // c feeds two concats at different places; the first concat also reads the
  // graph input, the second a constant; the third concatenates a concat
  // with one of its own parts (wanted at two places).
  ModelBuilder b;
  b.input("x", 1, {1, 16, 4, 4});
  b.initializer("w", {16, 16, 3, 3}, floats({16, 16, 3, 3}, 100));
  b.initializer("k", {1, 16, 4, 4}, floats({1, 16, 4, 4}, 101));
  b.initializer("w1", {8, 32, 1, 1}, floats({8, 32, 1, 1}, 102));
  b.initializer("w2", {8, 32, 1, 1}, floats({8, 32, 1, 1}, 103));
  b.initializer("w3", {8, 48, 1, 1}, floats({8, 48, 1, 1}, 104));
  ModelBuilder::attr_ints(b.node("Conv", {"x", "w"}, {"c"}), "pads", {1, 1, 1, 1});
  ModelBuilder::attr_int(b.node("Concat", {"x", "c"}, {"cat_a"}), "axis", 1);
  ModelBuilder::attr_int(b.node("Concat", {"c", "k"}, {"cat_b"}), "axis", 1);
  ModelBuilder::attr_int(b.node("Concat", {"cat_a", "x"}, {"cat_c"}), "axis", 1);
  b.node("Conv", {"cat_a", "w1"}, {"y1"});
  b.node("Conv", {"cat_b", "w2"}, {"y2"});
  b.node("Conv", {"cat_c", "w3"}, {"y3"});
  b.output("y1");
  b.output("y2");
  b.output("y3");
  auto cp = compile_for(b, Target::cpu());
  EXPECT_EQ(count(cp.model, "Concat"), 3);
  auto placed = inputs_in_place(cp);
  ASSERT_EQ(placed.size(), 3u);
  // cat_a: x's blocked copy and c in place. cat_b: c lives in cat_a and the
  // constant is copied. cat_c: cat_a in place, x copied (it lives in cat_a).
  EXPECT_EQ(placed, (std::vector<int>{2, 0, 1}));
  expect_matches_ref(b, {{"x", filled({1, 16, 4, 4}, 105)}});
}

/// The plan offset of the value named `name` in cp (-1: not placed).
int64_t planned_at(const artifact::CompiledProgram& cp, const std::string& name) {
  for (size_t v = 0; v < cp.model.values.size(); ++v)
    if (cp.model.values[v].name == name) return cp.plan.offsets.at(v);
  ADD_FAILURE() << "no value " << name;
  return -2;
}

TEST(CpuTarget, ChannelShuffleReshapesAliasTheirInputs) {
  // ShuffleNet's channel shuffle: Reshape [N,2,C/2,H,W], Transpose, Reshape
  // back. Each Reshape's output is placed on its input (nothing copied); a
  // Reshape of the graph input (not in the plan) still copies.
  ModelBuilder b;
  b.input("x", 1, {1, 16, 4, 4});
  b.initializer("w0", {32, 16, 3, 3}, weights({32, 16, 3, 3}, 120));
  b.initializer("w1", {16, 32, 1, 1}, weights({16, 32, 1, 1}, 121));
  b.initializer_i64("s5", {5}, {1, 2, 16, 4, 4});
  b.initializer_i64("s4", {4}, {1, 32, 4, 4});
  b.initializer_i64("s3", {3}, {1, 16, 16});
  ModelBuilder::attr_ints(b.node("Conv", {"x", "w0"}, {"c"}), "pads", {1, 1, 1, 1});
  b.node("Reshape", {"c", "s5"}, {"r5"});
  ModelBuilder::attr_ints(b.node("Transpose", {"r5"}, {"t"}), "perm", {0, 2, 1, 3, 4});
  b.node("Reshape", {"t", "s4"}, {"r4"});
  b.node("Conv", {"r4", "w1"}, {"y"});
  b.node("Reshape", {"x", "s3"}, {"x3"});
  b.node("Add", {"x3", "x3"}, {"z"});
  b.output("y");
  b.output("z");
  auto cp = compile_for(b, Target::cpu());
  int marked = 0;
  for (auto& n : cp.model.main.nodes) marked += n.op_type == "Reshape" && n.has("in_place_offsets");
  EXPECT_EQ(marked, 3);
  EXPECT_GE(planned_at(cp, "c"), 0);
  EXPECT_EQ(planned_at(cp, "r5"), planned_at(cp, "c"));
  EXPECT_GE(planned_at(cp, "t"), 0);
  EXPECT_EQ(planned_at(cp, "r4"), planned_at(cp, "t"));
  EXPECT_NE(planned_at(cp, "t"), planned_at(cp, "c"));
  EXPECT_EQ(planned_at(cp, "x"), -1);  // a graph input: x3 is a copy of it
  EXPECT_GE(planned_at(cp, "x3"), 0);
  expect_matches_ref(b, {{"x", filled({1, 16, 4, 4}, 122)}});
}

TEST(CpuTarget, LargeTransposesRunAsReordersSmallOnesOnTheReferenceKernel) {
  // A channel shuffle (rank 5), an NCHW -> NHWC transpose (ConvNeXt's
  // LayerNorm) with the default perm back, and a transpose too small for a
  // oneDNN call.
  ModelBuilder b;
  b.input("x", 1, {1, 16, 32, 32});
  b.input("s", 1, {4, 8, 16});
  b.initializer("w0", {32, 16, 3, 3}, weights({32, 16, 3, 3}, 130));
  b.initializer_i64("s5", {5}, {1, 2, 16, 32, 32});
  b.initializer_i64("s4", {4}, {1, 32, 32, 32});
  ModelBuilder::attr_ints(b.node("Conv", {"x", "w0"}, {"c"}), "pads", {1, 1, 1, 1});
  b.node("Reshape", {"c", "s5"}, {"r5"});
  ModelBuilder::attr_ints(b.node("Transpose", {"r5"}, {"t"}), "perm", {0, 2, 1, 3, 4});
  b.node("Reshape", {"t", "s4"}, {"r4"});
  ModelBuilder::attr_ints(b.node("Transpose", {"r4"}, {"nhwc"}), "perm", {0, 2, 3, 1});
  b.node("Transpose", {"nhwc"}, {"y"});  // default perm: reversed, [32, 32, 32, 1]
  ModelBuilder::attr_ints(b.node("Transpose", {"s"}, {"z"}), "perm", {2, 0, 1});
  b.output("y");
  b.output("z");
  auto cp = compile_for(b, Target::cpu());
  EXPECT_EQ(count(cp.model, "Transpose", ""), 1);  // z: 512 elements
  int strided = 0;
  for (auto& n : cp.model.main.nodes)
    if (n.op_type == "Reorder" && n.domain == "kiln.cpu") {
      auto src = targets::cpu::md_attr(n, "md.src");
      strided += src != targets::cpu::plain_md(src.dims()) && !targets::cpu::is_blocked(src);
    }
  EXPECT_EQ(strided, 3);
  expect_matches_ref(b, {{"x", filled({1, 16, 32, 32}, 131)}, {"s", filled({4, 8, 16}, 132)}});
}

TEST(CpuTarget, GroupedConvolutionOfPartialBlocksRunsOnGroupConvBetweenBlockedNeighbours) {
  // ResNeXt's grouped 3x3 conv (8 groups of 4 channels) between two dense
  // convs: oneDNN has no jit kernel for groups narrower than its vector (its
  // gemm convolution in nhwc ran 6x slower than ORT's), so it runs on kiln's
  // GroupConv (test_cpu_group_conv.cpp), in the blocked layout of its
  // neighbours: no reorder around it.
  ModelBuilder b;
  b.input("x", 1, {1, 16, 7, 7});
  b.initializer("w0", {32, 16, 1, 1}, weights({32, 16, 1, 1}, 110));
  b.initializer("wg", {32, 4, 3, 3}, weights({32, 4, 3, 3}, 111));
  b.initializer("bg", {32}, floats({32}, 112));
  b.initializer("w1", {16, 32, 1, 1}, weights({16, 32, 1, 1}, 113));
  b.node("Conv", {"x", "w0"}, {"c0"});
  auto& g = b.node("Conv", {"c0", "wg", "bg"}, {"cg"});
  ModelBuilder::attr_ints(g, "pads", {1, 1, 1, 1});
  ModelBuilder::attr_int(g, "group", 8);
  b.node("Relu", {"cg"}, {"r"});
  b.node("Conv", {"r", "w1"}, {"y"});
  b.output("y");
  auto cp = compile_for(b, Target::cpu());
  EXPECT_EQ(count(cp.model, "Conv"), 2);
  EXPECT_EQ(count(cp.model, "GroupConv"), 1);
  for (auto& n : cp.model.main.nodes)
    if (n.op_type == "GroupConv") {
      EXPECT_TRUE(targets::cpu::is_blocked(targets::cpu::md_attr(n, "md.src")));
      EXPECT_TRUE(targets::cpu::is_blocked(targets::cpu::md_attr(n, "md.dst")));
      EXPECT_EQ(n.i("relu", 0), 1);  // the ReLU is the kernel's
    }
  // x to blocked, y to plain: nothing around the grouped convolution.
  EXPECT_EQ(count(cp.model, "Reorder"), 2);
  expect_matches_ref(b, {{"x", filled({1, 16, 7, 7}, 114)}});
}

TEST(CpuTarget, LayerNormSoftmaxAndAttentionMask) {
  // BERT-like: LayerNorm(x) -> MatMul W -> scale 1/8 -> + mask -> Softmax.
  ModelBuilder b;
  b.input("x", 1, {1, 4, 8});
  b.input("mask", 1, {1, 1, 4});
  b.initializer("g", {8}, floats({8}, 18));
  b.initializer("beta", {8}, floats({8}, 19));
  b.initializer("w", {8, 4}, floats({8, 4}, 20));
  b.initializer("eighth", {}, {8.f});
  attr_float(b.node("LayerNormalization", {"x", "g", "beta"}, {"ln"}), "epsilon", 1e-5f);
  b.node("MatMul", {"ln", "w"}, {"mm"});
  b.node("Div", {"mm", "eighth"}, {"sc"});
  b.node("Add", {"sc", "mask"}, {"am"});
  ModelBuilder::attr_int(b.node("Softmax", {"am"}, {"y"}), "axis", -1);
  b.output("y");
  auto cp = compile_for(b, Target::cpu());
  EXPECT_EQ(count(cp.model, "LayerNorm"), 1);
  // The matmul, or on oneDNN's sgemm path kiln's SkinnyMatMul (4 rows).
  EXPECT_EQ(count(cp.model, "MatMul") + count(cp.model, "SkinnyMatMul"), 1);
  EXPECT_EQ(count(cp.model, "Softmax"), 1);
  EXPECT_EQ(cp.model.main.nodes.size(), 3u);  // Div and Add are post-ops of the matmul
  expect_matches_ref(b, {{"x", filled({1, 4, 8}, 21)}, {"mask", filled({1, 1, 4}, 22)}});
}

TEST(CpuTarget, OperatorsOneDnnLacksStayOnReferenceKernels) {
  // Softplus stays (oneDNN's soft_relu is not accurate enough); Erf has no
  // oneDNN form; the conv around them is still lowered.
  ModelBuilder b;
  b.input("x", 1, {1, 4, 3, 3});
  b.initializer("w", {4, 4, 1, 1}, floats({4, 4, 1, 1}, 23));
  b.node("Conv", {"x", "w"}, {"c"});
  b.node("Softplus", {"c"}, {"sp"});
  b.node("Erf", {"sp"}, {"y"});
  b.output("y");
  auto cp = compile_for(b, Target::cpu());
  EXPECT_EQ(count(cp.model, "Conv"), 1);
  EXPECT_EQ(count(cp.model, "Softplus", ""), 1);
  EXPECT_EQ(count(cp.model, "Erf", ""), 1);
  expect_matches_ref(b, {{"x", filled({1, 4, 3, 3}, 24)}});
}

TEST(CpuTarget, DynamicShapesStayOnReferenceKernels) {
  ModelBuilder b;
  b.input("x", 1, {-1, 4, 3, 3});
  b.initializer("w", {4, 4, 1, 1}, floats({4, 4, 1, 1}, 25));
  b.node("Conv", {"x", "w"}, {"y"});
  b.output("y");
  auto cp = compile_for(b, Target::cpu());
  EXPECT_EQ(count(cp.model, "Conv", ""), 1);
  auto out = run(std::move(cp), {{"x", filled({2, 4, 3, 3}, 26)}});
  EXPECT_EQ(out.at("y").shape(), (std::vector<int64_t>{2, 4, 3, 3}));
}

TEST(CpuTarget, CompatBlockNamesOneDnnVersionAndIsa) {
  auto cpu = targets::host_facts(Target::cpu());
  std::map<std::string, std::string> libs(cpu.library_versions.begin(), cpu.library_versions.end());
  ASSERT_EQ(libs.count("onednn"), 1u);
  EXPECT_EQ(libs["onednn"].rfind("2.", 0), 0u) << libs["onednn"];  // Debian's libdnnl 2.x
  ASSERT_EQ(libs.count("onednn_isa"), 1u);
  EXPECT_FALSE(libs["onednn_isa"].empty());
  // The ref target calls no oneDNN.
  EXPECT_TRUE(targets::host_facts(Target::ref()).library_versions.empty());
  // An artifact packed under another oneDNN is not runnable here.
  artifact::CompatInfo a = cpu;
  a.library_versions[0].second = "9.9.9";
  auto mism = targets::check_runnable(a, Target::cpu());
  ASSERT_EQ(mism.size(), 1u);
  EXPECT_EQ(mism[0].field, "library_versions");
}

}  // namespace
}  // namespace kiln::testing
