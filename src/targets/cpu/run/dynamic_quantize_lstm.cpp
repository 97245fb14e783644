// kiln.cpu.DynamicQuantizeLSTM: com.microsoft::DynamicQuantizeLSTM with
// constant weights, its integer products on oneDNN's int8 matmul.
//
// The node is the ONNX Runtime contrib node as it was (same inputs and
// attributes; compile/lower_integer.cpp checks W, R and their zero points are
// constants). The kernel runs the reference computation
// (ops::dynamic_quantize_lstm: the dynamic quantization of each product's
// float operand, the scales, the cell in the reference's order of float
// operations) with Int8Matmul computing sum (qa - za)(w - zw) exactly in
// int32, so every output is the reference's bit for bit. Weights are stored
// as int8 per direction (uint8 shifted by -128, the zero point likewise); one
// Int8Matmul per (weight, direction, row count M) is made on first use (M is
// the batch for H * R and max(sequence_lens) * batch for X * W) and kept.
// The directions run on threads of their own (direction_threads).
#include <map>
#include <memory>
#include <mutex>

#include "ops/dynamic_quantize_lstm.h"
#include "support/error.h"
#include "targets/cpu/run/cpu_kernels.h"
#include "targets/cpu/run/int8_matmul.h"

namespace kiln::targets::cpu {

namespace {

/// One direction of W or R as int8 [K, N], its shifted zero point, and the
/// products made for it so far (by M).
struct DirWeight {
  int64_t K = 0, N = 0;
  std::vector<int8_t> w;
  int32_t zero = 0;
  mutable std::mutex mu;
  mutable std::map<int64_t, std::unique_ptr<Int8Matmul>> by_rows;
};

class CpuProducts : public ops::DqLstmProducts {
 public:
  CpuProducts(const ir::Node& n, const ir::Model& m) : node_(n) {
    // Inputs: X, W, R, B, sequence_lens, initial_h, initial_c, P, W_scale, W_zero_point, R_scale, R_zero_point.
    load(m, 1, 9, weights_[0]);
    load(m, 2, 11, weights_[1]);
  }

  void product(bool recurrent, int64_t dir, const uint8_t* qa, int32_t za, int64_t M, int64_t K,
               int32_t* acc) const override {
    const auto& dirs = weights_[recurrent ? 1 : 0];
    if (dir < 0 || dir >= static_cast<int64_t>(dirs.size()) || dirs[static_cast<size_t>(dir)]->K != K)
      fail(ErrorCode::invalid_input, "{}: no {} weight of direction {} with {} rows", node_.label(),
           recurrent ? "R" : "W", dir, K);
    const Int8Matmul& mm = matmul(*dirs[static_cast<size_t>(dir)], M);
    mm.run(node_, qa, &za, 1, acc);
  }

  /// The directions on threads of their own (2 on this 2-core target): the
  /// cell's exact libm activations are most of the node's time, and a
  /// bidirectional LSTM's two directions are independent. oneDNN, called
  /// inside that parallel region, runs each product on its calling thread.
  int direction_threads() const override { return omp_get_max_threads(); }

  /// The product of `w` for M rows (made on first use).
  const Int8Matmul& matmul(const DirWeight& w, int64_t M) const {
    std::lock_guard<std::mutex> lock(w.mu);
    auto& slot = w.by_rows[M];
    if (!slot) slot = std::make_unique<Int8Matmul>(node_, M, w.K, w.N, DType::u8, w.w.data(), std::vector<int32_t>{w.zero});
    return *slot;
  }

  const std::vector<std::unique_ptr<DirWeight>>& weights(bool recurrent) const { return weights_[recurrent ? 1 : 0]; }

 private:
  void load(const ir::Model& m, size_t wi, size_t zi, std::vector<std::unique_ptr<DirWeight>>& out) {
    const Tensor* w = wi < node_.inputs.size() && node_.inputs[wi] != ir::kNoValue ? &*m.value(node_.inputs[wi]).constant
                                                                                  : nullptr;
    const auto& zc = zi < node_.inputs.size() && node_.inputs[zi] != ir::kNoValue ? m.value(node_.inputs[zi]).constant
                                                                                   : std::optional<Tensor>();
    if (!w || !zc || w->rank() != 3 || (w->dtype() != DType::u8 && w->dtype() != DType::i8) ||
        zc->dtype() != w->dtype() || zc->numel() % w->dim(0) != 0 || zc->numel() == 0)
      fail(ErrorCode::corrupt_artifact, "{}: input {} must be a constant 3-D uint8/int8 weight with a constant zero point",
           node_.label(), wi);
    const int64_t dirs = w->dim(0), K = w->dim(1), N = w->dim(2), per_dir = zc->numel() / dirs;
    const bool u8 = w->dtype() == DType::u8;
    for (int64_t d = 0; d < dirs; ++d) {
      auto dw = std::make_unique<DirWeight>();
      dw->K = K;
      dw->N = N;
      dw->w.resize(static_cast<size_t>(K * N));
      for (int64_t i = 0; i < K * N; ++i)
        dw->w[static_cast<size_t>(i)] =
            u8 ? static_cast<int8_t>(int32_t{w->data<uint8_t>()[d * K * N + i]} - 128) : w->data<int8_t>()[d * K * N + i];
      // The direction's first zero point (the reference's rule; it checks the others at run time).
      dw->zero = u8 ? int32_t{zc->data<uint8_t>()[d * per_dir]} - 128 : int32_t{zc->data<int8_t>()[d * per_dir]};
      out.push_back(std::move(dw));
    }
  }

  ir::Node node_;
  std::vector<std::unique_ptr<DirWeight>> weights_[2];  ///< W, R per direction
};

}  // namespace

BoundKernel make_dynamic_quantize_lstm(const ir::Node& n, const ir::Model& m) {
  auto products = std::make_shared<CpuProducts>(n, m);
  // Make the products the static shapes call for now (load time, not the first run).
  const ir::Value& x = m.value(n.inputs.at(0));
  if (x.shape && ir::is_static(*x.shape) && x.shape->size() == 3) {
    const auto xd = ir::to_sizes(*x.shape);
    for (auto& w : products->weights(false)) products->matmul(*w, xd[0] * xd[1]);
    for (auto& r : products->weights(true)) products->matmul(*r, xd[1]);
  }
  return [products](ops::KernelContext& ctx) { ops::dynamic_quantize_lstm(ctx, products.get()); };
}

}  // namespace kiln::targets::cpu
