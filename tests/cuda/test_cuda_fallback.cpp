// Host fallback of the cuda target, compile side (label `unit`, no GPU
// needed: cross-compiled for sm_90 with heuristic tuning): a node the cuda
// target cannot lower becomes a host segment recorded in the artifact with
// its boundary copies; --fallback error refuses instead, naming every node.
// Running such programs on a GPU: test_cuda_fallback_gpu.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>

#include "artifact/artifact.h"
#include "cuda_models.h"
#include "kiln/compile.h"
#include "kiln/errors.h"
#include "runtime/reference_nodes.h"
#include "targets/cuda/run/cuda_ops.h"

namespace kiln::testing {
namespace {

SessionOptions cross() {
  SessionOptions o;
  o.target = Target::cuda();
  o.arch = "sm_90";
  o.tuning = Tuning::heuristic;
  return o;
}

std::vector<std::string> names(const ir::Model& m, const std::vector<ir::ValueId>& ids) {
  std::vector<std::string> out;
  for (auto id : ids) out.push_back(m.value(id).name);
  return out;
}

TEST(CudaFallback, OneUnsupportedNodeInTheMiddleIsAHostSegmentWithTwoCopies) {
  TempDir dir;
  einsum_middle_model().save(dir / "e.onnx");
  CompileResult r = compile(dir / "e.onnx", dir / "e.kiln", cross());
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("Einsum 'einsum'"), std::string::npos) << r.notes[0];
  EXPECT_NE(r.notes[0].find("--fallback error"), std::string::npos) << r.notes[0];

  auto cp = artifact::read_file(dir / "e.kiln");
  EXPECT_EQ(cp.compat.format_version, artifact::kFormatVersion);
  const ir::Model& m = cp.model;
  ASSERT_EQ(m.segments.size(), 3u);
  EXPECT_EQ(m.segments[0].device, "cuda");
  EXPECT_EQ(m.segments[1].device, "host");
  EXPECT_EQ(m.segments[2].device, "cuda");
  ASSERT_EQ(m.segments[1].count, 1u);
  const ir::Node& host = m.main.nodes.at(m.segments[1].first);
  EXPECT_EQ(host.op_type, "Einsum");
  EXPECT_EQ(host.domain, "");
  // Only the values crossing the boundary: Relu's result down, Einsum's up.
  EXPECT_EQ(names(m, m.segments[1].to_host), std::vector<std::string>{"r"});
  EXPECT_EQ(names(m, m.segments[1].to_device), std::vector<std::string>{"e"});
  for (auto& s : m.segments)
    for (size_t i = s.first; i < s.first + s.count; ++i)
      EXPECT_EQ(m.main.nodes[i].domain == targets::cuda::kCudaDomain, s.device == "cuda") << m.main.nodes[i].label();
  // The two matmuls stay cuBLASLt matmuls on the device.
  int gemms = 0;
  for (auto& n : m.main.nodes) gemms += n.op_type == "Gemm" && n.domain == targets::cuda::kCudaDomain;
  EXPECT_EQ(gemms, 2);
}

TEST(CudaFallback, FallbackErrorRefusesNamingEveryNode) {
  TempDir dir;
  einsum_middle_model().save(dir / "e.onnx");
  SessionOptions o = cross();
  o.fallback = Fallback::error;
  try {
    compile(dir / "e.onnx", dir / "e.kiln", o);
    FAIL() << "compiled with --fallback error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    std::string msg = e.what();
    EXPECT_NE(msg.find("Einsum node 'einsum'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--fallback error"), std::string::npos) << msg;
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "e.kiln"));
  // Without the Einsum the same model has no segments at all.
  einsum_middle_model(false).save(dir / "n.onnx");
  CompileResult r = compile(dir / "n.onnx", dir / "n.kiln", o);
  EXPECT_TRUE(r.notes.empty());
  EXPECT_TRUE(artifact::read_file(dir / "n.kiln").model.segments.empty());
}

