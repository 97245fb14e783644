// The cuda target's fused attention (lower_attention / gen_attention) without
// a GPU: which graphs it recognizes, what it folds (scale Muls, the
// head-splitting Transposes, the mask Add), what it leaves alone, and that
// the generated kernel compiles to sm_90 with NVRTC. Its numbers are checked
// on a GPU (test_cuda_precision_gpu.cpp, cases "attention" and
// "attention-mask", fp16 and bf16).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <tuple>

#include "artifact/artifact.h"
#include "kiln/errors.h"
#include "cuda_models.h"
#include "onnx/importer.h"
#include "passes/passes.h"
#include "targets/cuda/compile/lowering.h"

namespace kiln::testing {
namespace {

ir::Model import(const ModelBuilder& b) { return imported_model(b); }

struct Lowered {
  targets::cuda::LowerStats st;
  std::map<std::string, int> kernels;  // source_op -> kiln.cuda.Kernel count
  artifact::CompiledProgram cp;
};

Lowered lower(ir::Model m, DType dtype, const std::function<void(ir::Model&)>& edit = {}) {
  Lowered l;
  l.cp.model = std::move(m);
  if (edit) edit(l.cp.model);
  targets::cuda::LowerOptions opt;
  opt.device = -1;  // cross-compile: no GPU needed
  opt.dtype = dtype;
  l.st = targets::cuda::lower_for_cuda(l.cp, opt);
  for (auto& n : l.cp.model.main.nodes)
    if (n.op_type == "Kernel") ++l.kernels[n.s("source_op", "")];
  return l;
}

TEST(CudaAttention, TransformerBlockAttentionBecomesOneKernel) {
  Lowered l = lower(import(attention_model()), DType::f16);
  EXPECT_EQ(l.st.attentions, 1);
  EXPECT_EQ(l.kernels["Attention"], 1);
  EXPECT_EQ(l.kernels["Softmax"], 0);
  // Q, K, V head splits and the context's merge are read / written in place.
  EXPECT_EQ(l.kernels["Transpose"], 0);
  // Q, K and V merged into one matmul (merge_qkv.cpp), then the output
  // projection and the two feed-forward matmuls: four cuBLASLt matmuls.
  EXPECT_EQ(l.st.gemms, 4);
  EXPECT_EQ(l.kernels["Split"], 0) << "the attention reads Q, K and V as column slices of one value";
  EXPECT_GT(l.st.cubin_bytes, 0u);
  for (auto& n : l.cp.model.main.nodes)
    if (n.s("source_op", "") == "Attention") {
      EXPECT_EQ(n.inputs.size(), 3u) << "no mask";
      EXPECT_EQ(n.inputs[0], n.inputs[1]);
      EXPECT_EQ(n.inputs[1], n.inputs[2]);
      EXPECT_EQ(n.ints("grid")[0], 2 * 2 * 1) << "batch 2 x 2 heads x one tile of 64 query rows";
      EXPECT_EQ(n.ints("block")[0], 128);
    }
}

TEST(CudaAttention, SdpaFormWithMaskAndRank3CrossAttentionFuse) {
  for (DType dt : {DType::f16, DType::bf16}) {
    Lowered l = lower(import(attention_mask_model()), dt);
    EXPECT_EQ(l.st.attentions, 2) << dtype_name(dt);
    EXPECT_EQ(l.kernels["Softmax"], 0);
    EXPECT_EQ(l.kernels["Transpose"], 0) << "K's Reshape / Transpose / Reshape and the rank-3 k^T fold into strides";
    EXPECT_EQ(l.st.copies, 0) << "no Reshape or Dropout left to alias";
    EXPECT_EQ(l.kernels["Mul"], 0) << "Q * c and K^T * c fold into the scale";
    EXPECT_EQ(l.kernels["Div"], 0);
    EXPECT_EQ(l.kernels["Add"], 0) << "the mask is read by the kernel";
    EXPECT_EQ(l.kernels["Where"], 0) << "Where(IsNaN(P), 0, P) is the kernel's zero for undefined rows";
    EXPECT_EQ(l.kernels["IsNaN"], 0);
    int with_mask = 0;
    for (auto& n : l.cp.model.main.nodes)
      if (n.s("source_op", "") == "Attention") {
        with_mask += n.inputs.size() == 4;
        EXPECT_FLOAT_EQ(n.f("attention_mask_scale"), 1.f) << "scalings before the mask Add leave it alone";
        int64_t grid = n.ints("grid")[0];
        EXPECT_TRUE(grid == 2 * 3 * 2 || grid == 6 * 1) << grid << ": 2 x 3 heads x 2 tiles (100 rows); 6 x 1 tile";
      }
    EXPECT_EQ(with_mask, 1);
  }
}

TEST(CudaAttention, ScalingAfterTheMaskAddScalesTheMaskToo) {
  // (s * 0.25 + m) * -2: scores scaled by -0.5, the mask by -2 (a -inf mask
  // entry becomes +inf, as in the graph); / 4: 0.0625 and 0.25.
  for (auto [op, after, scale, mask_scale] :
       {std::tuple{"Mul", -2.f, -0.5f, -2.f}, std::tuple{"Div", 4.f, 0.0625f, 0.25f}}) {
    Lowered l = lower(import(scaled_after_mask_model(op, after)), DType::f16);
    ASSERT_EQ(l.st.attentions, 1) << op;
    for (auto& n : l.cp.model.main.nodes)
      if (n.s("source_op", "") == "Attention") {
        EXPECT_FLOAT_EQ(n.f("attention_scale"), scale) << op;
        EXPECT_FLOAT_EQ(n.f("attention_mask_scale"), mask_scale) << op;
      }
  }
}

TEST(CudaAttention, Float32ProgramsKeepTheUnfusedPath) {
  Lowered l = lower(import(attention_mask_model()), DType::f32);
  EXPECT_EQ(l.st.attentions, 0);
  EXPECT_EQ(l.kernels["Softmax"], 2);
}

TEST(CudaAttention, ProbabilitiesReadElsewhereAreNotFused) {
  // The mask attention's probabilities become a graph output: the kernel
  // never writes them, so that attention stays unfused; the other one fuses.
  Lowered l = lower(import(attention_mask_model()), DType::f16, [](ir::Model& m) {
    for (size_t i = 0; i < m.values.size(); ++i)
      if (m.values[i].name == "probs") m.main.outputs.push_back(static_cast<ir::ValueId>(i));
  });
  EXPECT_EQ(l.st.attentions, 1);
  EXPECT_EQ(l.kernels["Softmax"], 1);
}

TEST(CudaAttention, ArchitecturesBeforeSm80KeepTheUnfusedPath) {
  // mma.sync.m16n8k16 needs sm_80: an sm_75 program must still compile.
  artifact::CompiledProgram cp;
  cp.model = import(attention_mask_model());
  targets::cuda::LowerOptions opt;
  opt.device = -1;
  opt.dtype = DType::f16;
  opt.arch = "sm_75";
  auto st = targets::cuda::lower_for_cuda(cp, opt);
  EXPECT_EQ(st.attentions, 0);
  EXPECT_GT(st.cubin_bytes, 0u);
}

TEST(CudaAttention, GeneratorRefusesWhatItCannotComputeNamingTheNode) {
  ir::Model m = import(attention_model());
  targets::cuda::Lowering L{m};
  ir::Node from;
  from.op_type = "MatMul";
  from.name = "pv";
  targets::cuda::AttentionSpec s;
  s.sq = s.skv = 8;
  s.d = s.dv = 64;
  s.dtype = DType::f32;
  try {
    targets::cuda::gen_attention(L, from, s);
    ADD_FAILURE() << "float32 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("'pv'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("float16 / bfloat16 only"), std::string::npos) << e.what();
  }
  s.dtype = DType::f16;
  s.d = 200;
  try {
    targets::cuda::gen_attention(L, from, s);
    ADD_FAILURE() << "head dim 200 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head dims 200 / 64 are outside 1..128"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(L.source.empty()) << "nothing generated for a refused spec";
}

TEST(CudaAttention, UnwritableSourceDumpOnlyWarns) {
  // KILN_CUDA_DUMP_SOURCE is a debugging aid: a path that cannot be written
  // leaves the compile as it is.
  setenv("KILN_CUDA_DUMP_SOURCE", "/nonexistent-dir/kiln.cu", 1);
  Lowered l = lower(import(attention_model()), DType::f16);
  unsetenv("KILN_CUDA_DUMP_SOURCE");
  EXPECT_EQ(l.st.attentions, 1);
  EXPECT_GT(l.st.cubin_bytes, 0u);
  EXPECT_FALSE(std::filesystem::exists("/nonexistent-dir/kiln.cu"));
}

TEST(CudaAttention, MergeSwitchKeepsThreeProjections) {
  setenv("KILN_CUDA_MERGE_QKV", "0", 1);
  Lowered l = lower(import(attention_model()), DType::f16);
  unsetenv("KILN_CUDA_MERGE_QKV");
  EXPECT_EQ(l.st.attentions, 1);
  EXPECT_EQ(l.st.gemms, 6);
}

TEST(CudaAttention, Float32ProgramsKeepTheirProjectionsApart) {
  // No fused attention in float32: a merged matmul would need a Split kernel.
  // Six projections and, unfused, Q K^T and P V: eight cuBLASLt matmuls.
  Lowered l = lower(import(attention_model()), DType::f32);
  EXPECT_EQ(l.st.gemms, 8);
  EXPECT_EQ(l.kernels["Split"], 0);
}

TEST(CudaAttention, PackedProjectionGathersAndTheirTransposeFold) {
  // nn.MultiheadAttention's form: one Transpose read by three Gathers.
  Lowered l = lower(import(packed_qkv_attention_model("gather")), DType::f16);
  EXPECT_EQ(l.st.attentions, 1);
  EXPECT_EQ(l.kernels["Gather"], 0);
  EXPECT_EQ(l.kernels["Transpose"], 0);
  EXPECT_EQ(l.st.gemms, 1);
}

TEST(CudaAttention, MultiheadAttentionHeadsAcrossTheBatchFold) {
  // [S, B, E] -> [S, B*H, Dh] is no strided view of the packed projection;
  // with the Transpose and the reshape to [B, H, S, Dh] after it, it is.
  Lowered l = lower(import(packed_qkv_attention_model("mha")), DType::f16);
  EXPECT_EQ(l.st.attentions, 1);
  EXPECT_EQ(l.kernels["Gather"], 0);
  EXPECT_EQ(l.kernels["Transpose"], 1) << "only the model's own x -> [S, B, E]";
}

TEST(CudaAttention, PackedProjectionSplitFolds) {
  // GPT-2's c_attn form: Split into Q, K, V, each reshaped and transposed.
  Lowered l = lower(import(packed_qkv_attention_model("split")), DType::f16);
  EXPECT_EQ(l.st.attentions, 1);
  EXPECT_EQ(l.kernels["Split"], 0);
  EXPECT_EQ(l.kernels["Transpose"], 0);
}

TEST(CudaAttention, SharedNodeWithAReaderOutsideStays) {
  // Q is also a graph output: its Gather (and the Transpose the three
  // Gathers share) must still be computed; K and V are read in place.
  Lowered l = lower(import(packed_qkv_attention_model("gather-q-out")), DType::f16);
  EXPECT_EQ(l.st.attentions, 1);
  EXPECT_EQ(l.kernels["Gather"], 1);
  EXPECT_EQ(l.kernels["Transpose"], 1);
}

TEST(CudaAttention, EnvironmentSwitchTurnsFusionOff) {
  setenv("KILN_CUDA_FUSED_ATTENTION", "0", 1);
  Lowered l = lower(import(attention_model()), DType::f16);
  unsetenv("KILN_CUDA_FUSED_ATTENTION");
  EXPECT_EQ(l.st.attentions, 0);
  EXPECT_EQ(l.kernels["Softmax"], 1);
}

}  // namespace
}  // namespace kiln::testing
