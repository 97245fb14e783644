// The precision check of 16-bit cuda compiles without a GPU (label `unit`):
// the 16-bit emulation on the ref kernels, the nodes the check keeps in
// float32 and why, the precision pass honouring them, and the options.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <omp.h>

#include "cuda_models.h"
#include "kiln/errors.h"
#include "ops/gemm_kernel.h"
#include "runtime/compile.h"
#include "runtime/precision_check.h"
#include "runtime/precision_check_run.h"
#include "runtime/program.h"
#include "support/half.h"
#include "targets/cuda/compile/precision.h"
#include "targets/kernels.h"

namespace kiln::testing {
namespace {

using targets::cuda::convert_precision;
using targets::cuda::emulate_16bit;

std::vector<std::string> kept_names(const PrecisionCheckResult& r) {
  std::vector<std::string> v;
  for (auto& k : r.kept) v.push_back(k.node);
  std::sort(v.begin(), v.end());
  return v;
}

DType dtype_named(const ir::Model& m, const std::string& name) {
  for (auto& v : m.values)
    if (v.name == name) return v.dtype;
  ADD_FAILURE() << "no value '" << name << "'";
  return DType::undefined;
}

/// Max |a - b| over two float32 tensors of one size.
double max_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.numel(), b.numel());
  double d = 0;
  for (int64_t i = 0; i < a.numel(); ++i) d = std::max(d, std::fabs(double(a.data<float>()[i]) - b.data<float>()[i]));
  return d;
}

Tensor ramp_input(const std::vector<int64_t>& shape) {
  Tensor t(DType::f32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = 0.5f + 0.5f * std::sin(0.37f * i);
  return t;
}

std::map<std::string, Tensor> run_ref(ir::Model m, const std::map<std::string, Tensor>& in) {
  artifact::CompiledProgram cp;
  cp.model = std::move(m);
  cp.compat.target = "ref";
  return Program(std::move(cp)).run(in, 1);
}

// The emulation leaves no 16-bit value and rounds where the program would:
// its output differs from float32 by about fp16's rounding, no more.
TEST(PrecisionEmulation, SixteenBitValuesBecomeRoundedFloat32) {
  ir::Model m = imported_model(conv_model());
  const std::map<std::string, Tensor> in = {{"x", ramp_input({2, 3, 16, 16})}};
  const Tensor ref = run_ref(m, in).at("y");
  ir::Model h = m;
  convert_precision(h, DType::f16);
  ASSERT_EQ(dtype_named(h, "c1"), DType::f16);
  const int points = emulate_16bit(h);
  EXPECT_GT(points, 5);
  // 16-bit values are left only between a rounding Cast and its widening Cast.
  int narrow = 0;
  for (auto& n : h.main.nodes)
    for (auto v : n.outputs)
      if (h.value(v).dtype == DType::f16) {
        ++narrow;
        EXPECT_EQ(n.op_type, "Cast") << h.value(v).name;
        EXPECT_TRUE(h.value(v).name.ends_with("~16")) << h.value(v).name;
      }
  EXPECT_EQ(narrow, points);
  // Every value keeps its name (the check compares by name).
  EXPECT_EQ(dtype_named(h, "c1"), DType::f32);
  const Tensor got = run_ref(h, in).at("y");
  double scale = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) scale = std::max(scale, std::fabs(double(ref.data<float>()[i])));
  const double err = max_diff(got, ref) / scale;
  EXPECT_GT(err, 1e-5) << "nothing was rounded";
  EXPECT_LT(err, 1e-2);
}

