// Channels-last models for the cuda target's tests beyond cuda_models.cpp
// (nhwc_models.h).
#include <fmt/format.h>

#include <cmath>

#include "nhwc_models.h"

#include <gtest/gtest.h>

#include "artifact/artifact.h"
#include "runtime/program.h"

namespace kiln::testing {

namespace {

/// `count` values offset + scale * cos(0.9 i + phase): distinct per element,
/// so a permuted or misplaced channel shows in the outputs.
std::vector<float> cosine_values(int64_t count, float scale, float phase, float offset = 0.f) {
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[i] = offset + scale * std::cos(0.9f * static_cast<float>(i) + phase);
  return v;
}

}  // namespace

ModelBuilder dense_block_model(int64_t n) {
  ModelBuilder b(17);
  b.input("x", 1, {n, 4, 8, 8});
  b.input("z", 1, {n, 2, 8, 8});
  b.initializer("W1", {6, 4, 3, 3}, cosine_values(6 * 36, 0.25f, 0.1f));
  b.initializer("W2", {6, 4, 1, 1}, cosine_values(24, 0.5f, 0.7f));
  b.initializer("B2", {6}, cosine_values(6, 0.2f, 1.3f));
  // Statistics of a trained layer: a mean away from zero, variances in
  // (0.1, 1.1), so that s = scale / sqrt(var + eps) and t = B - s * mean
  // differ per channel and the shift matters.
  b.initializer("bn_scale", {18}, cosine_values(18, 0.4f, 0.3f, 1.f));
  b.initializer("bn_bias", {18}, cosine_values(18, 0.3f, 1.9f));
  b.initializer("bn_mean", {18}, cosine_values(18, 0.5f, 2.2f, 0.2f));
  b.initializer("bn_var", {18}, cosine_values(18, 0.5f, 0.5f, 0.6f));
  b.initializer("W3", {8, 18, 3, 3}, cosine_values(8 * 18 * 9, 0.12f, 0.4f));
  auto& c1 = b.node("Conv", {"x", "W1"}, {"c1"});
  ModelBuilder::attr_ints(c1, "pads", {1, 1, 1, 1});
  b.node("Conv", {"x", "W2", "B2"}, {"c2"});
  ModelBuilder::attr_int(b.node("Concat", {"x", "c1", "c2", "z"}, {"cat"}), "axis", 1);
  b.node("BatchNormalization", {"cat", "bn_scale", "bn_bias", "bn_mean", "bn_var"}, {"bn"});
  b.node("Relu", {"bn"}, {"r"});
  auto& c3 = b.node("Conv", {"r", "W3"}, {"c3"});
  ModelBuilder::attr_ints(c3, "pads", {1, 1, 1, 1});
  auto& ap = b.node("AveragePool", {"c3"}, {"y"});
  ModelBuilder::attr_ints(ap, "kernel_shape", {2, 2});
  ModelBuilder::attr_ints(ap, "strides", {2, 2});
  b.output("y", 1, {n, 8, 4, 4});
  return b;
}

ModelBuilder convnext_block_model() {
  ModelBuilder b(17);
  b.input("x", 1, {2, 8, 6, 6});
  b.initializer("Wd", {8, 1, 3, 3}, cosine_values(72, 0.4f, 0.2f));
  b.initializer("Bd", {8}, cosine_values(8, 0.2f, 0.9f));
  b.initializer("Wd2", {8, 1, 3, 3}, cosine_values(72, 0.35f, 1.4f));
  b.initializer("ln_g", {8}, cosine_values(8, 0.3f, 0.6f, 1.f));
  b.initializer("ln_b", {8}, cosine_values(8, 0.2f, 2.1f));
  b.initializer("W1", {8, 16}, cosine_values(128, 0.3f, 0.8f));
  b.initializer("W2", {16, 8}, cosine_values(128, 0.25f, 1.1f));
  b.initializer("gamma", {8, 1, 1}, cosine_values(8, 0.5f, 0.4f));
  auto dw = [&](const std::string& in, const std::string& w, const std::string& bias, const std::string& out) {
    std::vector<std::string> ins{in, w};
    if (!bias.empty()) ins.push_back(bias);
    auto& c = b.node("Conv", ins, {out});
    ModelBuilder::attr_ints(c, "pads", {1, 1, 1, 1});
    ModelBuilder::attr_int(c, "group", 8);
  };
  dw("x", "Wd", "Bd", "a");
  ModelBuilder::attr_ints(b.node("Transpose", {"a"}, {"at"}), "perm", {0, 2, 3, 1});
  ModelBuilder::attr_int(b.node("LayerNormalization", {"at", "ln_g", "ln_b"}, {"ln"}), "axis", -1);
  b.node("MatMul", {"ln", "W1"}, {"h1"});
  b.node("Relu", {"h1"}, {"h1r"});
  b.node("MatMul", {"h1r", "W2"}, {"h"});
  ModelBuilder::attr_ints(b.node("Transpose", {"h"}, {"hb"}), "perm", {0, 3, 1, 2});
  b.node("Mul", {"hb", "gamma"}, {"hs"});
  b.node("Add", {"hs", "x"}, {"y1"});
  dw("y1", "Wd2", "", "y");
  b.output("y", 1, {2, 8, 6, 6});
  return b;
}

ModelBuilder patch_embed_model(int64_t n) {
  ModelBuilder b(17);
  b.input("x", 1, {n, 3, 16, 16});
  b.initializer("Wp", {16, 3, 4, 4}, cosine_values(16 * 48, 0.2f, 0.3f));
  b.initializer("Bp", {16}, cosine_values(16, 0.3f, 1.7f));
  b.initializer("Wv", {8, 3, 8, 8}, cosine_values(8 * 192, 0.1f, 0.9f));
  b.initializer_i64("tok_shape", {3}, {n, 8, 4});
  auto& c1 = b.node("Conv", {"x", "Wp", "Bp"}, {"c1"});
  ModelBuilder::attr_ints(c1, "kernel_shape", {4, 4});
  ModelBuilder::attr_ints(c1, "strides", {4, 4});
  b.node("Relu", {"c1"}, {"y"});
  auto& c2 = b.node("Conv", {"x", "Wv"}, {"c2"});
  ModelBuilder::attr_ints(c2, "strides", {8, 8});
  b.node("Reshape", {"c2", "tok_shape"}, {"flat"});
  ModelBuilder::attr_ints(b.node("Transpose", {"flat"}, {"tokens"}), "perm", {0, 2, 1});
  b.output("y", 1, {n, 16, 4, 4}).output("tokens", 1, {n, 4, 8});
  return b;
}

ModelBuilder rgb_stem_model(int64_t n, int64_t k, int64_t stride) {
  ModelBuilder b(17);
  const int64_t h = 32, oh = (h + 2 * (k / 2) - k) / stride + 1;
  b.input("x", 1, {n, 3, h, h});
  b.initializer("W1", {16, 3, k, k}, cosine_values(16 * 3 * k * k, 0.15f, 0.3f));
  b.initializer("B1", {16}, cosine_values(16, 0.2f, 1.1f));
  b.initializer("W2", {16, 16, 3, 3}, cosine_values(16 * 16 * 9, 0.1f, 0.7f));
  auto& c1 = b.node("Conv", {"x", "W1", "B1"}, {"c1"});
  ModelBuilder::attr_ints(c1, "kernel_shape", {k, k});
  ModelBuilder::attr_ints(c1, "strides", {stride, stride});
  ModelBuilder::attr_ints(c1, "pads", {k / 2, k / 2, k / 2, k / 2});
  b.node("Relu", {"c1"}, {"r1"});
  auto& c2 = b.node("Conv", {"r1", "W2"}, {"y"});
  ModelBuilder::attr_ints(c2, "pads", {1, 1, 1, 1});
  b.output("y", 1, {n, 16, oh, oh});
  return b;
}

ModelBuilder one_axis_pad_model() {
  ModelBuilder b(18);
  b.input("x", 1, {2, 5, 3, 4});
  b.initializer_i64("pc", {8}, {0, 2, 0, 0, 0, 1, 0, 0});
  b.initializer_i64("pw", {8}, {0, 0, 0, 3, 0, 0, 0, 2});
  b.node("Pad", {"x", "pc"}, {"padc"});
  b.node("Relu", {"padc"}, {"yc"});
  b.node("Pad", {"x", "pw"}, {"yw"});
  b.output("yc", 1, {2, 8, 3, 4}).output("yw", 1, {2, 5, 3, 9});
  return b;
}

ModelBuilder shared_stem_model(int64_t n) {
  ModelBuilder b(17);
  b.input("x", 1, {n, 3, 16, 16});
  b.initializer("Wa", {8, 3, 3, 3}, cosine_values(8 * 27, 0.2f, 0.5f));
  b.initializer("Wb", {8, 3, 3, 3}, cosine_values(8 * 27, 0.2f, 1.9f));
  b.initializer("Bb", {8}, cosine_values(8, 0.3f, 0.2f));
  auto& ca = b.node("Conv", {"x", "Wa"}, {"ya"});
  ModelBuilder::attr_ints(ca, "strides", {2, 2});
  ModelBuilder::attr_ints(ca, "pads", {1, 1, 1, 1});
  auto& cb = b.node("Conv", {"x", "Wb", "Bb"}, {"cb"});
  ModelBuilder::attr_ints(cb, "pads", {1, 1, 1, 1});
  b.node("Relu", {"cb"}, {"yb"});
  b.output("ya", 1, {n, 8, 8, 8}).output("yb", 1, {n, 8, 16, 16});
  return b;
}

ir::Model nchw_shim(ir::Model m) {
  std::vector<ir::Node> out;
  int k = 0;
  auto tr = [&](ir::ValueId v, std::vector<int64_t> perm, ir::ValueId dst = ir::kNoValue) {
    if (dst == ir::kNoValue) {
      ir::Value nv;
      nv.name = fmt::format("shim{}", k++);
      nv.dtype = m.value(v).dtype;
      dst = m.add_value(nv);
    }
    ir::Node t;
    t.op_type = "Transpose";
    t.name = fmt::format("shim_t{}", k++);
    t.opset = m.opset;
    t.attrs["perm"] = perm;
    t.inputs = {v};
    t.outputs = {dst};
    out.push_back(t);
    return dst;
  };
  const std::vector<int64_t> to_nchw{0, 3, 1, 2}, to_nhwc{0, 2, 3, 1};
  for (auto n : m.main.nodes) {
    if (n.i("kiln_nhwc", 0) == 0) {
      out.push_back(n);
      continue;
    }
    n.attrs.erase("kiln_nhwc");
    n.inputs[0] = tr(n.inputs[0], to_nchw);
    if (n.op_type == "Conv") n.inputs[1] = tr(n.inputs[1], to_nchw);
    ir::ValueId y = n.outputs[0];
    ir::Value nv;
    nv.name = fmt::format("shim{}", k++);
    nv.dtype = m.value(y).dtype;
    n.outputs[0] = m.add_value(nv);
    out.push_back(n);
    tr(n.outputs[0], to_nhwc, y);
  }
  m.main.nodes = std::move(out);
  for (auto& v : m.values)
    if (!v.constant) v.shape.reset();  // inferred again
  for (auto id : m.main.inputs) m.value(id).shape = ir::Shape();
  return m;
}

ModelBuilder resnet_tail_model(int64_t n) {
  ModelBuilder b(17);
  b.input("x", 1, {n, 8, 6, 6});
  b.initializer("W1", {8, 8, 3, 3}, cosine_values(8 * 8 * 9, 0.12f, 0.3f));
  b.initializer("B1", {8}, cosine_values(8, 0.2f, 1.1f));
  b.initializer("W2", {16, 8, 1, 1}, cosine_values(128, 0.3f, 0.5f));
  b.initializer("B2", {16}, cosine_values(16, 0.2f, 2.3f));
  b.initializer("Wd", {16, 8, 1, 1}, cosine_values(128, 0.25f, 1.7f));
  b.initializer("Wfc", {10, 16}, cosine_values(160, 0.3f, 0.9f));
  b.initializer("Cfc", {10}, cosine_values(10, 0.5f, 0.2f));
  b.initializer("Wm", {16, 4}, cosine_values(64, 0.35f, 1.3f));
  b.initializer("Bm", {4}, cosine_values(4, 0.4f, 2.9f));
  b.initializer("Wg", {16, 4}, cosine_values(64, 0.28f, 0.6f));
  b.initializer("Cg", {1, 4}, cosine_values(4, 0.3f, 1.9f));
  auto& c1 = b.node("Conv", {"x", "W1", "B1"}, {"c1"});
  ModelBuilder::attr_ints(c1, "pads", {1, 1, 1, 1});
  b.node("Relu", {"c1"}, {"r"});
  b.node("Conv", {"r", "W2", "B2"}, {"c2"});
  b.node("Conv", {"x", "Wd"}, {"d"});
  b.node("Add", {"c2", "d"}, {"s"});
  b.node("Relu", {"s"}, {"c"});
  b.node("GlobalAveragePool", {"c"}, {"g"});
  b.node("Flatten", {"g"}, {"f"});
  ModelBuilder::attr_int(b.node("Gemm", {"f", "Wfc", "Cfc"}, {"y"}), "transB", 1);
  b.node("MatMul", {"f", "Wm"}, {"mm"});
  b.node("Add", {"mm", "Bm"}, {"y2"});
  b.node("Gemm", {"f", "Wg", "Cg"}, {"y3"});
  b.output("y", 1, {n, 10}).output("y2", 1, {n, 4}).output("y3", 1, {n, 4});
  return b;
}

std::map<std::string, Tensor> run_ref(const ir::Model& m, const std::map<std::string, Tensor>& in) {
  artifact::CompiledProgram cp;
  cp.model = m;
  cp.compat.target = "ref";
  Program p(std::move(cp));
  return p.run(in, 1);
}

void expect_all_near(const std::map<std::string, Tensor>& got, const std::map<std::string, Tensor>& want, double rel) {
  for (auto& [name, w] : want) {
    ASSERT_TRUE(got.count(name)) << "no output " << name;
    ASSERT_EQ(got.at(name).shape(), w.shape()) << name;
    for (int64_t i = 0; i < w.numel(); ++i)
      ASSERT_NEAR(got.at(name).data<float>()[i], w.data<float>()[i], rel * (1 + std::fabs(w.data<float>()[i])))
          << name << "[" << i << "]";
  }
}

}  // namespace kiln::testing
