// ONNX LSTM -> kiln.cpu.LSTM (oneDNN's LSTM primitive; run/lstm.cpp).
//
// What oneDNN's cell computes is ONNX's default LSTM: sigmoid gates, tanh
// cell and output activations, no clip, no coupled input/forget gate, no
// peepholes, every batch entry running the whole sequence. Only that form is
// lowered: float32 with static dims, layout 0, constant W / R (/ B), P absent
// or all zeros, sequence_lens absent or a constant equal to T everywhere, and
// (for oneDNN's concatenated bidirectional output to be ONNX's Y [T, 2, N, H]
// byte for byte) batch 1 when bidirectional. The weights are repacked at
// compile time: ONNX W [D, 4H, I] with gates i, o, f, c becomes ldigo
// [1, D, I, 4, H] with oneDNN's order i, f, c, o (R likewise), and the bias is
// Wb + Rb as ldgo [1, D, 4, H].
#include "targets/cpu/compile/lower_ops.h"
#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets::cpu {

namespace {

/// ONNX gate index (i, o, f, c) of oneDNN gate g (i, f, c, o).
constexpr int64_t kOnnxGate[4] = {0, 2, 3, 1};

/// ONNX W or R [D, 4H, C] -> ldigo [1, D, C, 4, H].
Tensor to_ldigo(const Tensor& w, int64_t D, int64_t H, int64_t C) {
  Tensor out(DType::f32, {1, D, C, 4, H});
  const float* src = w.data<float>();
  float* dst = out.data<float>();
  for (int64_t d = 0; d < D; ++d)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t g = 0; g < 4; ++g)
        for (int64_t h = 0; h < H; ++h)
          dst[(((d * C + c) * 4 + g) * H) + h] = src[(d * 4 * H + kOnnxGate[g] * H + h) * C + c];
  return out;
}

/// ONNX B [D, 8H] (absent: zeros) -> ldgo [1, D, 4, H] holding Wb + Rb.
Tensor to_ldgo(const Tensor* b, int64_t D, int64_t H) {
  Tensor out(DType::f32, {1, D, 4, H});
  float* dst = out.data<float>();
  for (int64_t d = 0; d < D; ++d)
    for (int64_t g = 0; g < 4; ++g)
      for (int64_t h = 0; h < H; ++h) {
        float v = 0;
        if (b) {
          const float* row = b->data<float>() + d * 8 * H;
          v = row[kOnnxGate[g] * H + h] + row[4 * H + kOnnxGate[g] * H + h];
        }
        dst[(d * 4 + g) * H + h] = v;
      }
  return out;
}

bool all_zero(const Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (t.data<float>()[i] != 0.f) return false;
  return true;
}

/// True when the node's activation attributes are absent or ONNX's defaults.
bool default_activations(const ir::Node& n, int64_t D) {
  if (n.has("activation_alpha") || n.has("activation_beta") || n.has("clip")) return false;
  if (!n.has("activations")) return true;
  const auto acts = n.attrs.at("activations");
  const auto* names = std::get_if<std::vector<std::string>>(&acts);
  if (!names || names->size() != static_cast<size_t>(3 * D)) return false;
  for (size_t i = 0; i < names->size(); ++i)
    if ((*names)[i] != (i % 3 == 0 ? "Sigmoid" : "Tanh")) return false;
  return true;
}

ir::ValueId constant_value(ir::Model& m, const std::string& name, Tensor t) {
  ir::ValueId id = add_value(m, name, DType::f32, t.shape());
  m.value(id).constant = std::move(t);
  return id;
}

}  // namespace