// The check's in-place rounding is a Cast to the 16-bit type and back, bit
// for bit: every float16 value and the floats around each midpoint between
// two of them (ties go to even), a sweep over all exponents, the specials.
// (All 2^32 floats were compared once by hand: equal.)
TEST(PrecisionEmulation, RoundInPlaceIsACastPair) {
  std::vector<uint32_t> bits = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffc12345u, 0x477fefffu,
                                0x477ff000u, 0x477fe000u, 0x38800000u, 0x387fffffu, 0x33000000u, 0x33000001u,
                                0x80000000u, 0u, 1u, 0x7f7fffffu};
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    float f = half_to_float(static_cast<uint16_t>(h)), g = half_to_float(static_cast<uint16_t>(h + 1));
    if (!std::isfinite(f) || !std::isfinite(g)) continue;
    uint32_t mid;
    const float m = f + (g - f) / 2;
    std::memcpy(&mid, &m, 4);
    for (uint32_t d : {mid - 1, mid, mid + 1, mid ^ 0x80000000u}) bits.push_back(d);
  }
  for (uint64_t x = 0; x < (1ull << 32); x += 4099) bits.push_back(static_cast<uint32_t>(x));
  for (DType to : {DType::f16, DType::bf16}) {
    Tensor t(DType::f32, {static_cast<int64_t>(bits.size())});
    std::memcpy(t.data<float>(), bits.data(), bits.size() * 4);
    Tensor want = t.clone();
    for (int64_t i = 0; i < want.numel(); ++i) {
      float& w = want.data<float>()[i];
      w = to == DType::f16 ? half_to_float(float_to_half(w)) : bf16_to_float(float_to_bf16(w));
    }
    round_in_place(t, to);
    ASSERT_EQ(std::memcmp(t.raw(), want.raw(), t.nbytes()), 0) << dtype_name(to);
  }
}

// The check's executor with in-place rounding computes what the ref target
// computes on emulate_16bit's Cast pairs, bit for bit, value by value.
TEST(PrecisionEmulation, InPlaceRoundingEqualsTheCastPairs) {
  for (auto [name, builder] : std::vector<std::pair<std::string, ModelBuilder>>{
           {"conv_bn", conv_bn_model()}, {"attention", attention_model()}, {"sigmoid_head", sigmoid_head_model(50.f)}}) {
    ir::Model m = imported_model(builder);
    std::map<std::string, Tensor> in;
    for (auto id : m.main.inputs) in[m.value(id).name] = ramp_input(ir::to_sizes(*m.value(id).shape));
    ir::Model pairs = m, marked = m;
    convert_precision(pairs, DType::f16);
    convert_precision(marked, DType::f16);
    const int points = emulate_16bit(pairs);
    std::vector<DType> round;
    EXPECT_EQ(emulate_16bit(marked, &round), points) << name;
    ASSERT_EQ(round.size(), marked.values.size());
    EXPECT_GT(std::count(round.begin(), round.end(), DType::f16), 2) << name;
    std::map<std::string, Tensor> want;
    {
      // The check multiplies through oneDNN's sgemm: so does this ref run
      // (one thread: every product on this thread, which the override covers).
      const ops::SgemmOverride gemm(targets::library_sgemm);
      artifact::CompiledProgram cp;
      cp.model = pairs;
      cp.compat.target = "ref";
      Program(std::move(cp)).run_observed(in, 1, [&](size_t, ir::ValueId id, const Tensor& t) {
        if (t.dtype() == DType::f32) want[pairs.value(id).name] = t.clone();
      });
    }
    int compared = 0;
    run_for_check(marked, in, round, 1, [&](ir::ValueId id, const Tensor& t) {
      auto it = want.find(marked.value(id).name);
      ASSERT_NE(it, want.end()) << name << ": " << marked.value(id).name;
      ASSERT_EQ(t.nbytes(), it->second.nbytes());
      EXPECT_EQ(std::memcmp(t.raw(), it->second.raw(), t.nbytes()), 0) << name << ": " << marked.value(id).name;
      ++compared;
    });
    EXPECT_GT(compared, 3) << name;
  }
}

