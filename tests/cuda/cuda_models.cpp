// Small ONNX models for the cuda target's tests (cuda_models.h).
#include "cuda_models.h"

#include "onnx/importer.h"
#include "passes/passes.h"

#include <fmt/format.h>

#include <array>
#include <cmath>

namespace kiln::testing {

ir::Model imported_model(const ModelBuilder& b) {
  auto bytes = b.bytes();
  ir::Model m = onnx_import::import_bytes(bytes.data(), bytes.size(), ".", "test");
  passes::bind_input_shapes(m, {});
  passes::infer_and_fold(m);
  passes::eliminate_dead_code(m);
  return m;
}


void attr_float(onnx::NodeProto& n, const std::string& name, float v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

namespace {
std::vector<float> ramp(int n, float scale, float offset) {
  std::vector<float> v;
  for (int i = 0; i < n; ++i) v.push_back(scale * std::sin(0.7f * i + offset));
  return v;
}

void add_kernel_nodes(ModelBuilder& b) {
  b.input("x", 1, {2, 4, 8});
  b.input("idx", 7, {3});
  b.initializer("half", {1}, {0.5f});
  b.initializer("c8", {8}, ramp(8, 0.3f, 0.1f));
  b.initializer("g8", {8}, ramp(8, 1.0f, 0.4f));
  b.initializer("b8", {8}, ramp(8, 0.2f, 1.1f));
  b.initializer("zero", {}, {0.f});
  b.initializer("one", {}, {1.f});
  b.initializer_i64("starts", {1}, {1});
  b.initializer_i64("ends", {1}, {6});
  b.initializer_i64("axis1", {1}, {1});
  b.initializer_i64("shape16", {1}, {16});
  b.node("Mul", {"x", "half"}, {"e1"});
  b.node("Add", {"e1", "c8"}, {"e2"});
  b.node("Tanh", {"e2"}, {"e3"});
  ModelBuilder::attr_int(b.node("Softmax", {"e3"}, {"soft"}), "axis", -1);
  ModelBuilder::attr_ints(b.node("Transpose", {"soft"}, {"tr"}), "perm", {0, 2, 1});
  ModelBuilder::attr_int(b.node("Gather", {"x", "idx"}, {"g"}), "axis", 1);
  ModelBuilder::attr_int(b.node("Concat", {"x", "g"}, {"cat"}), "axis", 1);
  b.node("Slice", {"cat", "starts", "ends", "axis1"}, {"sl"});
  auto& rm = b.node("ReduceMean", {"x"}, {"mean"});
  ModelBuilder::attr_ints(rm, "axes", {2});
  ModelBuilder::attr_int(rm, "keepdims", 1);
  b.node("Sub", {"x", "mean"}, {"centered"});
  auto& ln = b.node("LayerNormalization", {"centered", "g8", "b8"}, {"ln"});
  ModelBuilder::attr_int(ln, "axis", -1);
  attr_float(ln, "epsilon", 1e-5f);
  auto& rs = b.node("ReduceSum", {"x", "axis1"}, {"rsum"});
  ModelBuilder::attr_int(rs, "keepdims", 0);
  b.node("Reshape", {"rsum", "shape16"}, {"rs"});
  b.node("Greater", {"x", "zero"}, {"pos"});
  b.node("Exp", {"x"}, {"ex"});
  b.node("Sub", {"ex", "one"}, {"em1"});
  b.node("Where", {"pos", "x", "em1"}, {"wh"});
  b.output("soft", 1, {2, 4, 8}).output("tr", 1, {2, 8, 4}).output("sl", 1, {2, 5, 8});
  b.output("ln", 1, {2, 4, 8}).output("rs", 1, {16}).output("wh", 1, {2, 4, 8});
}
}  // namespace

ModelBuilder kernels_model() {
  ModelBuilder b(17);
  add_kernel_nodes(b);
  return b;
}

ModelBuilder matmul_model() {
  ModelBuilder b(17);
  add_kernel_nodes(b);
  b.initializer("W", {8, 8}, ramp(64, 0.25f, 0.3f));
  b.initializer("bias", {8}, ramp(8, 0.5f, 2.0f));
  b.initializer("W2", {5, 8}, ramp(40, 0.4f, 0.9f));
  b.initializer("C", {5}, ramp(5, 1.0f, 0.2f));
  b.initializer_i64("shape88", {2}, {8, 8});
  b.node("MatMul", {"x", "W"}, {"h"});
  b.node("Add", {"h", "bias"}, {"hb"});
  b.node("Relu", {"hb"}, {"mm"});
  b.node("MatMul", {"soft", "tr"}, {"bmm"});
  b.node("Reshape", {"x", "shape88"}, {"x88"});
  auto& g = b.node("Gemm", {"x88", "W2", "C"}, {"gm"});
  ModelBuilder::attr_int(g, "transB", 1);
  attr_float(g, "alpha", 0.5f);
  b.output("mm", 1, {2, 4, 8}).output("bmm", 1, {2, 4, 4}).output("gm", 1, {8, 5});
  return b;
}

ModelBuilder pool_model() {
  ModelBuilder b(17);
  b.input("x", 1, {1, 4, 9, 9});
  auto& mp = b.node("MaxPool", {"x"}, {"mp"});
  ModelBuilder::attr_ints(mp, "kernel_shape", {3, 3});
  ModelBuilder::attr_ints(mp, "strides", {2, 2});
  ModelBuilder::attr_ints(mp, "pads", {1, 1, 1, 1});
  auto& ap = b.node("AveragePool", {"x"}, {"ap"});
  ModelBuilder::attr_ints(ap, "kernel_shape", {3, 3});
  ModelBuilder::attr_ints(ap, "strides", {2, 2});
  ModelBuilder::attr_ints(ap, "pads", {1, 1, 1, 1});
  auto& ai = b.node("AveragePool", {"x"}, {"ai"});
  ModelBuilder::attr_ints(ai, "kernel_shape", {2, 2});
  ModelBuilder::attr_ints(ai, "strides", {2, 2});
  ModelBuilder::attr_int(ai, "ceil_mode", 1);
  ModelBuilder::attr_int(ai, "count_include_pad", 1);
  b.output("mp", 1, {1, 4, 5, 5}).output("ap", 1, {1, 4, 5, 5}).output("ai", 1, {1, 4, 5, 5});
  return b;
}

ModelBuilder conv_model() {
  ModelBuilder b(17);
  b.input("x", 1, {2, 3, 16, 16});
  b.initializer("W1", {8, 3, 3, 3}, ramp(8 * 27, 0.3f, 0.1f));
  b.initializer("B1", {8}, ramp(8, 0.2f, 0.5f));
  b.initializer("W2", {8, 8, 3, 3}, ramp(8 * 72, 0.15f, 0.7f));
  b.initializer("B2", {8}, ramp(8, 0.1f, 1.5f));
  b.initializer("W3", {8, 1, 3, 3}, ramp(72, 0.4f, 0.2f));
  b.initializer("Wf", {10, 8}, ramp(80, 0.5f, 0.3f));
  b.initializer("Cf", {10}, ramp(10, 0.1f, 0.9f));
  auto conv = [&](const std::string& x, const std::string& w, const std::string& bias, const std::string& y,
                  int64_t stride, int64_t group) {
    std::vector<std::string> ins = {x, w};
    if (!bias.empty()) ins.push_back(bias);
    auto& c = b.node("Conv", ins, {y});
    ModelBuilder::attr_ints(c, "pads", {1, 1, 1, 1});
    ModelBuilder::attr_ints(c, "strides", {stride, stride});
    ModelBuilder::attr_ints(c, "kernel_shape", {3, 3});
    ModelBuilder::attr_int(c, "group", group);
  };
  conv("x", "W1", "B1", "c1", 1, 1);
  b.node("Relu", {"c1"}, {"r1"});
  auto& mp = b.node("MaxPool", {"r1"}, {"p1"});
  ModelBuilder::attr_ints(mp, "kernel_shape", {3, 3});
  ModelBuilder::attr_ints(mp, "strides", {2, 2});
  ModelBuilder::attr_ints(mp, "pads", {1, 1, 1, 1});
  conv("p1", "W2", "B2", "c2", 1, 1);
  b.node("Add", {"c2", "p1"}, {"s2"});
  b.node("Relu", {"s2"}, {"r2"});
  conv("r2", "W3", "", "c3", 2, 8);
  b.node("GlobalAveragePool", {"c3"}, {"g"});
  b.node("Flatten", {"g"}, {"f"});
  auto& gm = b.node("Gemm", {"f", "Wf", "Cf"}, {"y"});
  ModelBuilder::attr_int(gm, "transB", 1);
  b.output("y", 1, {2, 10});
  return b;
}

ModelBuilder conv_bn_model() {
  ModelBuilder b(17);
  b.input("x", 1, {2, 3, 16, 16});
  b.initializer("W1", {8, 3, 3, 3}, ramp(8 * 27, 0.3f, 0.1f));
  b.initializer("W2", {8, 8, 3, 3}, ramp(8 * 72, 0.15f, 0.7f));
  auto bn_params = [&](const std::string& p, float phase) {
    b.initializer(p + "_s", {8}, ramp(8, 0.5f, phase));
    b.initializer(p + "_b", {8}, ramp(8, 0.2f, phase + 1.f));
    b.initializer(p + "_m", {8}, ramp(8, 0.1f, phase + 2.f));
    std::vector<float> var;
    for (int i = 0; i < 8; ++i) var.push_back(1.f + 0.5f * std::fabs(std::sin(0.9f * i + phase)));
    b.initializer(p + "_v", {8}, var);
  };
  bn_params("bn1", 0.3f);
  bn_params("bn2", 1.7f);
  b.initializer("Wf", {10, 8}, ramp(80, 0.5f, 0.3f));
  b.initializer("Cf", {10}, ramp(10, 0.1f, 0.9f));
  auto conv = [&](const std::string& x, const std::string& w, const std::string& y) {
    auto& c = b.node("Conv", {x, w}, {y});
    ModelBuilder::attr_ints(c, "pads", {1, 1, 1, 1});
    ModelBuilder::attr_ints(c, "kernel_shape", {3, 3});
  };
  conv("x", "W1", "c1");
  b.node("BatchNormalization", {"c1", "bn1_s", "bn1_b", "bn1_m", "bn1_v"}, {"n1"});
  b.node("Relu", {"n1"}, {"r1"});
  conv("r1", "W2", "c2");
  b.node("BatchNormalization", {"c2", "bn2_s", "bn2_b", "bn2_m", "bn2_v"}, {"n2"});
  b.node("Add", {"n2", "r1"}, {"s2"});
  b.node("Relu", {"s2"}, {"r2"});
  auto& mp = b.node("MaxPool", {"r2"}, {"p2"});
  ModelBuilder::attr_ints(mp, "kernel_shape", {2, 2});
  ModelBuilder::attr_ints(mp, "strides", {2, 2});
  b.node("GlobalAveragePool", {"p2"}, {"g"});
  b.node("Flatten", {"g"}, {"f"});
  auto& gm = b.node("Gemm", {"f", "Wf", "Cf"}, {"y"});
  ModelBuilder::attr_int(gm, "transB", 1);
  b.output("y", 1, {2, 10});
  return b;
}

ModelBuilder attention_model() {
  const int64_t B = 2, S = 8, D = 32, H = 2, Dh = 16, F = 64;
  ModelBuilder b(17);
  b.input("x", 1, {B, S, D});
  b.initializer("g1", {D}, ramp(D, 0.3f, 0.2f));
  b.initializer("b1", {D}, ramp(D, 0.1f, 0.5f));
  b.initializer("g2", {D}, ramp(D, 0.3f, 1.2f));
  b.initializer("b2", {D}, ramp(D, 0.1f, 1.5f));
  for (auto w : {"q", "k", "v", "o"}) {
    float ph = static_cast<float>(w[0]) * 0.01f;
    b.initializer(std::string("W") + w, {D, D}, ramp(D * D, 0.2f, ph));
    b.initializer(std::string("B") + w, {D}, ramp(D, 0.1f, ph + 0.5f));
  }
  b.initializer("W1", {D, F}, ramp(D * F, 0.2f, 0.4f));
  b.initializer("B1", {F}, ramp(F, 0.1f, 0.8f));
  b.initializer("W2", {F, D}, ramp(F * D, 0.15f, 1.1f));
  b.initializer("B2", {D}, ramp(D, 0.1f, 1.3f));
  b.initializer("scale", {}, {0.25f});
  b.initializer("eps", {}, {1e-5f});
  b.initializer_i64("heads", {4}, {B, S, H, Dh});
  b.initializer_i64("model", {3}, {B, S, D});
  auto ln = [&](const std::string& x, const std::string& g, const std::string& bias, const std::string& y) {
    auto& n = b.node("LayerNormalization", {x, g, bias}, {y});
    ModelBuilder::attr_int(n, "axis", -1);
    attr_float(n, "epsilon", 1e-5f);
  };
  auto linear = [&](const std::string& x, const std::string& w, const std::string& bias, const std::string& y) {
    b.node("MatMul", {x, w}, {y + "_mm"});
    b.node("Add", {y + "_mm", bias}, {y});
  };
  ln("x", "g1", "b1", "ln1");
  for (auto w : {"q", "k", "v"}) {
    std::string s(w);
    linear("ln1", "W" + s, "B" + s, s);
    b.node("Reshape", {s, "heads"}, {s + "_h"});
  }
  ModelBuilder::attr_ints(b.node("Transpose", {"q_h"}, {"qt"}), "perm", {0, 2, 1, 3});
  ModelBuilder::attr_ints(b.node("Transpose", {"k_h"}, {"kt"}), "perm", {0, 2, 3, 1});
  ModelBuilder::attr_ints(b.node("Transpose", {"v_h"}, {"vt"}), "perm", {0, 2, 1, 3});
  b.node("MatMul", {"qt", "kt"}, {"scores"});
  b.node("Mul", {"scores", "scale"}, {"scaled"});
  ModelBuilder::attr_int(b.node("Softmax", {"scaled"}, {"probs"}), "axis", -1);
  b.node("MatMul", {"probs", "vt"}, {"ctx"});
  ModelBuilder::attr_ints(b.node("Transpose", {"ctx"}, {"ctx_t"}), "perm", {0, 2, 1, 3});
  b.node("Reshape", {"ctx_t", "model"}, {"ctx_m"});
  linear("ctx_m", "Wo", "Bo", "attn");
  b.node("Add", {"x", "attn"}, {"r1"});
  ln("r1", "g2", "b2", "ln2");
  linear("ln2", "W1", "B1", "ff1");
  b.node("Relu", {"ff1"}, {"ff1r"});
  linear("ff1r", "W2", "B2", "ff2");
  b.node("Add", {"r1", "ff2"}, {"y"});
  b.node("Mul", {"y", "y"}, {"sq"});
  auto& rm = b.node("ReduceMean", {"sq"}, {"ms"});
  ModelBuilder::attr_ints(rm, "axes", {-1});
  ModelBuilder::attr_int(rm, "keepdims", 1);
  b.node("Add", {"ms", "eps"}, {"mse"});
  b.node("Sqrt", {"mse"}, {"rmsd"});
  b.node("Div", {"y", "rmsd"}, {"rms"});
  b.output("y", 1, {B, S, D}).output("rms", 1, {B, S, D});
  return b;
}

ModelBuilder attention_mask_model() {
  const int64_t B = 2, S = 100, H = 3, Dh = 64, D = H * Dh;
  ModelBuilder b(17);
  b.input("x", 1, {B, S, D});
  b.input("m", 1, {B, 1, S, S});
  for (auto w : {"q", "k", "v"}) b.initializer(std::string("W") + w, {D, D}, ramp(static_cast<int>(D * D), 0.08f, w[0] * 0.02f));
  b.initializer("half_scale", {}, {0.35355339f});  // sqrt(1 / sqrt(64))
  b.initializer_i64("heads", {4}, {B, S, H, Dh});
  b.initializer_i64("model", {3}, {B, S, D});
  for (auto w : {"q", "k", "v"}) {
    std::string s(w);
    b.node("MatMul", {"x", "W" + s}, {"p" + s});
    b.node("Reshape", {"p" + s, "heads"}, {s + "_h"});
    ModelBuilder::attr_ints(b.node("Transpose", {s + "_h"}, {s + "_t"}), "perm", {0, 2, 1, 3});
  }
  // K^T the way onnxscript's torchlib writes it: to rank 3, Transpose, back to rank 4.
  b.initializer_i64("bh_s_d", {3}, {B * H, S, Dh});
  b.initializer_i64("b_h_d_s", {4}, {B, H, Dh, S});
  b.node("Reshape", {"k_t", "bh_s_d"}, {"k_3"});
  ModelBuilder::attr_ints(b.node("Transpose", {"k_3"}, {"k_3t"}), "perm", {0, 2, 1});
  b.node("Reshape", {"k_3t", "b_h_d_s"}, {"k_tt"});
  b.node("Mul", {"q_t", "half_scale"}, {"q_s"});
  b.node("Mul", {"k_tt", "half_scale"}, {"k_s"});
  b.node("MatMul", {"q_s", "k_s"}, {"scores"});
  b.node("Add", {"scores", "m"}, {"masked"});
  ModelBuilder::attr_int(b.node("Softmax", {"masked"}, {"probs"}), "axis", -1);
  // torch.onnx: fully masked rows (NaN) become 0; then an inference Dropout.
  b.initializer("zero", {}, {0.f});
  b.node("IsNaN", {"probs"}, {"probs_nan"});
  b.node("Where", {"probs_nan", "zero", "probs"}, {"probs_z"});
  b.node("Dropout", {"probs_z"}, {"probs_d"});
  b.node("MatMul", {"probs_d", "v_t"}, {"ctx"});
  ModelBuilder::attr_ints(b.node("Transpose", {"ctx"}, {"ctx_t"}), "perm", {0, 2, 1, 3});
  b.node("Reshape", {"ctx_t", "model"}, {"y"});
  // Rank 3, cross attention, head dim 40, no mask.
  b.input("q", 1, {6, 30, 40});
  b.input("k", 1, {6, 70, 40});
  b.input("v", 1, {6, 70, 40});
  b.initializer("root40", {}, {6.3245553f});
  ModelBuilder::attr_ints(b.node("Transpose", {"k"}, {"kT"}), "perm", {0, 2, 1});
  b.node("MatMul", {"q", "kT"}, {"s3"});
  b.node("Div", {"s3", "root40"}, {"s3d"});
  ModelBuilder::attr_int(b.node("Softmax", {"s3d"}, {"p3"}), "axis", 2);
  b.node("MatMul", {"p3", "v"}, {"c"});
  b.output("y", 1, {B, S, D}).output("c", 1, {6, 30, 40});
  return b;
}

ModelBuilder packed_qkv_attention_model(const std::string& form) {
  const int64_t B = 2, S = 10, D = 32, H = 2, Dh = 16;
  ModelBuilder b(17);
  b.input("x", 1, {B, S, D});
  b.initializer("W", {D, 3 * D}, ramp(D * 3 * D, 0.2f, 0.7f));
  b.initializer("Bp", {3 * D}, ramp(3 * D, 0.1f, 0.2f));
  b.initializer("scale", {}, {0.25f});
  b.initializer_i64("model", {3}, {B, S, D});
  if (form == "mha") {
    // torch.nn.MultiheadAttention as torch.onnx (dynamo) writes it for batch_first inputs: tokens
    // first, packed projection, Q / K / V selected, then heads split across the batch ([S, B*H, Dh]:
    // no strided view alone) and merged back to [B, H, S, Dh] after a Transpose.
    b.initializer_i64("s1", {4}, {S, B, 3, D});
    b.initializer_i64("ax0", {1}, {0});
    b.initializer_i64("axm2", {1}, {-2});
    for (int64_t i = 0; i < 3; ++i) b.initializer_i64("i" + std::to_string(i), {}, {i});
    b.initializer_i64("s2", {3}, {S, -1, Dh});
    b.initializer_i64("s3", {4}, {-1, H, S, Dh});
    b.initializer_i64("s4", {3}, {B * H, S, Dh});
    b.initializer_i64("s5", {4}, {B, H, Dh, S});
    b.initializer_i64("s6", {2}, {-1, D});
    ModelBuilder::attr_ints(b.node("Transpose", {"x"}, {"xt"}), "perm", {1, 0, 2});
    b.node("MatMul", {"xt", "W"}, {"m_mm"});
    b.node("Add", {"m_mm", "Bp"}, {"lin"});
    b.node("Reshape", {"lin", "s1"}, {"v1"});
    b.node("Unsqueeze", {"v1", "ax0"}, {"u"});
    ModelBuilder::attr_ints(b.node("Transpose", {"u"}, {"t1"}), "perm", {3, 1, 2, 0, 4});
    b.node("Squeeze", {"t1", "axm2"}, {"sq"});
    for (int64_t i = 0; i < 3; ++i) {
      const std::string w(1, "qkv"[i]);
      ModelBuilder::attr_int(b.node("Gather", {"sq", "i" + std::to_string(i)}, {w + "0"}), "axis", 0);
      b.node("Reshape", {w + "0", "s2"}, {w + "r"});
      ModelBuilder::attr_ints(b.node("Transpose", {w + "r"}, {w + "t"}), "perm", {1, 0, 2});
    }
    b.node("Reshape", {"qt", "s3"}, {"q4"});
    b.node("Reshape", {"vt", "s3"}, {"v4"});
    b.node("Reshape", {"kt", "s4"}, {"k3"});
    ModelBuilder::attr_ints(b.node("Transpose", {"k3"}, {"k3t"}), "perm", {0, 2, 1});
    b.node("Reshape", {"k3t", "s5"}, {"k4"});
    b.node("Mul", {"q4", "scale"}, {"qs"});
    b.node("MatMul", {"qs", "k4"}, {"sc4"});
    ModelBuilder::attr_int(b.node("Softmax", {"sc4"}, {"probs"}), "axis", -1);
    b.node("MatMul", {"probs", "v4"}, {"o"});
    ModelBuilder::attr_ints(b.node("Transpose", {"o"}, {"ot"}), "perm", {2, 0, 1, 3});
    b.node("Reshape", {"ot", "s6"}, {"y"});
    b.output("y", 1, {S * B, D});
    return b;
  }
  b.node("MatMul", {"x", "W"}, {"p_mm"});
  b.node("Add", {"p_mm", "Bp"}, {"p"});
  if (form == "split") {
    b.initializer_i64("sizes", {3}, {D, D, D});
    b.initializer_i64("heads", {4}, {B, S, H, Dh});
    ModelBuilder::attr_int(b.node("Split", {"p", "sizes"}, {"q0", "k0", "v0"}), "axis", 2);
    for (auto w : {"q", "k", "v"}) {
      std::string s(w);
      b.node("Reshape", {s + "0", "heads"}, {s + "_h"});
      ModelBuilder::attr_ints(b.node("Transpose", {s + "_h"}, {s}), "perm", {0, 2, 1, 3});
    }
  } else {
    b.initializer_i64("packed", {5}, {B, S, 3, H, Dh});
    for (int64_t i = 0; i < 3; ++i) b.initializer_i64("i" + std::to_string(i), {}, {i});
    b.node("Reshape", {"p", "packed"}, {"p5"});
    ModelBuilder::attr_ints(b.node("Transpose", {"p5"}, {"pt"}), "perm", {2, 0, 3, 1, 4});
    ModelBuilder::attr_int(b.node("Gather", {"pt", "i0"}, {"q"}), "axis", 0);
    ModelBuilder::attr_int(b.node("Gather", {"pt", "i1"}, {"k"}), "axis", 0);
    ModelBuilder::attr_int(b.node("Gather", {"pt", "i2"}, {"v"}), "axis", 0);
  }
  ModelBuilder::attr_ints(b.node("Transpose", {"k"}, {"kt"}), "perm", {0, 1, 3, 2});
  b.node("MatMul", {"q", "kt"}, {"scores"});
  b.node("Mul", {"scores", "scale"}, {"scaled"});
  ModelBuilder::attr_int(b.node("Softmax", {"scaled"}, {"probs"}), "axis", -1);
  b.node("MatMul", {"probs", "v"}, {"ctx"});
  ModelBuilder::attr_ints(b.node("Transpose", {"ctx"}, {"ctx_t"}), "perm", {0, 2, 1, 3});
  b.node("Reshape", {"ctx_t", "model"}, {"y"});
  b.output("y", 1, {B, S, D});
  if (form == "gather-q-out") b.output("q", 1, {B, H, S, Dh});
  return b;
}

ModelBuilder scaled_after_mask_model(const std::string& after_op, float after) {
  ModelBuilder b(17);
  b.input("x", 1, {2, 2, 70, 16});
  std::vector<float> mask(70);
  for (int i = 0; i < 70; ++i) mask[static_cast<size_t>(i)] = 0.1f * static_cast<float>(i % 7);
  b.initializer("m", {70}, mask);
  b.initializer("pre", {}, {0.25f});
  b.initializer("post", {}, {after});
  ModelBuilder::attr_ints(b.node("Transpose", {"x"}, {"xt"}), "perm", {0, 1, 3, 2});
  b.node("MatMul", {"x", "xt"}, {"s"});
  b.node("Mul", {"s", "pre"}, {"s1"});
  b.node("Add", {"s1", "m"}, {"sm"});
  b.node(after_op, {"sm", "post"}, {"ss"});
  ModelBuilder::attr_int(b.node("Softmax", {"ss"}, {"p"}), "axis", -1);
  b.node("MatMul", {"p", "x"}, {"y"});
  b.output("y", 1, {2, 2, 70, 16});
  return b;
}

ModelBuilder pointwise_model() {
  ModelBuilder b(17);
  b.input("x", 1, {2, 6, 5, 7});
  b.initializer("W1", {4, 6, 1, 1}, ramp(24, 0.4f, 0.3f));
  b.initializer("B1", {4}, ramp(4, 0.2f, 0.1f));
  b.initializer("W2", {6, 4, 1, 1}, ramp(24, 0.3f, 0.8f));
  b.initializer("W3", {5, 6, 1, 1}, ramp(30, 0.2f, 0.4f));
  auto& c1 = b.node("Conv", {"x", "W1", "B1"}, {"c1"});
  ModelBuilder::attr_ints(c1, "kernel_shape", {1, 1});
  b.node("Relu", {"c1"}, {"r1"});
  b.node("Conv", {"r1", "W2"}, {"c2"});
  b.node("Add", {"c2", "x"}, {"s"});
  auto& c3 = b.node("Conv", {"s", "W3"}, {"c3"});  // strided: stays a cuDNN convolution
  ModelBuilder::attr_ints(c3, "strides", {2, 2});
  b.output("s", 1, {2, 6, 5, 7}).output("c3", 1, {2, 5, 3, 4});
  return b;
}

ModelBuilder residual_model() {
  ModelBuilder b(17);
  b.input("x", 1, {1, 6, 8});
  b.initializer("W", {8, 8}, ramp(64, 0.3f, 0.2f));
  b.initializer("B", {8}, ramp(8, 0.5f, 0.7f));
  b.node("MatMul", {"x", "W"}, {"mm"});
  b.node("Add", {"mm", "B"}, {"mb"});
  b.node("Add", {"x", "mb"}, {"res"});
  b.node("Relu", {"res"}, {"y"});
  b.output("y", 1, {1, 6, 8});
  return b;
}

ModelBuilder nhwc_model() {
  ModelBuilder b(17);
  b.input("x", 1, {2, 4, 9, 9});
  b.input("z", 1, {2, 6, 4, 4});
  b.initializer("W1", {8, 4, 3, 3}, ramp(8 * 36, 0.2f, 0.3f));
  b.initializer("B1", {8}, ramp(8, 0.3f, 0.2f));
  b.initializer("S", {8, 1, 1}, ramp(8, 0.5f, 1.0f));
  b.initializer("W2", {6, 8, 1, 1}, ramp(48, 0.4f, 0.6f));
  b.initializer("B2", {6}, ramp(6, 0.2f, 0.9f));
  b.initializer("W4", {1, 6, 1, 1}, ramp(6, 0.7f, 0.1f));
  b.initializer("W5", {4, 8, 3, 3}, ramp(4 * 72, 0.1f, 0.4f));
  b.initializer("W6", {8, 4, 3, 3}, ramp(8 * 36, 0.15f, 0.8f));
  auto& c1 = b.node("Conv", {"x", "W1", "B1"}, {"c1"});
  ModelBuilder::attr_ints(c1, "pads", {1, 1, 1, 1});
  b.node("Relu", {"c1"}, {"r1"});
  b.node("Mul", {"r1", "S"}, {"m1"});
  auto& ap = b.node("AveragePool", {"m1"}, {"ap"});
  ModelBuilder::attr_ints(ap, "kernel_shape", {3, 3});
  ModelBuilder::attr_ints(ap, "strides", {2, 2});
  ModelBuilder::attr_ints(ap, "pads", {1, 1, 1, 1});
  b.node("Conv", {"ap", "W2", "B2"}, {"c2"});
  auto& mp = b.node("MaxPool", {"c2"}, {"mp"});
  ModelBuilder::attr_ints(mp, "kernel_shape", {2, 2});
  b.node("Add", {"mp", "z"}, {"t"});
  b.node("Sigmoid", {"t"}, {"s"});
  b.node("Conv", {"s", "W4"}, {"c4"});
  auto& c5 = b.node("Conv", {"r1", "W5"}, {"c5"});
  ModelBuilder::attr_ints(c5, "pads", {2, 2, 2, 2});
  ModelBuilder::attr_ints(c5, "dilations", {2, 2});
  auto& c6 = b.node("Conv", {"r1", "W6"}, {"c6"});
  ModelBuilder::attr_ints(c6, "pads", {1, 1, 1, 1});
  ModelBuilder::attr_int(c6, "group", 2);
  b.output("r1", 1, {2, 8, 9, 9}).output("s", 1, {2, 6, 4, 4}).output("c4", 1, {2, 1, 4, 4});
  b.output("c5", 1, {2, 4, 9, 9}).output("c6", 1, {2, 8, 9, 9});
  return b;
}

ModelBuilder nhwc_se_model() {
  ModelBuilder b(17);
  b.input("x", 1, {2, 8, 10, 10});
  b.input("z", 1, {2, 1, 10, 10});
  b.initializer("W1", {16, 8, 3, 3}, ramp(16 * 72, 0.1f, 0.3f));
  b.initializer("B1", {16}, ramp(16, 0.2f, 0.5f));
  b.initializer("Wf1", {4, 16, 1, 1}, ramp(64, 0.3f, 0.7f));
  b.initializer("Bf1", {4}, ramp(4, 0.1f, 0.2f));
  b.initializer("Wf2", {16, 4, 1, 1}, ramp(64, 0.4f, 0.1f));
  b.initializer("Bf2", {16}, ramp(16, 0.2f, 0.9f));
  b.initializer_i64("sp", {2}, {8, 8});
  auto& c1 = b.node("Conv", {"x", "W1", "B1"}, {"c1"});
  ModelBuilder::attr_ints(c1, "pads", {1, 1, 1, 1});
  b.node("Relu", {"c1"}, {"r1"});
  b.node("GlobalAveragePool", {"r1"}, {"g"});
  b.node("Conv", {"g", "Wf1", "Bf1"}, {"f1"});
  b.node("Relu", {"f1"}, {"f1r"});
  b.node("Conv", {"f1r", "Wf2", "Bf2"}, {"f2"});
  b.node("Sigmoid", {"f2"}, {"s"});
  b.node("Mul", {"r1", "s"}, {"m"});
  ModelBuilder::attr_int(b.node("Split", {"m", "sp"}, {"a", "bb"}), "axis", 1);
  ModelBuilder::attr_int(b.node("Concat", {"bb", "a"}, {"cat"}), "axis", 1);
  b.node("Add", {"cat", "z"}, {"y"});
  b.node("GlobalMaxPool", {"m"}, {"gm"});
  b.output("y", 1, {2, 16, 10, 10}).output("gm", 1, {2, 16, 1, 1});
  return b;
}

ModelBuilder batch_model() {
  ModelBuilder b(17);
  b.input("x", 1, {-1, 8});
  std::vector<float> w(64), bias(8);
  for (int i = 0; i < 64; ++i) w[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  for (int i = 0; i < 8; ++i) bias[i] = 0.05f * static_cast<float>(i);
  b.initializer("W", {8, 8}, w);
  b.initializer("B", {8}, bias);
  b.node("MatMul", {"x", "W"}, {"mm"});
  b.node("Add", {"mm", "B"}, {"z"});
  b.node("Softmax", {"z"}, {"s"});
  b.node("Sigmoid", {"s"}, {"y"});  // its loop bound N * 8 is baked into the code
  b.output("y", 1, {-1, 8});
  return b;
}

std::vector<int64_t> softmax_lengths() { return {1, 7, 32, 100, 128, 1000, 1030, 3000}; }

ModelBuilder softmax_rows_model() {
  ModelBuilder b(20);
  for (int64_t L : softmax_lengths()) {
    std::string s = std::to_string(L);
    b.input("s" + s, 1, {13, L});
    ModelBuilder::attr_int(b.node("Softmax", {"s" + s}, {"sm" + s}), "axis", -1);
    ModelBuilder::attr_int(b.node("LogSoftmax", {"s" + s}, {"lsm" + s}), "axis", -1);
    b.output("sm" + s, 1, {13, L}).output("lsm" + s, 1, {13, L});
  }
  b.input("s3d", 1, {2, 3, 128});
  ModelBuilder::attr_int(b.node("Softmax", {"s3d"}, {"sm3d"}), "axis", -1);
  b.output("sm3d", 1, {2, 3, 128});
  b.input("sc", 1, {2, 100, 3});
  ModelBuilder::attr_int(b.node("Softmax", {"sc"}, {"smc"}), "axis", 1);
  b.output("smc", 1, {2, 100, 3});
  return b;
}

std::vector<int64_t> layer_norm_sizes() { return {5, 768, 1024, 1500}; }

ModelBuilder layer_norm_rows_model() {
  ModelBuilder b(20);
  for (int64_t D : layer_norm_sizes()) {
    std::string s = std::to_string(D);
    b.input("l" + s, 1, {7, D});
    b.initializer("g" + s, {D}, ramp(static_cast<int>(D), 1.0f, 0.3f));
    b.initializer("b" + s, {D}, ramp(static_cast<int>(D), 0.5f, 1.3f));
    auto& n = b.node("LayerNormalization", {"l" + s, "g" + s, "b" + s}, {"ln" + s, "lnm" + s, "lni" + s});
    ModelBuilder::attr_int(n, "axis", -1);
    attr_float(n, "epsilon", 1e-5f);
    ModelBuilder::attr_int(b.node("LayerNormalization", {"l" + s, "g" + s}, {"lnnb" + s}), "axis", -1);
    b.output("ln" + s, 1, {7, D}).output("lnm" + s, 1, {7, 1}).output("lni" + s, 1, {7, 1});
    b.output("lnnb" + s, 1, {7, D});
  }
  b.initializer("g1", {1}, {1.5f});
  b.node("LayerNormalization", {"l768", "g1"}, {"lns768"});
  b.output("lns768", 1, {7, 768});
  b.input("l3", 1, {6, 4, 192});
  b.initializer("g3", {4, 192}, ramp(768, 1.0f, 0.7f));
  b.initializer("b3", {4, 192}, ramp(768, 0.3f, 0.1f));
  ModelBuilder::attr_int(b.node("LayerNormalization", {"l3", "g3", "b3"}, {"ln3"}), "axis", 1);
  b.output("ln3", 1, {6, 4, 192});
  return b;
}

ModelBuilder elementwise_chains_model() {
  ModelBuilder b(20);
  b.input("e", 1, {2, 3, 5, 7}).input("e2", 1, {3, 1001}).input("ea", 1, {4, 1001}).input("eb", 1, {4, 1001});
  b.input("g", 1, {33, 3077}).input("b1", 1, {3, 3000001}).input("b2", 1, {3, 3000001});
  b.initializer("c", {3, 1, 1}, {0.5f, -0.25f, 1.5f});
  b.initializer("k075", {}, {0.75f});
  b.initializer("one", {}, {1.f});
  b.initializer("half", {}, {0.5f});
  b.initializer("sqrt2", {}, {1.4142135f});
  b.node("Add", {"e", "c"}, {"ec0"});
  b.node("Relu", {"ec0"}, {"ec"});
  b.node("Mul", {"e2", "k075"}, {"es0"});
  b.node("Add", {"es0", "one"}, {"es"});
  b.node("Add", {"ea", "eb"}, {"ef0"});
  b.node("Relu", {"ef0"}, {"ef"});
  b.node("Greater", {"ea", "eb"}, {"gt"});
  b.node("Gelu", {"g"}, {"ge"});
  auto* a = b.node("Gelu", {"g"}, {"gh"}).add_attribute();
  a->set_name("approximate");
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s("tanh");
  b.node("Div", {"g", "sqrt2"}, {"gd0"});
  b.node("Erf", {"gd0"}, {"gd1"});
  b.node("Add", {"gd1", "one"}, {"gd2"});
  b.node("Mul", {"g", "half"}, {"gd3"});
  b.node("Mul", {"gd3", "gd2"}, {"gd"});
  b.node("Add", {"b1", "b2"}, {"big0"});
  b.node("Relu", {"big0"}, {"big"});
  b.output("ec", 1, {2, 3, 5, 7}).output("es", 1, {3, 1001}).output("ef", 1, {4, 1001}).output("gt", 9, {4, 1001});
  b.output("ge", 1, {33, 3077}).output("gh", 1, {33, 3077}).output("gd", 1, {33, 3077}).output("big", 1, {3, 3000001});
  return b;
}

ModelBuilder transposes_model() {
  ModelBuilder b(20);
  auto tr = [&](const std::string& x, const std::string& y, const std::vector<int64_t>& perm) {
    ModelBuilder::attr_ints(b.node("Transpose", {x}, {y}), "perm", perm);
  };
  b.input("t1", 1, {2, 5, 3, 8}).input("t2", 1, {3, 7, 5, 6}).input("t3", 1, {33, 65}).input("t4", 1, {2, 3, 20, 40});
  b.input("t5", 1, {2, 40, 4, 5}).input("t6", 1, {4, 1, 7, 8}).input("ti", 7, {3, 7, 5, 6}).input("t7", 1, {2, 3, 4, 5, 6});
  tr("t1", "tr1a", {0, 2, 1, 3});
  tr("t1", "tr1b", {0, 3, 1, 2});
  tr("t1", "tr1c", {0, 2, 3, 1});
  tr("t2", "tr2a", {0, 2, 1, 3});
  tr("t2", "tr2b", {0, 3, 1, 2});
  tr("t3", "tr3", {1, 0});
  tr("t4", "tr4", {0, 3, 1, 2});
  tr("t5", "tr5", {0, 2, 3, 1});
  tr("t6", "tr6", {0, 2, 1, 3});
  tr("ti", "tri", {0, 2, 1, 3});
  tr("t7", "tr7", {4, 2, 0, 3, 1});
  b.output("tr1a", 1, {2, 3, 5, 8}).output("tr1b", 1, {2, 8, 5, 3}).output("tr1c", 1, {2, 3, 8, 5});
  b.output("tr2a", 1, {3, 5, 7, 6}).output("tr2b", 1, {3, 6, 7, 5}).output("tr3", 1, {65, 33});
  b.output("tr4", 1, {2, 40, 3, 20}).output("tr5", 1, {2, 4, 5, 40}).output("tr6", 1, {4, 7, 1, 8});
  b.output("tri", 7, {3, 5, 7, 6}).output("tr7", 1, {6, 4, 2, 5, 3});
  return b;
}

ModelBuilder einsum_middle_model(bool einsum) {
  ModelBuilder b(17);
  b.input("x", 1, {4, 64});
  auto weights = [](size_t n, float phase) {
    std::vector<float> w(n);
    for (size_t i = 0; i < n; ++i) w[i] = 0.1f * std::sin(0.71f * static_cast<float>(i) + phase);
    return w;
  };
  b.initializer("W1", {64, 64}, weights(64 * 64, 0.1f));
  b.initializer("W2", {64, 64}, weights(64 * 64, 0.7f));
  b.initializer("W3", {64, 32}, weights(64 * 32, 1.3f));
  b.node("MatMul", {"x", "W1"}, {"a"}, "mm1");
  b.node("Relu", {"a"}, {"r"}, "relu");
  if (einsum) {
    // Three operands (a ones vector scales W2's columns by 1): the cuda
    // pipeline turns two-operand GEMM-like Einsums into MatMuls
    // (einsum_to_matmul), and this model needs one the cuda target lacks.
    b.initializer("ones", {64}, std::vector<float>(64, 1.f));
    auto& e = b.node("Einsum", {"r", "W2", "ones"}, {"e"}, "einsum");
    auto* eq = e.add_attribute();
    eq->set_name("equation");
    eq->set_type(onnx::AttributeProto::STRING);
    eq->set_s("bi,ij,j->bj");
  }
  b.node("Tanh", {einsum ? "e" : "r"}, {"t"}, "tanh");
  b.node("MatMul", {"t", "W3"}, {"y"}, "mm2");
  b.output("y", 1, {4, 32});
  return b;
}

ModelBuilder two_host_segments_model() {
  ModelBuilder b(17);
  b.input("x", 1, {4, 64});
  auto weights = [](size_t n, float phase) {
    std::vector<float> w(n);
    for (size_t i = 0; i < n; ++i) w[i] = 0.1f * std::sin(0.53f * static_cast<float>(i) + phase);
    return w;
  };
  b.initializer("W1", {64, 64}, weights(64 * 64, 0.2f));
  b.initializer("W2", {64, 64}, weights(64 * 64, 0.9f));
  auto einsum = [&](std::vector<std::string> in, const std::string& out, const char* eq) {
    auto* a = b.node("Einsum", in, {out}, "einsum_" + out).add_attribute();
    a->set_name("equation");
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(eq);
  };
  // Three-operand Einsums (times a ones vector): two-operand ones become
  // MatMuls in the cuda pipeline (einsum_to_matmul); these must stay on the host.
  b.initializer("ones", {64}, std::vector<float>(64, 1.f));
  b.node("MatMul", {"x", "W1"}, {"a"}, "mm1");
  einsum({"a", "W2", "ones"}, "e", "bi,ij,j->bj");
  b.node("Tanh", {"e"}, {"t"}, "tanh");
  einsum({"t", "x", "ones"}, "f", "bi,bi,i->bi");
  b.node("Relu", {"f"}, {"r"}, "relu");
  b.node("Add", {"r", "e"}, {"y"}, "add");
  b.output("y", 1, {4, 64});
  b.output("e", 1, {4, 64});
  return b;
}

namespace {
/// A branch graph computing `out` = op(x[, c]) from the outer scope's x; out
/// is float32 of shape `dims`.
void branch(onnx::AttributeProto* a, const std::string& name, const std::string& op, const std::string& out,
            const std::vector<std::string>& ins, const std::vector<int64_t>& dims = {8}) {
  a->set_name(name);
  a->set_type(onnx::AttributeProto::GRAPH);
  auto* g = a->mutable_g();
  g->set_name(name);
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name + "_" + op);
  for (auto& i : ins) n->add_input(i);
  n->add_output(out);
  auto* o = g->add_output();
  o->set_name(out);
  o->mutable_type()->mutable_tensor_type()->set_elem_type(1);
  for (auto d : dims) o->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
}
}  // namespace

ModelBuilder data_if_model() {
  ModelBuilder b(17);
  b.input("x", 1, {8});
  b.initializer("two", {}, {2.f});
  b.initializer("zero", {}, {0.f});
  b.initializer_i64("axes", {1}, {0});
  auto& sum = b.node("ReduceSum", {"x", "axes"}, {"s"}, "sum");
  ModelBuilder::attr_int(sum, "keepdims", 0);
  b.node("Greater", {"s", "zero"}, {"cond"}, "positive");
  auto& n = b.node("If", {"cond"}, {"branch"}, "if");
  branch(n.add_attribute(), "then_branch", "Mul", "then_out", {"x", "two"});
  branch(n.add_attribute(), "else_branch", "Neg", "else_out", {"x"});
  b.node("Add", {"branch", "x"}, {"y"}, "add");
  b.output("y", 1, {8});
  return b;
}

ModelBuilder data_if_gemm_model(int64_t batch, int64_t dim) {
  ModelBuilder b(17);
  b.input("x", 1, {batch, dim});
  std::vector<float> w(static_cast<size_t>(dim * dim));
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.05f * std::sin(0.7f * static_cast<float>(i) + 0.3f);
  b.initializer("W", {dim, dim}, w);
  b.initializer("three", {}, {3.f});
  b.initializer("zero", {}, {0.f});
  auto& sum = b.node("ReduceSum", {"x"}, {"s"}, "sum");
  ModelBuilder::attr_int(sum, "keepdims", 0);
  b.node("Greater", {"s", "zero"}, {"cond"}, "positive");
  auto& n = b.node("If", {"cond"}, {"branch"}, "if");
  auto body = [&](const std::string& name, const std::vector<std::array<std::string, 4>>& nodes, const std::string& out) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::GRAPH);
    auto* g = a->mutable_g();
    g->set_name(name);
    for (auto& [op, in0, in1, o] : nodes) {
      auto* k = g->add_node();
      k->set_op_type(op);
      k->set_name(name + "_" + o);
      k->add_input(in0);
      if (!in1.empty()) k->add_input(in1);
      k->add_output(o);
    }
    auto* v = g->add_output();
    v->set_name(out);
    v->mutable_type()->mutable_tensor_type()->set_elem_type(1);
    v->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(batch);
    v->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(dim);
  };
  body("then_branch", {{"MatMul", "x", "W", "mm"}, {"Relu", "mm", "", "then_out"}}, "then_out");
  body("else_branch", {{"Tanh", "x", "", "t"}, {"Mul", "t", "three", "else_out"}}, "else_out");
  b.node("Add", {"branch", "x"}, {"y"}, "add");
  b.output("y", 1, {batch, dim});
  return b;
}

