// The cuda target's compile side without a GPU: lowering and fusion, NVRTC
// code generation for sm_90 (NVRTC needs no device), the kernels section's
// round trip through the artifact, and the errors for what cuda cannot run.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>

#include "artifact/artifact.h"
#include "cuda_models.h"
#include "kiln/errors.h"
#include "kiln/session.h"
#include "onnx/importer.h"
#include "passes/passes.h"
#include "runtime/compile.h"
#include "targets/cuda/compile/lowering.h"
#include "targets/cuda/run/blaslt_api.h"
#include "targets/cuda/compile/nvrtc.h"
#include "targets/cuda/run/cuda_ops.h"
#include "targets/cuda/run/cudnn_graph.h"
#include "targets/cuda/run/node_checks.h"
#include "targets/cuda/run/driver.h"

namespace kiln::testing {
namespace {

using targets::cuda::KernelBundle;

/// Imports and lowers for sm_90 with no device (matmul / convolution algorithms left to the load).
artifact::CompiledProgram lower(const ModelBuilder& b, targets::cuda::LowerStats* st = nullptr, DType dtype = DType::f32,
                                bool fallback = true) {
  auto bytes = b.bytes();
  artifact::CompiledProgram cp;
  cp.model = onnx_import::import_bytes(bytes.data(), bytes.size(), ".", "test");
  passes::bind_input_shapes(cp.model, {});
  passes::infer_and_fold(cp.model);
  passes::eliminate_dead_code(cp.model);
  targets::cuda::LowerOptions opt;
  opt.arch = "sm_90";
  opt.device = -1;
  opt.dtype = dtype;
  opt.fallback = fallback;
  auto s = targets::cuda::lower_for_cuda(cp, opt);
  if (st) *st = s;
  cp.compat.target = "cuda";
  cp.compat.device_arch = "sm_90";
  return cp;
}

TEST(CudaCodegen, EveryKernelFamilyCompilesToSm90CubinAndPtx) {
  targets::cuda::LowerStats st;
  auto cp = lower(kernels_model(), &st);
  // Mul, Add, Tanh fuse into one kernel; Greater, Exp, Sub, Where into another.
  EXPECT_GE(st.fused, 5);
  EXPECT_EQ(st.gemms, 0);
  EXPECT_EQ(st.copies, 1);  // the Reshape
  for (auto& n : cp.model.main.nodes) EXPECT_EQ(n.domain, "kiln.cuda") << n.label();
  KernelBundle b = targets::cuda::decode_bundle(cp.kernels, "test");
  EXPECT_EQ(b.arch, "sm_90");
  ASSERT_GT(b.cubin.size(), 4u);
  EXPECT_EQ(std::memcmp(b.cubin.data(), "\x7f" "ELF", 4), 0) << "a cubin is an ELF file";
  EXPECT_NE(b.ptx.find(".target sm_90"), std::string::npos);
  EXPECT_NE(b.source.find("extern \"C\" __global__"), std::string::npos);
  // Every kernel node names a function of the source.
  for (auto& n : cp.model.main.nodes)
    if (n.op_type == "Kernel") EXPECT_NE(b.source.find(n.s("fn", "?") + "("), std::string::npos) << n.label();
  // The intermediates have an arena.
  EXPECT_GT(cp.plan.arena_bytes, 0u);
}

TEST(CudaCodegen, PoolingWindowsCompile) {
  targets::cuda::LowerStats st;
  auto cp = lower(pool_model(), &st);
  EXPECT_EQ(st.kernels, 3);
  auto b = targets::cuda::decode_bundle(cp.kernels, "test");
  EXPECT_NE(b.source.find("k0_maxpool("), std::string::npos);
}

TEST(CudaCodegen, MiscOperatorsCompile) {
  ModelBuilder b(17);
  b.input("x", 1, {3, 4});
  b.input("ind", 7, {2, 4});
  b.input("like", 7, {1});
  b.node("Tan", {"x"}, {"t"});
  b.node("Acosh", {"t"}, {"a"});
  b.node("IsInf", {"a"}, {"inf"});
  b.node("CastLike", {"x", "like"}, {"cl"});
  ModelBuilder::attr_int(b.node("ArgMax", {"x"}, {"am"}), "axis", 1);
  ModelBuilder::attr_int(b.node("GatherElements", {"x", "ind"}, {"ge"}), "axis", 0);
  b.node("Trilu", {"x"}, {"tu"});
  b.input("xi", 7, {3, 4});
  b.input("xu", 12, {3, 4});
  b.node("BitShift", {"xu", "xu"}, {"bs"}).add_attribute()->set_name("direction");
  b.graph().mutable_node(b.graph().node_size() - 1)->mutable_attribute(0)->set_type(onnx::AttributeProto::STRING);
  b.graph().mutable_node(b.graph().node_size() - 1)->mutable_attribute(0)->set_s("LEFT");
  b.node("Mod", {"xi", "xi"}, {"md"});
  b.node("Hardmax", {"x"}, {"hm"});
  b.initializer_i64("reps", {2}, {2, 1});
  b.node("Tile", {"x", "reps"}, {"tl"});
  b.initializer_i64("ax0", {}, {0});
  b.node("CumSum", {"x", "ax0"}, {"cs"});
  b.initializer("scales", {2}, {2.f, 1.5f});
  auto& rz = b.node("Resize", {"x", "", "scales"}, {"rz"});
  rz.add_attribute()->set_name("coordinate_transformation_mode");
  rz.mutable_attribute(0)->set_type(onnx::AttributeProto::STRING);
  rz.mutable_attribute(0)->set_s("asymmetric");
  b.output("inf", 9, {3, 4}).output("cl", 7, {3, 4}).output("am", 7, {3, 1}).output("ge", 1, {2, 4}).output("tu", 1, {3, 4});
  b.output("bs", 12, {3, 4}).output("md", 7, {3, 4}).output("hm", 1, {3, 4}).output("tl", 1, {6, 4}).output("cs", 1, {3, 4}).output("rz", 1, {6, 6});
  targets::cuda::LowerStats st;
  lower(b, &st);
  EXPECT_EQ(st.kernels, 11);
}

TEST(CudaCodegen, HalfCastsAndLossesCompile) {
  ModelBuilder b(17);
  b.input("x", 1, {3, 5});
  b.input("t", 7, {3});
  ModelBuilder::attr_int(b.node("Cast", {"x"}, {"h"}), "to", 10);   // float16
  b.node("Relu", {"h"}, {"hr"});                                     // computed on float16
  ModelBuilder::attr_int(b.node("Cast", {"hr"}, {"f"}), "to", 1);
  ModelBuilder::attr_int(b.node("Cast", {"x"}, {"bf"}), "to", 16);  // bfloat16
  b.node("NegativeLogLikelihoodLoss", {"x", "t"}, {"nll"});
  auto& sce = b.node("SoftmaxCrossEntropyLoss", {"x", "t"}, {"sce", "lp"});
  auto* a = sce.add_attribute();
  a->set_name("reduction");
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s("none");
  b.output("f", 1, {3, 5}).output("bf", 16, {3, 5}).output("nll", 1, {}).output("sce", 1, {3}).output("lp", 1, {3, 5});
  targets::cuda::LowerStats st;
  auto cp = lower(b, &st);
  EXPECT_EQ(st.kernels, 5);  // Cast+Relu+Cast fused, Cast to bf16, NLL, LogSoftmax + NLL for SCE
  auto src = targets::cuda::decode_bundle(cp.kernels, "test").source;
  EXPECT_NE(src.find("kl_f2h("), std::string::npos);
  EXPECT_NE(src.find("kl_f2bf("), std::string::npos);
}

TEST(CudaCodegen, PadDepthToSpaceResizeCompile) {
  ModelBuilder b(19);
  b.input("x", 1, {1, 8, 3, 4});
  b.initializer_i64("pads", {8}, {0, 1, 2, 1, 0, 2, 1, 3});
  auto str = [](onnx::NodeProto& nd, const std::string& k, const std::string& v) {
    auto* a = nd.add_attribute();
    a->set_name(k);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(v);
  };
  str(b.node("Pad", {"x", "pads"}, {"pr"}), "mode", "reflect");
  b.initializer("pv", {}, {2.5f});
  b.node("Pad", {"x", "pads", "pv"}, {"pc"});
  ModelBuilder::attr_int(b.node("DepthToSpace", {"x"}, {"d2s"}), "blocksize", 2);
  ModelBuilder::attr_int(b.node("SpaceToDepth", {"d2s"}, {"s2d"}), "blocksize", 2);
  b.initializer("scales", {4}, {1.f, 1.f, 2.f, 1.5f});
  str(b.node("Resize", {"x", "", "scales"}, {"lin"}), "mode", "linear");
  str(b.node("Resize", {"x", "", "scales"}, {"cub"}), "mode", "cubic");
  b.output("pr", 1, {1, 11, 6, 8}).output("pc", 1, {1, 11, 6, 8}).output("s2d", 1, {1, 8, 3, 4});
  b.output("lin", 1, {1, 8, 6, 6}).output("cub", 1, {1, 8, 6, 6});
  targets::cuda::LowerStats st;
  lower(b, &st);
  EXPECT_EQ(st.kernels, 6);
}

TEST(CudaCodegen, RunTimeAxesStartsPadsAndK) {
  // Inputs that ONNX allows at run time: the static output shapes decide
  // what the kernel needs, the rest is read on the device.
  ModelBuilder b(18);
  b.input("x", 1, {3, 4, 5});
  b.input("axes", 7, {1});
  b.input("k", 7, {});
  b.input("starts", 7, {1});
  b.input("ends", 7, {1});
  b.input("pads", 7, {6});
  b.input("ax", 7, {});
  b.node("ReduceSum", {"x", "axes"}, {"rs"});
  b.node("Trilu", {"x", "k"}, {"tu"});
  b.initializer_i64("sax", {1}, {1});
  b.node("Slice", {"x", "starts", "ends", "sax"}, {"sl"});
  b.node("Pad", {"x", "pads"}, {"pd"});
  b.node("CumSum", {"x", "ax"}, {"cs"});
  b.output("rs", 1, {3, 1, 5}).output("tu", 1, {3, 4, 5}).output("sl", 1, {3, 2, 5}).output("pd", 1, {4, 6, 8});
  b.output("cs", 1, {3, 4, 5});
  targets::cuda::LowerStats st;
  lower(b, &st);
  EXPECT_EQ(st.kernels, 5);
}

TEST(CudaCodegen, QuantScatterGatherNdCompile) {
  ModelBuilder b(18);
  b.input("x", 1, {2, 3, 4});
  b.input("ind", 7, {2, 1});
  b.input("upd", 1, {2, 3, 4});
  b.input("ie", 7, {2, 3, 4});
  b.initializer("sc", {3}, {0.1f, 0.2f, 0.5f});
  b.node("QuantizeLinear", {"x", "sc"}, {"q"});
  b.node("DequantizeLinear", {"q", "sc"}, {"dq"});
  b.node("GatherND", {"x", "ind"}, {"gn"});
  b.node("ScatterND", {"x", "ind", "upd"}, {"sn"});
  auto& se = b.node("ScatterElements", {"x", "ie", "upd"}, {"se"});
  auto* a = se.add_attribute();
  a->set_name("reduction");
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s("add");
  b.node("Shrink", {"x"}, {"sh"});
  b.output("dq", 1, {2, 3, 4}).output("gn", 1, {2, 3, 4}).output("sn", 1, {2, 3, 4}).output("se", 1, {2, 3, 4});
  b.output("sh", 1, {2, 3, 4});
  targets::cuda::LowerStats st;
  auto cp = lower(b, &st);
  EXPECT_EQ(st.kernels, 6);
  int init = 0;
  for (auto& n : cp.model.main.nodes) init += n.has("init_from");
  EXPECT_EQ(init, 2);
}

TEST(CudaCodegen, NormalizationsOneHotEyeDropoutCompile) {
  ModelBuilder b(18);
  b.input("x", 1, {2, 4, 3, 3});
  b.input("ind", 7, {2, 3});
  b.initializer("c4", {4}, {1.f, 0.5f, 2.f, -1.f});
  b.initializer("v4", {4}, {1.f, 0.5f, 2.f, 3.f});
  b.initializer("g2", {2}, {1.f, 0.5f});
  b.initializer_i64("depth", {}, {5});
  b.initializer("vals", {2}, {0.f, 7.f});
  b.node("InstanceNormalization", {"x", "c4", "c4"}, {"in"});
  ModelBuilder::attr_int(b.node("GroupNormalization", {"x", "g2", "g2"}, {"gn"}), "num_groups", 2);
  b.node("BatchNormalization", {"x", "c4", "c4", "c4", "v4"}, {"bn"});
  b.node("OneHot", {"ind", "depth", "vals"}, {"oh"});
  b.input("m", 1, {3, 4});
  b.node("EyeLike", {"m"}, {"ey"});
  b.node("Dropout", {"x"}, {"dr", "mask"});
  b.output("in", 1, {2, 4, 3, 3}).output("gn", 1, {2, 4, 3, 3}).output("bn", 1, {2, 4, 3, 3}).output("oh", 1, {2, 3, 5});
  b.output("ey", 1, {3, 4}).output("dr", 1, {2, 4, 3, 3}).output("mask", 9, {2, 4, 3, 3});
  targets::cuda::LowerStats st;
  lower(b, &st);
  EXPECT_EQ(st.kernels, 6);
}

TEST(CudaCodegen, ConvBiasBecomesAFusedAdd) {
  // Without a device the convolution itself is refused, after the split.
  auto bytes = conv_model().bytes();
  ir::Model m = onnx_import::import_bytes(bytes.data(), bytes.size(), ".", "test");
  passes::bind_input_shapes(m, {});
  passes::infer_and_fold(m);
  EXPECT_EQ(targets::cuda::split_conv_bias(m), 2);
  int adds = 0;
  for (auto& n : m.main.nodes) adds += n.op_type == "Add";
  EXPECT_EQ(adds, 3);  // two biases and the residual
  ir::verify(m);
}

TEST(CudaCodegen, ArtifactRoundTripKeepsKernelsAndPlan) {
  auto cp = lower(kernels_model());
  auto bytes = std::make_shared<const std::vector<uint8_t>>(artifact::serialize(cp));
  auto back = artifact::read_bytes(bytes, "roundtrip");
  EXPECT_EQ(back.kernels, cp.kernels);
  EXPECT_EQ(back.plan.arena_bytes, cp.plan.arena_bytes);
  EXPECT_EQ(back.plan.offsets, cp.plan.offsets);
  ASSERT_EQ(back.model.main.nodes.size(), cp.model.main.nodes.size());
  for (size_t i = 0; i < cp.model.main.nodes.size(); ++i) {
    EXPECT_EQ(back.model.main.nodes[i].op_type, cp.model.main.nodes[i].op_type);
    if (cp.model.main.nodes[i].op_type != "Kernel") continue;
    EXPECT_EQ(back.model.main.nodes[i].s("fn", ""), cp.model.main.nodes[i].s("fn", ""));
    EXPECT_EQ(back.model.main.nodes[i].ints("grid"), cp.model.main.nodes[i].ints("grid"));
  }
  EXPECT_EQ(back.compat.device_arch, "sm_90");
}

TEST(CudaCodegen, KernelNodesRecordTheirCubin) {
  auto a = lower(kernels_model());
  auto b = lower(pool_model());
  auto ba = targets::cuda::decode_bundle(a.kernels, "a"), bb = targets::cuda::decode_bundle(b.kernels, "b");
  EXPECT_NO_THROW(targets::cuda::check_bundle_matches(a.model, ba));
  EXPECT_NO_THROW(targets::cuda::check_bundle_matches(b.model, bb));
  try {
    targets::cuda::check_bundle_matches(a.model, bb);  // another program's kernels
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_model);
    EXPECT_NE(std::string(e.what()).find("another cubin"), std::string::npos) << e.what();
  }
  // Each program carries its own bundle: given another program's section, a
  // program still finds its own kernels.
  auto own = targets::cuda::program_bundle(a.model, b.kernels, "a");
  EXPECT_EQ(targets::cuda::cubin_digest(own), targets::cuda::cubin_digest(ba));
}

// A byte changed inside a program's cubin (what a rewritten checksum would
// let through) no longer matches the digest its Kernel nodes record: kiln
// inspect reports that without a GPU.
TEST(CudaCodegen, DamagedCubinNoLongerMatchesItsNodes) {
  auto cp = lower(kernels_model());
  ir::Value* kv = nullptr;
  for (auto& v : cp.model.values)
    if (v.name == targets::cuda::kKernelsValue) kv = &v;
  ASSERT_NE(kv, nullptr);
  Tensor t = kv->constant->clone();
  auto b = targets::cuda::decode_bundle(cp.kernels, "x");
  const size_t cubin_at = 8 + 8 + b.arch.size() + 8;
  static_cast<uint8_t*>(t.raw())[cubin_at + b.cubin.size() / 2] ^= 0x5a;
  kv->constant = t;
  auto damaged = targets::cuda::program_bundle(cp.model, cp.kernels, "x");
  EXPECT_NE(targets::cuda::cubin_digest(damaged), targets::cuda::cubin_digest(b));
  EXPECT_THROW(targets::cuda::check_bundle_matches(cp.model, damaged), Error);
}

TEST(CudaCodegen, DamagedKernelsSectionIsCorrupt) {
  auto cp = lower(kernels_model());
  auto k = cp.kernels;
  k.resize(k.size() - 3);
  try {
    targets::cuda::decode_bundle(k, "m.kiln");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::corrupt_artifact);
    EXPECT_NE(std::string(e.what()).find("section 'kernels'"), std::string::npos) << e.what();
  }
}

