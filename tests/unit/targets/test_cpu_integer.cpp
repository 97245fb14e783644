// kiln.cpu.MatMulInteger / kiln.cpu.ConvInteger (oneDNN int8 with the zero
// points applied by kiln): random shapes, operand types and zero points
// (0, 128, 255 and their int8 counterparts, per tensor / row / column /
// channel), padding, groups and strides, every result equal bit for bit to
// the ref target's; large sums that wrap int32; and the forms left to the
// reference kernel. On a machine without VNNI / AMX nothing is lowered (the
// tests check that instead).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "cpu_test_util.h"
#include "targets/cpu/run/cpu_kernels.h"

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
    int64_t diff = 0, first = -1;
    for (int64_t i = 0; i < r.numel(); ++i)
      if (c.data<int32_t>()[i] != r.data<int32_t>()[i] && ++diff == 1) first = i;
    EXPECT_EQ(diff, 0) << what << ": " << diff << " of " << r.numel() << " differ, first at " << first << " ("
                       << (first >= 0 ? c.data<int32_t>()[first] : 0) << " vs " << (first >= 0 ? r.data<int32_t>()[first] : 0)
                       << ")";
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
          EXPECT_EQ(cpu_nodes(b, "MatMulInteger"), targets::cpu::int8_exact_isa() ? 1 : 0) << describe(s);
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
      EXPECT_EQ(cpu_nodes(b, "MatMulInteger"), targets::cpu::int8_exact_isa() ? 1 : 0) << describe(s);
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
    expect_exact(b, in, describe(s));
  }
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

}  // namespace
}  // namespace kiln::testing
