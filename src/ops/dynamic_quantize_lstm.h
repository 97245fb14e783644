// com.microsoft::DynamicQuantizeLSTM's computation with its integer weight
// products pluggable (dynamic_quantize_lstm.cpp documents the arithmetic): a
// target supplies a faster exact int32 product and reuses the rest (the
// dynamic quantization of each product's float operand, the scales, the cell)
// so that its results are the reference kernel's bit for bit.
#pragma once
#include <cstdint>

#include "ops/registry.h"

namespace kiln::ops {

/// The integer products of one DynamicQuantizeLSTM node.
class DqLstmProducts {
 public:
  virtual ~DqLstmProducts() = default;
  /// acc[M, N] (int32, wrapping) = sum_k (qa[m, k] - za) * (w[k, n] - zw) for
  /// direction `dir` of W (`recurrent` false: K = input size) or R (true:
  /// K = hidden), w [K, N = 4 * hidden] its int8/uint8 data and zw the
  /// direction's first zero point. qa: M * K uint8 values, row-major.
  /// Throws Error naming the node on failure.
  virtual void product(bool recurrent, int64_t dir, const uint8_t* qa, int32_t za, int64_t M, int64_t K,
                       int32_t* acc) const = 0;
  /// How many threads may run the directions at once (each direction is
  /// independent: same results in any order); product() must then be
  /// thread-safe. 1: one after the other, as the reference kernel does.
  virtual int direction_threads() const { return 1; }
};

/// Runs DynamicQuantizeLSTM on ctx (inputs, outputs, checks and errors as the
/// reference kernel: Error(invalid_input / unsupported / invalid_model) naming
/// the node), with `products` computing the integer products (null: the
/// reference's own int32 GEMM).
void dynamic_quantize_lstm(KernelContext& ctx, const DqLstmProducts* products);

}  // namespace kiln::ops