TEST(CudaCodegen, UnsupportedNodeNamesNodeOpAndCuda) {
  ModelBuilder b(17);
  b.input("x", 1, {2, 3, 3});
  b.node("Det", {"x"}, {"y"}, "det1");
  b.output("y", 1, {2});
  // With host fallback (the default) the node is a host segment ...
  targets::cuda::LowerStats st;
  auto cp = lower(b, &st);
  EXPECT_EQ(st.host_nodes, 1);
  ASSERT_EQ(cp.model.segments.size(), 1u);
  EXPECT_EQ(cp.model.segments[0].device, "host");
  // ... without, the compile is refused naming it.
  try {
    lower(b, nullptr, DType::f32, /*fallback=*/false);
    FAIL() << "no error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(m.find("det1"), std::string::npos) << m;
    EXPECT_NE(m.find("Det"), std::string::npos) << m;
    EXPECT_NE(m.find("cuda"), std::string::npos) << m;
  }
}

TEST(CudaCodegen, SymbolicShapesAreRefused) {
  ModelBuilder b(17);
  b.input("x", 1, {-1, 4});
  b.node("Relu", {"x"}, {"y"}, "relu1");
  b.output("y", 1, {-1, 4});
  try {
    lower(b, nullptr, DType::f32, /*fallback=*/false);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("static shapes"), std::string::npos) << e.what();
  }
}