// The check's GEMM (oneDNN's, in fixed tiles) gives the same bits on 1, 2
// or 5 threads, transposed or not, and the product the built-in one gives
// up to summation order.
TEST(PrecisionEmulation, LibrarySgemmDoesNotDependOnTheThreads) {
  const int64_t M = 300, N = 700, K = 900;
  std::vector<float> a(M * K), b(K * N);
  for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.01f * static_cast<float>(i));
  for (size_t i = 0; i < b.size(); ++i) b[i] = std::cos(0.013f * static_cast<float>(i));
  const int saved = omp_get_max_threads();
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int64_t lda = ta ? M : K, ldb = tb ? K : N;
      std::vector<float> want(M * N), got(M * N, std::nanf(""));
      ops::sgemm(ta, tb, M, N, K, 1.f, a.data(), lda, b.data(), ldb, 0.f, want.data(), N);
      std::vector<std::vector<float>> runs;
      for (int threads : {1, 2, 5}) {
        omp_set_num_threads(threads);
        targets::library_sgemm(ta, tb, M, N, K, 1.f, a.data(), lda, b.data(), ldb, 0.f, got.data(), N);
        runs.push_back(got);
      }
      omp_set_num_threads(saved);
      EXPECT_EQ(runs[0], runs[1]) << ta << tb;
      EXPECT_EQ(runs[0], runs[2]) << ta << tb;
      double worst = 0;
      for (int64_t i = 0; i < M * N; ++i) worst = std::max(worst, std::fabs(double(runs[0][i]) - want[i]));
      EXPECT_LT(worst, 1e-3) << ta << tb;  // |C| reaches ~30: float rounding of 900-term sums
    }
}

// The head: Sigmoid(50 * (a - b)) of feature maps near 100. The
// subtraction amplifies the 16-bit rounding of a and b: it and the two
// convolutions that make them stay float32, and the output comes within the
// fp16 tolerance; conv_out (reading Sigmoid's [0, 1] output) stays 16-bit.
TEST(PrecisionCheck, SigmoidHeadKeepsTheCancellationInFloat32) {
  ir::Model m = imported_model(sigmoid_head_model(50.f));
  PrecisionCheckResult r = check_precision(m, DType::f16, {});
  ASSERT_EQ(r.state, "checked") << r.reason;
  EXPECT_EQ(kept_names(r), (std::vector<std::string>{"conv_a", "conv_b", "sub"})) << r.note();
  EXPECT_GT(r.output_error_before, 0.05) << r.note();
  EXPECT_LT(r.output_error_after, 1e-2) << r.note();
  EXPECT_EQ(r.rounds, 2);
  EXPECT_EQ(r.nodes, 6);
  const auto sub = std::find_if(r.kept.begin(), r.kept.end(), [](auto& k) { return k.node == "sub"; });
  ASSERT_NE(sub, r.kept.end());
  EXPECT_EQ(sub->op, "Sub");
  EXPECT_NE(sub->reason.find("amplifies the 16-bit rounding"), std::string::npos) << sub->reason;
  EXPECT_GT(sub->error, 8 * sub->input_error);
  const auto ca = std::find_if(r.kept.begin(), r.kept.end(), [](auto& k) { return k.node == "conv_a"; });
  ASSERT_NE(ca, r.kept.end());
  EXPECT_NE(ca->reason.find("feeds 'sub'"), std::string::npos) << ca->reason;
  EXPECT_EQ(r.inputs, "random (seed 0)");
  // The note and the JSON say the same.
  EXPECT_NE(r.note().find("kept 3 of 6 nodes in float32"), std::string::npos) << r.note();
  const auto j = r.to_json();
  EXPECT_EQ(j["state"], "checked");
  EXPECT_EQ(j["kept"].size(), 3u);
  // Deterministic: the same model checks the same.
  EXPECT_EQ(kept_names(check_precision(m, DType::f16, {})), kept_names(r));
  // bf16 has 8 bits of mantissa: the same head loses even more.
  PrecisionCheckResult b = check_precision(m, DType::bf16, {});
  ASSERT_EQ(b.state, "checked");
  EXPECT_EQ(kept_names(b), kept_names(r)) << b.note();
  EXPECT_LT(b.output_error_after, 4e-2) << b.note();
}

