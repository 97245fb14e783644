// Tests for src/ops/generator.cpp. Expected values are worked out by hand
// from the ONNX operator definitions unless a comment says otherwise.
#include <cmath>
#include <cstring>
#include <limits>

#include "kiln/errors.h"
#include "onnx/parser.h"
#include "op_test_util.h"
#include "support/half.h"

namespace kiln::testing {
namespace {

using ir::AttrValue;
using I = std::vector<int64_t>;
using F = std::vector<float>;

Tensor ints(std::vector<int64_t> shape, I v) { return make<int64_t>(std::move(shape), std::move(v)); }

template <class Fn>
ErrorCode code_of(Fn&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::internal;  // "did not throw" reads as a mismatch below
}

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

void parse(ir::Node& n, FakeParseContext& ctx) {
  const auto* e = onnx_import::parsers().find(n.domain, n.op_type);
  ASSERT_NE(e, nullptr) << n.op_type;
  if (e->parse) e->parse(n, ctx);
}

/// Runs the kernel alone with outputs allocated over garbage (0xCD bytes), as
/// a reused arena slot would be, to catch kernels that do not write every element.
std::vector<Tensor> run_dirty(const std::string& op, std::map<std::string, AttrValue> attrs, std::vector<Tensor> in,
                              size_t nout = 1) {
  ir::Node n;
  n.op_type = op;
  n.name = op + "_node";
  n.opset = 21;
  n.attrs = std::move(attrs);
  std::vector<const Tensor*> ptrs;
  for (size_t i = 0; i < in.size(); ++i) {
    n.inputs.push_back(in[i].defined() ? static_cast<ir::ValueId>(i) : ir::kNoValue);
    ptrs.push_back(in[i].defined() ? &in[i] : nullptr);
  }
  for (size_t i = 0; i < nout; ++i) n.outputs.push_back(static_cast<ir::ValueId>(100 + i));
  ops::KernelContext ctx(n, ptrs, [](size_t, DType dt, const std::vector<int64_t>& shape) {
    Tensor t(dt, shape);
    std::memset(t.raw(), 0xCD, t.nbytes());
    return t;
  });
  ops::run_kernel(ctx);
  return ctx.outputs();
}

std::string infer_shape(const std::string& op, std::map<std::string, AttrValue> attrs, std::vector<ops::InType> ins,
                        size_t out = 0, size_t nout = 1) {
  ir::Node n;
  n.op_type = op;
  n.name = op + "_node";
  n.opset = 21;
  n.attrs = std::move(attrs);
  for (size_t i = 0; i < ins.size(); ++i) n.inputs.push_back(static_cast<ir::ValueId>(i));
  for (size_t i = 0; i < nout; ++i) n.outputs.push_back(static_cast<ir::ValueId>(100 + i));
  return ir::shape_str(ops::infer(n, ins).at(out).shape);
}

// ---- Constant, ConstantOfShape, Identity ------------------------------------------------------

TEST(Constant, ValueForms) {
  auto t = run_op("Constant", {{"value", ints({2}, {5, -6})}}, {})[0];
  EXPECT_EQ(values<int64_t>(t), (I{5, -6}));
  auto f = run_op("Constant", {{"value_float", 2.5f}}, {})[0];
  EXPECT_EQ(f.dtype(), DType::f32);
  EXPECT_EQ(f.rank(), 0);
  EXPECT_EQ(f.data<float>()[0], 2.5f);
  auto fs = run_op("Constant", {{"value_floats", F{1, 2}}}, {})[0];
  EXPECT_EQ(values<float>(fs), (F{1, 2}));
  auto i = run_op("Constant", {{"value_int", int64_t{-3}}}, {})[0];
  EXPECT_EQ(i.dtype(), DType::i64);
  EXPECT_EQ(i.data<int64_t>()[0], -3);
  EXPECT_EQ(values<int64_t>(run_op("Constant", {{"value_ints", I{1, 2, 3}}}, {})[0]), (I{1, 2, 3}));
  EXPECT_EQ(code_of([] { run_op("Constant", {{"value_string", std::string("a")}}, {}); }), ErrorCode::unsupported);
  EXPECT_EQ(code_of([] { run_op("Constant", {}, {}); }), ErrorCode::invalid_model);
}

TEST(ConstantOfShape, DefaultAndTypedValue) {
  auto z = run_dirty("ConstantOfShape", {}, {ints({2}, {2, 3})})[0];
  EXPECT_EQ(z.dtype(), DType::f32);
  EXPECT_EQ(values<float>(z), (F(6, 0.0f)));
  auto y = run_op("ConstantOfShape", {{"value", ints({1}, {7})}}, {ints({1}, {3})})[0];
  EXPECT_EQ(values<int64_t>(y), (I{7, 7, 7}));
  auto s = run_op("ConstantOfShape", {{"value", make<int32_t>({1}, {4})}}, {ints({0}, {})})[0];
  EXPECT_EQ(s.dtype(), DType::i32);
  EXPECT_EQ(s.rank(), 0);
  EXPECT_EQ(s.data<int32_t>()[0], 4);
  EXPECT_EQ(code_of([] { run_op("ConstantOfShape", {}, {ints({1}, {-1})}); }), ErrorCode::invalid_model);
}

TEST(Identity, CopiesEveryDtype) {
  auto b = run_op("Identity", {}, {make<bool>({2}, {true, false})})[0];
  EXPECT_EQ(values<bool>(b), (std::vector<bool>{true, false}));
  auto i = run_op("Identity", {}, {ints({}, {std::numeric_limits<int64_t>::min()})})[0];
  EXPECT_EQ(i.data<int64_t>()[0], std::numeric_limits<int64_t>::min());
}

// ---- Range ---------------------------------------------------------------------------------

TEST(Range, IntegerAndFloat) {
  auto r = [](int64_t s, int64_t l, int64_t d) {
    return values<int64_t>(run_op("Range", {}, {ints({}, {s}), ints({}, {l}), ints({}, {d})})[0]);
  };
  EXPECT_EQ(r(1, 10, 3), (I{1, 4, 7}));
  EXPECT_EQ(r(10, 1, -3), (I{10, 7, 4}));
  EXPECT_EQ(r(5, 5, 1), (I{}));
  EXPECT_EQ(r(5, 1, 1), (I{}));
  EXPECT_EQ(code_of([&] { r(0, 3, 0); }), ErrorCode::invalid_model);
  auto f = run_op("Range", {}, {make<float>({}, {0}), make<float>({}, {1}), make<float>({}, {0.25f})})[0];
  EXPECT_EQ(values<float>(f), (F{0, 0.25f, 0.5f, 0.75f}));
  auto i32 = run_op("Range", {}, {make<int32_t>({}, {0}), make<int32_t>({}, {-5}), make<int32_t>({}, {-2})})[0];
  EXPECT_EQ(values<int32_t>(i32), (std::vector<int32_t>{0, -2, -4}));
}

TEST(Range, InferenceNeedsConstants) {
  Tensor s = ints({}, {0}), l = ints({}, {7}), d = ints({}, {2});
  ops::InType cs{DType::i64, ir::Shape{}, &s}, cl{DType::i64, ir::Shape{}, &l}, cd{DType::i64, ir::Shape{}, &d};
  EXPECT_EQ(infer_shape("Range", {}, {cs, cl, cd}), "[4]");
  ops::InType dynamic{DType::i64, ir::Shape{}, nullptr};
  EXPECT_EQ(infer_shape("Range", {}, {cs, dynamic, cd}), "[?]");
}

// ---- EyeLike, OneHot -----------------------------------------------------------------------------

TEST(EyeLike, DiagonalOffsetsAndDtype) {
  auto y = run_dirty("EyeLike", {{"k", int64_t{1}}}, {Tensor(DType::f32, {3, 4})})[0];
  EXPECT_EQ(values<float>(y), (F{0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}));
  auto z = run_dirty("EyeLike", {{"k", int64_t{-1}}, {"dtype", int64_t{7}}}, {Tensor(DType::f32, {3, 3})})[0];
  EXPECT_EQ(z.dtype(), DType::i64);
  EXPECT_EQ(values<int64_t>(z), (I{0, 0, 0, 1, 0, 0, 0, 1, 0}));
  auto h = run_dirty("EyeLike", {{"dtype", int64_t{10}}}, {Tensor(DType::i64, {2, 2})})[0];
  EXPECT_EQ(half_to_float(h.data<uint16_t>()[0]), 1.0f);
  EXPECT_EQ(half_to_float(h.data<uint16_t>()[1]), 0.0f);
}

TEST(OneHot, AxesNegativeAndOutOfRangeIndices) {
  Tensor idx = ints({3}, {0, -1, 5});  // -1 means depth-1 = 2; 5 is out of range: all off
  Tensor depth = ints({}, {3}), vals = make<float>({2}, {0, 1});
  auto y = run_dirty("OneHot", {}, {idx, depth, vals})[0];
  EXPECT_EQ(y.shape(), (I{3, 3}));
  EXPECT_EQ(values<float>(y), (F{1, 0, 0, 0, 0, 1, 0, 0, 0}));
  auto z = run_op("OneHot", {{"axis", int64_t{0}}}, {idx, depth, make<float>({2}, {-1, 5})})[0];
  // out[d][i] = idx[i] == d ? 5 : -1
  EXPECT_EQ(values<float>(z), (F{5, -1, -1, -1, -1, -1, -1, 5, -1}));
}

// ---- NonZero ----------------------------------------------------------------------------------

TEST(NonZero, CoordinatesRowMajor) {
  auto y = run_op("NonZero", {}, {make<float>({2, 2}, {1, 0, 1, 1})})[0];
  EXPECT_EQ(y.shape(), (I{2, 3}));
  EXPECT_EQ(values<int64_t>(y), (I{0, 1, 1, 0, 0, 1}));
  auto b = run_op("NonZero", {}, {make<bool>({4}, {false, true, false, true})})[0];
  EXPECT_EQ(values<int64_t>(b), (I{1, 3}));
  // ONNX Runtime 1.20 gives shape [1,1] = [[0]] for a non-zero scalar.
  auto s = run_op("NonZero", {}, {make<float>({}, {3})})[0];
  EXPECT_EQ(s.shape(), (I{1, 1}));
  EXPECT_EQ(s.data<int64_t>()[0], 0);
  EXPECT_EQ(run_op("NonZero", {}, {make<float>({3}, {0, -0.0f, 0})})[0].shape(), (I{1, 0}));
}

/// Rank 3 with zeros, -0.0, NaN and runs of zeros at the start and end; the
/// same pattern as int32 and as float16 (tested through its value: -0.0's
/// bits are not zero): coordinates against a loop with divisions.
TEST(NonZero, Rank3DtypesMatchDivisionLoop) {
  const I dims{3, 4, 5};
  F v(60, 0.f);
  for (size_t i = 3; i < 57; ++i)
    if (i % 3 == 0 || i % 7 == 0) v[i] = static_cast<float>(i) - 30.f;  // includes 0.0 at i = 30
  v[10] = -0.0f;
  v[11] = std::numeric_limits<float>::quiet_NaN();
  I want_rows[3];
  int64_t n = 0;
  for (int64_t i = 0; i < 60; ++i)
    if (v[static_cast<size_t>(i)] != 0.f) {
      want_rows[0].push_back(i / 20), want_rows[1].push_back(i / 5 % 4), want_rows[2].push_back(i % 5);
      ++n;
    }
  I want;
  for (auto& r : want_rows) want.insert(want.end(), r.begin(), r.end());
  auto y = run_op("NonZero", {}, {make<float>(dims, v)})[0];
  EXPECT_EQ(y.shape(), (I{3, n}));
  EXPECT_EQ(values<int64_t>(y), want);
  std::vector<int32_t> iv(60);
  std::vector<uint16_t> hv(60);
  for (size_t i = 0; i < 60; ++i) {
    iv[i] = std::isnan(v[i]) ? 1 : static_cast<int32_t>(v[i]);
    hv[i] = float_to_half(v[i]);
  }
  EXPECT_EQ(values<int64_t>(run_op("NonZero", {}, {make<int32_t>(dims, iv)})[0]), want);
  Tensor h(DType::f16, dims);
  std::memcpy(h.raw(), hv.data(), 120);
  EXPECT_EQ(values<int64_t>(run_op("NonZero", {}, {h})[0]), want);
}

// ---- TopK ---------------------------------------------------------------------------------------

TEST(TopK, LargestSmallestAndTies) {
  Tensor x = make<float>({5}, {1, 3, 3, 2, 5});
  auto o = run_op("TopK", {}, {x, ints({1}, {3})}, 2);
  EXPECT_EQ(values<float>(o[0]), (F{5, 3, 3}));
  EXPECT_EQ(values<int64_t>(o[1]), (I{4, 1, 2}));  // tie: lower index first
  o = run_op("TopK", {{"largest", int64_t{0}}}, {x, ints({1}, {2})}, 2);
  EXPECT_EQ(values<float>(o[0]), (F{1, 2}));
  EXPECT_EQ(values<int64_t>(o[1]), (I{0, 3}));
  o = run_op("TopK", {{"largest", int64_t{0}}}, {ints({4}, {2, 1, 1, 1}), ints({1}, {2})}, 2);
  EXPECT_EQ(values<int64_t>(o[0]), (I{1, 1}));
  EXPECT_EQ(values<int64_t>(o[1]), (I{1, 2}));
  EXPECT_EQ(code_of([&] { run_op("TopK", {}, {x, ints({1}, {6})}, 2); }), ErrorCode::invalid_model);
}

TEST(TopK, AxisZeroAndNaN) {
  // columns [1,5,3] and [6,2,4]: top-2 are 5 (row 1), 3 (row 2) and 6 (row 0), 4 (row 2).
  auto o = run_op("TopK", {{"axis", int64_t{0}}}, {make<float>({3, 2}, {1, 6, 5, 2, 3, 4}), ints({1}, {2})}, 2);
  EXPECT_EQ(o[0].shape(), (I{2, 2}));
  EXPECT_EQ(values<float>(o[0]), (F{5, 6, 3, 4}));
  EXPECT_EQ(values<int64_t>(o[1]), (I{1, 0, 2, 2}));
  float nan = std::numeric_limits<float>::quiet_NaN();
  o = run_op("TopK", {}, {make<float>({3}, {1, nan, 3}), ints({1}, {2})}, 2);
  EXPECT_TRUE(std::isnan(o[0].data<float>()[0]));
  EXPECT_EQ(values<int64_t>(o[1]), (I{1, 2}));
}

// ---- CumSum, Trilu --------------------------------------------------------------------------------

TEST(CumSum, ExclusiveReverse) {
  Tensor x = make<float>({4}, {1, 2, 3, 4});
  Tensor ax = ints({}, {0});
  auto cs = [&](int64_t excl, int64_t rev) {
    return values<float>(run_op("CumSum", {{"exclusive", excl}, {"reverse", rev}}, {x, ax})[0]);
  };
  EXPECT_EQ(cs(0, 0), (F{1, 3, 6, 10}));
  EXPECT_EQ(cs(1, 0), (F{0, 1, 3, 6}));
  EXPECT_EQ(cs(0, 1), (F{10, 9, 7, 4}));
  EXPECT_EQ(cs(1, 1), (F{9, 7, 4, 0}));
}

TEST(CumSum, TwoDimsAndInt64) {
  Tensor x = ints({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(values<int64_t>(run_op("CumSum", {}, {x, make<int32_t>({}, {1})})[0]), (I{1, 3, 6, 4, 9, 15}));
  EXPECT_EQ(values<int64_t>(run_op("CumSum", {}, {x, ints({1}, {-2})})[0]), (I{1, 2, 3, 5, 7, 9}));
}

TEST(Trilu, UpperLowerOffsets) {
  Tensor x = make<float>({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  auto tr = [&](int64_t upper, std::optional<int64_t> k) {
    return values<float>(run_dirty("Trilu", {{"upper", upper}}, {x, k ? ints({}, {*k}) : Tensor()})[0]);
  };
  EXPECT_EQ(tr(1, std::nullopt), (F{1, 2, 3, 0, 5, 6, 0, 0, 9}));
  EXPECT_EQ(tr(0, std::nullopt), (F{1, 0, 0, 4, 5, 0, 7, 8, 9}));
  EXPECT_EQ(tr(1, 1), (F{0, 2, 3, 0, 0, 6, 0, 0, 0}));
  EXPECT_EQ(tr(0, -1), (F{0, 0, 0, 4, 0, 0, 7, 8, 0}));
  EXPECT_EQ(tr(1, -1), (F{1, 2, 3, 4, 5, 6, 0, 8, 9}));
  auto r = run_op("Trilu", {{"upper", int64_t{0}}}, {ints({2, 2, 3}, {1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6}), ints({}, {1})})[0];
  EXPECT_EQ(values<int64_t>(r), (I{1, 2, 0, 4, 5, 6, 1, 2, 0, 4, 5, 6}));
}

// ---- Shape inference ------------------------------------------------------------------------------

TEST(GeneratorInfer, ConstantInputsGiveExactShapes) {
  Tensor shape = ints({3}, {2, 0, 4});
  EXPECT_EQ(infer_shape("ConstantOfShape", {}, {ops::InType{DType::i64, ir::static_shape({3}), &shape}}), "[2,0,4]");
  EXPECT_EQ(infer_shape("ConstantOfShape", {}, {ops::InType{DType::i64, ir::static_shape({3}), nullptr}}), "[?,?,?]");
  Tensor cond = make<bool>({2, 3}, {true, false, true, false, false, true});
  EXPECT_EQ(infer_shape("NonZero", {}, {ops::InType{DType::boolean, ir::static_shape({2, 3}), &cond}}), "[2,3]");
  ir::Shape nk{ir::Dim::sym("N"), ir::Dim::known(10)};
  EXPECT_EQ(infer_shape("NonZero", {}, {ops::InType{DType::f32, nk, nullptr}}), "[2,?]");
  Tensor k = ints({1}, {3});
  ops::InType x{DType::f32, nk, nullptr}, kk{DType::i64, ir::static_shape({1}), &k};
  EXPECT_EQ(infer_shape("TopK", {}, {x, kk}, 1, 2), "[N,3]");
  EXPECT_EQ(infer_shape("TopK", {{"axis", int64_t{0}}}, {x, ops::InType{DType::i64, ir::static_shape({1}), nullptr}}, 0, 2),
            "[?,10]");
  Tensor depth = ints({}, {4});
  EXPECT_EQ(infer_shape("OneHot", {}, {ops::InType{DType::i64, nk, nullptr}, ops::InType{DType::i64, ir::Shape{}, &depth},
                                       ops::InType{DType::f32, ir::static_shape({2}), nullptr}}),
            "[N,10,4]");
}

TEST(GeneratorParsers, ConstantFormsBecomeValueTensor) {
  FakeParseContext ctx;
  ir::Node n;
  n.op_type = "Constant";
  n.name = "c";
  n.opset = 13;
  n.attrs["value_ints"] = I{4, 5};
  parse(n, ctx);
  EXPECT_FALSE(n.has("value_ints"));
  EXPECT_EQ(values<int64_t>(n.tensor("value")), (I{4, 5}));
  ir::Node s = n;
  s.attrs = {{"value_string", std::string("x")}};
  EXPECT_EQ(code_of([&] { parse(s, ctx); }), ErrorCode::unsupported);
}

TEST(GeneratorParsers, TopK1AttributeBecomesInput) {
  FakeParseContext ctx;
  ir::Node n;
  n.op_type = "TopK";
  n.name = "t";
  n.opset = 1;
  n.inputs = {0};
  n.attrs["k"] = int64_t{3};
  parse(n, ctx);
  ASSERT_EQ(n.inputs.size(), 2u);
  EXPECT_EQ(values<int64_t>(*ctx.value(n.inputs[1]).constant), (I{3}));
  for (const char* op : {"Constant", "ConstantOfShape", "Range", "Identity", "EyeLike", "OneHot", "NonZero", "TopK",
                         "CumSum", "Trilu"})
    EXPECT_NE(onnx_import::parsers().find("", op), nullptr) << op;
}

}  // namespace
}  // namespace kiln::testing