/// Lowers `b` for sm_90 as a cross-compile does (no device, heuristic
/// tuning: matmul algorithms are left to the load), unlike lower(), whose
/// default tuning refuses matmuls without a device.
artifact::CompiledProgram cross_compile(const ModelBuilder& b, targets::cuda::LowerStats& st) {
  auto bytes = b.bytes();
  artifact::CompiledProgram cp;
  cp.model = onnx_import::import_bytes(bytes.data(), bytes.size(), ".", "test");
  passes::infer_and_fold(cp.model);
  targets::cuda::LowerOptions opt;
  opt.device = -1;
  opt.tuning = Tuning::heuristic;
  st = targets::cuda::lower_for_cuda(cp, opt);
  return cp;
}

TEST(CudaCodegen, MatmulWithPartlyBroadcastBatchDimsReadsAnExpand) {
  ModelBuilder b(17);
  b.input("a", 1, {1, 3, 4, 5}).input("b", 1, {2, 3, 5, 6});
  b.node("MatMul", {"a", "b"}, {"y"}, "mm");
  b.output("y", 1, {2, 3, 4, 6});
  targets::cuda::LowerStats st;
  artifact::CompiledProgram cp = cross_compile(b, st);
  EXPECT_EQ(st.gemms, 1);
  const ir::Node* gemm = nullptr;
  for (auto& n : cp.model.main.nodes)
    if (n.op_type == "Gemm") gemm = &n;
  ASSERT_NE(gemm, nullptr);
  // A is read through a [2,3,4,5] copy: one batch of 6 for cuBLASLt.
  EXPECT_EQ(ir::to_sizes(*cp.model.value(gemm->inputs[0]).shape), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(gemm->i("batch", 1), 6);
}

TEST(CudaCodegen, ConstantMatmulOperandIsBroadcastAtCompileTime) {
  // B [1,3,5,2] constant against A [2,3,4,5]: B becomes a [2,3,5,2] constant
  // (both images read the same weights), no copy kernel at run time.
  ModelBuilder b(17);
  std::vector<float> w(30);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i);
  b.input("a", 1, {2, 3, 4, 5});
  b.initializer("w", {1, 3, 5, 2}, w);
  b.node("MatMul", {"a", "w"}, {"y"}, "mm");
  b.output("y", 1, {2, 3, 4, 2});
  targets::cuda::LowerStats st;
  artifact::CompiledProgram cp = cross_compile(b, st);
  EXPECT_EQ(st.gemms, 1);
  EXPECT_EQ(st.kernels, 0) << "a constant operand needs no Expand kernel";
  const ir::Node* gemm = nullptr;
  for (auto& n : cp.model.main.nodes)
    if (n.op_type == "Gemm") gemm = &n;
  ASSERT_NE(gemm, nullptr);
  const ir::Value& bw = cp.model.value(gemm->inputs[1]);
  ASSERT_TRUE(bw.constant.has_value());
  ASSERT_EQ(bw.constant->shape(), (std::vector<int64_t>{2, 3, 5, 2}));
  const float* d = bw.constant->data<float>();
  for (int i = 0; i < 30; ++i) {
    EXPECT_EQ(d[i], w[i]) << i;
    EXPECT_EQ(d[30 + i], w[i]) << "image 1 reads the same weights, " << i;
  }
}