ModelBuilder nonzero_model() {
  ModelBuilder b(17);
  b.input("x", 1, {16});
  b.node("Relu", {"x"}, {"r"}, "relu");
  b.node("NonZero", {"r"}, {"idx"}, "nonzero");
  b.node("Sigmoid", {"x"}, {"s"}, "sigmoid");
  b.output("idx");
  b.output("s", 1, {16});
  return b;
}

ModelBuilder host_fp32_model() {
  ModelBuilder b(17);
  b.input("x", 1, {1, 4, 8, 8});
  auto weights = [](size_t n, float scale, float phase) {
    std::vector<float> w(n);
    for (size_t i = 0; i < n; ++i) w[i] = scale * std::sin(0.61f * static_cast<float>(i) + phase);
    return w;
  };
  b.initializer("Wc", {4, 4, 3, 3}, weights(4 * 4 * 9, 0.3f, 0.2f));
  b.initializer("Wg", {16, 8}, weights(16 * 8, 0.2f, 0.9f));
  b.initializer("Bg", {8}, weights(8, 0.1f, 1.7f));
  b.initializer("zero", {}, {0.f});
  b.initializer("two", {}, {2.f});
  b.initializer_i64("rows_shape", {2}, {4, 16});
  b.initializer_i64("one", {}, {1});
  ModelBuilder::attr_ints(b.node("Conv", {"x", "Wc"}, {"c"}, "conv"), "pads", {1, 1, 1, 1});
  b.node("Relu", {"c"}, {"r"}, "relu");
  auto& mp = b.node("MaxPool", {"r"}, {"mp", "ind"}, "maxpool");
  ModelBuilder::attr_ints(mp, "kernel_shape", {2, 2});
  ModelBuilder::attr_ints(mp, "strides", {2, 2});
  b.node("Sigmoid", {"mp"}, {"s"}, "sigmoid");
  auto& q = b.node("ReduceMax", {"r"}, {"q"}, "reducemax");
  ModelBuilder::attr_ints(q, "axes", {2, 3});
  ModelBuilder::attr_int(q, "keepdims", 0);
  auto& mx = b.node("ReduceMean", {"x"}, {"mx"}, "reducemean");
  ModelBuilder::attr_ints(mx, "axes", {2, 3});
  ModelBuilder::attr_int(mx, "keepdims", 0);
  b.node("Greater", {"mx", "zero"}, {"gt"}, "greater");
  b.node("NonZero", {"gt"}, {"nz"}, "nonzero");
  ModelBuilder::attr_int(b.node("Gather", {"nz", "one"}, {"ids"}, "ids"), "axis", 0);
  b.node("Reshape", {"s", "rows_shape"}, {"feat"}, "reshape");
  ModelBuilder::attr_int(b.node("Gather", {"feat", "ids"}, {"rows"}, "rows"), "axis", 0);
  b.node("Gemm", {"rows", "Wg", "Bg"}, {"h"}, "gemm");
  b.node("Exp", {"h"}, {"e"}, "exp");
  b.node("Mul", {"e", "h"}, {"z"}, "mul");
  auto& sum = b.node("ReduceSum", {"mx"}, {"sum"}, "sum");
  ModelBuilder::attr_int(sum, "keepdims", 0);
  b.node("Greater", {"sum", "zero"}, {"cond"}, "positive");
  auto& n = b.node("If", {"cond"}, {"w"}, "if");
  branch(n.add_attribute(), "then_branch", "Mul", "then_out", {"q", "two"}, {1, 4});
  branch(n.add_attribute(), "else_branch", "Neg", "else_out", {"q"}, {1, 4});
  // Sub, not Add: with the else branch (-q) an Add would make u exactly 0.
  b.node("Sub", {"w", "q"}, {"u"}, "sub");
  b.output("s", 1, {1, 4, 4, 4});
  b.output("z");
  b.output("u", 1, {1, 4});
  return b;
}

}  // namespace kiln::testing

