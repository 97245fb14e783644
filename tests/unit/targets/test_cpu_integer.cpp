// kiln.cpu.MatMulInteger / kiln.cpu.ConvInteger (oneDNN int8 with the zero
// points applied by kiln): random shapes, operand types and zero points
// (0, 128, 255 and their int8 counterparts, per tensor / row / column /
// channel), padding, groups and strides, every result equal bit for bit to
// the ref target's; large sums that wrap int32; and the forms left to the
// reference kernel. On a machine without VNNI / AMX the products run on
// oneDNN's float32 kernels where the weights' sums are small enough for them
// to be exact (int8_products_exact_in_f32), else on the reference kernel; the
// tests check which, and bit-exact results either way.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>

#include "cpu_test_util.h"
#include "kiln/errors.h"
#include "targets/cpu/run/cpu_kernels.h"
#include "targets/cpu/run/int8_matmul.h"

namespace kiln::testing {
namespace {

constexpr int kU8 = 2, kI8 = 3;  // ONNX elem types

DType dtype_of(int elem) { return elem == kU8 ? DType::u8 : DType::i8; }

/// An 8-bit initializer (raw data) of ONNX elem type `elem`.
void int8_initializer(ModelBuilder& b, const std::string& name, int elem, const std::vector<int64_t>& dims,
                      const std::vector<int32_t>& vals) {
  auto* t = b.graph().add_initializer();
  t->set_name(name);
  t->set_data_type(elem);
  for (auto d : dims) t->add_dims(d);
  std::string raw;
  for (auto v : vals) raw.push_back(static_cast<char>(static_cast<uint8_t>(v)));
  t->set_raw_data(raw);
}

int64_t numel(const std::vector<int64_t>& d) {
  int64_t e = 1;
  for (auto v : d) e *= v;
  return e;
}

/// n values of the range of `elem` (uniform, or all at one end when `extreme`).
std::vector<int32_t> values(std::mt19937& rng, int elem, int64_t n, int extreme = 0) {
  const int lo = elem == kU8 ? 0 : -128, hi = elem == kU8 ? 255 : 127;
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = extreme < 0 ? lo : extreme > 0 ? hi : d(rng);
  return v;
}

Tensor int8_tensor(int elem, const std::vector<int64_t>& shape, const std::vector<int32_t>& v) {
  Tensor t(dtype_of(elem), shape);
  auto* p = static_cast<uint8_t*>(t.raw());
  for (size_t i = 0; i < v.size(); ++i) p[i] = static_cast<uint8_t>(v[i]);
  return t;
}

/// Element i of t (int32, uint8 or float32) as text.
std::string element(const Tensor& t, int64_t i) {
  if (t.dtype() == DType::u8) return std::to_string(int{t.data<uint8_t>()[i]});
  if (t.dtype() == DType::f32) return std::to_string(t.data<float>()[i]);
  return std::to_string(t.data<int32_t>()[i]);
}

/// Whether the cpu target lowers the integer product whose 8-bit weights are
/// initializer `name` of b: always with VNNI / AMX (int8_exact_isa); else
/// when float32 sums them exactly (int8_products_exact_in_f32, on the weights
/// as the kernels store them: uint8 shifted by -128). `columns`: each slice
/// [K, N] of the trailing two dims sums over K per column (MatMulInteger,
/// DynamicQuantizeLSTM's directions), else each output channel over the rest
/// of its dims (ConvInteger).
bool lowered_here(ModelBuilder& b, const std::string& name, bool columns) {
  if (targets::cpu::int8_exact_isa()) return true;
  for (const auto& t : b.proto().graph().initializer()) {
    if (t.name() != name) continue;
    std::vector<int8_t> w;
    for (char c : t.raw_data())
      w.push_back(t.data_type() == kU8 ? static_cast<int8_t>(int{static_cast<uint8_t>(c)} - 128) : static_cast<int8_t>(c));
    std::vector<int64_t> d(t.dims().begin(), t.dims().end());
    if (!columns) return targets::cpu::int8_products_exact_in_f32(w.data(), d[0], numel(d) / d[0], numel(d) / d[0], 1);
    const int64_t K = d[d.size() - 2], N = d.back();
    for (int64_t off = 0; off < numel(d); off += K * N)
      if (!targets::cpu::int8_products_exact_in_f32(w.data() + off, N, K, 1, N)) return false;
    return true;
  }
  ADD_FAILURE() << "no initializer " << name;
  return false;
}

/// Runs b on cpu and ref and expects every output equal byte for byte.
void expect_exact(const ModelBuilder& b, const std::map<std::string, Tensor>& in, const std::string& what) {
  auto cpu = run_on(b, Target::cpu(), in);
  auto ref = run_on(b, Target::ref(), in);
  ASSERT_EQ(cpu.size(), ref.size()) << what;
  for (auto& [name, r] : ref) {
    const Tensor& c = cpu.at(name);
    ASSERT_EQ(c.dtype(), r.dtype()) << what;
    ASSERT_EQ(c.shape(), r.shape()) << what;
    ASSERT_EQ(c.nbytes(), r.nbytes()) << what;
    const size_t size = r.numel() ? r.nbytes() / static_cast<size_t>(r.numel()) : 1;
    const auto* cb = static_cast<const uint8_t*>(c.raw());
    const auto* rb = static_cast<const uint8_t*>(r.raw());
    int64_t diff = 0, first = -1;
    for (int64_t i = 0; i < r.numel(); ++i)
      if (std::memcmp(cb + i * size, rb + i * size, size) != 0 && ++diff == 1) first = i;
    EXPECT_EQ(diff, 0) << what << ", output " << name << ": " << diff << " of " << r.numel() << " differ, first at "
                       << first << " (" << (first >= 0 ? element(c, first) : "") << " vs "
                       << (first >= 0 ? element(r, first) : "") << ")";
  }
}

// ---------------------------------------------------------------- MatMulInteger

struct MmSpec {
  std::vector<int64_t> a_shape;  ///< [..., M, K]
  int64_t N = 1;
  int a_elem = kU8, b_elem = kU8;
  /// a zero point: -1 absent, else its value (a graph input of shape a_zp_shape).
  int a_zp = -1;
  std::vector<int64_t> a_zp_shape;  ///< {} scalar, {M} per row (a_zp = value of row 0, others random)
  /// b zero point: -1 absent, else its value (constant, per column when b_per_column).
  int b_zp = -1;
  bool b_per_column = false;
  int extreme_a = 0, extreme_b = 0;  ///< all-low (-1) / all-high (+1) data
};

std::string describe(const MmSpec& s) {
  std::string a;
  for (auto d : s.a_shape) a += std::to_string(d) + "x";
  return "A " + a + " N " + std::to_string(s.N) + " a " + (s.a_elem == kU8 ? "u8" : "s8") + " b " +
         (s.b_elem == kU8 ? "u8" : "s8") + " azp " + std::to_string(s.a_zp) + (s.a_zp_shape.empty() ? "" : "/row") +
         " bzp " + std::to_string(s.b_zp) + (s.b_per_column ? "/col" : "");
}

/// The model (MatMulInteger of input a and constant b) and its inputs.
ModelBuilder matmul_integer(const MmSpec& s, std::mt19937& rng, std::map<std::string, Tensor>& in) {
  const int64_t K = s.a_shape.back(), M = s.a_shape[s.a_shape.size() - 2];
  ModelBuilder b(17);
  b.input("a", s.a_elem, s.a_shape);
  in["a"] = int8_tensor(s.a_elem, s.a_shape, values(rng, s.a_elem, numel(s.a_shape), s.extreme_a));
  int8_initializer(b, "b", s.b_elem, {K, s.N}, values(rng, s.b_elem, K * s.N, s.extreme_b));
  std::string azp, bzp;
  if (s.a_zp >= 0 || s.a_zp < -1) {
    azp = "a_zp";
    b.input(azp, s.a_elem, s.a_zp_shape);
    std::vector<int32_t> v = values(rng, s.a_elem, s.a_zp_shape.empty() ? 1 : M);
    v[0] = s.a_zp;
    in[azp] = int8_tensor(s.a_elem, s.a_zp_shape, v);
  }
  if (s.b_zp >= 0 || s.b_zp < -1) {
    bzp = "b_zp";
    std::vector<int32_t> v = values(rng, s.b_elem, s.b_per_column ? s.N : 1);
    v[0] = s.b_zp;
    int8_initializer(b, bzp, s.b_elem, s.b_per_column ? std::vector<int64_t>{s.N} : std::vector<int64_t>{}, v);
  }
  b.node("MatMulInteger", {"a", "b", azp, bzp}, {"y"});
  b.output("y");
  return b;
}

/// s's a_zp / b_zp values mapped to the operand's type: 0, 128, 255 for
/// uint8 become -128, 0, 127 for int8 (the same positions in the range).
int zp_for(int elem, int u8_value) { return elem == kU8 ? u8_value : u8_value - 128; }

TEST(CpuMatMulInteger, RandomShapesTypesAndZeroPointsMatchRef) {
  std::mt19937 rng(20);
  const int zps[] = {-1, 0, 128, 255};
  int cases = 0;
  for (int a_elem : {kU8, kI8})
    for (int b_elem : {kU8, kI8})
      for (int azp : zps)
        for (int bzp : zps) {
          MmSpec s;
          std::uniform_int_distribution<int64_t> m(1, 37), k(1, 300), n(1, 150);
          s.a_shape = {m(rng), k(rng)};
          if (cases % 3 == 1) s.a_shape.insert(s.a_shape.begin(), 3);  // batch dims fold into M
          s.N = n(rng);
          s.a_elem = a_elem;
          s.b_elem = b_elem;
          s.a_zp = azp < 0 ? -1 : zp_for(a_elem, azp);
          s.b_zp = bzp < 0 ? -1 : zp_for(b_elem, bzp);
          std::map<std::string, Tensor> in;
          ModelBuilder b = matmul_integer(s, rng, in);
          EXPECT_EQ(cpu_nodes(b, "MatMulInteger"), lowered_here(b, "b", true) ? 1 : 0) << describe(s);
          expect_exact(b, in, describe(s));
          ++cases;
        }
  EXPECT_EQ(cases, 64);
}

TEST(CpuMatMulInteger, PerRowAndPerColumnZeroPointsMatchRef) {
  std::mt19937 rng(7);
  for (int a_elem : {kU8, kI8})
    for (int b_elem : {kU8, kI8}) {
      MmSpec s;
      s.a_shape = {19, 131};
      s.N = 67;
      s.a_elem = a_elem;
      s.b_elem = b_elem;
      s.a_zp = zp_for(a_elem, 255);
      s.a_zp_shape = {19};
      s.b_zp = zp_for(b_elem, 0);
      s.b_per_column = true;
      std::map<std::string, Tensor> in;
      ModelBuilder b = matmul_integer(s, rng, in);
      EXPECT_EQ(cpu_nodes(b, "MatMulInteger"), lowered_here(b, "b", true) ? 1 : 0) << describe(s);
      expect_exact(b, in, describe(s));
    }
}

TEST(CpuMatMulInteger, LargeSumsWrapLikeRef) {
  // 255 * 255 * 8192 > 2^31: the reference's int32 accumulation wraps, and so
  // must the cpu kernel's (oneDNN's raw product plus the zero-point terms).
  std::mt19937 rng(3);
  for (int extreme_b : {-1, 1}) {
    MmSpec s;
    s.a_shape = {5, 8192};
    s.N = 33;
    s.a_zp = 0;
    s.b_zp = extreme_b < 0 ? 255 : 0;
    s.extreme_a = 1;
    s.extreme_b = extreme_b;
    std::map<std::string, Tensor> in;
    ModelBuilder b = matmul_integer(s, rng, in);
    // Column sums of 8192 extreme weights: too large for float32 without VNNI.
    if (!targets::cpu::int8_exact_isa()) EXPECT_FALSE(lowered_here(b, "b", true));
    EXPECT_EQ(cpu_nodes(b, "MatMulInteger"), lowered_here(b, "b", true) ? 1 : 0) << describe(s);
    expect_exact(b, in, describe(s));
  }
}

// The float32 bound: 255 * max column sum of |w| <= 2^24 (16777216).
TEST(CpuMatMulInteger, Float32ExactnessBoundIsTwoToThe24) {
  std::vector<int8_t> w127(600, 127), w128(600, -128);
  EXPECT_TRUE(targets::cpu::int8_products_exact_in_f32(w127.data(), 1, 518, 0, 1));   // 16774530
  EXPECT_FALSE(targets::cpu::int8_products_exact_in_f32(w127.data(), 1, 519, 0, 1));  // 16806915
  EXPECT_TRUE(targets::cpu::int8_products_exact_in_f32(w128.data(), 1, 514, 0, 1));   // 16773120
  EXPECT_FALSE(targets::cpu::int8_products_exact_in_f32(w128.data(), 1, 515, 0, 1));  // 16805760
  // Per output: one column over the bound is enough to refuse.
  std::vector<int8_t> two(2 * 600, 0);
  for (int64_t k = 0; k < 600; ++k) two[static_cast<size_t>(k * 2 + 1)] = 127;
  EXPECT_FALSE(targets::cpu::int8_products_exact_in_f32(two.data(), 2, 600, 1, 2));
  EXPECT_TRUE(targets::cpu::int8_products_exact_in_f32(two.data(), 1, 600, 1, 2));
}

// At the bound's edge (all-255 A, all-127 int8 B: every sum 255 * 127 * K)
// the products are exact on whichever kernel runs them; one row more and,
// without VNNI, the node stays on the reference kernel.
TEST(CpuMatMulInteger, SumsAtTheFloat32BoundAreExact) {
  for (int64_t K : {518, 519}) {
    ModelBuilder b(17);
    b.input("a", kU8, {3, K});
    int8_initializer(b, "b", kI8, {K, 5}, std::vector<int32_t>(static_cast<size_t>(K * 5), 127));
    b.node("MatMulInteger", {"a", "b"}, {"y"});
    b.output("y");
    const bool here = lowered_here(b, "b", true);
    if (!targets::cpu::int8_exact_isa()) EXPECT_EQ(here, K == 518);
    EXPECT_EQ(cpu_nodes(b, "MatMulInteger"), here ? 1 : 0) << K;
    std::map<std::string, Tensor> in{{"a", int8_tensor(kU8, {3, K}, std::vector<int32_t>(static_cast<size_t>(3 * K), 255))}};
    expect_exact(b, in, "K " + std::to_string(K));
    auto y = run_on(b, Target::cpu(), in).at("y");
    EXPECT_EQ(y.data<int32_t>()[0], 255 * 127 * K);
  }
}

// An artifact made on a VNNI machine holds int8 products whatever their
// sums; loaded where oneDNN's int8 is not exact, weights past the float32
// bound are refused naming the node (with VNNI they run on oneDNN's int8).
TEST(CpuMatMulInteger, WeightsPastTheFloat32BoundAreRefusedWithoutVnni) {
  ir::Node n;
  n.op_type = "MatMulInteger";
  n.domain = "kiln.cpu";
  n.name = "big_sums";
  std::vector<int8_t> b(static_cast<size_t>(600 * 3), 127);  // column sums 255 * 127 * 600 > 2^24
  if (targets::cpu::int8_exact_isa()) {
    targets::cpu::Int8Matmul mm(n, 2, 600, 3, DType::u8, b.data(), {});
    EXPECT_FALSE(mm.in_f32());
    return;
  }
  try {
    targets::cpu::Int8Matmul mm(n, 2, 600, 3, DType::u8, b.data(), {});
    FAIL() << "weights past the float32 bound were accepted without VNNI";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::incompatible_artifact) << e.what();
    EXPECT_NE(std::string(e.what()).find("big_sums"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("too large for exact float32"), std::string::npos) << e.what();
  }
  std::vector<int8_t> small(static_cast<size_t>(600 * 3), 1);  // within the bound: float32 products
  targets::cpu::Int8Matmul ok(n, 2, 600, 3, DType::u8, small.data(), {});
  EXPECT_TRUE(ok.in_f32());
}

TEST(CpuMatMulInteger, NonConstantWeightsStayOnReference) {
  ModelBuilder b(17);
  b.input("a", kU8, {4, 8});
  b.input("b", kU8, {8, 3});
  b.node("MatMulInteger", {"a", "b"}, {"y"});
  b.output("y");
  EXPECT_EQ(cpu_nodes(b, "MatMulInteger"), 0);
  std::mt19937 rng(1);
  expect_exact(b, {{"a", int8_tensor(kU8, {4, 8}, values(rng, kU8, 32))}, {"b", int8_tensor(kU8, {8, 3}, values(rng, kU8, 24))}},
               "runtime B");
}

// ---------------------------------------------------------------- ConvInteger

struct ConvSpec {
  std::vector<int64_t> x_shape;  ///< [N, C, sp...]
  int64_t maps = 4, group = 1;
  std::vector<int64_t> kernel, strides, dilations, pads;  ///< empty: attribute left out
  std::string auto_pad;
  int x_elem = kU8, w_elem = kU8;
  int x_zp = -1, w_zp = -1;  ///< -1 absent (int8 values are never -1 here)
  bool w_per_channel = false;
};

std::string describe(const ConvSpec& s) {
  auto list = [](const std::vector<int64_t>& v) {
    std::string t;
    for (auto d : v) t += std::to_string(d) + ",";
    return t;
  };
  return "x " + list(s.x_shape) + " maps " + std::to_string(s.maps) + " group " + std::to_string(s.group) + " k " +
         list(s.kernel) + " s " + list(s.strides) + " d " + list(s.dilations) + " p " + list(s.pads) + " " + s.auto_pad +
         (s.x_elem == kU8 ? " x u8" : " x s8") + (s.w_elem == kU8 ? " w u8" : " w s8") + " xzp " +
         std::to_string(s.x_zp) + " wzp " + std::to_string(s.w_zp) + (s.w_per_channel ? "/ch" : "");
}

ModelBuilder conv_integer(const ConvSpec& s, std::mt19937& rng, std::map<std::string, Tensor>& in) {
  ModelBuilder b(17);
  b.input("x", s.x_elem, s.x_shape);
  in["x"] = int8_tensor(s.x_elem, s.x_shape, values(rng, s.x_elem, numel(s.x_shape)));
  std::vector<int64_t> wd{s.maps, s.x_shape[1] / s.group};
  wd.insert(wd.end(), s.kernel.begin(), s.kernel.end());
  int8_initializer(b, "w", s.w_elem, wd, values(rng, s.w_elem, numel(wd)));
  std::string xzp, wzp;
  if (s.x_zp != -1) {
    xzp = "x_zp";
    b.input(xzp, s.x_elem, {});
    in[xzp] = int8_tensor(s.x_elem, {}, {s.x_zp});
  }
  if (s.w_zp != -1) {
    wzp = "w_zp";
    std::vector<int32_t> v = values(rng, s.w_elem, s.w_per_channel ? s.maps : 1);
    v[0] = s.w_zp;
    int8_initializer(b, wzp, s.w_elem, s.w_per_channel ? std::vector<int64_t>{s.maps} : std::vector<int64_t>{}, v);
  }
  auto& n = b.node("ConvInteger", {"x", "w", xzp, wzp}, {"y"});
  ModelBuilder::attr_int(n, "group", s.group);
  ModelBuilder::attr_ints(n, "kernel_shape", s.kernel);
  if (!s.strides.empty()) ModelBuilder::attr_ints(n, "strides", s.strides);
  if (!s.dilations.empty()) ModelBuilder::attr_ints(n, "dilations", s.dilations);
  if (!s.pads.empty()) ModelBuilder::attr_ints(n, "pads", s.pads);
  if (!s.auto_pad.empty()) {
    auto* a = n.add_attribute();
    a->set_name("auto_pad");
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(s.auto_pad);
  }
  b.output("y");
  return b;
}

TEST(CpuConvInteger, PaddedConvolutionWithZeroPointsIsLoweredAndExact) {
  // ddddocr's form: uint8 x from DynamicQuantizeLinear, uint8 weights with a
  // zero point that is not 128, 3x3 with padding 1 (the border reads xz).
  std::mt19937 rng(11);
  for (int xzp : {0, 128, 255})
    for (int wzp : {0, 128, 255}) {
      ConvSpec s;
      s.x_shape = {1, 8, 9, 13};
      s.maps = 12;
      s.kernel = {3, 3};
      s.pads = {1, 1, 1, 1};
      s.x_zp = xzp;
      s.w_zp = wzp;
      std::map<std::string, Tensor> in;
      ModelBuilder b = conv_integer(s, rng, in);
      EXPECT_EQ(cpu_nodes(b, "ConvInteger"), lowered_here(b, "w", false) ? 1 : 0) << describe(s);
      expect_exact(b, in, describe(s));
    }
}

TEST(CpuConvInteger, RandomGeometryTypesAndZeroPointsMatchRef) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> pick(0, 1 << 20);
  const int zps[] = {-1, 0, 128, 255};
  int lowered = 0, cases = 0;
  for (int i = 0; i < 48; ++i) {
    ConvSpec s;
    const int rank = i % 8 == 7 ? 1 : i % 8 == 6 ? 3 : 2;  // spatial dims
    s.group = (i % 4 == 1) ? 2 : (i % 4 == 3) ? 4 : 1;
    const int64_t cg = 1 + pick(rng) % 6, og = 1 + pick(rng) % 5;
    s.x_shape = {1 + pick(rng) % 2, cg * s.group};
    s.maps = og * s.group;
    for (int d = 0; d < rank; ++d) {
      s.x_shape.push_back(4 + pick(rng) % (rank == 3 ? 4 : 12));
      s.kernel.push_back(1 + pick(rng) % 3);
      s.strides.push_back(1 + pick(rng) % 2);
      s.dilations.push_back(1 + (pick(rng) % 4 == 0));
    }
    if (i % 5 == 4) {
      s.auto_pad = i % 10 == 4 ? "SAME_UPPER" : "SAME_LOWER";
    } else {
      for (int d = 0; d < 2 * rank; ++d) s.pads.push_back(pick(rng) % 3);
    }
    s.x_elem = i % 3 == 2 ? kI8 : kU8;
    s.w_elem = i % 6 >= 3 ? kI8 : kU8;
    const int xz = zps[pick(rng) % 4], wz = zps[pick(rng) % 4];
    s.x_zp = xz < 0 ? -1 : zp_for(s.x_elem, xz);
    s.w_zp = wz < 0 ? -1 : zp_for(s.w_elem, wz);
    s.w_per_channel = s.w_zp != -1 && i % 2 == 0;
    std::map<std::string, Tensor> in;
    ModelBuilder b = conv_integer(s, rng, in);
    const int c = cpu_nodes(b, "ConvInteger");
    EXPECT_LE(c, 1) << describe(s);
    if (!lowered_here(b, "w", false)) EXPECT_EQ(c, 0) << describe(s);
    lowered += c;
    expect_exact(b, in, describe(s));
    ++cases;
  }
  EXPECT_EQ(cases, 48);
  // Most forms run on oneDNN (a few tiny grouped ones may get only a reference kernel there).
  // Without VNNI: on the float32 convolution (these weights' sums are small).
  EXPECT_GE(lowered, 36);
}

TEST(CpuConvInteger, NonConstantWeightsStayOnReference) {
  ModelBuilder b(17);
  b.input("x", kU8, {1, 2, 5, 5});
  b.input("w", kU8, {3, 2, 3, 3});
  b.node("ConvInteger", {"x", "w"}, {"y"});
  b.output("y");
  EXPECT_EQ(cpu_nodes(b, "ConvInteger"), 0);
  std::mt19937 rng(5);
  expect_exact(b, {{"x", int8_tensor(kU8, {1, 2, 5, 5}, values(rng, kU8, 50))}, {"w", int8_tensor(kU8, {3, 2, 3, 3}, values(rng, kU8, 54))}},
               "runtime w");
}

// ---------------------------------------------------------------- DynamicQuantizeLSTM

struct DqSpec {
  int64_t T = 5, N = 1, I = 7, H = 6;
  std::string direction = "forward";
  int elem = kU8;
  bool per_column = false, bias = true, h0 = false, c0 = false, lens = false, y = true;
};

std::vector<float> floats(std::mt19937& rng, int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

Tensor f32_tensor(const std::vector<int64_t>& shape, const std::vector<float>& v) {
  Tensor t(DType::f32, shape);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

/// A DynamicQuantizeLSTM model (ONNX Runtime's contrib op) with constant
/// weights, scales and zero points, and its inputs.
ModelBuilder dq_lstm(const DqSpec& s, std::mt19937& rng, std::map<std::string, Tensor>& in) {
  const int64_t D = s.direction == "bidirectional" ? 2 : 1, G = 4 * s.H;
  ModelBuilder b(17);
  auto* ms = b.proto().add_opset_import();
  ms->set_domain("com.microsoft");
  ms->set_version(1);
  b.input("x", 1, {s.T, s.N, s.I});
  in["x"] = f32_tensor({s.T, s.N, s.I}, floats(rng, s.T * s.N * s.I, -2.f, 3.f));
  int8_initializer(b, "w", s.elem, {D, s.I, G}, values(rng, s.elem, D * s.I * G));
  int8_initializer(b, "r", s.elem, {D, s.H, G}, values(rng, s.elem, D * s.H * G));
  if (s.bias) b.initializer("b", {D, 2 * G}, floats(rng, D * 2 * G, -0.5f, 0.5f));
  if (s.lens) {
    b.input("lens", 6, {s.N});
    Tensor t(DType::i32, {s.N});
    for (int64_t i = 0; i < s.N; ++i) t.data<int32_t>()[i] = static_cast<int32_t>(i == 0 ? s.T : 1 + i % s.T);
    in["lens"] = t;
  }
  if (s.h0) {
    b.input("h0", 1, {D, s.N, s.H});
    in["h0"] = f32_tensor({D, s.N, s.H}, floats(rng, D * s.N * s.H, -1.f, 1.f));
  }
  if (s.c0) {
    b.input("c0", 1, {D, s.N, s.H});
    in["c0"] = f32_tensor({D, s.N, s.H}, floats(rng, D * s.N * s.H, -1.f, 1.f));
  }
  const std::vector<int64_t> qshape = s.per_column ? std::vector<int64_t>{D, G} : std::vector<int64_t>{D};
  const int64_t qn = numel(qshape);
  for (const char* name : {"w", "r"}) {
    b.initializer(std::string(name) + "_scale", qshape, floats(rng, qn, 0.002f, 0.02f));
    // Per-column zero points as ONNX Runtime accepts them: all one value (uint8), zeros (int8).
    std::vector<int32_t> z;
    const int32_t one = s.elem == kI8 ? 0 : values(rng, s.elem, 1)[0];
    for (int64_t d = 0; d < D; ++d) {
      const int32_t v = s.per_column ? one : values(rng, s.elem, 1)[0];
      for (int64_t j = 0; j < qn / D; ++j) z.push_back(v);
    }
    int8_initializer(b, std::string(name) + "_zp", s.elem, qshape, z);
  }
  auto& n = b.node("DynamicQuantizeLSTM",
                   {"x", "w", "r", s.bias ? "b" : "", s.lens ? "lens" : "", s.h0 ? "h0" : "", s.c0 ? "c0" : "", "",
                    "w_scale", "w_zp", "r_scale", "r_zp"},
                   {s.y ? "y" : "", "y_h", "y_c"});
  n.set_domain("com.microsoft");
  ModelBuilder::attr_int(n, "hidden_size", s.H);
  auto* a = n.add_attribute();
  a->set_name("direction");
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(s.direction);
  if (s.y) b.output("y");
  b.output("y_h");
  b.output("y_c");
  return b;
}

TEST(CpuDynamicQuantizeLstm, DirectionsTypesStatesAndLengthsMatchRefBitForBit) {
  std::mt19937 rng(202);
  int cases = 0;
  for (const char* dir : {"forward", "reverse", "bidirectional"})
    for (int elem : {kU8, kI8})
      for (int variant = 0; variant < 3; ++variant) {
        DqSpec s;
        s.direction = dir;
        s.elem = elem;
        s.per_column = variant == 1;
        s.N = variant == 2 ? 3 : 1;
        s.h0 = s.c0 = variant != 0;
        s.lens = variant == 2;
        s.y = variant != 1;
        s.bias = variant != 2;
        s.H = variant == 2 ? 33 : 6;  // 4H = 132 columns: not a multiple of oneDNN's blocks
        std::map<std::string, Tensor> in;
        ModelBuilder b = dq_lstm(s, rng, in);
        const std::string what = std::string(dir) + (elem == kU8 ? " u8" : " s8") + " variant " + std::to_string(variant);
        EXPECT_EQ(cpu_nodes(b, "DynamicQuantizeLSTM"), lowered_here(b, "w", true) && lowered_here(b, "r", true) ? 1 : 0)
            << what;
        expect_exact(b, in, what);
        ++cases;
      }
  EXPECT_EQ(cases, 18);
}

// ---------------------------------------------------------------- DynamicQuantizeLinear

/// DynamicQuantizeLinear of x (`shape`) with all three outputs.
ModelBuilder dynamic_quantize(const std::vector<int64_t>& shape) {
  ModelBuilder b(17);
  b.input("x", 1, shape);
  b.node("DynamicQuantizeLinear", {"x"}, {"y", "y_scale", "y_zero_point"});
  for (const char* o : {"y", "y_scale", "y_zero_point"}) b.output(o);
  return b;
}

TEST(CpuDynamicQuantizeLinear, EdgeValuesAndTiesMatchRefBitForBit) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::mt19937 rng(9);
  struct Case {
    const char* what;
    std::vector<float> v;
  };
  std::vector<Case> cases = {
      {"all zero", std::vector<float>(100, 0.0f)},
      {"negative zeros", std::vector<float>(37, -0.0f)},
      {"positive only", floats(rng, 1000, 0.5f, 7.0f)},
      {"negative only", floats(rng, 1000, -9.0f, -0.25f)},
      {"mixed", floats(rng, 100003, -3.0f, 5.0f)},  // two threads' parts and a scalar tail
      {"huge range (scale inf)", {3e38f, -3e38f, 1.0f, -2.0f, 0.0f, 5e37f}},
  };
  // Ties: range [0, 255] gives scale 1, so k + 0.5 lands on round-half-even.
  std::vector<float> ties{0.0f, 255.0f};
  for (int k = 0; k < 254; ++k) ties.push_back(static_cast<float>(k) + 0.5f);
  cases.push_back({"ties", ties});
  std::vector<float> specials = floats(rng, 64, -1.0f, 1.0f);
  specials[3] = nan;
  specials[17] = inf;
  specials[18] = -0.0f;
  specials[40] = nan;
  cases.push_back({"NaN and inf", specials});
  std::vector<float> nans(40, nan);
  nans[5] = 2.0f;
  cases.push_back({"mostly NaN", nans});
  for (auto& c : cases) {
    ModelBuilder b = dynamic_quantize({static_cast<int64_t>(c.v.size())});
    EXPECT_EQ(cpu_nodes(b, "DynamicQuantizeLinear"), 1) << c.what;
    expect_exact(b, {{"x", f32_tensor({static_cast<int64_t>(c.v.size())}, c.v)}}, c.what);
  }
  // The ties' expected values, worked out: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2 (zero point 0).
  auto got = run_on(dynamic_quantize({static_cast<int64_t>(ties.size())}), Target::cpu(),
                    {{"x", f32_tensor({static_cast<int64_t>(ties.size())}, ties)}});
  const uint8_t* y = got.at("y").data<uint8_t>();
  EXPECT_EQ(int{y[1]}, 255);
  EXPECT_EQ(int{y[2]}, 0);
  EXPECT_EQ(int{y[3]}, 2);
  EXPECT_EQ(int{y[4]}, 2);
  EXPECT_EQ(got.at("y_scale").data<float>()[0], 1.0f);
}

}  // namespace
}  // namespace kiln::testing
