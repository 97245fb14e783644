// Channel padding of RGB-stem convolutions (stem_pad.cpp) without a GPU:
// what the rewrite makes of the channels-last float16 graph (padded input and
// filter, the entry reordered to Transpose -> Pad -> Cast, the rest intact),
// that it keeps the model's meaning on the ref target (the 16-bit program
// emulated in float32, with and without the padding: the same numbers), and
// what the lowering makes of it (one entry kernel). test_cuda_stem_pad_gpu.cpp
// runs the models on a GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "artifact/artifact.h"
#include "nhwc_models.h"
#include "passes/passes.h"
#include "runtime/program.h"
#include "targets/cuda/compile/lowering.h"
#include "targets/cuda/compile/stem_pad.h"

namespace kiln::testing {
namespace {

/// The graph as lower_for_cuda has it when pad_stem_channels runs (float16,
/// channels-last), after pad_stem_channels(`multiple`); `padded` gets its count.
ir::Model prepared(const ModelBuilder& b, int multiple, int* padded = nullptr) {
  ir::Model m = imported_model(b);
  targets::cuda::split_conv_bias(m);
  targets::cuda::convert_precision(m, DType::f16);
  targets::cuda::batch_norm_to_affine(m);
  EXPECT_GT(targets::cuda::to_nhwc(m), 0);
  targets::cuda::merge_layout_transposes(m);
  const int p = targets::cuda::pad_stem_channels(m, multiple);
  if (padded) *padded = p;
  ir::verify(m);
  return m;
}

const ir::Node* producer(const ir::Model& m, ir::ValueId v) {
  for (auto& n : m.main.nodes)
    for (auto o : n.outputs)
      if (o == v) return &n;
  return nullptr;
}

std::vector<int64_t> dims(const ir::Model& m, ir::ValueId v) { return ir::to_sizes(*m.value(v).shape); }

/// The Conv nodes of m, in order.
std::vector<const ir::Node*> convs(const ir::Model& m) {
  std::vector<const ir::Node*> c;
  for (auto& n : m.main.nodes)
    if (n.op_type == "Conv") c.push_back(&n);
  return c;
}

std::vector<uint16_t> bits(const Tensor& t) {
  std::vector<uint16_t> b(static_cast<size_t>(t.numel()));
  std::memcpy(b.data(), t.raw(), b.size() * 2);
  return b;
}

// ResNet's 7x7 / 2 stem: the Conv reads x [2,32,32,C'] through Transpose
// (float32) -> Pad (zeros at the end of the channel axis) -> Cast to float16,
// its filter [16,7,7,C'] holds the original weights in channels 0..2 and +0
// in the rest; the 16-channel Conv after it is untouched.
TEST(CudaStemPad, StemConvReadsZeroPaddedChannels) {
  const ModelBuilder b = rgb_stem_model(2, 7, 2);
  int none = -1;
  const ir::Model plain = prepared(b, 0, &none);
  EXPECT_EQ(none, 0);
  const std::vector<uint16_t> w0 = bits(*plain.value(convs(plain)[0]->inputs[1]).constant);  // [16,7,7,3]
  ASSERT_EQ(w0.size(), 16u * 49 * 3);
  for (int multiple : {8, 4}) {
    int padded = 0;
    const ir::Model m = prepared(b, multiple, &padded);
    EXPECT_EQ(padded, 1);
    EXPECT_EQ(m.main.nodes.size(), plain.main.nodes.size() + 1) << "one Pad more, nothing else";
    const auto c = convs(m);
    ASSERT_EQ(c.size(), 2u);
    const ir::Node& stem = *c[0];
    EXPECT_EQ(stem.i("kiln_nhwc", 0), 1);
    EXPECT_EQ(dims(m, stem.inputs[0]), (std::vector<int64_t>{2, 32, 32, multiple}));
    EXPECT_EQ(m.value(stem.inputs[0]).dtype, DType::f16);
    ASSERT_EQ(dims(m, stem.inputs[1]), (std::vector<int64_t>{16, 7, 7, multiple}));
    const std::vector<uint16_t> w = bits(*m.value(stem.inputs[1]).constant);
    for (size_t row = 0; row < 16u * 49; ++row)
      for (size_t ch = 0; ch < static_cast<size_t>(multiple); ++ch)
        ASSERT_EQ(w[row * multiple + ch], ch < 3 ? w0[row * 3 + ch] : 0) << "row " << row << " channel " << ch;
    // Cast <- Pad <- Transpose <- the graph input x.
    const ir::Node* cast = producer(m, stem.inputs[0]);
    ASSERT_NE(cast, nullptr);
    EXPECT_EQ(cast->op_type, "Cast");
    const ir::Node* pad = producer(m, cast->inputs[0]);
    ASSERT_NE(pad, nullptr);
    ASSERT_EQ(pad->op_type, "Pad");
    EXPECT_EQ(m.value(pad->outputs[0]).dtype, DType::f32);
    EXPECT_EQ(pad->s("mode", "constant"), "constant");
    const Tensor& pads = *m.value(pad->inputs[1]).constant;
    EXPECT_EQ(std::vector<int64_t>(pads.data<int64_t>(), pads.data<int64_t>() + 8),
              (std::vector<int64_t>{0, 0, 0, 0, 0, 0, 0, multiple - 3}));
    const ir::Node* tr = producer(m, pad->inputs[0]);
    ASSERT_NE(tr, nullptr);
    EXPECT_EQ(tr->op_type, "Transpose");
    EXPECT_EQ(tr->ints("perm"), (std::vector<int64_t>{0, 2, 3, 1}));
    EXPECT_EQ(tr->inputs[0], m.main.inputs[0]);
    EXPECT_EQ(dims(m, tr->outputs[0]), (std::vector<int64_t>{2, 32, 32, 3}));
    // The 16-channel Conv: as before.
    EXPECT_EQ(dims(m, c[1]->inputs[1]), (std::vector<int64_t>{16, 3, 3, 16}));
    EXPECT_EQ(c[1]->inputs[0], convs(plain)[1]->inputs[0]) << "it reads the same value as without the padding";
  }
}

// Two convolutions reading one image: its channels-last entry has two
// readers, so the Cast and the Transpose stay and each Conv reads a Pad of
// its own. A float32 program, and C >= 8, are left alone.
TEST(CudaStemPad, SharedEntryGetsOnePadPerConvolution) {
  int padded = 0;
  const ir::Model m = prepared(shared_stem_model(2), 8, &padded);
  EXPECT_EQ(padded, 2);
  for (const ir::Node* c : convs(m)) {
    EXPECT_EQ(dims(m, c->inputs[1])[3], 8);
    const ir::Node* pad = producer(m, c->inputs[0]);
    ASSERT_NE(pad, nullptr);
    EXPECT_EQ(pad->op_type, "Pad");
    EXPECT_EQ(m.value(pad->inputs[0]).dtype, DType::f16);
    const ir::Node* tr = producer(m, pad->inputs[0]);
    ASSERT_NE(tr, nullptr);
    EXPECT_EQ(tr->op_type, "Transpose");
  }
  // float32, channels-last (TF32 programs): not padded (cuDNN's float32 kernels were not measured).
  ir::Model f = imported_model(rgb_stem_model(1, 7, 2));
  targets::cuda::split_conv_bias(f);
  ASSERT_GT(targets::cuda::to_nhwc(f), 0);
  EXPECT_EQ(targets::cuda::pad_stem_channels(f, 8), 0);
  // 16 channels or more: nothing to pad (the stem of rgb_stem_model is C = 3; its second Conv C = 16).
  int second = 0;
  prepared(rgb_stem_model(1, 3, 2), 8, &second);
  EXPECT_EQ(second, 1);
}

std::map<std::string, Tensor> run_ref(ir::Model m, const std::map<std::string, Tensor>& in) {
  artifact::CompiledProgram cp;
  cp.model = std::move(m);
  cp.compat.target = "ref";
  Program p(std::move(cp));
  return p.run(in, 1);
}

/// The float16 channels-last graph, padded to `multiple` (0: not), emulated
/// in float32 and wrapped back to NCHW, on the ref target.
std::map<std::string, Tensor> run_emulated(const ModelBuilder& b, int multiple, const std::map<std::string, Tensor>& in) {
  ir::Model m = prepared(b, multiple);
  targets::cuda::emulate_16bit(m);
  // emulate_16bit widens the constants' tensors; the shim's shape inference
  // reads the values' dtypes.
  for (auto& v : m.values)
    if (v.constant) v.dtype = v.constant->dtype();
  ir::Model shim = nchw_shim(m);
  const ir::Model orig = imported_model(b);
  for (auto id : shim.main.inputs) shim.value(id).shape = orig.value(id).shape;
  passes::infer_and_fold(shim);
  return run_ref(std::move(shim), in);
}

Tensor wave(std::vector<int64_t> shape, float phase) {
  Tensor t(DType::f32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::sin(0.37f * static_cast<float>(i) + phase);
  return t;
}

// Zero channels times zero weights add nothing: with the same 16-bit
// roundings, the padded program's outputs equal the unpadded one's.
TEST(CudaStemPad, RewriteKeepsTheModelsMeaningOnRef) {
  struct Case {
    ModelBuilder b;
    std::map<std::string, Tensor> in;
  };
  std::vector<Case> cases;
  cases.push_back({rgb_stem_model(2, 7, 2), {{"x", wave({2, 3, 32, 32}, 0.3f)}}});
  cases.push_back({rgb_stem_model(2, 3, 2), {{"x", wave({2, 3, 32, 32}, 1.3f)}}});
  cases.push_back({shared_stem_model(2), {{"x", wave({2, 3, 16, 16}, 0.8f)}}});
  for (auto& c : cases) {
    const auto want = run_emulated(c.b, 0, c.in);
    for (int multiple : {8, 4}) {
      const auto got = run_emulated(c.b, multiple, c.in);
      ASSERT_EQ(got.size(), want.size());
      for (auto& [name, w] : want) {
        const Tensor& g = got.at(name);
        ASSERT_EQ(g.shape(), w.shape()) << name;
        double nonzero = 0;
        for (int64_t i = 0; i < w.numel(); ++i) {
          ASSERT_EQ(g.data<float>()[i], w.data<float>()[i]) << name << "[" << i << "] padded to " << multiple;
          nonzero += w.data<float>()[i] != 0;
        }
        EXPECT_GT(nonzero, 0.25 * static_cast<double>(w.numel())) << name << ": the comparison must see values";
      }
    }
  }
}

/// Counts of the lowered program's nodes ("Conv", "Gemm", each Kernel's
/// source_op) for `b` in `dt`, cross-compiled (NVRTC compiles the
/// kernels for sm_90), with KILN_CUDA_STEM_PAD_C = `pad`; `stem_x` gets the
/// first Conv's x dims.
std::map<std::string, int> lowered_counts(const char* pad, std::vector<int64_t>* stem_x = nullptr,
                                          const ModelBuilder& b = rgb_stem_model(2, 7, 2), DType dt = DType::f16) {
  artifact::CompiledProgram cp;
  cp.model = imported_model(b);
  targets::cuda::LowerOptions opt;
  opt.device = -1;
  opt.dtype = dt;
  setenv("KILN_CUDA_STEM_PAD_C", pad, 1);
  targets::cuda::lower_for_cuda(cp, opt);
  unsetenv("KILN_CUDA_STEM_PAD_C");
  std::map<std::string, int> c;
  for (auto& n : cp.model.main.nodes) {
    ++c[n.op_type == "Kernel" ? n.s("source_op", "") : n.op_type];
    if (stem_x && n.op_type == "Conv" && stem_x->empty()) *stem_x = dims(cp.model, n.inputs[0]);
  }
  return c;
}

// The lowering: the Transpose, Pad and Cast of the entry are one generated
// kernel (today's Cast and Transpose were two), and the Conv reads its
// 8 (or 4) channels.
TEST(CudaStemPad, EntryIsOneKernel) {
  std::vector<int64_t> x0, x8, x4;
  auto off = lowered_counts("0", &x0), on = lowered_counts("8", &x8), four = lowered_counts("4", &x4);
  EXPECT_EQ(x0, (std::vector<int64_t>{2, 32, 32, 3}));
  EXPECT_EQ(x8, (std::vector<int64_t>{2, 32, 32, 8}));
  EXPECT_EQ(x4, (std::vector<int64_t>{2, 32, 32, 4}));
  EXPECT_EQ(off["Transpose"], 2) << "x's entry and y's exit";
  EXPECT_EQ(on["Transpose"], 1) << "only y's exit: x's entry is the Cast's gather";
  EXPECT_EQ(on["Pad"], 0);
  EXPECT_EQ(on["Cast"], off["Cast"]);
  EXPECT_EQ(on["Conv"], 2);
  for (auto& [op, n] : four) EXPECT_EQ(n, on[op]) << op;
  // Two readers of the entry: the Transpose stays a kernel, each Pad is one
  // (a gather of the transposed float16 image).
  auto shared = lowered_counts("8", nullptr, shared_stem_model(2)), shared_off = lowered_counts("0", nullptr, shared_stem_model(2));
  EXPECT_EQ(shared["Pad"], 2);
  EXPECT_EQ(shared["Transpose"], shared_off["Transpose"]);
  EXPECT_EQ(shared["Conv"], 2);
  // Pads on one axis elsewhere, with zeros before the input too: a Relu's
  // chain gathers one, the other is a gather kernel alone (NVRTC compiles both).
  auto pads = lowered_counts("8", nullptr, one_axis_pad_model(), DType::f32);
  EXPECT_EQ(pads["Relu"], 1);
  EXPECT_EQ(pads["Pad"], 1);
  EXPECT_EQ(pads.size(), 2u) << "no other node";
}

}  // namespace
}  // namespace kiln::testing
