// Activation functions of the recurrent operators (ONNX RNN / GRU / LSTM
// "activations", activation_alpha, activation_beta; ONNX Runtime's contrib
// DynamicQuantizeLSTM takes the same attributes). Shared by recurrent.cpp and
// dynamic_quantize_lstm.cpp.
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::ops {

enum class ActFn { relu, tanh, sigmoid, affine, leaky_relu, thresholded_relu, scaled_tanh, hard_sigmoid, elu,
                   softsign, softplus };

/// One activation function with its alpha/beta (ONNX RNN "activations").
struct Activation {
  ActFn fn = ActFn::tanh;
  double alpha = 0, beta = 0;

  template <class T>
  T operator()(T x) const {
    switch (fn) {
      case ActFn::relu: return x > T(0) ? x : T(0);
      case ActFn::tanh: return std::tanh(x);
      case ActFn::sigmoid: return T(1) / (T(1) + std::exp(-x));
      case ActFn::affine: return T(alpha) * x + T(beta);
      case ActFn::leaky_relu: return x >= T(0) ? x : T(alpha) * x;
      case ActFn::thresholded_relu: return x > T(alpha) ? x : T(0);
      case ActFn::scaled_tanh: return T(alpha) * std::tanh(T(beta) * x);
      case ActFn::hard_sigmoid: return std::clamp(T(alpha) * x + T(beta), T(0), T(1));
      case ActFn::elu: return x >= T(0) ? x : T(alpha) * (std::exp(x) - T(1));
      case ActFn::softsign: return x / (T(1) + std::fabs(x));
      case ActFn::softplus: return std::log1p(std::exp(x));
    }
    return x;
  }
};

/// How activation_alpha / activation_beta map onto the functions.
enum class ActParams {
  /// A list with one value per activation is positional; a shorter list is
  /// consumed in order by the functions that take the value (ONNX Runtime's RNN).
  positional_if_full,
  /// Always consumed in order by the functions that take the value (ONNX
  /// Runtime's LSTM and DynamicQuantizeLSTM).
  in_order,
};

/// The node's activations for `dirs` directions (dirs * defaults.size()
/// entries; `defaults` is one direction's default list, e.g. Sigmoid, Tanh,
/// Tanh for LSTM). A list of only one direction's functions is used for both
/// when `dirs` is 2 and `repeat_single` is set. A function left without an
/// alpha/beta value uses its ONNX operator's default. Throws
/// Error(unsupported) for an unknown name and Error(invalid_model) for a list
/// of the wrong length.
std::vector<Activation> read_activations(const ir::Node& n, const std::vector<std::string>& defaults, int64_t dirs,
                                         ActParams params, bool repeat_single = true);

}  // namespace kiln::ops