// No node amplifies, yet the output is off: the error accumulates (doubles
// at every step of the tent map). The check keeps the earliest 16-bit nodes
// in float32, 8 then 16 more, until the output is within half its bound;
// before, the output is far off (the test can fail).
TEST(PrecisionCheck, AccumulatedRoundingKeepsTheEarliestNodes) {
  constexpr int kSteps = 10;
  ir::Model m = imported_model(tent_map_model(kSteps));
  PrecisionCheckResult r = check_precision(m, DType::f16, {});
  ASSERT_EQ(r.state, "checked") << r.reason;
  EXPECT_GT(r.output_error_before, 5e-2) << r.note();
  EXPECT_LE(r.output_error_after, 5e-3) << r.note();
  ASSERT_FALSE(r.kept.empty());
  for (auto& k : r.kept) EXPECT_NE(k.reason.find("accumulates over the graph"), std::string::npos) << k.reason;
  // The earliest first: what is kept is a prefix of the chain.
  const auto names = kept_names(r);
  auto kept = [&](const std::string& n) { return std::binary_search(names.begin(), names.end(), n); };
  EXPECT_TRUE(kept("mul0") && kept("sub0")) << r.note();  // abs0 reads the float32 Tanh: already float32
  for (int i = 1; i < kSteps; ++i) {
    if (kept("abs" + std::to_string(i))) {
      EXPECT_TRUE(kept("sub" + std::to_string(i - 1))) << i;
    }
  }
  EXPECT_LT(names.size(), size_t{3 * kSteps}) << "the last steps stay 16-bit: " << r.note();
}

// Ordinary networks lose nothing worth a float32 node. (The sigmoid head
// with k = 1 does: a - b alone is off by 1/16 of ~0.1, and the output by 2e-2.)
TEST(PrecisionCheck, OrdinaryNetworksKeepEverythingSixteenBit) {
  for (const auto& [name, builder] : std::vector<std::pair<std::string, ModelBuilder>>{
           {"conv", conv_model()}, {"conv_bn", conv_bn_model()},
           {"attention", attention_model()}, {"matmul", matmul_model()}}) {
    ir::Model m = imported_model(builder);
    PrecisionCheckResult r = check_precision(m, DType::f16, {});
    EXPECT_EQ(r.state, "checked") << name << ": " << r.reason;
    EXPECT_TRUE(r.kept.empty()) << name << ": " << r.note();
    EXPECT_EQ(r.rounds, 1) << name;
    EXPECT_NE(r.note().find("no node amplifies"), std::string::npos) << r.note();
  }
}

// Given sample inputs are used where they fit, else random, and said so.
TEST(PrecisionCheck, GivenInputsAreUsedWhereTheyFit) {
  ir::Model m = imported_model(sigmoid_head_model(50.f));
  // All zeros: a == b exactly, nothing to amplify.
  Tensor zeros(DType::f32, {1, 4, 8, 8});
  std::fill(zeros.data<float>(), zeros.data<float>() + zeros.numel(), 0.f);
  PrecisionCheckResult r = check_precision(m, DType::f16, {{"x", zeros}});
  EXPECT_EQ(r.inputs, "given for x");
  EXPECT_TRUE(r.kept.empty()) << r.note();
  PrecisionCheckResult other = check_precision(m, DType::f16, {{"x", Tensor(DType::f32, {1, 4, 4, 4})}});
  EXPECT_NE(other.inputs.find("x given with another dtype or shape"), std::string::npos) << other.inputs;
  EXPECT_EQ(kept_names(other).size(), 3u) << other.note();
}