TEST(CudaCodegen, MatmulWithoutDeviceIsRefusedAtCompileTime) {
  // (mlp_model's batch is symbolic: with host fallback off that refuses it.)
  try {
    lower(mlp_model(), nullptr, DType::f32, /*fallback=*/false);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
  }
}

/// Lowers for sm_90 without a device, computing in `dtype` (the precision pass).
artifact::CompiledProgram lower_as(const ModelBuilder& b, DType dtype) { return lower(b, nullptr, dtype); }

/// The kernel of `src` whose name ends with `tag` ("_softmax(") after `from`.
std::string kernel_text(const std::string& src, const std::string& tag, size_t from = 0) {
  auto at = src.find(tag, from);
  if (at == std::string::npos) return {};
  auto begin = src.rfind("\n//", at);
  return src.substr(begin, src.find("\n}\n", at) - begin);
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// The row kernels (one warp per row up to 1024 elements, a block per row
// beyond), the vectorized element-wise and transpose kernels and their scalar
// fallbacks compile for float32, float16 and bfloat16; 16-bit programs use
// 16-byte accesses.
TEST(CudaCodegen, RowVectorAndTiledKernelsCompileForEveryDtype) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    auto sm = targets::cuda::decode_bundle(lower_as(softmax_rows_model(), dt).kernels, "test");
    // 8 lengths x (Softmax, LogSoftmax) + s3d: warp rows for L <= 1024, block rows for 1030 and 3000.
    EXPECT_EQ(count(sm.source, "(warp per row"), 13u) << sm.source;
    EXPECT_EQ(count(sm.source, "kl_block_max(m)"), 4u);
    EXPECT_NE(sm.source.find("columns of 100, stride 3"), std::string::npos);  // axis 1 of [2,100,3]
    auto ln = targets::cuda::decode_bundle(lower_as(layer_norm_rows_model(), dt).kernels, "test");
    // D 5, 768, 1024 (x2 each), lns768 and ln3 (768) by warps; D 1500 (x2) by blocks.
    EXPECT_EQ(count(ln.source, "(warp per row"), 8u) << ln.source;
    EXPECT_EQ(count(ln.source, "mean_out[row]"), 3u);
    EXPECT_EQ(count(ln.source, "mean_out[blockIdx.x]"), 1u);
    auto ew = targets::cuda::decode_bundle(lower_as(elementwise_chains_model(), dt).kernels, "test");
    EXPECT_GE(count(ew.source, "union {"), 6u) << ew.source;
    EXPECT_GE(count(ew.source, "} else {"), 6u);
    auto tr = targets::cuda::decode_bundle(lower_as(transposes_model(), dt).kernels, "test");
    // Tiles for tr3, tr4 ([2,60,40] -> [2,40,60]) and tr5 ([2,40,20] -> [2,20,40]) after merging dims;
    // contiguous runs for tr1a, tr2a, tri and tr6 (a plain copy once the size-1 dim is dropped).
    EXPECT_EQ(count(tr.source, "(32x32 tiles"), 3u) << tr.source;
    EXPECT_EQ(count(tr.source, "(inner dim kept"), 4u) << tr.source;
    for (auto* b : {&sm, &ln, &ew, &tr}) {
      EXPECT_NE(b->ptx.find(".target sm_90"), std::string::npos);
      EXPECT_EQ(std::memcmp(b->cubin.data(), "\x7f" "ELF", 4), 0);
    }
    if (dt != DType::f32) {
      // 8 half elements per 16-byte access in the element-wise and transpose kernels.
      EXPECT_NE(ew.ptx.find(".v4.u32"), std::string::npos) << "no 16-byte access in the element-wise kernels";
      EXPECT_NE(tr.ptx.find(".v4.u32"), std::string::npos) << "no 16-byte access in the transposes";
    }
  }
}

