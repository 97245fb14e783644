// fp16, bf16 and TF32 on a GPU (label `cuda`, part of kiln_cuda_gpu_tests,
// whose main() prints SKIPPED and exits 77 without a device): programs
// compiled with each precision run against the ref target's float32 outputs
// within the tolerances below (docs/cuda.md, "Precision", gives the same
// numbers and their derivation).
//
// Tolerances. An output element passes when
//     |cuda - ref| <= atol * scale + rtol * |ref|,  scale = max(1, max |ref|)
// (scale makes atol relative to the output's magnitude). With unit roundoff
// u (2^-11 for fp16 and for TF32's 10-bit mantissa rounded to nearest, 2^-8
// for bf16), a dot product of length K with fp32 accumulation whose inputs
// were rounded carries a relative error of about 2u per term, which grows
// like sqrt(K) over the sum; these models have K <= 72 (sqrt ~ 8.5) and a
// few roundings in sequence (inputs, each 16-bit op's output, 2-4 layers),
// taken as a factor c:
//   - fp16: c = 4:  4 * 2^-11 * 8.5 = 1.7e-2  -> rtol = atol = 2e-2
//   - bf16: c = 3:  3 * 2^-8  * 8.5 = 1.0e-1  -> rtol = atol = 1e-1
//   - TF32: c = 2 (only matmul / convolution inputs are rounded, every other
//     op is exact fp32): 2 * 2^-11 * 8.5 = 8.3e-3 -> rtol = atol = 1e-2
// against 1e-4 / 1e-5 for strict fp32 (test_cuda_gpu.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <algorithm>
#include <functional>

#include "artifact/artifact.h"
#include "cuda_models.h"
#include "gpu_compare.h"
#include "nhwc_models.h"
#include "kiln/compile.h"
#include "kiln/errors.h"
#include "kiln/session.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;

constexpr Tol kFp16{2e-2, 2e-2};
constexpr Tol kBf16{1e-1, 1e-1};
constexpr Tol kTf32{1e-2, 1e-2};

