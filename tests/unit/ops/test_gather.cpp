// Tests for src/ops/gather.cpp. Expected values are worked out by hand from
// the ONNX operator definitions (several are the spec's own examples).
#include "kiln/errors.h"
#include "onnx/parser.h"
#include "op_test_util.h"

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

ops::InType typed(DType dt, std::vector<std::string> dims) {
  ir::Shape s;
  for (auto& d : dims)
    s.push_back(d.find_first_not_of("0123456789") == std::string::npos ? ir::Dim::known(std::stoll(d)) : ir::Dim::sym(d));
  return {dt, s, nullptr};
}

std::string infer_shape(const std::string& op, std::map<std::string, AttrValue> attrs, std::vector<ops::InType> ins) {
  ir::Node n;
  n.op_type = op;
  n.name = op + "_node";
  n.opset = 21;
  n.attrs = std::move(attrs);
  for (size_t i = 0; i < ins.size(); ++i) n.inputs.push_back(static_cast<ir::ValueId>(i));
  n.outputs = {100};
  return ir::shape_str(ops::infer(n, ins).at(0).shape);
}

// ---- Gather -------------------------------------------------------------------------------

TEST(Gather, Axis0WithNegativeIndices) {
  Tensor data = make<float>({3, 2}, {1, 2, 3, 4, 5, 6});
  auto y = run_op("Gather", {}, {data, ints({2, 2}, {0, 1, -1, 0})})[0];
  EXPECT_EQ(y.shape(), (I{2, 2, 2}));
  EXPECT_EQ(values<float>(y), (F{1, 2, 3, 4, 5, 6, 1, 2}));
}

TEST(Gather, Axis1Int32Indices) {
  Tensor data = make<float>({2, 3}, {0, 1, 2, 3, 4, 5});
  auto y = run_op("Gather", {{"axis", int64_t{1}}}, {data, make<int32_t>({2}, {2, -3})})[0];
  EXPECT_EQ(y.shape(), (I{2, 2}));
  EXPECT_EQ(values<float>(y), (F{2, 0, 5, 3}));
}

TEST(Gather, ScalarIndexOnShapeVector) {
  // The Shape -> Gather(0) pattern of exported models, on int64 data.
  auto y = run_op("Gather", {}, {ints({4}, {2, 3, 4000000000, 5}), ints({}, {-2})})[0];
  EXPECT_EQ(y.shape(), (I{}));
  EXPECT_EQ(y.data<int64_t>()[0], 4000000000);
}

TEST(Gather, OutOfRangeIndexIsAnError) {
  Tensor data = make<float>({3}, {1, 2, 3});
  EXPECT_EQ(code_of([&] { run_op("Gather", {}, {data, ints({1}, {3})}); }), ErrorCode::invalid_input);
  EXPECT_EQ(code_of([&] { run_op("Gather", {}, {data, ints({1}, {-4})}); }), ErrorCode::invalid_input);
  EXPECT_EQ(code_of([&] { run_op("Gather", {}, {data, make<float>({1}, {0})}); }), ErrorCode::unsupported);
}

TEST(Gather, BoolData) {
  auto y = run_op("Gather", {}, {make<bool>({3}, {true, false, true}), ints({2}, {1, 2})})[0];
  EXPECT_EQ(values<bool>(y), (std::vector<bool>{false, true}));
}

// ---- GatherElements ---------------------------------------------------------------------------

TEST(GatherElements, SpecExamples) {
  auto y = run_op("GatherElements", {{"axis", int64_t{1}}},
                  {make<float>({2, 2}, {1, 2, 3, 4}), ints({2, 2}, {0, 0, 1, 0})})[0];
  EXPECT_EQ(values<float>(y), (F{1, 1, 4, 3}));
  auto z = run_op("GatherElements", {{"axis", int64_t{0}}},
                  {make<float>({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}), ints({2, 3}, {1, 2, 0, 2, 0, 0})})[0];
  EXPECT_EQ(z.shape(), (I{2, 3}));
  EXPECT_EQ(values<float>(z), (F{4, 8, 3, 7, 2, 3}));
}