TEST(CudaFallback, IfWithADataConditionRunsOnTheHostWithItsOuterValues) {
  TempDir dir;
  data_if_model().save(dir / "if.onnx");
  // Conditional nodes off: the If goes to the host (test_cuda_conditional.cpp: on).
  setenv("KILN_CUDA_CONDITIONAL", "0", 1);
  compile(dir / "if.onnx", dir / "if.kiln", cross());
  unsetenv("KILN_CUDA_CONDITIONAL");
  auto cp = artifact::read_file(dir / "if.kiln");
  const ir::Model& m = cp.model;
  ASSERT_FALSE(m.segments.empty());
  const ir::Segment* host = nullptr;
  for (auto& s : m.segments)
    if (s.device == "host")
      for (size_t i = s.first; i < s.first + s.count; ++i)
        if (m.main.nodes[i].op_type == "If") host = &s;
  ASSERT_NE(host, nullptr) << "the If is in a host segment";
  // The branches read the input x: it is copied along with the condition
  // (a run() takes x from the caller's host tensor instead: no copy then).
  auto down = names(m, host->to_host);
  EXPECT_NE(std::find(down.begin(), down.end(), "x"), down.end());
  EXPECT_NE(std::find(down.begin(), down.end(), "cond"), down.end());
  EXPECT_EQ(names(m, host->to_device), std::vector<std::string>{"branch"});  // the Add is on the device
}

TEST(CudaFallback, ADataDependentShapeStaysOnTheHost) {
  TempDir dir;
  nonzero_model().save(dir / "nz.onnx");
  compile(dir / "nz.onnx", dir / "nz.kiln", cross());
  auto cp = artifact::read_file(dir / "nz.kiln");
  const ir::Model& m = cp.model;
  bool nonzero_on_host = false;
  for (auto& s : m.segments)
    for (size_t i = s.first; i < s.first + s.count; ++i)
      if (m.main.nodes[i].op_type == "NonZero") {
        nonzero_on_host = s.device == "host";
        EXPECT_TRUE(s.to_device.empty()) << "its [1, N] result is a program output, never on the device";
      }
  EXPECT_TRUE(nonzero_on_host);
}