Tensor wave(std::vector<int64_t> shape, float scale, float phase) {
  Tensor t(DType::f32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = scale * std::sin(0.37f * static_cast<float>(i) + phase);
  return t;
}

SessionOptions make_options(Target t, Precision p = Precision::fp32, bool tf32 = false) {
  SessionOptions o;
  o.target = t;
  o.precision = p;
  o.allow_tf32 = tf32;
  o.use_cache = false;
  return o;
}

/// One model with its inputs (and fixed shapes, if any).
struct Case {
  std::string name;
  std::function<ModelBuilder()> model;
  std::function<std::map<std::string, Tensor>()> inputs;
  std::map<std::string, std::vector<int64_t>> shapes;
  bool convs = false;  ///< has cuDNN convolutions (bf16 may be refused, see below)
};

std::map<std::string, Tensor> kernel_inputs() {
  Tensor idx(DType::i64, {3});
  idx.data<int64_t>()[0] = 3;
  idx.data<int64_t>()[1] = -4;
  idx.data<int64_t>()[2] = 1;
  return {{"x", wave({2, 4, 8}, 2.f, 0.2f)}, {"idx", idx}};
}

ModelBuilder norms_model() {
  ModelBuilder b(18);
  b.input("x", 1, {2, 4, 3, 3});
  b.initializer("c4", {4}, {1.f, 0.5f, 2.f, -1.f});
  b.initializer("v4", {4}, {1.f, 0.5f, 2.f, 3.f});
  b.initializer("g2", {2}, {1.f, 0.5f});
  b.node("InstanceNormalization", {"x", "c4", "c4"}, {"in"});
  ModelBuilder::attr_int(b.node("GroupNormalization", {"x", "g2", "g2"}, {"gn"}), "num_groups", 2);
  b.node("BatchNormalization", {"x", "c4", "c4", "c4", "v4"}, {"bn"});
  b.node("Relu", {"bn"}, {"bnr"});
  b.output("in", 1, {2, 4, 3, 3}).output("gn", 1, {2, 4, 3, 3}).output("bnr", 1, {2, 4, 3, 3});
  return b;
}

/// attention_mask_model's inputs. Batch 0: query rows 0..9 see no key
/// (every mask entry -inf: the output rows are 0, torch's Where(IsNaN)),
/// the other rows do not see keys 0..63 (-inf: the fused kernel's whole
/// first key chunk); batch 1 masks keys 64..69 with -inf and 70..99 with
/// -10000 (BERT's mask value).
std::map<std::string, Tensor> attention_mask_inputs() {
  Tensor m(DType::f32, {2, 1, 100, 100});
  for (int64_t i = 0; i < 100; ++i)
    for (int64_t j = 0; j < 100; ++j) {
      m.data<float>()[i * 100 + j] = i < 10 || j < 64 ? -INFINITY : 0.f;
      m.data<float>()[10000 + i * 100 + j] = j >= 70 ? -10000.f : j >= 64 ? -INFINITY : 0.f;
    }
  return {{"x", wave({2, 100, 192}, 1.f, 0.3f)}, {"m", m}, {"q", wave({6, 30, 40}, 1.f, 0.1f)},
          {"k", wave({6, 70, 40}, 1.f, 0.9f)}, {"v", wave({6, 70, 40}, 1.f, 1.7f)}};
}

std::vector<Case> cases() {
  return {
      {"mlp", [] { return mlp_model(); }, [] { return std::map<std::string, Tensor>{{"x", wave({5, 4}, 1.5f, 0.3f)}}; },
       {{"x", {5, 4}}}},
      {"kernels+matmuls", matmul_model, kernel_inputs, {}},
      {"attention", attention_model,
       [] { return std::map<std::string, Tensor>{{"x", wave({2, 8, 32}, 1.f, 0.4f)}}; }, {}},
      {"attention-mask", attention_mask_model, attention_mask_inputs, {}},
      {"attention-packed-gather", [] { return packed_qkv_attention_model("gather"); },
       [] { return std::map<std::string, Tensor>{{"x", wave({2, 10, 32}, 1.f, 0.5f)}}; }, {}},
      {"attention-packed-split", [] { return packed_qkv_attention_model("split"); },
       [] { return std::map<std::string, Tensor>{{"x", wave({2, 10, 32}, 1.f, 0.5f)}}; }, {}},
      {"attention-packed-mha", [] { return packed_qkv_attention_model("mha"); },
       [] { return std::map<std::string, Tensor>{{"x", wave({2, 10, 32}, 1.f, 0.5f)}}; }, {}},
      {"attention-packed-q-out", [] { return packed_qkv_attention_model("gather-q-out"); },
       [] { return std::map<std::string, Tensor>{{"x", wave({2, 10, 32}, 1.f, 0.5f)}}; }, {}},
      {"attention-scaled-mask", [] { return scaled_after_mask_model("Mul", -2.f); },
       [] { return std::map<std::string, Tensor>{{"x", wave({2, 2, 70, 16}, 1.f, 0.6f)}}; }, {}},
      {"norms", norms_model, [] { return std::map<std::string, Tensor>{{"x", wave({2, 4, 3, 3}, 2.f, 0.7f)}}; }, {}},
      {"pools", pool_model, [] { return std::map<std::string, Tensor>{{"x", wave({1, 4, 9, 9}, 3.f, 0.4f)}}; }, {}},
      {"convnet", conv_model, [] { return std::map<std::string, Tensor>{{"x", wave({2, 3, 16, 16}, 1.f, 0.9f)}}; }, {},
       true},
      {"conv+bn", conv_bn_model, [] { return std::map<std::string, Tensor>{{"x", wave({2, 3, 16, 16}, 1.f, 0.5f)}}; },
       {}, true},
      {"pointwise", pointwise_model,
       [] { return std::map<std::string, Tensor>{{"x", wave({2, 6, 5, 7}, 1.f, 0.3f)}}; }, {}, true},
      {"nhwc-se", nhwc_se_model,
       [] {
         return std::map<std::string, Tensor>{{"x", wave({2, 8, 10, 10}, 1.f, 0.4f)}, {"z", wave({2, 1, 10, 10}, 0.5f, 1.1f)}};
       },
       {}, true},
      {"convnext-block", convnext_block_model,
       [] { return std::map<std::string, Tensor>{{"x", wave({2, 8, 6, 6}, 1.f, 0.5f)}}; }, {}, true},
      {"lm-head", lm_head_model,
       [] { return std::map<std::string, Tensor>{{"x", wave({3, 5, 16}, 1.f, 0.8f)}}; }, {}},
      {"nhwc", nhwc_model,
       [] {
         return std::map<std::string, Tensor>{{"x", wave({2, 4, 9, 9}, 1.f, 0.2f)}, {"z", wave({2, 6, 4, 4}, 0.5f, 0.6f)}};
       },
       {}, true},
  };
}

/// Runs `c` on ref (float32) and on cuda with `p` / `tf32`; true when it ran.
/// With bf16, a model with convolutions may be refused at compile time
/// (Error unsupported naming cuDNN and bfloat16, when cuDNN's legacy API
/// has no NCHW bfloat16 algorithm for it): a NOTE is printed, no failure.
bool check_case(const Case& c, Precision p, bool tf32, Tol tol) {
  TempDir dir;
  fs::path path = dir / (c.name + ".onnx");
  c.model().save(path);
  auto ref_opt = make_options(Target::ref());
  auto gpu_opt = make_options(Target::cuda(), p, tf32);
  ref_opt.input_shapes = gpu_opt.input_shapes = c.shapes;
  std::string what = c.name + " " + precision_text(p, tf32);
  std::unique_ptr<Session> gpu;
  try {
    gpu = std::make_unique<Session>(path, gpu_opt);
  } catch (const Error& e) {
    std::string msg = e.what();
    if (p == Precision::bf16 && c.convs && e.code() == ErrorCode::unsupported &&
        msg.find("cuDNN") != std::string::npos && msg.find("bfloat16") != std::string::npos) {
      std::printf("NOTE: %s refused at compile time: %s\n", what.c_str(), msg.c_str());
      return false;
    }
    ADD_FAILURE() << what << ": " << msg;
    return false;
  }
  Session ref(path, ref_opt);
  for (auto& t : gpu->outputs()) EXPECT_EQ(t.dtype, DType::f32) << what << " output " << t.name;
  auto in = c.inputs();
  auto want = ref.run(in);
  auto got = gpu->run(in);
  EXPECT_EQ(got.size(), want.size()) << what;
  for (auto& [name, t] : want) {
    if (!got.count(name)) {
      ADD_FAILURE() << what << ": no output " << name;
      continue;
    }
    double worst = expect_within(got.at(name), t, what + " " + name, tol);
    std::printf("%-28s %-6s worst error / tolerance %.3f\n", what.c_str(), name.c_str(), worst);
  }
  return true;
}

TEST(CudaPrecision, Fp16MatchesRefWithinTolerance) {
  for (auto& c : cases()) check_case(c, Precision::fp16, false, kFp16);
}

TEST(CudaPrecision, Bf16MatchesRefWithinTolerance) {
  int ran = 0;
  for (auto& c : cases()) ran += check_case(c, Precision::bf16, false, kBf16);
  EXPECT_GE(ran, 5) << "every model without convolutions must run in bf16";
}

TEST(CudaPrecision, Tf32MatchesRefWithinTolerance) {
  for (auto& c : cases()) check_case(c, Precision::fp32, true, kTf32);
}

// The 16-bit program really computes in 16 bits: its outputs differ from
// float32 somewhere (rounding), yet stay within tolerance.
TEST(CudaPrecision, Fp16OutputsAreRoundedNotFloat32) {
  TempDir dir;
  attention_model().save(dir / "a.onnx");
  std::map<std::string, Tensor> in{{"x", wave({2, 8, 32}, 1.f, 0.4f)}};
  auto strict = Session(dir / "a.onnx", make_options(Target::cuda())).run(in);
  auto half = Session(dir / "a.onnx", make_options(Target::cuda(), Precision::fp16)).run(in);
  double diff = 0;
  const Tensor &a = strict.at("y"), &b = half.at("y");
  for (int64_t i = 0; i < a.numel(); ++i) diff = std::max(diff, double(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
  EXPECT_GT(diff, 0.0);
}

// Artifacts record the precision (compatibility block) and each matmul /
// convolution its dtype and math (node attributes), and load back.
TEST(CudaPrecision, ArtifactsRecordPrecisionAndNodeDtypes) {
  TempDir dir;
  conv_model().save(dir / "c.onnx");
  for (auto [p, tf32, dtype, compat] : std::vector<std::tuple<Precision, bool, std::string, std::string>>{
           {Precision::fp16, false, "float16", "fp16"}, {Precision::fp32, true, "float32", "fp32+tf32"}}) {
    auto opt = make_options(Target::cuda(), p, tf32);
    fs::path art = dir / (compat + ".kiln");
    kiln::compile(dir / "c.onnx", art, opt);
    EXPECT_EQ(artifact::read_compat(art).precision, compat);
    auto cp = artifact::read_file(art);
    int gemms = 0, convs = 0;
    for (auto& n : cp.model.main.nodes) {
      // A depthwise convolution may run on kiln's generated kernel (timed
      // against cuDNN): a Kernel whose function is a dwconv, no dtype attribute.
      if (n.domain == "kiln.cuda" && n.op_type == "Kernel" && n.s("fn", "").find("dwconv") != std::string::npos) {
        ++convs;
        continue;
      }
      if (n.domain != "kiln.cuda" || (n.op_type != "Gemm" && n.op_type != "Conv")) continue;
      (n.op_type == "Gemm" ? gemms : convs)++;
      EXPECT_EQ(n.s("dtype", "?"), dtype) << n.label();
      EXPECT_EQ(n.i("tf32", -1), tf32 ? 1 : 0) << n.label();
    }
    EXPECT_EQ(gemms, 1);
    EXPECT_EQ(convs, 3);
    Session s = Session::load(art, opt);
    Session ref(dir / "c.onnx", make_options(Target::ref()));
    std::map<std::string, Tensor> in{{"x", wave({2, 3, 16, 16}, 1.f, 0.9f)}};
    expect_within(s.run(in).at("y"), ref.run(in).at("y"), compat + " artifact", p == Precision::fp16 ? kFp16 : kTf32);
  }
}

// The cache keeps one entry per precision: switching never reuses a program
// compiled with other math.
TEST(CudaPrecision, CacheSeparatesPrecisions) {
  TempDir dir;
  mlp_model().save(dir / "m.onnx");
  auto with_cache = [&](Precision p, bool tf32) {
    auto o = make_options(Target::cuda(), p, tf32);
    o.use_cache = true;
    o.cache_dir = dir / "cache";
    o.input_shapes["x"] = {5, 4};
    return Session(dir / "m.onnx", o).stats().cache;
  };
  using C = SessionStats::Cache;
  EXPECT_EQ(with_cache(Precision::fp32, false), C::miss);
  EXPECT_EQ(with_cache(Precision::fp32, true), C::miss);
  EXPECT_EQ(with_cache(Precision::fp16, false), C::miss);
  EXPECT_EQ(with_cache(Precision::bf16, false), C::miss);
  EXPECT_EQ(with_cache(Precision::fp32, false), C::hit);
  EXPECT_EQ(with_cache(Precision::fp32, true), C::hit);
  EXPECT_EQ(with_cache(Precision::fp16, false), C::hit);
}

// The fp16 head, Sigmoid(50 * (a - b)) of feature maps near 100:
// with the precision check (on by default) the output is within 1e-2 of
// the ref target's float32 (max|diff| / max|ref|); with it off, 16-bit a and
// b (spacing 1/16 there) put it far off.
TEST(CudaPrecisionCheck, SigmoidHeadIsWithinOnePercentAfterTheCheck) {
  TempDir dir;
  sigmoid_head_model(50.f).save(dir / "sig.onnx");
  Tensor x(DType::f32, {1, 4, 8, 8});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 0.5f + 0.5f * std::sin(0.37f * i + 0.2f);
  const std::map<std::string, Tensor> in{{"x", x}};
  const Tensor ref = Session(dir / "sig.onnx", make_options(Target::ref())).run(in).at("out");
  auto rel = [&](const Tensor& got) {
    double d = 0, s = 0;
    for (int64_t i = 0; i < ref.numel(); ++i) {
      d = std::max(d, std::fabs(double(got.data<float>()[i]) - ref.data<float>()[i]));
      s = std::max(s, std::fabs(double(ref.data<float>()[i])));
    }
    return d / s;
  };
  SessionOptions on = make_options(Target::cuda(), Precision::fp16);
  Session checked(dir / "sig.onnx", on);
  const double err_on = rel(checked.run(in).at("out"));
  SessionOptions off = on;
  off.precision_check = PrecisionCheck::off;
  const double err_off = rel(Session(dir / "sig.onnx", off).run(in).at("out"));
  std::printf("sigmoid head k=50 fp16: max|diff|/max|ref| %.3e with the precision check, %.3e without\n", err_on,
              err_off);
  EXPECT_LE(err_on, 1e-2);
  EXPECT_GT(err_off, 5e-2);
  bool noted = false;
  for (auto& n : checked.stats().notes) noted |= n.find("precision check (fp16): kept") != std::string::npos;
  EXPECT_TRUE(noted);
}

}  // namespace
}  // namespace kiln::testing