namespace kiln::testing {

ModelBuilder sigmoid_head_model(float k) {
  ModelBuilder b(17);
  b.input("x", 1, {1, 4, 8, 8});
  // a, b: 1x1 convolutions plus 100, b's weights a's plus up to 0.05: two
  // feature maps near 100 (fp16's spacing there is 1/16) that differ by ~0.1.
  std::vector<float> wa(8 * 4), wb(8 * 4), wc(4 * 8);
  for (int i = 0; i < 32; ++i) {
    wa[i] = std::sin(0.7f * i + 0.3f);
    wb[i] = wa[i] + 0.05f * std::cos(1.3f * i);
    wc[i] = 0.5f * std::sin(0.45f * i + 1.0f);
  }
  b.initializer("Wa", {8, 4, 1, 1}, wa);
  b.initializer("Wb", {8, 4, 1, 1}, wb);
  b.initializer("bias", {8}, std::vector<float>(8, 100.f));
  b.initializer("k", {}, {k});
  b.initializer("Wc", {4, 8, 1, 1}, wc);
  auto conv = [&](const std::string& x, const std::vector<std::string>& rest, const std::string& y) {
    std::vector<std::string> ins = {x};
    ins.insert(ins.end(), rest.begin(), rest.end());
    auto& c = b.node("Conv", ins, {y}, "conv_" + y);
    ModelBuilder::attr_ints(c, "kernel_shape", {1, 1});
  };
  conv("x", {"Wa", "bias"}, "a");
  conv("x", {"Wb", "bias"}, "b");
  b.node("Sub", {"a", "b"}, {"d"}, "sub");
  b.node("Mul", {"d", "k"}, {"s"}, "scale");
  b.node("Sigmoid", {"s"}, {"y"}, "sigmoid");
  conv("y", {"Wc"}, "out");
  b.output("out", 1, {1, 4, 8, 8});
  return b;
}

// `steps` steps of the tent map x <- 1 - 2|x| on [-1, 1] (Abs, MatMul by 2I,
// Sub): the map doubles any error its input carries, yet every node's own
// error growth is at most 2x (below the check's 8x amplifier bar) and the
// values stay in [-1, 1]: the error grows over the chain without a single
// node amplifying it. The MatMul ends every fused pointwise chain, so each
// step's result is stored (rounded) in 16 bits, as a network's layers are.
ModelBuilder tent_map_model(int steps) {
  ModelBuilder b(17);
  b.input("x", 1, {1, 64});
  std::vector<float> two_i(64 * 64, 0.f);
  for (int i = 0; i < 64; ++i) two_i[i * 64 + i] = 2.f;
  b.initializer("two", {64, 64}, two_i);
  b.initializer("one", {}, {1.f});
  b.node("Tanh", {"x"}, {"t"}, "squash");  // into (-1, 1) whatever the sample inputs are: the map's domain
  std::string x = "t";
  for (int i = 0; i < steps; ++i) {
    const std::string n = std::to_string(i), a = "a" + n, d = "d" + n, y = "y" + n;
    b.node("Abs", {x}, {a}, "abs" + n);
    b.node("MatMul", {a, "two"}, {d}, "mul" + n);
    b.node("Sub", {"one", d}, {y}, "sub" + n);
    x = y;
  }
  b.node("Identity", {x}, {"out"}, "out");
  b.output("out", 1, {1, 64});
  return b;
}

std::string LstmConfig::label() const {
  return fmt::format("{} layout {} seq {} batch {} input {} hidden {}{}{}{}{}{}{}{}", direction, layout, seq, batch, input,
                     hidden, bias ? " B" : "", init_h ? " h0" : "", init_c ? " c0" : "", peepholes ? " P" : "",
                     lens.empty() ? "" : " lens", clip > 0 ? " clip" : "", input_forget ? " input_forget" : "");
}

ModelBuilder lstm_model(const LstmConfig& c) {
  ModelBuilder b(14);
  const int64_t D = c.direction == "bidirectional" ? 2 : 1, H = c.hidden, G = 4 * H;
  auto seeded = [](int64_t n, float scale, uint32_t seed) {
    std::vector<float> v(static_cast<size_t>(n));
    uint32_t s = seed;
    for (auto& x : v) {
      s = s * 1664525u + 1013904223u;
      x = scale * (static_cast<float>(s >> 8) / 8388608.f - 1.f);  // uniform in [-scale, scale)
    }
    return v;
  };
  const float scale = 1.f / std::sqrt(static_cast<float>(H));
  const std::vector<int64_t> xdims = c.layout == 0 ? std::vector<int64_t>{c.seq, c.batch, c.input}
                                                   : std::vector<int64_t>{c.batch, c.seq, c.input};
  const std::vector<int64_t> state = c.layout == 0 ? std::vector<int64_t>{D, c.batch, H}
                                                   : std::vector<int64_t>{c.batch, D, H};
  b.input("x", 1, xdims);
  b.initializer("W", {D, G, c.input}, seeded(D * G * c.input, scale, 1));
  b.initializer("R", {D, G, H}, seeded(D * G * H, scale, 2));
  std::vector<std::string> ins = {"x", "W", "R", "", "", "", "", ""};
  if (c.bias) b.initializer("B", {D, 2 * G}, seeded(D * 2 * G, scale, 3)), ins[3] = "B";
  if (!c.lens.empty()) {
    auto* t = b.graph().add_initializer();
    t->set_name("lens");
    t->set_data_type(6);  // int32
    t->add_dims(static_cast<int64_t>(c.lens.size()));
    for (int32_t v : c.lens) t->add_int32_data(v);
    ins[4] = "lens";
  }
  if (c.init_h) b.input("h0", 1, state), ins[5] = "h0";
  if (c.init_c) b.input("c0", 1, state), ins[6] = "c0";
  if (c.peepholes) b.initializer("P", {D, 3 * H}, seeded(D * 3 * H, scale, 4)), ins[7] = "P";
  while (!ins.empty() && ins.back().empty()) ins.pop_back();
  std::vector<std::string> outs = {c.y ? "y" : "", c.yh ? "yh" : "", c.yc ? "yc" : ""};
  while (!outs.empty() && outs.back().empty()) outs.pop_back();
  auto& n = b.node("LSTM", ins, outs, "lstm");
  ModelBuilder::attr_int(n, "hidden_size", H);
  if (c.layout) ModelBuilder::attr_int(n, "layout", c.layout);
  if (c.input_forget) ModelBuilder::attr_int(n, "input_forget", 1);
  if (c.clip > 0) attr_float(n, "clip", c.clip);
  auto* dir = n.add_attribute();
  dir->set_name("direction");
  dir->set_type(onnx::AttributeProto::STRING);
  dir->set_s(c.direction);
  if (!c.activations.empty()) {
    auto* a = n.add_attribute();
    a->set_name("activations");
    a->set_type(onnx::AttributeProto::STRINGS);
    for (auto& s : c.activations) a->add_strings(s);
  }
  for (auto& o : outs)
    if (!o.empty()) b.output(o);
  return b;
}

ModelBuilder lm_head_model() {
  ModelBuilder b(17);
  b.input("x", 1, {3, 5, 16});
  b.initializer("W", {16, 9}, ramp(144, 0.05f, 0.7f));
  b.node("MatMul", {"x", "W"}, {"logits"});
  b.output("logits", 1, {3, 5, 9});
  return b;
}

}  // namespace kiln::testing