TEST(CudaFallback, ACorruptPartitionIsRefusedByTheReader) {
  TempDir dir;
  einsum_middle_model().save(dir / "e.onnx");
  compile(dir / "e.onnx", dir / "e.kiln", cross());
  auto cp = artifact::read_file(dir / "e.kiln");
  auto expect_refused = [&](artifact::CompiledProgram bad, const std::string& part) {
    try {
      // The writer checks the partition too (ir::check_segments).
      artifact::serialize(bad);
      FAIL() << "a bad partition was written (" << part << ")";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  auto missing_copy = cp;
  missing_copy.model.segments[1].to_host.clear();
  expect_refused(missing_copy, "copies to the host");
  auto gap = cp;
  gap.model.segments[2].first += 1;
  gap.model.segments[2].count -= 1;
  expect_refused(gap, "do not continue");
  auto twice = cp;
  twice.model.segments[1].device = "cuda";
  expect_refused(twice, "segments alternate");
}

// A reshape between a device node and a host node is a cuda Copy that the
// lowering renames away for cuda readers (same bytes, kernels carry their own
// shapes). A host node takes its inputs' shapes from the values, so the value
// it reads must keep the reshaped shape: here Einsum must see [4,8,8], not
// Relu's [4,64] (silero's LSTM failed on cuda fp32 with X seen as [1,128,1]).
TEST(CudaFallback, AHostNodeReadsTheReshapedValueNotTheBytesBeforeIt) {
  TempDir dir;
  ModelBuilder b(17);
  b.input("x", 1, {4, 64});
  b.initializer_i64("s3", {3}, {4, 8, 8});
  b.initializer_i64("s2", {2}, {4, 64});
  b.node("Relu", {"x"}, {"r"}, "relu");
  b.node("Reshape", {"r", "s3"}, {"rs"}, "to3d");
  auto& e = b.node("Einsum", {"rs"}, {"e"}, "einsum");
  auto* eq = e.add_attribute();
  eq->set_name("equation");
  eq->set_type(onnx::AttributeProto::STRING);
  eq->set_s("bij->bji");
  b.node("Reshape", {"e", "s2"}, {"eo"}, "to2d");
  b.node("Tanh", {"eo"}, {"y"}, "tanh");
  b.output("y", 1, {4, 64});
  b.save(dir / "r.onnx");
  compile(dir / "r.onnx", dir / "r.kiln", cross());
  const ir::Model& m = artifact::read_file(dir / "r.kiln").model;
  bool seen = false;
  for (auto& n : m.main.nodes) {
    if (n.op_type != "Einsum") continue;
    seen = true;
    ASSERT_EQ(n.inputs.size(), 1u);
    const ir::Value& x = m.value(n.inputs[0]);
    ASSERT_TRUE(x.shape.has_value());
    EXPECT_EQ(ir::to_sizes(*x.shape), (std::vector<int64_t>{4, 8, 8})) << x.name;
  }
  EXPECT_TRUE(seen) << "no host Einsum in the program";
  for (auto& s : m.segments) {
    if (s.device != "host") continue;
    for (auto id : s.to_host) {
      EXPECT_EQ(ir::to_sizes(*m.value(id).shape).size(), 3u) << m.value(id).name;
    }
  }
}

// A two-operand Einsum that is a batched GEMM (MaxViT's attention scores,
// "bhid,bhjd->bhij") becomes a MatMul before the cuda lowering: no host
// segment, a cuda matmul instead (MaxViT-T spent 117% of its batch-1 latency
// in Einsum host segments on the H200 before).
TEST(CudaFallback, AGemmLikeEinsumRunsOnTheDeviceAsAMatMul) {
  TempDir dir;
  ModelBuilder b(17);
  b.input("q", 1, {1, 2, 8, 16});
  b.input("k", 1, {1, 2, 8, 16});
  auto& e = b.node("Einsum", {"q", "k"}, {"s"}, "scores");
  auto* eq = e.add_attribute();
  eq->set_name("equation");
  eq->set_type(onnx::AttributeProto::STRING);
  eq->set_s("bhid,bhjd->bhij");
  b.node("Relu", {"s"}, {"y"}, "relu");
  b.output("y", 1, {1, 2, 8, 8});
  b.save(dir / "a.onnx");
  CompileResult r = compile(dir / "a.onnx", dir / "a.kiln", cross());
  EXPECT_TRUE(r.notes.empty()) << r.notes[0];
  const ir::Model& m = artifact::read_file(dir / "a.kiln").model;
  EXPECT_TRUE(m.segments.empty());
  int einsums = 0, device = 0;
  for (auto& n : m.main.nodes) {
    einsums += n.op_type == "Einsum";
    device += n.domain == targets::cuda::kCudaDomain;
  }
  EXPECT_EQ(einsums, 0);
  EXPECT_EQ(device, static_cast<int>(m.main.nodes.size()));
}

bool is_half(DType t) { return t == DType::f16 || t == DType::bf16; }

// 16-bit programs: the host kernels compute in float32 (most have no 16-bit
// kernel; the host Exp of an fp16 program wrote float16 where float32 was
// declared, retinanet's exit 6). Every host node reads and writes float32;
// what crosses from the device stays 16-bit and a host Cast widens it, a
// host result a device node reads is cast back to the 16-bit type on the
// host, and the host Gemm reads the original float32 weights.
TEST(CudaFallback, SixteenBitProgramsComputeTheirHostNodesInFloat32) {
  TempDir dir;
  host_fp32_model().save(dir / "h.onnx");
  for (Precision p : {Precision::fp16, Precision::bf16}) {
    SCOPED_TRACE(precision_name(p));
    const DType half = p == Precision::fp16 ? DType::f16 : DType::bf16;
    SessionOptions o = cross();
    o.precision = p;
    // The If runs as a conditional node in 16-bit programs too
    // (test_cuda_control_precision.cpp): off, it is a host node here.
    setenv("KILN_CUDA_CONDITIONAL", "0", 1);
    try {
      compile(dir / "h.onnx", dir / "h.kiln", o);
    } catch (...) {
      unsetenv("KILN_CUDA_CONDITIONAL");
      throw;
    }
    unsetenv("KILN_CUDA_CONDITIONAL");
    const artifact::CompiledProgram cp = artifact::read_file(dir / "h.kiln");
    const ir::Model& m = cp.model;
    std::map<ir::ValueId, const ir::Node*> producer;
    for (auto& n : m.main.nodes)
      for (auto v : n.outputs)
        if (v != ir::kNoValue) producer[v] = &n;
    auto float_ok = [&](const ir::Node& n, ir::ValueId v) {
      if (v == ir::kNoValue) return;
      const DType t = m.value(v).dtype;
      EXPECT_FALSE(is_half(t)) << n.label() << " on the host: '" << m.value(v).name << "' is " << dtype_name(t);
    };
    std::map<std::string, const ir::Node*> host;  // by node name
    std::vector<std::string> to_host, to_device;
    for (auto& s : m.segments) {
      if (s.device != "host") continue;
      for (auto id : s.to_host) to_host.push_back(m.value(id).name);
      for (auto id : s.to_device) to_device.push_back(m.value(id).name);
      for (size_t i = s.first; i < s.first + s.count; ++i) {
        const ir::Node& n = m.main.nodes[i];
        host[n.name] = &n;
        if (n.op_type == "Cast") continue;  // the boundary: 16-bit on one side
        for (auto v : n.inputs) float_ok(n, v);
        for (auto v : n.outputs) float_ok(n, v);
        for (auto& [k, a] : n.attrs)
          if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a))
            ir::for_each_graph(**sg, [&](ir::Graph& g) {
              for (auto& inner : g.nodes)
                for (auto v : inner.inputs) float_ok(inner, v);
            });
      }
    }
    for (const char* name : {"maxpool", "nonzero", "rows", "gemm", "exp", "mul", "if"})
      EXPECT_TRUE(host.count(name)) << name << " is not on the host";
    ASSERT_TRUE(host.count("gemm") && host.count("rows") && host.count("maxpool") && host.count("if"));
    // The Gemm reads the model's float32 weights, not their 16-bit copies.
    const ir::Node& gemm = *host.at("gemm");
    ASSERT_EQ(gemm.inputs.size(), 3u);
    EXPECT_EQ(m.value(gemm.inputs[1]).name, "Wg");
    EXPECT_EQ(m.value(gemm.inputs[2]).name, "Bg");
    // Gather's data: the 16-bit device value crosses, a host Cast widens it.
    const ir::Value& rows_in = m.value(host.at("rows")->inputs[0]);
    EXPECT_EQ(rows_in.dtype, DType::f32);
    ASSERT_TRUE(producer.count(host.at("rows")->inputs[0]));
    const ir::Node& widen = *producer.at(host.at("rows")->inputs[0]);
    EXPECT_EQ(widen.op_type, "Cast");
    EXPECT_TRUE(host.count(widen.name)) << widen.name << " is not on the host";
    EXPECT_EQ(m.value(widen.inputs[0]).dtype, half);
    EXPECT_NE(std::find(to_host.begin(), to_host.end(), m.value(widen.inputs[0]).name), to_host.end());
    // `kiln inspect` says why the boundary Cast runs on reference kernels.
    bool explained = false;
    for (auto& r : reference_nodes(m, "cuda"))
      if (r.node == widen.name) explained = r.reason.find("16-bit values and float32") != std::string::npos;
    EXPECT_TRUE(explained) << widen.name;
    // MaxPool's result: float32 on the host, cast back to 16 bits on the
    // host for the device's Sigmoid: the 16-bit value crosses.
    const ir::ValueId mp = host.at("maxpool")->outputs[0];
    EXPECT_EQ(m.value(mp).dtype, DType::f32);
    const ir::Node* narrow = nullptr;
    for (auto& [name, n] : host)
      if (n->op_type == "Cast" && n->inputs[0] == mp) narrow = n;
    ASSERT_NE(narrow, nullptr) << "no host Cast of MaxPool's output";
    EXPECT_EQ(m.value(narrow->outputs[0]).dtype, half);
    EXPECT_NE(std::find(to_device.begin(), to_device.end(), m.value(narrow->outputs[0]).name), to_device.end());
    EXPECT_EQ(std::find(to_device.begin(), to_device.end(), m.value(mp).name), to_device.end());
    // The If's branches read the outer q (a 16-bit device value) as float32.
    int q_reads = 0;
    for (auto& [k, a] : host.at("if")->attrs)
      if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a))
        for (auto& inner : (*sg)->nodes)
          for (auto v : inner.inputs) {
            if (m.value(v).name.rfind("q", 0) != 0) continue;
            ++q_reads;
            EXPECT_EQ(m.value(v).dtype, DType::f32) << m.value(v).name;
          }
    EXPECT_EQ(q_reads, 2);
    // The notes and `kiln inspect`: the Gemm is a float32 node, and why.
    auto share = nlohmann::json::parse(cp.metadata_json).at("precision_share");
    bool listed = false;
    for (auto& f : share.at("fp32"))
      if (f.at("node") == "gemm") {
        listed = true;
        EXPECT_NE(f.at("why").get<std::string>().find("host"), std::string::npos) << f.dump();
      }
    EXPECT_TRUE(listed) << share.dump();
  }
}

}  // namespace
}  // namespace kiln::testing
