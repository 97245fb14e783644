// Tests for src/ops/shape_ops.cpp: kernel values (computed by hand unless a
// comment says otherwise) and shape inference with symbolic dims.
#include <limits>

#include "kiln/errors.h"
#include "onnx/parser.h"
#include "op_test_util.h"
#include "support/half.h"

namespace kiln::testing {
namespace {

using ir::AttrValue;
using I = std::vector<int64_t>;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

Tensor ints(I v) { return make<int64_t>({static_cast<int64_t>(v.size())}, v); }
Tensor iota_f(std::vector<int64_t> shape) {
  Tensor t(DType::f32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i);
  return t;
}
Tensor iota_i(std::vector<int64_t> shape) {
  Tensor t(DType::i64, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = i;
  return t;
}
Tensor none() { return Tensor(); }

/// Input type with dims given as text: digits are static, anything else a symbol.
ops::InType typed(DType dt, std::vector<std::string> dims) {
  ir::Shape s;
  for (auto& d : dims)
    s.push_back(!d.empty() && d.find_first_not_of("0123456789") == std::string::npos ? ir::Dim::known(std::stoll(d))
                                                                                     : ir::Dim::sym(d));
  return {dt, s, nullptr};
}
ops::InType constant(const Tensor& t) { return {t.dtype(), ir::static_shape(t.shape()), &t}; }

std::vector<ops::OutType> infer(const std::string& op, std::map<std::string, AttrValue> attrs,
                                std::vector<ops::InType> ins, size_t nout = 1, int opset = 21) {
  ir::Node n;
  n.op_type = op;
  n.name = op + "_node";
  n.opset = opset;
  n.attrs = std::move(attrs);
  for (size_t i = 0; i < ins.size(); ++i) n.inputs.push_back(ins[i].present() ? static_cast<ir::ValueId>(i) : ir::kNoValue);
  for (size_t i = 0; i < nout; ++i) n.outputs.push_back(static_cast<ir::ValueId>(100 + i));
  return ops::infer(n, ins);
}
std::string shape1(const std::vector<ops::OutType>& o, size_t i = 0) { return ir::shape_str(o.at(i).shape); }

template <class F>
ErrorCode code_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::internal;  // "did not throw" reads as a mismatch below
}

// ---- Shape, Size ----------------------------------------------------------------------

TEST(ShapeOps, ShapeWithStartEnd) {
  Tensor x(DType::f32, {2, 3, 4});
  EXPECT_EQ(values<int64_t>(run_op("Shape", {}, {x})[0]), (I{2, 3, 4}));
  EXPECT_EQ(values<int64_t>(run_op("Shape", {{"start", int64_t{1}}}, {x})[0]), (I{3, 4}));
  EXPECT_EQ(values<int64_t>(run_op("Shape", {{"start", int64_t{-2}}, {"end", int64_t{-1}}}, {x})[0]), (I{3}));
  EXPECT_EQ(values<int64_t>(run_op("Shape", {{"end", int64_t{10}}}, {x})[0]), (I{2, 3, 4}));  // clamped
  auto empty = run_op("Shape", {{"start", int64_t{2}}, {"end", int64_t{1}}}, {x})[0];
  EXPECT_EQ(empty.shape(), (I{0}));
}

TEST(ShapeOps, Size) {
  auto y = run_op("Size", {}, {Tensor(DType::boolean, {2, 3, 4})})[0];
  EXPECT_EQ(y.dtype(), DType::i64);
  EXPECT_EQ(y.rank(), 0);
  EXPECT_EQ(y.data<int64_t>()[0], 24);
}

// ---- Reshape, Flatten, Squeeze, Unsqueeze ------------------------------------------------

TEST(ShapeOps, ReshapeZeroCopiesAndMinusOneInfers) {
  Tensor x = iota_i({2, 3, 4});
  auto y = run_op("Reshape", {}, {x, ints({0, -1})})[0];
  EXPECT_EQ(y.shape(), (I{2, 12}));
  EXPECT_EQ(y.data<int64_t>()[13], 13);
  EXPECT_EQ(run_op("Reshape", {}, {x, ints({4, 0, 2})})[0].shape(), (I{4, 3, 2}));
  EXPECT_EQ(run_op("Reshape", {}, {x, ints({-1})})[0].shape(), (I{24}));
}

TEST(ShapeOps, ReshapeAllowZero) {
  Tensor x(DType::f32, {0, 3});
  EXPECT_EQ(run_op("Reshape", {{"allowzero", int64_t{1}}}, {x, ints({3, 0})})[0].shape(), (I{3, 0}));
  // Without allowzero the 0 copies dim 1 (3): [3,3] does not hold 0 elements.
  EXPECT_EQ(code_of([&] { run_op("Reshape", {}, {x, ints({3, 0})}); }), ErrorCode::invalid_model);
  EXPECT_EQ(code_of([&] { run_op("Reshape", {{"allowzero", int64_t{1}}}, {x, ints({0, -1})}); }),
            ErrorCode::invalid_model);
}

TEST(ShapeOps, ReshapeErrors) {
  Tensor x = iota_f({2, 3, 4});
  EXPECT_EQ(code_of([&] { run_op("Reshape", {}, {x, ints({5, -1})}); }), ErrorCode::invalid_model);
  EXPECT_EQ(code_of([&] { run_op("Reshape", {}, {x, ints({-1, -1})}); }), ErrorCode::invalid_model);
  EXPECT_EQ(code_of([&] { run_op("Reshape", {}, {x, ints({4, 7})}); }), ErrorCode::invalid_model);
  // The kernel alone (shape not known at compile time) reports invalid_input.
  ir::Node n;
  n.op_type = "Reshape";
  n.name = "r";
  n.outputs = {0};
  Tensor shape = ints({5, -1});
  ops::KernelContext ctx(n, {&x, &shape}, nullptr);
  EXPECT_EQ(code_of([&] { ops::run_kernel(ctx); }), ErrorCode::invalid_input);
}

TEST(ShapeOps, Flatten) {
  Tensor x = iota_f({2, 3, 4});
  EXPECT_EQ(run_op("Flatten", {{"axis", int64_t{2}}}, {x})[0].shape(), (I{6, 4}));
  EXPECT_EQ(run_op("Flatten", {{"axis", int64_t{0}}}, {x})[0].shape(), (I{1, 24}));
  EXPECT_EQ(run_op("Flatten", {{"axis", int64_t{-1}}}, {x})[0].shape(), (I{6, 4}));
  EXPECT_EQ(run_op("Flatten", {{"axis", int64_t{3}}}, {x})[0].shape(), (I{24, 1}));
  EXPECT_EQ(run_op("Flatten", {}, {x})[0].shape(), (I{2, 12}));
  EXPECT_EQ(code_of([&] { run_op("Flatten", {{"axis", int64_t{4}}}, {x}); }), ErrorCode::invalid_model);
}

TEST(ShapeOps, Squeeze) {
  Tensor x = iota_f({1, 3, 1, 2});
  auto y = run_op("Squeeze", {}, {x, ints({-2})})[0];
  EXPECT_EQ(y.shape(), (I{1, 3, 2}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(run_op("Squeeze", {}, {x})[0].shape(), (I{3, 2}));
  EXPECT_EQ(code_of([&] { run_op("Squeeze", {}, {x, ints({1})}); }), ErrorCode::invalid_model);
}

TEST(ShapeOps, Unsqueeze) {
  Tensor x = iota_i({3, 2});
  EXPECT_EQ(run_op("Unsqueeze", {}, {x, ints({0, -1})})[0].shape(), (I{1, 3, 2, 1}));
  EXPECT_EQ(run_op("Unsqueeze", {}, {x, ints({1})})[0].shape(), (I{3, 1, 2}));
  Tensor s = make<int64_t>({}, {7});
  auto y = run_op("Unsqueeze", {}, {s, ints({0})})[0];
  EXPECT_EQ(y.shape(), (I{1}));
  EXPECT_EQ(y.data<int64_t>()[0], 7);
  EXPECT_EQ(code_of([&] { run_op("Unsqueeze", {}, {x, ints({1, 1})}); }), ErrorCode::invalid_model);
  EXPECT_EQ(code_of([&] { run_op("Unsqueeze", {}, {x, ints({4})}); }), ErrorCode::invalid_model);
}

// ---- Transpose, Concat, Split ---------------------------------------------------------------

TEST(ShapeOps, TransposeDefaultAndPerm) {
  auto y = run_op("Transpose", {}, {iota_f({2, 3})})[0];
  EXPECT_EQ(y.shape(), (I{3, 2}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  // out[i,j,k] = x[k,i,j] = 12k + 4i + j
  auto z = run_op("Transpose", {{"perm", I{1, 2, 0}}}, {iota_i({2, 3, 4})})[0];
  EXPECT_EQ(z.shape(), (I{3, 4, 2}));
  EXPECT_EQ(values<int64_t>(z), (I{0, 12, 1, 13, 2, 14, 3, 15, 4, 16, 5, 17, 6, 18, 7, 19, 8, 20, 9, 21, 10, 22, 11, 23}));
  auto b = run_op("Transpose", {}, {make<bool>({2, 2}, {true, true, false, false})})[0];
  EXPECT_EQ(values<bool>(b), (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(code_of([&] { run_op("Transpose", {{"perm", I{0, 0}}}, {iota_f({2, 3})}); }), ErrorCode::invalid_model);
}

TEST(ShapeOps, TransposeFloat16MovesBits) {
  Tensor x(DType::f16, {2, 1});
  x.data<uint16_t>()[0] = float_to_half(1.5f);
  x.data<uint16_t>()[1] = float_to_half(-2.0f);
  auto y = run_op("Transpose", {}, {x})[0];
  EXPECT_EQ(y.shape(), (I{1, 2}));
  EXPECT_EQ(half_to_float(y.data<uint16_t>()[1]), -2.0f);
}

TEST(ShapeOps, Concat) {
  Tensor a = make<float>({2, 1}, {1, 2}), b = make<float>({2, 2}, {3, 4, 5, 6});
  EXPECT_EQ(values<float>(run_op("Concat", {{"axis", int64_t{1}}}, {a, b})[0]), (std::vector<float>{1, 3, 4, 2, 5, 6}));
  auto y = run_op("Concat", {{"axis", int64_t{-1}}}, {a, b})[0];
  EXPECT_EQ(y.shape(), (I{2, 3}));
  auto s = run_op("Concat", {{"axis", int64_t{0}}}, {ints({5}), ints({7, 8}), ints({})})[0];
  EXPECT_EQ(values<int64_t>(s), (I{5, 7, 8}));
  EXPECT_EQ(code_of([&] { run_op("Concat", {{"axis", int64_t{0}}}, {a, b}); }), ErrorCode::invalid_model);
}

TEST(ShapeOps, SplitEvenUnevenAndExplicit) {
  Tensor x = make<float>({5}, {1, 2, 3, 4, 5});
  auto o = run_op("Split", {{"num_outputs", int64_t{2}}}, {x}, 2, 18);
  EXPECT_EQ(values<float>(o[0]), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(values<float>(o[1]), (std::vector<float>{4, 5}));
  o = run_op("Split", {}, {x, ints({2, 3})}, 2);
  EXPECT_EQ(values<float>(o[0]), (std::vector<float>{1, 2}));
  EXPECT_EQ(values<float>(o[1]), (std::vector<float>{3, 4, 5}));
  o = run_op("Split", {{"num_outputs", int64_t{3}}}, {iota_i({7})}, 3, 18);  // 3, 3, 1
  EXPECT_EQ(values<int64_t>(o[2]), (I{6}));
  EXPECT_EQ(o[1].shape(), (I{3}));
  o = run_op("Split", {}, {make<float>({6}, {1, 2, 3, 4, 5, 6})}, 3, 13);
  EXPECT_EQ(values<float>(o[2]), (std::vector<float>{5, 6}));
  EXPECT_EQ(code_of([&] { run_op("Split", {}, {x}, 2, 13); }), ErrorCode::invalid_model);
  EXPECT_EQ(code_of([&] { run_op("Split", {}, {x, ints({2, 2})}, 2); }), ErrorCode::invalid_model);
}

TEST(ShapeOps, SplitNegativeAxis) {
  auto o = run_op("Split", {{"axis", int64_t{-1}}}, {iota_i({2, 4}), ints({1, 3})}, 2);
  EXPECT_EQ(o[0].shape(), (I{2, 1}));
  EXPECT_EQ(values<int64_t>(o[0]), (I{0, 4}));
  EXPECT_EQ(values<int64_t>(o[1]), (I{1, 2, 3, 5, 6, 7}));
}

// ---- Slice ---------------------------------------------------------------------------------

I slice10(I starts, I ends, std::optional<I> steps = std::nullopt) {
  Tensor x = iota_i({10});
  return values<int64_t>(run_op("Slice", {}, {x, ints(starts), ints(ends), steps ? ints({0}) : none(),
                                              steps ? ints(*steps) : none()})[0]);
}

TEST(ShapeOps, SliceClampingAndNegativeSteps) {
  EXPECT_EQ(slice10({2}, {5}), (I{2, 3, 4}));
  EXPECT_EQ(slice10({-3}, {kMax}), (I{7, 8, 9}));
  EXPECT_EQ(slice10({8}, {2}, I{-2}), (I{8, 6, 4}));
  EXPECT_EQ(slice10({-1}, {kMin}, I{-1}), (I{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(slice10({20}, {-20}, I{-3}), (I{9, 6, 3, 0}));  // start -> 9, end -> -1
  EXPECT_EQ(slice10({-20}, {3}), (I{0, 1, 2}));
  EXPECT_EQ(slice10({5}, {2}), (I{}));
  EXPECT_EQ(slice10({0}, {10}, I{kMax}), (I{0}));
}

TEST(ShapeOps, Slice2DAxesAndSteps) {
  // x = [[0..3],[4..7],[8..11]]; axis 1 from 3 down by 2 -> cols 3,1; axis 0 rows 1,2.
  auto y = run_op("Slice", {}, {iota_i({3, 4}), ints({-1, 1}), ints({kMin, 3}), ints({1, 0}), ints({-2, 1})})[0];
  EXPECT_EQ(y.shape(), (I{2, 2}));
  EXPECT_EQ(values<int64_t>(y), (I{7, 5, 11, 9}));
  EXPECT_EQ(code_of([&] { slice10({0}, {5}, I{0}); }), ErrorCode::invalid_model);
}

// ---- Expand, Tile ---------------------------------------------------------------------------

TEST(ShapeOps, Expand) {
  Tensor x = make<float>({3, 1}, {1, 2, 3});
  auto y = run_op("Expand", {}, {x, ints({2, 1, 2})})[0];
  EXPECT_EQ(y.shape(), (I{2, 3, 2}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(run_op("Expand", {}, {x, ints({1})})[0].shape(), (I{3, 1}));
  EXPECT_EQ(code_of([&] { run_op("Expand", {}, {x, ints({2, 1})}); }), ErrorCode::invalid_model);
}

TEST(ShapeOps, Tile) {
  Tensor x = make<int64_t>({2, 2}, {1, 2, 3, 4});
  auto y = run_op("Tile", {}, {x, ints({1, 2})})[0];
  EXPECT_EQ(y.shape(), (I{2, 4}));
  EXPECT_EQ(values<int64_t>(y), (I{1, 2, 1, 2, 3, 4, 3, 4}));
  EXPECT_EQ(values<int64_t>(run_op("Tile", {}, {x, ints({2, 1})})[0]), (I{1, 2, 3, 4, 1, 2, 3, 4}));
  EXPECT_EQ(run_op("Tile", {}, {x, ints({0, 1})})[0].shape(), (I{0, 2}));
}

// ---- Pad ----------------------------------------------------------------------------------

std::vector<float> pad3(const std::string& mode, I pads, Tensor value = Tensor()) {
  Tensor x = make<float>({3}, {1, 2, 3});
  return values<float>(run_op("Pad", {{"mode", mode}}, {x, ints(pads), value})[0]);
}

TEST(ShapeOps, PadModes) {
  using F = std::vector<float>;
  EXPECT_EQ(pad3("constant", {2, 1}, make<float>({}, {9})), (F{9, 9, 1, 2, 3, 9}));
  EXPECT_EQ(pad3("constant", {-1, 1}), (F{2, 3, 0}));
  // reflect / edge / wrap checked against numpy.pad(x, (2, 2 or 1), mode) offline.
  EXPECT_EQ(pad3("reflect", {2, 2}), (F{3, 2, 1, 2, 3, 2, 1}));
  EXPECT_EQ(pad3("reflect", {4, 0}), (F{1, 2, 3, 2, 1, 2, 3}));
  EXPECT_EQ(pad3("edge", {2, 1}), (F{1, 1, 1, 2, 3, 3}));
  EXPECT_EQ(pad3("wrap", {2, 1}), (F{2, 3, 1, 2, 3, 1}));
  EXPECT_EQ(code_of([&] { pad3("mirror", {1, 1}); }), ErrorCode::unsupported);
}

TEST(ShapeOps, Pad2DAxesAndInt64Value) {
  Tensor x = make<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  // pads = [begin axis0, begin axis1, end axis0, end axis1]
  auto y = run_op("Pad", {{"mode", std::string("reflect")}}, {x, ints({0, 1, 0, 1})})[0];
  EXPECT_EQ(values<float>(y), (std::vector<float>{2, 1, 2, 3, 2, 5, 4, 5, 6, 5}));
  auto z = run_op("Pad", {}, {make<float>({2, 2}, {1, 2, 3, 4}), ints({1, 0}), Tensor(), ints({-1})})[0];
  EXPECT_EQ(z.shape(), (I{2, 3}));
  EXPECT_EQ(values<float>(z), (std::vector<float>{0, 1, 2, 0, 3, 4}));
  auto w = run_op("Pad", {}, {ints({1, 2}), ints({1, 0}), make<int64_t>({}, {5000000000})})[0];
  EXPECT_EQ(values<int64_t>(w), (I{5000000000, 1, 2}));
}

// ---- DepthToSpace, SpaceToDepth ---------------------------------------------------------------

TEST(ShapeOps, DepthToSpaceSmall) {
  // out[c', i, j] = x[(i*2 + j)*2 + c'] (DCR) or x[c'*4 + i*2 + j] (CRD).
  Tensor x = iota_f({1, 8, 1, 1});
  auto d = run_op("DepthToSpace", {{"blocksize", int64_t{2}}}, {x})[0];
  EXPECT_EQ(d.shape(), (I{1, 2, 2, 2}));
  EXPECT_EQ(values<float>(d), (std::vector<float>{0, 2, 4, 6, 1, 3, 5, 7}));
  auto c = run_op("DepthToSpace", {{"blocksize", int64_t{2}}, {"mode", std::string("CRD")}}, {x})[0];
  EXPECT_EQ(values<float>(c), (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(ShapeOps, DepthToSpaceAndBack) {
  // Expected values: numpy reshape/transpose formulas of the ONNX spec, x = arange(48).reshape(1,8,2,3).
  Tensor x = iota_i({1, 8, 2, 3});
  auto d = run_op("DepthToSpace", {{"blocksize", int64_t{2}}}, {x})[0];
  EXPECT_EQ(d.shape(), (I{1, 2, 4, 6}));
  EXPECT_EQ(values<int64_t>(d), (I{0,  12, 1,  13, 2,  14, 24, 36, 25, 37, 26, 38, 3,  15, 4,  16,
                                   5,  17, 27, 39, 28, 40, 29, 41, 6,  18, 7,  19, 8,  20, 30, 42,
                                   31, 43, 32, 44, 9,  21, 10, 22, 11, 23, 33, 45, 34, 46, 35, 47}));
  auto c = run_op("DepthToSpace", {{"blocksize", int64_t{2}}, {"mode", std::string("CRD")}}, {x})[0];
  EXPECT_EQ(values<int64_t>(c), (I{0,  6,  1,  7,  2,  8,  12, 18, 13, 19, 14, 20, 3,  9,  4,  10,
                                   5,  11, 15, 21, 16, 22, 17, 23, 24, 30, 25, 31, 26, 32, 36, 42,
                                   37, 43, 38, 44, 27, 33, 28, 34, 29, 35, 39, 45, 40, 46, 41, 47}));
  // SpaceToDepth is the inverse of DCR.
  auto back = run_op("SpaceToDepth", {{"blocksize", int64_t{2}}}, {d})[0];
  EXPECT_EQ(back.shape(), (I{1, 8, 2, 3}));
  EXPECT_EQ(values<int64_t>(back), values<int64_t>(x));
  // numpy: arange(16).reshape(1,2,2,4) through the spec's SpaceToDepth formula.
  auto s = run_op("SpaceToDepth", {{"blocksize", int64_t{2}}}, {iota_i({1, 2, 2, 4})})[0];
  EXPECT_EQ(s.shape(), (I{1, 8, 1, 2}));
  EXPECT_EQ(values<int64_t>(s), (I{0, 2, 8, 10, 1, 3, 9, 11, 4, 6, 12, 14, 5, 7, 13, 15}));
  EXPECT_EQ(code_of([&] { run_op("DepthToSpace", {{"blocksize", int64_t{3}}}, {x}); }), ErrorCode::invalid_model);
}

// ---- Shape inference with symbolic dims ------------------------------------------------------

TEST(ShapeOpsInfer, ReshapeWithConstantShapeKeepsSymbols) {
  auto x = typed(DType::f32, {"N", "3", "4"});
  Tensor s1 = ints({0, -1}), s2 = ints({0, 12}), s3 = ints({-1, 4}), s4 = ints({2, -1}), s5 = ints({0, 3, 2, 2});
  EXPECT_EQ(shape1(infer("Reshape", {}, {x, constant(s1)})), "[N,12]");
  EXPECT_EQ(shape1(infer("Reshape", {}, {x, constant(s2)})), "[N,12]");
  EXPECT_EQ(shape1(infer("Reshape", {}, {x, constant(s3)})), "[?,4]");
  EXPECT_EQ(shape1(infer("Reshape", {}, {x, constant(s4)})), "[2,?]");
  EXPECT_EQ(shape1(infer("Reshape", {}, {x, constant(s5)})), "[N,3,2,2]");
  Tensor s6 = ints({-1, 12});
  EXPECT_EQ(shape1(infer("Reshape", {}, {x, constant(s6)})), "[N,12]");
  // An anonymous dim copied through 0 still cancels out of the count.
  EXPECT_EQ(shape1(infer("Reshape", {}, {typed(DType::f32, {"", "3", "4"}), constant(s1)})), "[?,12]");
  Tensor bad = ints({0, 5, 2});
  EXPECT_EQ(code_of([&] { infer("Reshape", {}, {x, constant(bad)}); }), ErrorCode::invalid_model);
  // A computed shape tensor of length 3: rank known, dims not.
  EXPECT_EQ(shape1(infer("Reshape", {}, {x, typed(DType::i64, {"3"})})), "[?,?,?]");
}

TEST(ShapeOpsInfer, ShapeAndSizeOfSymbolicInput) {
  auto o = infer("Shape", {}, {typed(DType::f32, {"N", "3", "4"})});
  EXPECT_EQ(o[0].dtype, DType::i64);
  EXPECT_EQ(shape1(o), "[3]");
  EXPECT_EQ(shape1(infer("Shape", {{"start", int64_t{-2}}}, {typed(DType::f32, {"N", "3", "4"})})), "[2]");
  EXPECT_EQ(shape1(infer("Size", {}, {typed(DType::f32, {"N"})})), "[]");
}

TEST(ShapeOpsInfer, ConcatAlongAndBesideSymbolicBatch) {
  auto a = typed(DType::f32, {"N", "3"}), b = typed(DType::f32, {"N", "5"}), m = typed(DType::f32, {"M", "3"});
  EXPECT_EQ(shape1(infer("Concat", {{"axis", int64_t{1}}}, {a, b})), "[N,8]");
  EXPECT_EQ(shape1(infer("Concat", {{"axis", int64_t{0}}}, {a, m})), "[?,3]");
  EXPECT_EQ(shape1(infer("Concat", {{"axis", int64_t{0}}}, {a, typed(DType::f32, {"0", "3"})})), "[N,3]");
  EXPECT_EQ(shape1(infer("Concat", {{"axis", int64_t{0}}}, {typed(DType::f32, {"2", "3"}), typed(DType::f32, {"4", "3"})})),
            "[6,3]");
  EXPECT_EQ(code_of([&] { infer("Concat", {{"axis", int64_t{0}}}, {a, b}); }), ErrorCode::invalid_model);
}

TEST(ShapeOpsInfer, SqueezeUnsqueezeFlattenTranspose) {
  Tensor ax0 = ints({0});
  EXPECT_EQ(shape1(infer("Unsqueeze", {}, {typed(DType::i64, {"N"}), constant(ax0)})), "[1,N]");
  EXPECT_EQ(shape1(infer("Squeeze", {}, {typed(DType::f32, {"1", "N"}), constant(ax0)})), "[N]");
  EXPECT_FALSE(infer("Squeeze", {}, {typed(DType::f32, {"1", "N"})})[0].shape.has_value());
  EXPECT_EQ(shape1(infer("Flatten", {}, {typed(DType::f32, {"N", "3", "4"})})), "[N,12]");
  EXPECT_EQ(shape1(infer("Flatten", {{"axis", int64_t{2}}}, {typed(DType::f32, {"N", "3", "4"})})), "[?,4]");
  EXPECT_EQ(shape1(infer("Transpose", {{"perm", I{0, 2, 1}}}, {typed(DType::f32, {"N", "C", "7"})})), "[N,7,C]");
}

TEST(ShapeOpsInfer, SliceOnSymbolicDims) {
  auto x = typed(DType::f32, {"N", "10"});
  Tensor s0 = ints({0}), eMax = ints({kMax}), a0 = ints({0}), a1 = ints({1}), s2 = ints({2}), e5 = ints({5}),
         s1 = ints({1}), e3 = ints({3});
  EXPECT_EQ(shape1(infer("Slice", {}, {x, constant(s0), constant(eMax), constant(a0)})), "[N,10]");
  EXPECT_EQ(shape1(infer("Slice", {}, {x, constant(s2), constant(e5), constant(a1)})), "[N,3]");
  EXPECT_EQ(shape1(infer("Slice", {}, {x, constant(s1), constant(e3), constant(a0)})), "[?,10]");
  EXPECT_EQ(shape1(infer("Slice", {}, {x, typed(DType::i64, {"1"}), typed(DType::i64, {"1"}), constant(a1)})),
            "[N,?]");
}

TEST(ShapeOpsInfer, ExpandTileSplitPadDepthToSpace) {
  Tensor shp = ints({1, 5}), rep1 = ints({1, 3}), rep2 = ints({2, 1}), pads = ints({0, 1, 0, 1});
  EXPECT_EQ(shape1(infer("Expand", {}, {typed(DType::f32, {"N", "1"}), constant(shp)})), "[N,5]");
  EXPECT_EQ(shape1(infer("Tile", {}, {typed(DType::f32, {"N", "2"}), constant(rep1)})), "[N,6]");
  EXPECT_EQ(shape1(infer("Tile", {}, {typed(DType::f32, {"N", "2"}), constant(rep2)})), "[?,2]");
  auto sp = infer("Split", {{"axis", int64_t{1}}, {"num_outputs", int64_t{2}}}, {typed(DType::f32, {"N", "6"})}, 2);
  EXPECT_EQ(shape1(sp, 0), "[N,3]");
  EXPECT_EQ(shape1(sp, 1), "[N,3]");
  EXPECT_EQ(shape1(infer("Pad", {}, {typed(DType::f32, {"N", "3"}), constant(pads)})), "[N,5]");
  EXPECT_EQ(shape1(infer("DepthToSpace", {{"blocksize", int64_t{2}}}, {typed(DType::f32, {"N", "8", "H", "4"})})),
            "[N,2,?,8]");
}

// ---- Parsers: old opsets normalised to the newest form ---------------------------------------

/// Records the constants a parser adds (ids from 1000 up).
struct FakeParseContext : onnx_import::ParseContext {
  std::vector<ir::Value> added;
  ir::ValueId add_constant(const std::string& name, Tensor t) override {
    ir::Value v;
    v.name = name;
    v.dtype = t.dtype();
    v.constant = t;
    added.push_back(v);
    return static_cast<ir::ValueId>(999 + added.size());
  }
  const ir::Value& value(ir::ValueId id) const override { return added.at(static_cast<size_t>(id - 1000)); }
};

ir::Node parsed(const std::string& op, int opset, std::vector<ir::ValueId> inputs,
                std::map<std::string, AttrValue> attrs, FakeParseContext& ctx) {
  ir::Node n;
  n.op_type = op;
  n.name = op + "_node";
  n.opset = opset;
  n.inputs = std::move(inputs);
  n.outputs = {50};
  n.attrs = std::move(attrs);
  const auto* e = onnx_import::parsers().find("", op);
  EXPECT_NE(e, nullptr) << op;
  if (e && e->parse) e->parse(n, ctx);
  return n;
}

TEST(ShapeOpsParsers, AttributesBecomeInputs) {
  FakeParseContext ctx;
  auto sq = parsed("Squeeze", 11, {0}, {{"axes", I{1, -1}}}, ctx);
  ASSERT_EQ(sq.inputs.size(), 2u);
  EXPECT_FALSE(sq.has("axes"));
  EXPECT_EQ(values<int64_t>(*ctx.value(sq.inputs[1]).constant), (I{1, -1}));
  auto sl = parsed("Slice", 9, {0}, {{"starts", I{1}}, {"ends", I{3}}, {"axes", I{2}}}, ctx);
  ASSERT_EQ(sl.inputs.size(), 4u);
  EXPECT_EQ(values<int64_t>(*ctx.value(sl.inputs[2]).constant), (I{3}));
  EXPECT_EQ(values<int64_t>(*ctx.value(sl.inputs[3]).constant), (I{2}));
  auto pad = parsed("Pad", 2, {0}, {{"pads", I{0, 1, 0, 2}}, {"value", 1.5f}}, ctx);
  ASSERT_EQ(pad.inputs.size(), 3u);
  EXPECT_EQ(values<int64_t>(*ctx.value(pad.inputs[1]).constant), (I{0, 1, 0, 2}));
  EXPECT_EQ(ctx.value(pad.inputs[2]).constant->data<float>()[0], 1.5f);
  auto sp = parsed("Split", 11, {0}, {{"split", I{2, 3}}}, ctx);
  EXPECT_EQ(values<int64_t>(*ctx.value(sp.inputs.at(1)).constant), (I{2, 3}));
  auto un = parsed("Unsqueeze", 13, {0, 7}, {}, ctx);  // already the new form: untouched
  EXPECT_EQ(un.inputs, (std::vector<ir::ValueId>{0, 7}));
}

TEST(ShapeOpsParsers, RejectUnsupportedModes) {
  FakeParseContext ctx;
  EXPECT_EQ(code_of([&] { parsed("Pad", 18, {0, 1}, {{"mode", std::string("symmetric")}}, ctx); }),
            ErrorCode::unsupported);
  EXPECT_EQ(code_of([&] { parsed("DepthToSpace", 13, {0}, {{"blocksize", int64_t{2}}, {"mode", std::string("XYZ")}}, ctx); }),
            ErrorCode::unsupported);
  for (const char* op : {"Shape", "Size", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split",
                         "Slice", "Expand", "Tile", "Pad", "DepthToSpace", "SpaceToDepth"})
    EXPECT_NE(onnx_import::parsers().find("", op), nullptr) << op;
}

}  // namespace
}  // namespace kiln::testing
