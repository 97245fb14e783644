// The cuda target's channels-last layout pass (to_nhwc) without a GPU: what
// the rewritten graph holds (NHWC convolutions with permuted filters, 1x1
// convolutions as matmuls, entry / exit transposes, unchanged graph outputs)
// and that a float16 program lowers and compiles with it. The numbers are
// checked on a GPU (test_cuda_precision_gpu.cpp, case "nhwc").
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "artifact/artifact.h"
#include "cuda_models.h"
#include "nhwc_models.h"
#include "onnx/importer.h"
#include "passes/passes.h"
#include "targets/cuda/compile/lowering.h"
#include "targets/cuda/run/blaslt.h"
#include "targets/cuda/run/cudnn_conv.h"
#include "runtime/program.h"

namespace kiln::testing {
namespace {

ir::Model import(const ModelBuilder& b) { return imported_model(b); }

const ir::Node* producer(const ir::Model& m, ir::ValueId v) {
  for (auto& n : m.main.nodes)
    for (auto o : n.outputs)
      if (o == v) return &n;
  return nullptr;
}

ir::ValueId by_name(const ir::Model& m, const std::string& name) {
  for (size_t i = 0; i < m.values.size(); ++i)
    if (m.values[i].name == name) return static_cast<ir::ValueId>(i);
  return ir::kNoValue;
}

std::vector<int64_t> dims(const ir::Model& m, ir::ValueId v) { return ir::to_sizes(*m.value(v).shape); }

TEST(CudaLayout, ConvolutionRegionBecomesNhwcWithTransposesOnlyAtItsEdges) {
  ir::Model m = import(nhwc_model());
  std::vector<std::vector<int64_t>> out_dims;
  for (auto v : m.main.outputs) out_dims.push_back(dims(m, v));
  const auto outputs = m.main.outputs;
  targets::cuda::split_conv_bias(m);
  int moved = targets::cuda::to_nhwc(m);
  ir::verify(m);
  // 5 Conv, 2 bias Add, Relu, Mul, AveragePool, MaxPool, Add, Sigmoid.
  EXPECT_EQ(moved, 13);
  int nhwc_convs = 0, matmuls = 0, pools = 0, enter = 0, leave = 0, reshapes = 0;
  for (auto& n : m.main.nodes) {
    if (n.op_type == "Conv") {
      EXPECT_EQ(n.i("kiln_nhwc", 0), 1) << n.label();
      ++nhwc_convs;
    }
    matmuls += n.op_type == "MatMul";
    if (n.op_type == "MaxPool" || n.op_type == "AveragePool") {
      EXPECT_EQ(n.i("kiln_nhwc", 0), 1) << n.label();
      ++pools;
    }
    if (n.op_type == "Transpose") {
      auto perm = n.ints("perm");
      enter += perm == std::vector<int64_t>{0, 2, 3, 1};
      leave += perm == std::vector<int64_t>{0, 3, 1, 2};
    }
    reshapes += n.op_type == "Reshape";
  }
  EXPECT_EQ(nhwc_convs, 3);  // the 3x3 one, the dilated one, the grouped one
  EXPECT_EQ(matmuls, 2);     // both 1x1 convolutions
  EXPECT_EQ(pools, 2);
  EXPECT_EQ(enter, 2);       // x and z
  EXPECT_EQ(leave, 4);       // r1, s, c5, c6 (graph outputs)
  EXPECT_EQ(reshapes, 1);    // c4 has one channel: NHWC and NCHW bytes agree
  // Graph outputs keep their ids and NCHW shapes.
  ASSERT_EQ(m.main.outputs, outputs);
  for (size_t i = 0; i < outputs.size(); ++i) EXPECT_EQ(dims(m, outputs[i]), out_dims[i]);

  // The 3x3 filter is [K, R, S, C] now: element [k, r, s, c] = W1[k, c, r, s].
  ir::ValueId w1 = by_name(m, "W1"), w1k = by_name(m, "W1_krsc");
  ASSERT_NE(w1, ir::kNoValue);
  ASSERT_NE(w1k, ir::kNoValue);
  EXPECT_EQ(dims(m, w1k), (std::vector<int64_t>{8, 3, 3, 4}));
  const float* a = m.value(w1).constant->data<float>();
  const float* b = m.value(w1k).constant->data<float>();
  for (int k = 0; k < 8; ++k)
    for (int c = 0; c < 4; ++c)
      for (int r = 0; r < 3; ++r)
        for (int s = 0; s < 3; ++s) ASSERT_EQ(b[((k * 3 + r) * 3 + s) * 4 + c], a[((k * 4 + c) * 3 + r) * 3 + s]);
  // The 1x1 filter [6, 8, 1, 1] is the matmul's [8, 6] = its transpose.
  ir::ValueId w2 = by_name(m, "W2"), w2t = by_name(m, "W2_kc_t");
  ASSERT_NE(w2t, ir::kNoValue);
  EXPECT_EQ(dims(m, w2t), (std::vector<int64_t>{8, 6}));
  for (int k = 0; k < 6; ++k)
    for (int c = 0; c < 8; ++c)
      ASSERT_EQ(m.value(w2t).constant->data<float>()[c * 6 + k], m.value(w2).constant->data<float>()[k * 8 + c]);
  // The per-channel constant [8, 1, 1] broadcasts over NHWC as [1, 1, 1, 8].
  ir::ValueId sc = by_name(m, "S_nhwc");
  ASSERT_NE(sc, ir::kNoValue);
  EXPECT_EQ(dims(m, sc), (std::vector<int64_t>{1, 1, 1, 8}));
  // r1 leaves the region through a Transpose of its NHWC twin [2, 9, 9, 8].
  const ir::Node* exit = producer(m, by_name(m, "r1"));
  ASSERT_NE(exit, nullptr);
  EXPECT_EQ(exit->op_type, "Transpose");
  EXPECT_EQ(dims(m, exit->inputs[0]), (std::vector<int64_t>{2, 9, 9, 8}));
}

Tensor wave_tensor(std::vector<int64_t> shape, float phase) {
  Tensor t(DType::f32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::sin(0.37f * static_cast<float>(i) + phase);
  return t;
}

/// to_nhwc(model) (and merge_layout_transposes when `merge`) run through
/// nchw_shim on the ref target equals the model.
void expect_same_semantics(const ModelBuilder& b, const std::map<std::string, Tensor>& in, bool merge = false) {
  ir::Model m = import(b);
  auto want = run_ref(m, in);
  ir::Model r = import(b);
  targets::cuda::split_conv_bias(r);
  targets::cuda::batch_norm_to_affine(r);  // as lower_for_cuda orders them
  ASSERT_GT(targets::cuda::to_nhwc(r), 0);
  if (merge) targets::cuda::merge_layout_transposes(r);
  ir::Model shim = nchw_shim(r);
  // The graph inputs keep their declared shapes for the ref target.
  for (auto id : shim.main.inputs) shim.value(id).shape = m.value(id).shape;
  passes::infer_and_fold(shim);
  auto got = run_ref(shim, in);
  ASSERT_EQ(got.size(), want.size());
  for (auto& [name, w] : want) {
    const Tensor& g = got.at(name);
    ASSERT_EQ(g.shape(), w.shape()) << name;
    for (int64_t i = 0; i < w.numel(); ++i)
      ASSERT_NEAR(g.data<float>()[i], w.data<float>()[i], 1e-4 * (1 + std::fabs(w.data<float>()[i]))) << name << "[" << i << "]";
  }
}

TEST(CudaLayout, RewriteKeepsTheModelsMeaningOnTheRefTarget) {
  expect_same_semantics(nhwc_model(), {{"x", wave_tensor({2, 4, 9, 9}, 0.2f)}, {"z", wave_tensor({2, 6, 4, 4}, 0.6f)}});
  expect_same_semantics(conv_model(), {{"x", wave_tensor({2, 3, 16, 16}, 0.9f)}});
  expect_same_semantics(pointwise_model(), {{"x", wave_tensor({2, 6, 5, 7}, 0.3f)}});
  expect_same_semantics(nhwc_se_model(), {{"x", wave_tensor({2, 8, 10, 10}, 0.4f)}, {"z", wave_tensor({2, 1, 10, 10}, 1.1f)}});
  expect_same_semantics(dense_block_model(2), {{"x", wave_tensor({2, 4, 8, 8}, 0.1f)}, {"z", wave_tensor({2, 2, 8, 8}, 1.7f)}});
}

// ConvNeXt's block: the region's exit after the depthwise Conv merges with
// the model's Transpose(0,2,3,1) into nothing, the model's Transpose
// (0,3,1,2) joins the region as an Identity, so the layer scale, the
// residual Add and the next Conv stay channels-last: x's entry and y's exit
// are the only transposes left (there were 4 more), and the result is the
// model's on the ref target.
TEST(CudaLayout, ConvNextBlockKeepsOnlyItsEntryAndExitTransposes) {
  std::map<std::string, Tensor> in{{"x", wave_tensor({2, 8, 6, 6}, 0.3f)}};
  expect_same_semantics(convnext_block_model(), in, /*merge=*/true);
  ir::Model m = import(convnext_block_model());
  targets::cuda::split_conv_bias(m);
  targets::cuda::batch_norm_to_affine(m);
  ASSERT_GT(targets::cuda::to_nhwc(m), 0);
  EXPECT_GT(targets::cuda::merge_layout_transposes(m), 0);
  passes::eliminate_dead_code(m);  // as lower_for_cuda does after lowering
  std::vector<std::string> transposes;
  for (auto& n : m.main.nodes) {
    if (n.op_type == "Transpose") transposes.push_back(n.name);
    EXPECT_NE(n.op_type, "Identity") << n.name << ": simplify_algebra reads through it";
  }
  EXPECT_EQ(transposes, (std::vector<std::string>{"x_to_nhwc", "y_to_nchw"}));
  // The second depthwise Conv reads the residual sum channels-last.
  const ir::Node* last = producer(m, m.main.outputs[0]);
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(last->op_type, "Transpose");
  const ir::Node* conv = producer(m, last->inputs[0]);
  ASSERT_NE(conv, nullptr);
  EXPECT_EQ(conv->op_type, "Conv");
  EXPECT_EQ(conv->i("kiln_nhwc", 0), 1);
}

// DenseNet's dense layer: Concat -> BatchNormalization -> Relu -> Conv.
// The BatchNormalization becomes a per-channel Mul + Add (its statistics
// folded into s and t), so the Concat, the affine, the Relu and the Conv
// after them stay channels-last: x and z enter (z read only by the Concat,
// through a transpose of its own), y leaves; nothing goes back to NCHW
// between the Concat and the convolution.
TEST(CudaLayout, DenseBlockConcatBatchNormReluStayChannelsLast) {
  ir::Model m = import(dense_block_model(2));
  targets::cuda::split_conv_bias(m);
  ASSERT_EQ(targets::cuda::batch_norm_to_affine(m), 1);
  // Conv c1, c2 (a MatMul) and its bias Add, Concat, Mul, Add, Relu, Conv c3, AveragePool.
  EXPECT_EQ(targets::cuda::to_nhwc(m), 9);
  ir::verify(m);
  int enter = 0, leave = 0, concats = 0;
  for (auto& n : m.main.nodes) {
    EXPECT_NE(n.op_type, "BatchNormalization");
    if (n.op_type == "Transpose") {
      auto perm = n.ints("perm");
      enter += perm == std::vector<int64_t>{0, 2, 3, 1};
      leave += perm == std::vector<int64_t>{0, 3, 1, 2};
    }
    if (n.op_type == "Concat") {
      ++concats;
      EXPECT_EQ(n.i("axis"), 3);
      EXPECT_EQ(dims(m, n.outputs[0]), (std::vector<int64_t>{2, 8, 8, 18}));
    }
  }
  EXPECT_EQ(enter, 2);  // x and z
  EXPECT_EQ(leave, 1);  // y
  EXPECT_EQ(concats, 1);
  // The scale broadcasts over the last axis: [1, 1, 1, 18], s[c] = scale[c] / sqrt(var[c] + 1e-5).
  ir::ValueId s = ir::kNoValue;  // named after the BatchNormalization node: "<name>_bn_scale_nhwc"
  for (size_t i = 0; i < m.values.size() && s == ir::kNoValue; ++i)
    if (m.values[i].name.ends_with("_bn_scale_nhwc")) s = static_cast<ir::ValueId>(i);
  ASSERT_NE(s, ir::kNoValue);
  EXPECT_EQ(dims(m, s), (std::vector<int64_t>{1, 1, 1, 18}));
  const float* sc = m.value(by_name(m, "bn_scale")).constant->data<float>();
  const float* var = m.value(by_name(m, "bn_var")).constant->data<float>();
  for (int c = 0; c < 18; ++c)
    EXPECT_FLOAT_EQ(m.value(s).constant->data<float>()[c], sc[c] / std::sqrt(var[c] + 1e-5f)) << "channel " << c;
}

// The same layer lowered as float16: the Concat, the affine and the Relu
// are one generated kernel that reads the Concat's channels-last inputs
// (the concatenation is never stored), and the only transposes are the two
// entries and the exit (DenseNet-121 at batch 32 had 124: each
// BatchNormalization left and re-entered the region).
TEST(CudaLayout, Float16DenseBlockFusesConcatBatchNormReluWithoutTransposes) {
  artifact::CompiledProgram cp;
  cp.model = import(dense_block_model(4));
  targets::cuda::LowerOptions opt;
  opt.device = -1;
  opt.dtype = DType::f16;
  targets::cuda::lower_for_cuda(cp, opt);
  std::map<std::string, int> kernels;
  const ir::Node* bn_relu = nullptr;
  for (auto& n : cp.model.main.nodes) {
    if (n.op_type != "Kernel") continue;
    ++kernels[n.s("source_op", "")];
    if (n.s("source_op", "") == "Relu") bn_relu = &n;
  }
  EXPECT_EQ(kernels["Transpose"], 3);
  EXPECT_EQ(kernels["BatchNormalization"], 0);
  EXPECT_EQ(kernels["Concat"], 0);
  EXPECT_EQ(kernels["Relu"], 1);
  ASSERT_NE(bn_relu, nullptr);
  // It reads the Concat's inputs x, c1, c2 (the matmul's output, bias
  // included), z as [4, 8, 8, C] float16, then the float32 s and t [1, 1, 1, 18].
  ASSERT_EQ(bn_relu->inputs.size(), 6u);
  const int64_t channels[4] = {4, 6, 6, 2};
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(cp.model.value(bn_relu->inputs[k]).dtype, DType::f16) << k;
    EXPECT_EQ(dims(cp.model, bn_relu->inputs[k]), (std::vector<int64_t>{4, 8, 8, channels[k]})) << k;
  }
  for (size_t k = 4; k < 6; ++k) {
    EXPECT_EQ(cp.model.value(bn_relu->inputs[k]).dtype, DType::f32);
    EXPECT_EQ(dims(cp.model, bn_relu->inputs[k]), (std::vector<int64_t>{1, 1, 1, 18}));
  }
  EXPECT_EQ(cp.model.value(bn_relu->outputs[0]).dtype, DType::f16);
}

// Global pools, Split, Concat and a rank-4 operand of another shape stay in
// the region: only x and z enter, only y leaves through a transpose (gm, one
// value per channel, through a reshape).
TEST(CudaLayout, SqueezeExcitationSplitAndConcatStayChannelsLast) {
  ir::Model m = import(nhwc_se_model());
  targets::cuda::split_conv_bias(m);
  targets::cuda::to_nhwc(m);
  ir::verify(m);
  int enter = 0, leave = 0, reshapes = 0, reduces = 0;
  for (auto& n : m.main.nodes) {
    if (n.op_type == "Transpose") {
      auto perm = n.ints("perm");
      enter += perm == std::vector<int64_t>{0, 2, 3, 1};
      leave += perm == std::vector<int64_t>{0, 3, 1, 2};
    }
    reshapes += n.op_type == "Reshape";
    reduces += n.op_type == "ReduceMean" || n.op_type == "ReduceMax";
    if (n.op_type == "Concat" || n.op_type == "Split") EXPECT_EQ(n.i("axis"), 3) << n.label();
    EXPECT_NE(n.op_type, "GlobalAveragePool");
  }
  EXPECT_EQ(enter, 2);  // x and z
  EXPECT_EQ(leave, 1);  // y
  EXPECT_EQ(reshapes, 1);  // gm
  EXPECT_EQ(reduces, 2);
}

TEST(CudaLayout, Float16ProgramLowersNhwcConvolutionsAndFusedMatmulEpilogues) {
  artifact::CompiledProgram cp;
  cp.model = import(nhwc_model());
  targets::cuda::LowerOptions opt;
  opt.device = -1;
  opt.dtype = DType::f16;  // NHWC by default for 16-bit programs
  auto st = targets::cuda::lower_for_cuda(cp, opt);
  EXPECT_EQ(st.convs, 3);
  EXPECT_EQ(st.gemms, 2);
  int nhwc = 0, bias = 0;
  for (auto& n : cp.model.main.nodes) {
    if (n.op_type == "Conv") {
      auto s = targets::cuda::conv_spec_from(n);
      EXPECT_TRUE(s.nhwc) << n.label();
      nhwc += s.nhwc;
      EXPECT_EQ(s.x.size(), 4u);
    }
    if (n.op_type == "Gemm") bias += targets::cuda::gemm_spec_from(n).has_bias;
  }
  EXPECT_EQ(nhwc, 3);
  EXPECT_EQ(bias, 1) << "the 1x1 convolution with B2 takes its bias as a cuBLASLt epilogue";
  // Strict float32 keeps NCHW unless asked.
  artifact::CompiledProgram cp32;
  cp32.model = import(nhwc_model());
  targets::cuda::LowerOptions o32;
  o32.device = -1;
  targets::cuda::lower_for_cuda(cp32, o32);
  for (auto& n : cp32.model.main.nodes)
    if (n.op_type == "Conv") EXPECT_FALSE(targets::cuda::conv_spec_from(n).nhwc) << n.label();
}

}  // namespace
}  // namespace kiln::testing