std::optional<std::vector<ir::Node>> lower_lstm(ir::Model& m, const ir::Node& n) {
  if (!is_onnx(n, "LSTM") || n.inputs.size() < 3 || n.outputs.empty() || n.outputs[0] == ir::kNoValue)
    return std::nullopt;
  auto in = [&](size_t i) { return i < n.inputs.size() ? n.inputs[i] : ir::kNoValue; };
  const std::string dir = n.s("direction", "forward");
  const int64_t D = dir == "bidirectional" ? 2 : 1;
  if (n.i("layout", 0) != 0 || n.i("input_forget", 0) != 0 || !default_activations(n, D)) return std::nullopt;
  const ir::ValueId x = in(0), y = n.outputs[0];
  if (!is_static_f32(m, x) || !is_static_f32(m, y)) return std::nullopt;
  const auto xd = *static_dims(m, x);
  const Tensor* w = constant_of(m, in(1));
  const Tensor* r = constant_of(m, in(2));
  const Tensor* b = in(3) == ir::kNoValue ? nullptr : constant_of(m, in(3));
  if (xd.size() != 3 || !w || !r || (in(3) != ir::kNoValue && !b)) return std::nullopt;
  const int64_t T = xd[0], N = xd[1], I = xd[2];
  if (w->dtype() != DType::f32 || r->dtype() != DType::f32 || w->rank() != 3 || r->rank() != 3) return std::nullopt;
  const int64_t H = r->dim(2);
  if (T == 0 || N == 0 || H == 0 || (D == 2 && N != 1)) return std::nullopt;
  if (w->shape() != std::vector<int64_t>{D, 4 * H, I} || r->shape() != std::vector<int64_t>{D, 4 * H, H})
    return std::nullopt;
  if (b && (b->dtype() != DType::f32 || b->shape() != std::vector<int64_t>{D, 8 * H})) return std::nullopt;
  // Every batch entry must run all T steps.
  if (in(4) != ir::kNoValue) {
    const Tensor* lens = constant_of(m, in(4));
    if (!lens || lens->dtype() != DType::i32 || lens->numel() != N) return std::nullopt;
    for (int64_t i = 0; i < N; ++i)
      if (lens->data<int32_t>()[i] != T) return std::nullopt;
  }
  if (in(7) != ir::kNoValue) {
    const Tensor* p = constant_of(m, in(7));
    if (!p || p->dtype() != DType::f32 || !all_zero(*p)) return std::nullopt;
  }
  for (size_t i : {size_t{5}, size_t{6}})
    if (in(i) != ir::kNoValue && !is_static_f32(m, in(i))) return std::nullopt;
  // Repack every constant before adding a value: w, r and b point into
  // m.values, which add_value may reallocate (reading R or B through them
  // after the first add_value was a use-after-free).
  Tensor w_ldigo = to_ldigo(*w, D, H, I), r_ldigo = to_ldigo(*r, D, H, H), bias = to_ldgo(b, D, H);
  const std::string w_name = m.value(in(1)).name, r_name = m.value(in(2)).name;
  w = r = b = nullptr;
  ir::Node c = cpu_node(n, "LSTM");
  c.inputs = {x,
              constant_value(m, w_name + "/ldigo", std::move(w_ldigo)),
              constant_value(m, r_name + "/ldigo", std::move(r_ldigo)),
              constant_value(m, w_name + "/lstm_bias", std::move(bias)),
              in(5),
              in(6)};
  c.outputs = {y, n.outputs.size() > 1 ? n.outputs[1] : ir::kNoValue,
               n.outputs.size() > 2 ? n.outputs[2] : ir::kNoValue};
  c.attrs["hidden"] = H;
  const auto direction = D == 2               ? dnnl::rnn_direction::bidirectional_concat
                         : dir == "reverse"   ? dnnl::rnn_direction::unidirectional_right2left
                                              : dnnl::rnn_direction::unidirectional_left2right;
  c.attrs["direction"] = static_cast<int64_t>(direction);
  try {
    lstm_pd(c, m);  // oneDNN must take this LSTM here
  } catch (const Error&) {
    return std::nullopt;
  }
  return std::vector<ir::Node>{std::move(c)};
}

}  // namespace kiln::targets::cpu