TEST(GatherElements, NegativeIndicesAndSmallerIndexTensor) {
  auto y = run_op("GatherElements", {{"axis", int64_t{-1}}},
                  {make<float>({2, 2}, {1, 2, 3, 4}), ints({1, 2}, {-1, 0})})[0];
  EXPECT_EQ(y.shape(), (I{1, 2}));
  EXPECT_EQ(values<float>(y), (F{2, 1}));
  EXPECT_EQ(code_of([&] { run_op("GatherElements", {}, {make<float>({2}, {1, 2}), ints({1}, {2})}); }),
            ErrorCode::invalid_input);
}

// ---- GatherND -------------------------------------------------------------------------------

TEST(GatherND, SpecExamples) {
  Tensor d2 = ints({2, 2}, {0, 1, 2, 3});
  EXPECT_EQ(values<int64_t>(run_op("GatherND", {}, {d2, ints({2, 2}, {0, 0, 1, 1})})[0]), (I{0, 3}));
  auto rows = run_op("GatherND", {}, {d2, ints({2, 1}, {1, 0})})[0];
  EXPECT_EQ(rows.shape(), (I{2, 2}));
  EXPECT_EQ(values<int64_t>(rows), (I{2, 3, 0, 1}));
  Tensor d3 = ints({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  EXPECT_EQ(values<int64_t>(run_op("GatherND", {}, {d3, ints({2, 2}, {0, 1, 1, 0})})[0]), (I{2, 3, 4, 5}));
  auto b = run_op("GatherND", {{"batch_dims", int64_t{1}}}, {d3, ints({2, 1}, {1, 0})})[0];
  EXPECT_EQ(b.shape(), (I{2, 2}));
  EXPECT_EQ(values<int64_t>(b), (I{2, 3, 4, 5}));
  EXPECT_EQ(values<int64_t>(run_op("GatherND", {}, {d2, ints({1, 2}, {-1, -1})})[0]), (I{3}));
  EXPECT_EQ(code_of([&] { run_op("GatherND", {}, {d2, ints({1, 2}, {2, 0})}); }), ErrorCode::invalid_input);
}

/// Data [2, 5, 6, 3]; tuples of length 1-3 with and without batch_dims 1,
/// int32 and int64, negative values; against a loop over the spec's formula.
/// GatherND copies whole elements (k = 3) or blocks (k < 3), and ScatterND
/// writes the same offsets back.
TEST(GatherND, RandomizedTuplesMatchSpecLoop) {
  const I shape{2, 5, 6, 3}, st{90, 18, 3, 1};
  F data(180);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i) * 0.25f;
  uint32_t seed = 99;
  auto next = [&](int64_t dim) { return static_cast<int64_t>((seed = seed * 1664525u + 1013904223u) >> 8) % (2 * dim) - dim; };
  for (int64_t batch : {int64_t{0}, int64_t{1}})
    for (int64_t k = 1; k + batch <= 3; ++k)
      for (DType it : {DType::i64, DType::i32}) {
        const int64_t tuples = 7, block = k + batch == 3 ? 3 : (k + batch == 2 ? 18 : 90);
        I idx_shape = batch ? I{2, tuples, k} : I{tuples, k};
        const int64_t groups = batch ? 2 : 1;
        I idx, offs;
        for (int64_t g = 0; g < groups; ++g)
          for (int64_t t = 0; t < tuples; ++t) {
            int64_t off = g * st[0];
            for (int64_t j = 0; j < k; ++j) {
              const int64_t d = batch + j, v = next(shape[static_cast<size_t>(d)]);
              idx.push_back(v);
              off += (v < 0 ? v + shape[static_cast<size_t>(d)] : v) * st[static_cast<size_t>(d)];
            }
            offs.push_back(off);
          }
        F want;
        for (int64_t o : offs) want.insert(want.end(), data.begin() + o, data.begin() + o + block);
        Tensor indices = it == DType::i64 ? ints(idx_shape, idx)
                                          : make<int32_t>(idx_shape, std::vector<int32_t>(idx.begin(), idx.end()));
        SCOPED_TRACE(::testing::Message() << "batch_dims " << batch << ", k " << k << ", " << dtype_name(it));
        auto y = run_op("GatherND", {{"batch_dims", batch}}, {make<float>(shape, data), indices})[0];
        EXPECT_EQ(values<float>(y), want);
        if (batch == 0) {  // ScatterND has no batch_dims: write the gathered blocks, doubled, back
          F upd = want, expect = data;
          for (auto& v : upd) v *= 2;
          for (size_t t = 0; t < offs.size(); ++t)
            std::copy_n(upd.begin() + static_cast<int64_t>(t) * block, block, expect.begin() + offs[t]);
          I upd_shape{tuples};
          upd_shape.insert(upd_shape.end(), shape.begin() + k, shape.end());
          auto z = run_op("ScatterND", {}, {make<float>(shape, data), indices, make<float>(upd_shape, upd)})[0];
          EXPECT_EQ(values<float>(z), expect);
        }
      }
  EXPECT_EQ(code_of([&] { run_op("GatherND", {}, {make<float>(shape, data), ints({1, 3}, {1, 5, 0})}); }),
            ErrorCode::invalid_input);
}

// ---- ScatterElements / Scatter --------------------------------------------------------------

TEST(ScatterElements, SpecExamples) {
  auto y = run_op("ScatterElements", {{"axis", int64_t{1}}},
                  {make<float>({1, 5}, {1, 2, 3, 4, 5}), ints({1, 2}, {1, 3}), make<float>({1, 2}, {1.5f, 2.5f})})[0];
  EXPECT_EQ(values<float>(y), (F{1, 1.5f, 3, 2.5f, 5}));
  auto z = run_op("ScatterElements", {},
                  {Tensor(DType::f32, {3, 3}), ints({2, 3}, {1, 0, 2, 0, 2, 1}), make<float>({2, 3}, {1, 2, 3, 4, 5, 6})})[0];
  // out[idx[i][j]][j] = upd[i][j]
  EXPECT_EQ(values<float>(z), (F{4, 2, 0, 1, 0, 6, 0, 5, 3}));
}

TEST(ScatterElements, Reductions) {
  Tensor data = ints({1, 5}, {1, 2, 3, 4, 5});
  Tensor idx = ints({1, 2}, {1, 1});
  auto run = [&](const std::string& r, I upd) {
    return values<int64_t>(run_op("ScatterElements", {{"axis", int64_t{1}}, {"reduction", r}},
                                  {data, idx, ints({1, 2}, std::move(upd))})[0]);
  };
  EXPECT_EQ(run("add", {10, 20}), (I{1, 32, 3, 4, 5}));
  EXPECT_EQ(run("mul", {10, 20}), (I{1, 400, 3, 4, 5}));
  EXPECT_EQ(run("max", {10, 0}), (I{1, 10, 3, 4, 5}));
  EXPECT_EQ(run("min", {10, 0}), (I{1, 0, 3, 4, 5}));
  EXPECT_EQ(run("none", {10, 20}), (I{1, 20, 3, 4, 5}));  // repeated index: the last update stays
  EXPECT_EQ(code_of([&] { run("sum", {1, 1}); }), ErrorCode::unsupported);
}

TEST(ScatterElements, NegativeIndexAndDeprecatedScatter) {
  auto y = run_op("ScatterElements", {}, {ints({3}, {1, 2, 3}), ints({1}, {-1}), ints({1}, {9})})[0];
  EXPECT_EQ(values<int64_t>(y), (I{1, 2, 9}));
  auto z = run_op("Scatter", {{"axis", int64_t{0}}}, {ints({3}, {1, 2, 3}), ints({2}, {0, 2}), ints({2}, {7, 8})}, 1, 9)[0];
  EXPECT_EQ(values<int64_t>(z), (I{7, 2, 8}));
}

/// Rank-4 data, a smaller index tensor, every axis, int32 and int64 indices
/// with negative values and repeats, against a per-element loop written from
/// the spec (out[..., idx[i,j,k,l] on axis, ...] = upd[i,j,k,l], in row-major
/// order of the index tensor): the kernel walks rows with a base offset.
TEST(ScatterElements, RandomizedRank4MatchesSpecLoop) {
  const I data_shape{3, 4, 5, 6}, idx_shape{2, 3, 4, 5};
  const I dst{4 * 5 * 6, 5 * 6, 6, 1};  // data strides
  uint32_t seed = 12345;
  auto next = [&] { return seed = seed * 1664525u + 1013904223u; };
  F data(360);
  for (auto& v : data) v = static_cast<float>(next() % 1000) / 10.f;
  for (int64_t axis = 0; axis < 4; ++axis) {
    for (DType it : {DType::i64, DType::i32}) {
      const int64_t dim = data_shape[static_cast<size_t>(axis)];
      I idx(120);
      F upd(120);
      for (size_t e = 0; e < idx.size(); ++e) {
        idx[e] = static_cast<int64_t>(next() % static_cast<uint32_t>(2 * dim)) - dim;  // [-dim, dim)
        upd[e] = static_cast<float>(e) + 0.5f;
      }
      F want_scatter = data, want_add = data, want_gather(120);
      for (int64_t i = 0, e = 0; i < 2; ++i)
        for (int64_t j = 0; j < 3; ++j)
          for (int64_t k = 0; k < 4; ++k)
            for (int64_t l = 0; l < 5; ++l, ++e) {
              I pos{i, j, k, l};
              const int64_t v = idx[static_cast<size_t>(e)];
              pos[static_cast<size_t>(axis)] = v < 0 ? v + dim : v;
              const int64_t off = pos[0] * dst[0] + pos[1] * dst[1] + pos[2] * dst[2] + pos[3];
              want_scatter[static_cast<size_t>(off)] = upd[static_cast<size_t>(e)];
              want_add[static_cast<size_t>(off)] += upd[static_cast<size_t>(e)];
              want_gather[static_cast<size_t>(e)] = data[static_cast<size_t>(off)];
            }
      Tensor indices = it == DType::i64 ? ints(idx_shape, idx) : make<int32_t>(idx_shape, std::vector<int32_t>(idx.begin(), idx.end()));
      const std::map<std::string, AttrValue> ax{{"axis", axis}};
      SCOPED_TRACE(::testing::Message() << "axis " << axis << ", indices " << dtype_name(it));
      EXPECT_EQ(values<float>(run_op("ScatterElements", ax, {make<float>(data_shape, data), indices, make<float>(idx_shape, upd)})[0]),
                want_scatter);
      EXPECT_EQ(values<float>(run_op("ScatterElements", {{"axis", axis}, {"reduction", std::string("add")}},
                                     {make<float>(data_shape, data), indices, make<float>(idx_shape, upd)})[0]),
                want_add);
      EXPECT_EQ(values<float>(run_op("GatherElements", ax, {make<float>(data_shape, data), indices})[0]), want_gather);
    }
  }
  // One index out of range, deep inside the tensor: an error, not a write past the end.
  I bad(120, 0);
  bad[77] = 4;
  EXPECT_EQ(code_of([&] {
              run_op("ScatterElements", {{"axis", int64_t{3}}},
                     {make<float>({3, 4, 5, 4}, F(240, 0.f)), ints(idx_shape, bad), make<float>(idx_shape, F(120, 1.f))});
            }),
            ErrorCode::invalid_input);
  // Index tensor larger than the data off the axis.
  EXPECT_EQ(code_of([&] { run_op("GatherElements", {{"axis", int64_t{0}}}, {make<float>({2, 2}, {1, 2, 3, 4}), ints({1, 3}, {0, 0, 0})}); }),
            ErrorCode::invalid_input);
}

// ---- ScatterND ------------------------------------------------------------------------------

TEST(ScatterND, SpecExampleAndSlices) {
  auto y = run_op("ScatterND", {},
                  {ints({8}, {1, 2, 3, 4, 5, 6, 7, 8}), ints({4, 1}, {4, 3, 1, 7}), ints({4}, {9, 10, 11, 12})})[0];
  EXPECT_EQ(values<int64_t>(y), (I{1, 11, 3, 10, 9, 6, 7, 12}));
  auto z = run_op("ScatterND", {}, {Tensor(DType::i64, {2, 2}), ints({1, 1}, {-1}), ints({1, 2}, {5, 6})})[0];
  EXPECT_EQ(values<int64_t>(z), (I{0, 0, 5, 6}));
  EXPECT_EQ(code_of([&] { run_op("ScatterND", {}, {Tensor(DType::i64, {2, 2}), ints({1, 1}, {0}), ints({1}, {5})}); }),
            ErrorCode::invalid_input);
}

TEST(ScatterND, Reductions) {
  Tensor data = ints({3}, {1, 2, 3});
  Tensor idx = ints({2, 1}, {0, 0});
  auto run = [&](const std::string& r) {
    return values<int64_t>(run_op("ScatterND", {{"reduction", r}}, {data, idx, ints({2}, {5, 6})})[0]);
  };
  EXPECT_EQ(run("add"), (I{12, 2, 3}));
  EXPECT_EQ(run("mul"), (I{30, 2, 3}));
  EXPECT_EQ(run("max"), (I{6, 2, 3}));
  EXPECT_EQ(run("min"), (I{1, 2, 3}));
}

// ---- Shape inference ------------------------------------------------------------------------

TEST(GatherInfer, SymbolicShapes) {
  Tensor zero = ints({}, {0});
  ops::InType scalar_idx{DType::i64, ir::Shape{}, &zero};
  EXPECT_EQ(infer_shape("Gather", {}, {typed(DType::i64, {"3"}), scalar_idx}), "[]");
  EXPECT_EQ(infer_shape("Gather", {{"axis", int64_t{1}}}, {typed(DType::f32, {"N", "3", "4"}), typed(DType::i64, {"2", "K"})}),
            "[N,2,K,4]");
  EXPECT_EQ(infer_shape("GatherElements", {{"axis", int64_t{1}}},
                        {typed(DType::f32, {"N", "3"}), typed(DType::i64, {"N", "7"})}),
            "[N,7]");
  EXPECT_EQ(infer_shape("GatherND", {{"batch_dims", int64_t{1}}},
                        {typed(DType::f32, {"N", "3", "4"}), typed(DType::i64, {"N", "5", "1"})}),
            "[N,5,4]");
  EXPECT_EQ(infer_shape("ScatterND", {}, {typed(DType::f32, {"N", "3"}), typed(DType::i64, {"2", "1"}), typed(DType::f32, {"2", "3"})}),
            "[N,3]");
  EXPECT_EQ(code_of([&] { infer_shape("Gather", {{"axis", int64_t{3}}}, {typed(DType::f32, {"N", "3"}), typed(DType::i64, {"1"})}); }),
            ErrorCode::invalid_model);
}

TEST(GatherParsers, ScatterBecomesScatterElementsAndReductionsAreChecked) {
  FakeParseContext ctx;
  ir::Node n;
  n.op_type = "Scatter";
  n.name = "s";
  n.opset = 9;
  parse(n, ctx);
  EXPECT_EQ(n.op_type, "ScatterElements");
  ir::Node r;
  r.op_type = "ScatterND";
  r.name = "r";
  r.opset = 18;
  r.attrs["reduction"] = std::string("mean");
  EXPECT_EQ(code_of([&] { parse(r, ctx); }), ErrorCode::unsupported);
  for (const char* op : {"Gather", "GatherElements", "GatherND", "ScatterElements", "ScatterND", "Scatter"})
    EXPECT_NE(onnx_import::parsers().find("", op), nullptr) << op;
}

}  // namespace
}  // namespace kiln::testing
