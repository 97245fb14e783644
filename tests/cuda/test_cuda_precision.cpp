// The cuda target's fp16 / bf16 / TF32 support without a GPU (label `unit`):
// the precision pass's graph before and after (which values become 16-bit,
// the casts at the model's boundary, what keeps float32), the generated
// kernels' fp32 internals on 16-bit storage (NVRTC compiles them for sm_90
// without a device), the Gemm / Conv node attributes, and the option errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cuda_models.h"
#include "kiln/errors.h"
#include "kiln/options.h"
#include "onnx/importer.h"
#include "passes/passes.h"
#include "support/half.h"
#include "targets/cuda/compile/lowering.h"
#include "targets/cuda/compile/precision.h"
#include "targets/cuda/run/blaslt.h"
#include "targets/cuda/run/cuda_ops.h"
#include "targets/cuda/run/cudnn_conv.h"

namespace kiln::testing {
namespace {

using targets::cuda::convert_precision;
using targets::cuda::PrecisionRole;

/// Imports `b` with shapes inferred and constants folded (what the cuda
/// pipeline hands to lowering, minus the algebraic rewrites).
ir::Model imported(const ModelBuilder& b, const std::map<std::string, std::vector<int64_t>>& shapes = {}) {
  auto bytes = b.bytes();
  ir::Model m = onnx_import::import_bytes(bytes.data(), bytes.size(), ".", "test");
  passes::bind_input_shapes(m, shapes);
  passes::infer_and_fold(m);
  passes::eliminate_dead_code(m);
  return m;
}

ir::ValueId value_named(const ir::Model& m, const std::string& name) {
  for (size_t i = 0; i < m.values.size(); ++i)
    if (m.values[i].name == name) return static_cast<ir::ValueId>(i);
  ADD_FAILURE() << "no value '" << name << "'";
  return ir::kNoValue;
}

const ir::Node& node_of(const ir::Model& m, const std::string& op, int nth = 0) {
  for (auto& n : m.main.nodes)
    if (n.op_type == op && nth-- == 0) return n;
  ADD_FAILURE() << "no " << op << " node";
  static ir::Node none;
  return none;
}

DType dtype_of(const ir::Model& m, ir::ValueId v) { return m.value(v).dtype; }

int count_op(const ir::Model& m, const std::string& op) {
  return static_cast<int>(std::count_if(m.main.nodes.begin(), m.main.nodes.end(),
                                        [&](const ir::Node& n) { return n.op_type == op; }));
}

class PrecisionPass : public ::testing::TestWithParam<DType> {};

// MLP: x -> MatMul(W) -> Add(b) -> Relu -> y. The input is cast once where
// the matmul needs it, W and b become 16-bit constants, y is cast back.
TEST_P(PrecisionPass, MlpIsSixteenBitInsideWithCastsAtTheBoundary) {
  const DType h = GetParam();
  ir::Model m = imported(mlp_model(), {{"x", {5, 4}}});
  const auto inputs = m.main.inputs, outputs = m.main.outputs;
  auto st = convert_precision(m, h);
  ir::verify(m);
  // The model's interface is unchanged: same value ids, names and dtypes.
  EXPECT_EQ(m.main.inputs, inputs);
  EXPECT_EQ(m.main.outputs, outputs);
  EXPECT_EQ(dtype_of(m, m.main.inputs[0]), DType::f32);
  EXPECT_EQ(dtype_of(m, m.main.outputs[0]), DType::f32);
  EXPECT_EQ(m.value(m.main.outputs[0]).name, "y");
  // First node: Cast(x -> 16-bit); last node: Cast(-> float32) producing y.
  ASSERT_GE(m.main.nodes.size(), 5u);
  const ir::Node& first = m.main.nodes.front();
  EXPECT_EQ(first.op_type, "Cast");
  EXPECT_EQ(first.inputs[0], m.main.inputs[0]);
  EXPECT_EQ(first.i("to"), static_cast<int64_t>(h));
  EXPECT_EQ(dtype_of(m, first.outputs[0]), h);
  const ir::Node& last = m.main.nodes.back();
  EXPECT_EQ(last.op_type, "Cast");
  EXPECT_EQ(last.outputs[0], m.main.outputs[0]);
  EXPECT_EQ(last.i("to"), static_cast<int64_t>(DType::f32));
  EXPECT_EQ(dtype_of(m, last.inputs[0]), h);
  // Everything between is 16-bit, weights included.
  const ir::Node& mm = node_of(m, "MatMul");
  EXPECT_EQ(mm.inputs[0], first.outputs[0]);
  EXPECT_EQ(dtype_of(m, mm.inputs[1]), h);
  ASSERT_TRUE(m.value(mm.inputs[1]).constant.has_value());
  EXPECT_EQ(m.value(mm.inputs[1]).constant->dtype(), h);
  EXPECT_EQ(dtype_of(m, mm.outputs[0]), h);
  EXPECT_EQ(dtype_of(m, node_of(m, "Add").outputs[0]), h);
  EXPECT_EQ(st.casts, 2);
  EXPECT_EQ(st.constants, 2);
  EXPECT_EQ(st.values, 3);  // MatMul, Add, Relu outputs
  EXPECT_EQ(st.fp32_nodes, 0);
}

// Softmax, LayerNormalization and the reductions run on 16-bit data; the
// normalization parameters and LayerNormalization's statistics stay float32.
TEST_P(PrecisionPass, NormalizationParametersAndStatisticsStayFloat32) {
  const DType h = GetParam();
  ModelBuilder b(17);
  b.input("x", 1, {2, 8});
  b.initializer("W", {8, 8}, std::vector<float>(64, 0.1f));
  b.initializer("g", {8}, std::vector<float>(8, 1.f));
  b.initializer("beta", {8}, std::vector<float>(8, 0.f));
  b.node("MatMul", {"x", "W"}, {"h"});
  auto& ln = b.node("LayerNormalization", {"h", "g", "beta"}, {"ln", "mean", "inv"});
  ModelBuilder::attr_int(ln, "axis", -1);
  ModelBuilder::attr_int(b.node("Softmax", {"ln"}, {"sm"}), "axis", -1);
  b.output("sm", 1, {2, 8}).output("mean", 1, {2, 1}).output("inv", 1, {2, 1});
  ir::Model m = imported(b);
  convert_precision(m, h);
  ir::verify(m);
  const ir::Node& n = node_of(m, "LayerNormalization");
  EXPECT_EQ(dtype_of(m, n.inputs[0]), h);
  EXPECT_EQ(dtype_of(m, n.inputs[1]), DType::f32) << "scale";
  EXPECT_EQ(dtype_of(m, n.inputs[2]), DType::f32) << "bias";
  EXPECT_EQ(dtype_of(m, n.outputs[0]), h);
  EXPECT_EQ(dtype_of(m, n.outputs[1]), DType::f32) << "Mean";
  EXPECT_EQ(dtype_of(m, n.outputs[2]), DType::f32) << "InvStdDev";
  // The statistics are model outputs already float32: no cast for them.
  EXPECT_EQ(n.outputs[1], value_named(m, "mean"));
  const ir::Node& sm = node_of(m, "Softmax");
  EXPECT_EQ(dtype_of(m, sm.inputs[0]), h);
  EXPECT_EQ(dtype_of(m, sm.outputs[0]), h);
  EXPECT_EQ(count_op(m, "Cast"), 2);  // x in, sm out
}

// A float32 activation (here a model's explicit Cast from float64 to
// float32) promotes the element-wise ops it meets to float32; the next
// matmul is 16-bit again. The share counts the Cast and the Add as float32.
TEST_P(PrecisionPass, Float32ActivationsPromoteFollowOpsUntilTheNextMatmul) {
  const DType h = GetParam();
  ModelBuilder b(17);
  b.input("x", 1, {2, 4});
  b.input("mask", 11, {2, 4});
  b.initializer("W", {4, 4}, std::vector<float>(16, 0.5f));
  b.node("MatMul", {"x", "W"}, {"s"});
  ModelBuilder::attr_int(b.node("Cast", {"mask"}, {"mf"}, "cast_mask"), "to", 1);  // float64 -> float32
  b.node("Add", {"s", "mf"}, {"sm"}, "add_mask");                                   // promoted: float32
  b.node("MatMul", {"sm", "W"}, {"y"});
  b.output("y", 1, {2, 4});
  ir::Model m = imported(b);
  auto st = convert_precision(m, h);
  ir::verify(m);
  const ir::Node& add = node_of(m, "Add");
  EXPECT_EQ(dtype_of(m, add.outputs[0]), DType::f32);
  EXPECT_EQ(dtype_of(m, add.inputs[0]), DType::f32) << "the 16-bit matmul output is cast up";
  EXPECT_EQ(dtype_of(m, value_named(m, "mf")), DType::f32) << "an explicit Cast between floats keeps its 'to'";
  const ir::Node& mm2 = node_of(m, "MatMul", 1);
  EXPECT_EQ(dtype_of(m, mm2.inputs[0]), h);
  EXPECT_EQ(dtype_of(m, mm2.inputs[1]), h);
  EXPECT_EQ(mm2.inputs[1], node_of(m, "MatMul").inputs[1]) << "one 16-bit copy of W for both matmuls";
  EXPECT_EQ(st.fp32_nodes, 2);
  EXPECT_EQ(st.float_nodes, 4);
  EXPECT_EQ(st.nodes_16bit, 2);
  ASSERT_EQ(st.fp32.size(), 2u);
  EXPECT_EQ(st.fp32[0].node, "cast_mask");
  EXPECT_EQ(st.fp32[0].why, "an explicit Cast to float32");
  EXPECT_EQ(st.fp32[1].node, "add_mask");
  EXPECT_EQ(st.fp32[1].op, "Add");
  EXPECT_EQ(st.fp32[1].why, "promoted: reads the float32 activation 'mf'");
}

// transformers' eager attention mask: int64 mask -> Cast(float32) ->
// (1 - m) * float32's lowest -> + scores -> Softmax. The Cast from integers
// makes the 16-bit type, the lowest float32 becomes the 16-bit type's
// lowest finite value (not -inf, so 0 * it stays 0), and every float node
// is 16-bit.
TEST_P(PrecisionPass, IntegerCastsAreSixteenBitAndConstantsClampToTheRange) {
  const DType h = GetParam();
  ModelBuilder b(17);
  b.input("x", 1, {2, 4});
  b.input("mask", 7, {2, 4});
  b.initializer("W", {4, 4}, std::vector<float>(16, 0.5f));
  b.initializer("one", {}, {1.f});
  b.initializer("lowest", {}, {-3.4028234663852886e38f});
  b.node("MatMul", {"x", "W"}, {"s"});
  ModelBuilder::attr_int(b.node("Cast", {"mask"}, {"mf"}, "cast_mask"), "to", 1);  // int64 -> float32
  b.node("Sub", {"one", "mf"}, {"inv"});
  b.node("Mul", {"inv", "lowest"}, {"bias"});
  b.node("Add", {"s", "bias"}, {"sm"});
  ModelBuilder::attr_int(b.node("Softmax", {"sm"}, {"p"}), "axis", -1);
  b.node("MatMul", {"p", "W"}, {"y"});
  b.output("y", 1, {2, 4});
  ir::Model m = imported(b);
  auto st = convert_precision(m, h);
  ir::verify(m);
  const ir::Node& cast = node_of(m, "Cast");
  EXPECT_EQ(cast.i("to", 0), static_cast<int64_t>(h)) << "Cast(int64 -> float32) makes the 16-bit type";
  EXPECT_EQ(dtype_of(m, value_named(m, "mf")), h);
  for (const char* v : {"inv", "bias", "sm", "p"}) EXPECT_EQ(dtype_of(m, value_named(m, v)), h) << v;
  EXPECT_EQ(st.float_nodes, 7);
  EXPECT_EQ(st.nodes_16bit, 7);
  EXPECT_TRUE(st.fp32.empty());
  EXPECT_EQ(st.clamped, 1);
  const ir::Node& mul = node_of(m, "Mul");
  const ir::Value& c = m.value(mul.inputs[1]);
  ASSERT_TRUE(c.constant.has_value());
  ASSERT_EQ(c.dtype, h);
  const uint16_t bits = c.constant->data<uint16_t>()[0];
  const float lowest = h == DType::f16 ? half_to_float(bits) : bf16_to_float(bits);
  EXPECT_EQ(lowest, h == DType::f16 ? -65504.f : -bf16_to_float(0x7f7fu)) << "the lowest finite 16-bit value";
  // Infinity is no finite value: a -inf constant stays -inf.
  ModelBuilder bi(17);
  bi.input("x", 1, {2, 4});
  bi.initializer("ninf", {4}, {0.f, -INFINITY, 1e9f, -1.f});
  bi.node("Add", {"x", "ninf"}, {"y"});
  bi.output("y", 1, {2, 4});
  ir::Model mi = imported(bi);
  auto sti = convert_precision(mi, h);
  EXPECT_EQ(sti.clamped, h == DType::f16 ? 1 : 0) << "1e9 is beyond fp16's range only";
  const ir::Value& ci = mi.value(node_of(mi, "Add").inputs[1]);
  ASSERT_EQ(ci.dtype, h);
  auto at = [&](int k) {
    const uint16_t u = ci.constant->data<uint16_t>()[k];
    return h == DType::f16 ? half_to_float(u) : bf16_to_float(u);
  };
  EXPECT_TRUE(std::isinf(at(1)) && at(1) < 0);
  EXPECT_EQ(at(2), h == DType::f16 ? 65504.f : bf16_to_float(float_to_bf16(1e9f)));
  EXPECT_EQ(at(3), -1.f);
}

// Operators without 16-bit kernels run as written: their 16-bit inputs are
// cast back to float32. Resize's scales are never touched.
TEST_P(PrecisionPass, IslandsGetFloat32InputsAndResizeScalesAreNotData) {
  const DType h = GetParam();
  ModelBuilder b(19);
  b.input("x", 1, {1, 2, 4, 4});
  b.initializer("W", {2, 2, 1, 1}, {1.f, 0.f, 0.f, 1.f});
  b.initializer("scales", {4}, {1.f, 1.f, 2.f, 2.f});
  b.initializer_i64("ax", {}, {3});
  b.node("Conv", {"x", "W"}, {"c"});
  auto& lin = b.node("Resize", {"c", "", "scales"}, {"lin"});
  lin.add_attribute()->set_name("mode");
  lin.mutable_attribute(0)->set_type(onnx::AttributeProto::STRING);
  lin.mutable_attribute(0)->set_s("linear");
  b.node("Resize", {"c", "", "scales"}, {"nn"});  // nearest: moves 16-bit values
  b.node("CumSum", {"c", "ax"}, {"cs"});
  b.output("lin", 1, {1, 2, 8, 8}).output("nn", 1, {1, 2, 8, 8}).output("cs", 1, {1, 2, 4, 4});
  ir::Model m = imported(b);
  convert_precision(m, h);
  ir::verify(m);
  const ir::Node& r_lin = node_of(m, "Resize", 0);
  const ir::Node& r_nn = node_of(m, "Resize", 1);
  EXPECT_EQ(dtype_of(m, r_lin.inputs[0]), DType::f32);
  EXPECT_EQ(dtype_of(m, r_lin.outputs[0]), DType::f32);
  EXPECT_EQ(dtype_of(m, r_nn.inputs[0]), h);
  EXPECT_EQ(dtype_of(m, r_nn.outputs[0]), h);
  for (auto* r : {&r_lin, &r_nn}) {
    EXPECT_EQ(dtype_of(m, r->inputs[2]), DType::f32);
    EXPECT_EQ(m.value(r->inputs[2]).name, "scales");
  }
  const ir::Node& cs = node_of(m, "CumSum");
  EXPECT_EQ(dtype_of(m, cs.inputs[0]), DType::f32);
  EXPECT_EQ(cs.inputs[0], r_lin.inputs[0]) << "one cast back to float32, shared";
  // Cast x up to 16 bits, c back to float32 (shared), nn's output back.
  EXPECT_EQ(count_op(m, "Cast"), 3);
}

INSTANTIATE_TEST_SUITE_P(Cuda, PrecisionPass, ::testing::Values(DType::f16, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(PrecisionPolicy, RolesOfOperators) {
  using targets::cuda::precision_role;
  auto node = [](const std::string& op) {
    ir::Node n;
    n.op_type = op;
    return n;
  };
  EXPECT_EQ(precision_role(node("MatMul"), DType::f16), PrecisionRole::half);
  EXPECT_EQ(precision_role(node("Conv"), DType::bf16), PrecisionRole::half);
  EXPECT_EQ(precision_role(node("Softmax"), DType::f16), PrecisionRole::follow);
  EXPECT_EQ(precision_role(node("LayerNormalization"), DType::f16), PrecisionRole::follow);
  EXPECT_EQ(precision_role(node("ReduceMean"), DType::f16), PrecisionRole::follow);
  // Results that can leave fp16's range are float32 in fp16 only.
  EXPECT_EQ(precision_role(node("Exp"), DType::f16), PrecisionRole::fp32_out);
  EXPECT_EQ(precision_role(node("ReduceSumSquare"), DType::f16), PrecisionRole::fp32_out);
  EXPECT_EQ(precision_role(node("Exp"), DType::bf16), PrecisionRole::follow);
  EXPECT_EQ(precision_role(node("Cast"), DType::f16), PrecisionRole::cast);
  EXPECT_EQ(precision_role(node("SoftmaxCrossEntropyLoss"), DType::f16), PrecisionRole::island);
  EXPECT_EQ(precision_role(node("DequantizeLinear"), DType::f16), PrecisionRole::island);
  ir::Node foreign = node("Gemm");
  foreign.domain = "com.example";
  EXPECT_EQ(precision_role(foreign, DType::f16), PrecisionRole::island);
}

TEST(PrecisionPolicy, OnlySixteenBitTargets) {
  ir::Model m = imported(mlp_model(), {{"x", {1, 4}}});
  try {
    convert_precision(m, DType::f32);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::internal);
  }
}

/// Lowers for sm_90 without a device (no matmuls or convolutions).
artifact::CompiledProgram lower_at(const ModelBuilder& b, DType dtype) {
  artifact::CompiledProgram cp;
  cp.model = imported(b);
  targets::cuda::LowerOptions opt;
  opt.device = -1;
  opt.dtype = dtype;
  targets::cuda::lower_for_cuda(cp, opt);
  return cp;
}

// The 16-bit kernels load with kl_h2f / kl_bf2f, keep every statistic in
// float, and NVRTC compiles them.
TEST_P(PrecisionPass, SixteenBitKernelsComputeInFloatAndCompile) {
  const DType h = GetParam();
  const std::string load = h == DType::f16 ? "kl_h2f(" : "kl_bf2f(";
  const std::string store = h == DType::f16 ? "kl_f2h(" : "kl_f2bf(";
  auto cp = lower_at(kernels_model(), h);
  auto src = targets::cuda::decode_bundle(cp.kernels, "test").source;
  auto kernel = [&](const std::string& tag) {
    auto at = src.find(tag);
    EXPECT_NE(at, std::string::npos) << tag;
    if (at == std::string::npos) return std::string();
    return src.substr(at, src.find("\n}\n", at) - at);
  };
  std::string ln = kernel("_layernorm(");
  EXPECT_NE(ln.find("const unsigned short* __restrict__ x, const float* __restrict__ g"), std::string::npos) << ln;
  EXPECT_NE(ln.find("float s = 0.f;"), std::string::npos) << ln;
  // One warp per row: each lane loads its elements as floats into registers once.
  EXPECT_NE(ln.find("float v[1][1];"), std::string::npos) << ln;
  EXPECT_NE(ln.find("v[c][0] = " + load + "x[b + j])"), std::string::npos) << ln;
  EXPECT_NE(ln.find("s += v[c][p];"), std::string::npos) << ln;
  EXPECT_NE(ln.find("y[b + j] = " + store), std::string::npos) << ln;
  std::string sm = kernel("_softmax(");
  EXPECT_NE(sm.find("v[c][0] = " + load + "x[b + j])"), std::string::npos) << sm;
  EXPECT_NE(sm.find("float s = 0.f;"), std::string::npos) << sm;
  EXPECT_NE(sm.find("v[c][p] = expf(v[c][p] - m); s += v[c][p];"), std::string::npos) << sm;
  EXPECT_NE(sm.find("unsigned short* __restrict__ y"), std::string::npos) << sm;
  std::string mean = kernel("_reducemean(");
  EXPECT_NE(mean.find("float a = 0.f;"), std::string::npos) << mean;
  EXPECT_NE(mean.find("float v = " + load), std::string::npos) << mean;
  // Every model output is still float32.
  for (auto id : cp.model.main.outputs) EXPECT_EQ(cp.model.value(id).dtype, DType::f32) << cp.model.value(id).name;
  // Pools on 16-bit storage.
  auto pools = lower_at(pool_model(), h);
  auto psrc = targets::cuda::decode_bundle(pools.kernels, "test").source;
  EXPECT_NE(psrc.find("const unsigned short* xp"), std::string::npos);
  EXPECT_NE(psrc.find("y[i] = " + store), std::string::npos);
}

TEST(PrecisionPolicy, Fp16ReduceSumAndExpWriteFloat32) {
  auto cp = lower_at(kernels_model(), DType::f16);
  auto src = targets::cuda::decode_bundle(cp.kernels, "test").source;
  auto at = src.find("_reducesum(");
  ASSERT_NE(at, std::string::npos);
  std::string rs = src.substr(at, src.find("\n}\n", at) - at);
  EXPECT_NE(rs.find(", float* __restrict__ y"), std::string::npos) << rs;
}

TEST(CudaNodeAttributes, GemmDtypeAndTf32RoundTrip) {
  using namespace targets::cuda;
  GemmSpec s;
  s.m = 4, s.n = 8, s.k = 16;
  s.dtype = DType::bf16;
  ir::Node n;
  n.op_type = "Gemm";
  n.domain = "kiln.cuda";
  n.name = "g0";
  set_gemm_attrs(n, s);
  EXPECT_EQ(n.s("dtype", ""), "bfloat16");
  GemmSpec r = gemm_spec_from(n);
  EXPECT_EQ(r.dtype, DType::bf16);
  EXPECT_FALSE(r.tf32);
  EXPECT_EQ(blaslt_type(r.dtype), CUDA_R_16BF);
  EXPECT_EQ(blaslt_compute(r), CUBLAS_COMPUTE_32F);
  s.dtype = DType::f32;
  s.tf32 = true;
  set_gemm_attrs(n, s);
  EXPECT_EQ(blaslt_compute(gemm_spec_from(n)), CUBLAS_COMPUTE_32F_FAST_TF32);
  // An artifact of an older kiln (no dtype / tf32): strict float32.
  n.attrs.erase("dtype");
  n.attrs.erase("tf32");
  EXPECT_EQ(gemm_spec_from(n).dtype, DType::f32);
  EXPECT_EQ(blaslt_compute(gemm_spec_from(n)), CUBLAS_COMPUTE_32F);
  for (auto [key, value] : std::vector<std::pair<std::string, ir::AttrValue>>{
           {"dtype", std::string("int8")}, {"tf32", int64_t{1}}}) {
    ir::Node bad = n;
    bad.attrs["dtype"] = std::string(key == "tf32" ? "float16" : "int8");
    bad.attrs[key] = value;
    try {
      gemm_spec_from(bad);
      ADD_FAILURE() << key << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_model);
      EXPECT_NE(std::string(e.what()).find("g0"), std::string::npos) << e.what();
    }
  }
}

TEST(CudaNodeAttributes, GeluBecomesTheMatmulEpilogueInSixteenBitProgramsOnly) {
  auto model = [] {
    ModelBuilder b(20);
    b.input("x", 1, {4, 8});
    b.initializer("W", {8, 16}, std::vector<float>(128, 0.1f));
    b.initializer("B", {16}, std::vector<float>(16, 0.2f));
    b.node("MatMul", {"x", "W"}, {"xw"});
    b.node("Add", {"xw", "B"}, {"h"});
    b.node("Gelu", {"h"}, {"y"});  // erf form (approximate="none")
    b.output("y", 1, {4, 16});
    return b;
  };
  for (DType dt : {DType::f16, DType::bf16, DType::f32}) {
    artifact::CompiledProgram cp;
    cp.model = imported(model());
    targets::cuda::LowerOptions opt;
    opt.device = -1;
    opt.dtype = dt;
    targets::cuda::lower_for_cuda(cp, opt);
    const ir::Node& g = node_of(cp.model, "Gemm");
    auto spec = targets::cuda::gemm_spec_from(g);
    EXPECT_TRUE(spec.has_bias) << dtype_name(dt);
    int gelu_kernels = 0;
    for (auto& n : cp.model.main.nodes) gelu_kernels += n.op_type == "Kernel" && n.s("source_op", "") == "Gelu";
    if (dt == DType::f32) {
      EXPECT_EQ(spec.epilogue, 0) << "float32 keeps the exact erf Gelu";
      EXPECT_EQ(gelu_kernels, 1);
    } else {
      EXPECT_EQ(spec.epilogue, 2) << dtype_name(dt);
      EXPECT_EQ(gelu_kernels, 0) << dtype_name(dt);
    }
  }
}

TEST(CudaNodeAttributes, ConvDtypeAndMathRoundTrip) {
  using namespace targets::cuda;
  ConvSpec s;
  s.x = {1, 2, 4, 4}, s.w = {2, 2, 3, 3}, s.y = {1, 2, 4, 4};
  s.pads = {1, 1}, s.strides = {1, 1}, s.dilations = {1, 1};
  ir::Node n;
  n.name = "c0";
  EXPECT_EQ(conv_math(s), CUDNN_FMA_MATH) << "strict fp32 by default";
  s.tf32 = true;
  EXPECT_EQ(conv_math(s), CUDNN_DEFAULT_MATH);
  s.tf32 = false;
  s.dtype = DType::f16;
  set_conv_attrs(n, s);
  ConvSpec r = conv_spec_from(n);
  EXPECT_EQ(r.dtype, DType::f16);
  EXPECT_EQ(cudnn_type(r.dtype), CUDNN_DATA_HALF);
  EXPECT_EQ(conv_math(r), CUDNN_TENSOR_OP_MATH);
  EXPECT_EQ(cudnn_type(DType::bf16), CUDNN_DATA_BFLOAT16);
  n.attrs["tf32"] = int64_t{1};
  try {
    conv_spec_from(n);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_model);
    EXPECT_NE(std::string(e.what()).find("c0"), std::string::npos) << e.what();
  }
}

void expect_option_error(const SessionOptions& o, const std::string& option, const std::string& also) {
  try {
    o.validate();
    ADD_FAILURE() << option << ": no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option) << e.what();
    EXPECT_NE(std::string(e.what()).find(option + ":"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(also), std::string::npos) << e.what();
  }
}

// An LM head: in fp16 / bf16 the Cast of the logits to float32 is fused
// into the matmul (out_dtype), so no cast kernel remains; in float32 there
// is nothing to fuse. B keeps its [k, n] layout (a transposed copy measured
// slower, lower_gemm.cpp).
TEST(CudaGemmLayout, LmHeadFusesTheOutputCast) {
  for (DType dt : {DType::f16, DType::bf16, DType::f32}) {
    auto cp = lower_at(lm_head_model(), dt);
    const ir::Node* gemm = nullptr;
    int kernels = 0;
    for (auto& n : cp.model.main.nodes) {
      if (n.op_type == "Gemm") gemm = &n;
      if (n.op_type == "Kernel") ++kernels;
    }
    ASSERT_NE(gemm, nullptr) << dtype_name(dt);
    auto s = targets::cuda::gemm_spec_from(*gemm);
    EXPECT_FALSE(s.trans_b) << dtype_name(dt);
    EXPECT_EQ(cp.model.value(gemm->inputs[1]).constant->shape(), (std::vector<int64_t>{16, 9})) << dtype_name(dt);
    EXPECT_EQ(s.m, 15);
    EXPECT_EQ(s.n, 9);
    EXPECT_EQ(s.k, 16);
    EXPECT_EQ(s.d_type(), DType::f32) << dtype_name(dt);
    EXPECT_EQ(gemm->has("out_dtype"), dt != DType::f32) << dtype_name(dt);
    EXPECT_EQ(cp.model.value(gemm->outputs[0]).name, "logits") << dtype_name(dt);
    EXPECT_EQ(cp.model.value(gemm->outputs[0]).dtype, DType::f32);
    // 16-bit: only the input's cast to 16 bits is a kernel; the output cast is gone.
    EXPECT_EQ(kernels, dt == DType::f32 ? 0 : 1) << dtype_name(dt);
  }
}

// out_dtype round-trips, is absent when it equals dtype, and is refused
// where cuBLASLt's bias / C types would follow it (naming the node).
TEST(CudaNodeAttributes, GemmOutDtypeRoundTripsAndIsChecked) {
  using namespace targets::cuda;
  GemmSpec s;
  s.m = 4, s.n = 8, s.k = 16;
  s.dtype = DType::f16;
  ir::Node n;
  n.op_type = "Gemm";
  n.domain = "kiln.cuda";
  n.name = "g1";
  set_gemm_attrs(n, s);
  EXPECT_FALSE(n.has("out_dtype"));
  EXPECT_EQ(gemm_spec_from(n).d_type(), DType::f16);
  s.out_dtype = DType::f32;
  set_gemm_attrs(n, s);
  EXPECT_EQ(n.s("out_dtype", ""), "float32");
  EXPECT_EQ(gemm_spec_from(n).d_type(), DType::f32);
  for (auto [key, value] : std::vector<std::pair<std::string, ir::AttrValue>>{
           {"out_dtype", std::string("bfloat16")}, {"has_bias", int64_t{1}}, {"has_c", int64_t{1}}}) {
    ir::Node bad = n;
    bad.attrs[key] = value;
    try {
      gemm_spec_from(bad);
      ADD_FAILURE() << key << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_model) << key;
      EXPECT_NE(std::string(e.what()).find("g1"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("out_dtype"), std::string::npos) << e.what();
    }
  }
}

TEST(PrecisionOptions, ValidationNamesTheOption) {
  SessionOptions o;
  o.precision = Precision::fp16;
  expect_option_error(o, "precision", "cpu");
  o.target = Target::ref();
  o.precision = Precision::bf16;
  expect_option_error(o, "precision", "bf16");
  o = SessionOptions();
  o.allow_tf32 = true;
  expect_option_error(o, "allow_tf32", "cpu");
  o.target = Target::cuda();
  o.precision = Precision::fp16;
  expect_option_error(o, "allow_tf32", "fp16");
  // Accepted on cuda: fp16, bf16, fp32 with TF32.
  for (auto [p, tf32] : std::vector<std::pair<Precision, bool>>{
           {Precision::fp16, false}, {Precision::bf16, false}, {Precision::fp32, true}}) {
    SessionOptions ok;
    ok.target = Target::cuda();
    ok.precision = p;
    ok.allow_tf32 = tf32;
    EXPECT_NO_THROW(ok.validate()) << precision_text(p, tf32);
  }
  EXPECT_EQ(precision_text(Precision::fp32, true), "fp32+tf32");
  EXPECT_EQ(precision_text(Precision::fp32, false), "fp32");
  EXPECT_EQ(precision_text(Precision::bf16, false), "bf16");
}

}  // namespace
}  // namespace kiln::testing