// A kept node runs as a float32 island; what follows it is promoted.
TEST(PrecisionCheck, ConvertPrecisionKeepsTheNamedNodesInFloat32) {
  ir::Model m = imported_model(sigmoid_head_model(50.f));
  ir::Model plain = m;
  convert_precision(plain, DType::f16);
  EXPECT_EQ(dtype_named(plain, "a"), DType::f16);
  EXPECT_EQ(dtype_named(plain, "d"), DType::f16);
  convert_precision(m, DType::f16, {"conv_a", "conv_b", "sub"});
  ir::verify(m);
  for (const char* v : {"a", "b", "d", "s", "y"}) EXPECT_EQ(dtype_named(m, v), DType::f32) << v;
  EXPECT_EQ(dtype_named(m, "out_f16"), DType::f16);  // conv_out: 16-bit, cast back at the output
}

// A value that leaves fp16's range is an overflow the check names.
TEST(PrecisionCheck, OverflowIsKeptWithItsReason) {
  ModelBuilder b(17);
  b.input("x", 1, {4, 8});
  b.initializer("big", {}, {40000.f});
  b.node("Mul", {"x", "big"}, {"m"}, "scale_up");
  b.node("Add", {"m", "m"}, {"s"}, "double_it");  // up to 80000: past fp16's 65504
  b.initializer("small", {}, {1e-4f});
  b.node("Mul", {"s", "small"}, {"y"}, "scale_down");
  b.output("y", 1, {4, 8});
  ir::Model m = imported_model(b);
  PrecisionCheckResult r = check_precision(m, DType::f16, {});
  ASSERT_EQ(r.state, "checked") << r.reason;
  ASSERT_FALSE(r.kept.empty()) << r.note();
  EXPECT_EQ(r.kept[0].node, "double_it");
  EXPECT_NE(r.kept[0].reason.find("overflows the 16-bit range"), std::string::npos) << r.kept[0].reason;
  EXPECT_TRUE(std::isinf(r.output_error_before));
  EXPECT_LT(r.output_error_after, 1e-2) << r.note();
}

TEST(PrecisionCheckOptions, ValidationAndTheCacheKey) {
  EXPECT_EQ(parse_precision_check("on"), PrecisionCheck::on);
  EXPECT_EQ(parse_precision_check("off"), PrecisionCheck::off);
  try {
    parse_precision_check("maybe");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("precision_check: unknown value 'maybe'"), std::string::npos) << e.what();
  }
  SessionOptions o;
  o.target = Target::cuda();
  o.precision = Precision::fp16;
  o.precision_check = PrecisionCheck::off;
  o.precision_check_inputs["x"] = ramp_input({1, 4, 8, 8});
  try {
    o.validate();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("precision_check_inputs:"), std::string::npos) << e.what();
  }
  // The key: the default adds nothing; off and given inputs change it for
  // 16-bit cuda programs only.
  SessionOptions on;
  on.target = Target::cuda();
  on.precision = Precision::fp16;
  SessionOptions off = on;
  off.precision_check = PrecisionCheck::off;
  SessionOptions given = on;
  given.precision_check_inputs["x"] = ramp_input({1, 4, 8, 8});
  SessionOptions given2 = given;
  given2.precision_check_inputs["x"] = ramp_input({1, 4, 8, 8});
  given2.precision_check_inputs["x"].data<float>()[3] += 1.f;
  EXPECT_EQ(options_text(on).find("precision-check"), std::string::npos);
  EXPECT_NE(options_text(off).find(";precision-check=off"), std::string::npos);
  EXPECT_NE(options_text(given).find(";precision-check-inputs="), std::string::npos);
  EXPECT_NE(options_text(given), options_text(given2));
  SessionOptions fp32 = off;
  fp32.precision = Precision::fp32;
  EXPECT_EQ(options_text(fp32).find("precision-check"), std::string::npos);
}

}  // namespace
}  // namespace kiln::testing