TEST(CudaCodegen, NvrtcRejectsBadArch) {
  EXPECT_THROW(targets::cuda::nvrtc_compile("extern \"C\" __global__ void f() {}", "gpu90"), Error);
  auto b = targets::cuda::nvrtc_compile("extern \"C\" __global__ void f(float* x) { x[threadIdx.x] = 1.f; }", "sm_90");
  EXPECT_FALSE(b.cubin.empty());
}

TEST(CudaCodegen, NoDeviceGivesACleanError) {
  if (targets::cuda::device_present()) GTEST_SKIP() << "a CUDA device is present";
  TempDir dir;
  mlp_model().save(dir / "mlp.onnx");
  SessionOptions opt;
  opt.target = Target::cuda();
  opt.use_cache = false;
  opt.input_shapes["x"] = {2, 4};
  try {
    Session s(dir / "mlp.onnx", opt);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("no CUDA driver or device"), std::string::npos) << e.what();
  }
}

TEST(CudaCodegen, ArtifactWithoutDeviceIsRefusedNamingDeviceArch) {
  if (targets::cuda::device_present()) GTEST_SKIP() << "a CUDA device is present";
  auto cp = lower(kernels_model());
  std::string arch = "sm_90";
  cp.compat = build_facts(Target::cuda());
  cp.compat.device_arch = arch;
  TempDir dir;
  artifact::write_file(dir / "k.kiln", cp);
  SessionOptions opt;
  opt.target = Target::cuda();
  try {
    Session::load(dir / "k.kiln", opt);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::incompatible_artifact) << e.what();
    EXPECT_NE(std::string(e.what()).find("device_arch"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln::testing

namespace kiln::testing {
namespace {

// cuBLASLt is opened with dlopen (blaslt_api.h), not linked: the library is
// found through the executable's RUNPATH / LD_LIBRARY_PATH, needs no GPU,
// and is the major version the build's header names.
TEST(CudaBlasLt, OpenedAtRunTimeWithTheHeadersMajorVersion) {
  targets::cuda::preload_blaslt();  // a background open; the call below waits for it
  const size_t v = targets::cuda::blaslt_api().cublasLtGetVersion();
  EXPECT_EQ(v / 10000, static_cast<size_t>(CUBLAS_VER_MAJOR)) << v;
  EXPECT_GE(v, static_cast<size_t>(CUBLAS_VER_MAJOR) * 10000);
}

// A library that cannot be opened, or is not cuBLASLt, is named in the error
// (blaslt_api() then throws it as Error(unsupported)).
TEST(CudaBlasLt, UnusableLibraryIsNamed) {
  auto missing = targets::cuda::open_blaslt_library("libcublasLt.so.999");
  EXPECT_NE(missing.error.find("cannot open libcublasLt.so.999"), std::string::npos) << missing.error;
  EXPECT_EQ(missing.api.cublasLtCreate, nullptr);
  auto other = targets::cuda::open_blaslt_library("libc.so.6");
  EXPECT_EQ(other.error, "libc.so.6 has no symbol cublasLtCreate");
  auto real = targets::cuda::open_blaslt_library(fmt::format("libcublasLt.so.{}", CUBLAS_VER_MAJOR));
  EXPECT_EQ(real.error, "");
  EXPECT_NE(real.api.cublasLtMatmul, nullptr);
}

}  // namespace
}  // namespace kiln::testing

namespace kiln::testing {
namespace {

/// Value `name` of `dtype` and `dims` added to `m`.
ir::ValueId add_value(ir::Model& m, const std::string& name, DType dtype, const std::vector<int64_t>& dims) {
  ir::Value v;
  v.name = name;
  v.dtype = dtype;
  v.shape = ir::Shape();
  for (auto d : dims) v.shape->push_back(ir::Dim{d, ""});
  return m.add_value(std::move(v));
}

/// The message of the Error(invalid_model) `f` throws ("" and a failure if none).
template <typename F>
std::string invalid_model_message(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_model) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

/// A graph-API kiln.cuda.Conv as an artifact would hold it (no cuDNN call:
/// these are the attribute checks a load makes first).
ir::Node graph_conv(const targets::cuda::ConvEpilogue& ep, std::vector<ir::ValueId> inputs) {
  using namespace targets::cuda;
  ir::Node n;
  n.op_type = "Conv";
  n.name = "conv7";
  n.inputs = std::move(inputs);
  n.outputs = {9};
  GraphEngine e;
  e.engine = 12;
  e.knobs = {3, 1, 17, 0};
  e.workspace = 4096;
  set_graph_conv_attrs(n, ep, e);
  return n;
}

TEST(CudaConvGraphAttrs, RoundTripAndRefusals) {
  using namespace targets::cuda;
  ir::Node n = graph_conv({true, true, true}, {0, 1, 2, 3});
  ASSERT_TRUE(is_graph_conv(n));
  ConvEpilogue ep = conv_epilogue_from(n);
  EXPECT_TRUE(ep.bias && ep.residual && ep.relu);
  GraphEngine e = graph_engine_from(n);
  EXPECT_EQ(e.engine, 12);
  EXPECT_EQ(e.knobs, (std::vector<int64_t>{3, 1, 17, 0}));
  EXPECT_EQ(e.workspace, 4096u);
  EXPECT_EQ(e.describe(), "engine 12 (knobs 3=1 17=0)");
  EXPECT_EQ(ep.describe(), "conv + bias + residual + relu");

  // Inputs that do not match the epilogue: refused, naming the node.
  ir::Node short_inputs = graph_conv({true, true, true}, {0, 1, 2});
  std::string msg = invalid_model_message([&] { conv_epilogue_from(short_inputs); });
  EXPECT_NE(msg.find("conv7"), std::string::npos) << msg;
  ir::Node odd = n;
  odd.attrs["knobs"] = std::vector<int64_t>{3, 1, 17};
  EXPECT_THROW(graph_engine_from(odd), Error);
  ir::Node neg = n;
  neg.attrs["workspace"] = int64_t{-5};
  EXPECT_THROW(graph_engine_from(neg), Error);
  // An api this kiln does not know is refused, not run as the legacy API.
  ir::Node future = n;
  future.attrs["api"] = std::string("graph2");
  try {
    is_graph_conv(future);
    FAIL() << "unknown api accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("graph2"), std::string::npos) << err.what();
  }
  ir::Node legacy = n;
  legacy.attrs.erase("api");
  EXPECT_FALSE(is_graph_conv(legacy));
}

/// A 3x3, pad 1, stride 1 convolution from [1,8,6,6] to [1,16,6,6].
targets::cuda::ConvSpec conv3x3_spec() {
  targets::cuda::ConvSpec s;
  s.x = {1, 8, 6, 6};
  s.w = {16, 8, 3, 3};
  s.y = {1, 16, 6, 6};
  s.pads = {1, 1};
  s.strides = {1, 1};
  s.dilations = {1, 1};
  return s;
}

TEST(CudaNodeChecks, ConvolutionOperandsMustHaveTheSpecsSizes) {
  using namespace targets::cuda;
  ir::Model m;
  ConvSpec s = conv3x3_spec();
  s.dtype = DType::f16;
  ir::Node n;
  n.op_type = "Conv";
  n.name = "conv3";
  n.inputs = {add_value(m, "x", DType::f16, {1, 8, 6, 6}), add_value(m, "w", DType::f16, {16, 8, 3, 3}),
              add_value(m, "bias", DType::f16, {16}), add_value(m, "z", DType::f16, {1, 16, 6, 6})};
  n.outputs = {add_value(m, "y", DType::f16, {1, 16, 6, 6})};
  const ConvEpilogue full{true, true, true};
  check_conv_operands(m, n, s, full);  // consistent: no error
  ir::Node short_bias = n;
  short_bias.inputs[2] = add_value(m, "bias8", DType::f16, {8});
  std::string msg = invalid_model_message([&] { check_conv_operands(m, short_bias, s, full); });
  EXPECT_NE(msg.find("conv3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bias 'bias8' holds 16 bytes"), std::string::npos) << msg;
  ir::Node small_z = n;
  small_z.inputs[3] = add_value(m, "z_half", DType::f16, {1, 8, 6, 6});
  msg = invalid_model_message([&] { check_conv_operands(m, small_z, s, full); });
  EXPECT_NE(msg.find("residual 'z_half'"), std::string::npos) << msg;
  ir::Node wrong_x = n;
  wrong_x.inputs[0] = add_value(m, "x32", DType::f32, {1, 8, 6, 6});  // float32 bytes for a float16 spec
  msg = invalid_model_message([&] { check_conv_operands(m, wrong_x, s, full); });
  EXPECT_NE(msg.find("input 'x32' holds 1152 bytes, the convolution's spec needs 576"), std::string::npos) << msg;
}

TEST(CudaNodeChecks, LaunchConfigurationsOutsideWhatTheGeneratorWritesAreRefused) {
  using namespace targets::cuda;
  ir::Model m;
  ir::Node k;
  k.op_type = "Kernel";
  k.name = "relu9";
  k.inputs = {add_value(m, "x", DType::f32, {4096})};
  k.outputs = {add_value(m, "y", DType::f32, {4096})};
  k.attrs["grid_stride"] = int64_t{1};
  auto launch = [&](std::vector<int64_t> grid, std::vector<int64_t> block) {
    ir::Node n = k;
    n.attrs["grid"] = std::move(grid);
    n.attrs["block"] = std::move(block);
    return n;
  };
  check_launch(m, launch({16, 1, 1}, {256, 1, 1}));  // what gen_elementwise writes
  for (auto [grid, block, says] : std::vector<std::tuple<std::vector<int64_t>, std::vector<int64_t>, std::string>>{
           {{-1, 1, 1}, {256, 1, 1}, "outside CUDA's limits"},
           {{1, 70000, 1}, {256, 1, 1}, "outside CUDA's limits"},
           {{16, 1, 1}, {2048, 1, 1}, "outside CUDA's limits"},
           {{16, 1, 1}, {512, 4, 1}, "a block of 2048 threads"},
           {{0, 1, 1}, {256, 1, 1}, "empty launch grid for output 'y'"},
           {{16, 1, 1}, {128, 1, 1}, "assumes 256 threads"},
           {{int64_t{1} << 24, 1, 1}, {256, 1, 1}, "32-bit stride"},
           {{16, 1}, {256, 1, 1}, "3 dims"}}) {
    std::string msg = invalid_model_message([&] { check_launch(m, launch(grid, block)); });
    EXPECT_NE(msg.find("relu9"), std::string::npos) << msg;
    EXPECT_NE(msg.find(says), std::string::npos) << msg;
  }
  // An empty grid is what an empty output gets: accepted there.
  ir::Node empty = launch({0, 1, 1}, {256, 1, 1});
  empty.outputs = {add_value(m, "nothing", DType::f32, {0})};
  check_launch(m, empty);
}

TEST(CudaNodeChecks, GraphConvolutionOfAnotherKindIsTheNodesFault) {
  // Refused before any cuDNN call (so on a machine without a GPU too).
  using namespace targets::cuda;
  ConvSpec s = conv3x3_spec();
  GraphEngine e;
  e.engine = 3;
  e.workspace = 1024;
  s.transposed = true;
  std::string msg = invalid_model_message([&] { GraphConvPlan(s, ConvEpilogue{}, e, 1024, "node 'up1'"); });
  EXPECT_NE(msg.find("up1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("transposed"), std::string::npos) << msg;
  s.transposed = false;
  s.dtype = DType::i64;
  msg = invalid_model_message([&] { GraphConvPlan(s, ConvEpilogue{}, e, 1024, "node 'c2'"); });
  EXPECT_NE(msg.find("c2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("int64"), std::string::npos) << msg;
}

}  // namespace
}  // namespace kiln::testing
