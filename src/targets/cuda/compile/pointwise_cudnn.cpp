// Matmuls by constant weights as cuDNN 1x1 convolutions (pointwise_cudnn.h:
// gemms_to_convs), and the switch that keeps 1x1 convolutions on cuDNN.
//
// Why: a fresh process's first result waits for cuBLASLt's one-time start
// (its first heuristic query or algorithm check, ~115 ms on the H200, then
// ~45 ms of its kernels' lazy loads, one after another), which needs the CUDA
// context and overlaps nothing on the plan thread
// (bench/results/cuda/warm_start_20261202.md). A ResNet-class program uses
// cuBLASLt only for its 1x1 convolutions (to_nhwc makes them matmuls) and its
// classifier (a Gemm by constant weights). Both are 1x1 convolutions to
// cuDNN, whose plans are already built on their own thread: with every one
// of them there, a load never starts cuBLASLt (CudaProgram creates its handle
// only for a program with a kiln.cuda.Gemm node). The steady-state cost is
// measured by scripts/device/warm_start.sh (kiln perf per variant).
#include "targets/cuda/compile/pointwise_cudnn.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <variant>

#include "support/log.h"
#include "targets/cuda/compile/codegen.h"
#include "targets/cuda/compile/lowering.h"

namespace kiln::targets::cuda {

bool pointwise_on_cudnn(const LowerOptions& opt) {
  if (opt.pointwise_cudnn) return *opt.pointwise_cudnn;
  const char* e = std::getenv("KILN_CUDA_POINTWISE");
  const std::string v = e ? e : "";
  if (v == "cudnn") return true;
  if (!v.empty() && v != "gemm") {
    static std::once_flag once;
    std::call_once(once, [&] { log().warn("KILN_CUDA_POINTWISE='{}' is neither 'cudnn' nor 'gemm': using 'gemm'", v); });
  }
  return false;
}

namespace {

/// A constant of exactly n values of dtype dt shaped [n] or [1, .., 1, n]
/// (a bias over the last axis), else nullptr.
const Tensor* row_constant(const ir::Model& m, ir::ValueId v, int64_t n, DType dt) {
  if (v == ir::kNoValue) return nullptr;
  const ir::Value& c = m.value(v);
  auto d = static_dims(m, v);
  if (!c.constant || c.dtype != dt || d.empty() || d.back() != n || c.constant->numel() != n) return nullptr;
  return &*c.constant;
}

/// One matmul this pass takes: y = a [M, K] x w^T + bias, w as [N, K].
struct Match {
  ir::ValueId a = ir::kNoValue, y = ir::kNoValue;  ///< the matmul's input and the final output (after a taken Add)
  int64_t M = 0, K = 0, N = 0;
  Tensor w;                    ///< [N, K] (row n: output channel n's weights)
  std::optional<Tensor> bias;  ///< N values, or none (a copy: adding values moves the model's)
  int add = -1;                  ///< index of a MatMul's bias Add taken with it
};

class GemmsToConvs {
 public:
  GemmsToConvs(ir::Model& m, bool nhwc) : m_(m), nhwc_(nhwc) {
    for (size_t i = 0; i < m.main.nodes.size(); ++i)
      for (auto v : m.main.nodes[i].inputs)
        if (v != ir::kNoValue) readers_[v].push_back(static_cast<int>(i));
    for (auto v : m.main.outputs) outputs_.insert(v);
    // A value read inside an If / Loop / Scan body is read there too (by name):
    // such a model keeps its bias Adds as they are.
    for (auto& n : m.main.nodes)
      for (auto& [k, a] : n.attrs)
        if (std::holds_alternative<std::shared_ptr<ir::Graph>>(a)) bodies_ = true;
  }

  int run() {
    std::vector<ir::Node>& nodes = m_.main.nodes;
    std::vector<bool> taken(nodes.size(), false);
    std::vector<ir::Node> out;
    out.reserve(nodes.size());
    int rewritten = 0;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (taken[i]) continue;
      std::optional<Match> mt = nodes[i].domain.empty() && nodes[i].op_type == "Gemm"     ? gemm(nodes[i])
                                : nodes[i].domain.empty() && nodes[i].op_type == "MatMul" ? matmul(nodes[i])
                                                                                          : std::nullopt;
      if (!mt) {
        out.push_back(std::move(nodes[i]));
        continue;
      }
      if (mt->add >= 0) taken[static_cast<size_t>(mt->add)] = true;
      emit(nodes[i], *mt, out);
      ++rewritten;
    }
    nodes = std::move(out);
    return rewritten;
  }

 private:
  ir::Model& m_;
  bool nhwc_;
  bool bodies_ = false;
  std::map<ir::ValueId, std::vector<int>> readers_;
  std::set<ir::ValueId> outputs_;

  bool dtypes_ok(const ir::Node& n, DType& dt) const {
    dt = m_.value(n.inputs[0]).dtype;
    return is_float_storage(dt) && m_.value(n.inputs[1]).dtype == dt && m_.value(n.outputs[0]).dtype == dt;
  }

  std::optional<Match> gemm(const ir::Node& n) const {
    if (n.inputs.size() < 2 || n.outputs.size() != 1) return std::nullopt;
    if (n.i("transA", 0) != 0 || n.f("alpha", 1.f) != 1.f || n.f("beta", 1.f) != 1.f) return std::nullopt;
    DType dt;
    if (!dtypes_ok(n, dt)) return std::nullopt;
    const ir::Value& bv = m_.value(n.inputs[1]);
    auto a = static_dims(m_, n.inputs[0]), b = static_dims(m_, n.inputs[1]), y = static_dims(m_, n.outputs[0]);
    if (!bv.constant || a.size() != 2 || b.size() != 2 || y.size() != 2) return std::nullopt;
    const bool tb = n.i("transB", 0) != 0;
    Match mt;
    mt.a = n.inputs[0], mt.y = n.outputs[0];
    mt.M = a[0], mt.K = a[1], mt.N = tb ? b[0] : b[1];
    if ((tb ? b[1] : b[0]) != mt.K || y != std::vector<int64_t>{mt.M, mt.N}) return std::nullopt;
    if (n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue) {
      const Tensor* c = row_constant(m_, n.inputs[2], mt.N, dt);
      if (!c || static_dims(m_, n.inputs[2]).size() > 2) return std::nullopt;
      mt.bias = *c;
    }
    mt.w = tb ? *bv.constant : permute_constant(*bv.constant, {1, 0});
    return mt;
  }

  std::optional<Match> matmul(const ir::Node& n) const {
    if (n.inputs.size() != 2 || n.outputs.size() != 1) return std::nullopt;
    DType dt;
    if (!dtypes_ok(n, dt)) return std::nullopt;
    const ir::Value& bv = m_.value(n.inputs[1]);
    auto a = static_dims(m_, n.inputs[0]), b = static_dims(m_, n.inputs[1]), y = static_dims(m_, n.outputs[0]);
    if (!bv.constant || a.size() < 2 || b.size() != 2 || a.back() != b[0] || y.size() != a.size()) return std::nullopt;
    Match mt;
    mt.a = n.inputs[0], mt.y = n.outputs[0];
    mt.M = 1;
    for (size_t j = 0; j + 1 < a.size(); ++j) mt.M *= a[j];
    mt.K = b[0], mt.N = b[1];
    std::vector<int64_t> want(a.begin(), a.end() - 1);
    want.push_back(mt.N);
    if (y != want) return std::nullopt;
    mt.w = permute_constant(*bv.constant, {1, 0});
    // A bias Add that only this matmul's result feeds: cuDNN's bias epilogue.
    auto it = readers_.find(n.outputs[0]);
    if (!bodies_ && !outputs_.count(n.outputs[0]) && it != readers_.end() && it->second.size() == 1) {
      const ir::Node& add = m_.main.nodes[static_cast<size_t>(it->second[0])];
      if (add.domain.empty() && add.op_type == "Add" && add.inputs.size() == 2 && add.inputs[0] != add.inputs[1] &&
          static_dims(m_, add.outputs[0]) == y && m_.value(add.outputs[0]).dtype == dt) {
        ir::ValueId other = add.inputs[0] == n.outputs[0] ? add.inputs[1] : add.inputs[0];
        if (const Tensor* c = row_constant(m_, other, mt.N, dt); c && static_dims(m_, other).size() <= y.size()) {
          mt.bias = *c;
          mt.add = it->second[0];
          mt.y = add.outputs[0];
        }
      }
    }
    return mt;
  }

  ir::Node make(const ir::Node& like, const std::string& op, const std::string& suffix, std::vector<ir::ValueId> in,
                ir::ValueId y) const {
    ir::Node n;
    n.op_type = op;
    n.name = like.name + suffix;
    n.opset = like.opset;
    n.inputs = std::move(in);
    n.outputs = {y};
    return n;
  }

  void emit(const ir::Node& n, const Match& mt, std::vector<ir::Node>& out) {
    const DType dt = m_.value(n.inputs[0]).dtype;
    const std::string base = m_.value(n.outputs[0]).name + "_conv1x1";
    auto four = [&](int64_t rows, int64_t ch) {
      return nhwc_ ? std::vector<int64_t>{rows, 1, 1, ch} : std::vector<int64_t>{rows, ch, 1, 1};
    };
    const ir::ValueId x4 = new_value(m_, base + "_x", dt, four(mt.M, mt.K));
    out.push_back(make(n, "Reshape", "_to_conv", {mt.a, shape_constant(m_, base + "_xs", four(mt.M, mt.K))}, x4));
    ir::Value wv;
    wv.name = base + "_w";
    wv.dtype = dt;
    const std::vector<int64_t> wd = nhwc_ ? std::vector<int64_t>{mt.N, 1, 1, mt.K} : std::vector<int64_t>{mt.N, mt.K, 1, 1};
    wv.shape = ir::static_shape(wd);
    wv.constant = mt.w.reshaped(wd);  // [N, K] row-major is both [N,1,1,K] and [N,K,1,1]
    ir::ValueId y4 = new_value(m_, base + "_y", dt, four(mt.M, mt.N));
    ir::Node conv = make(n, "Conv", "", {x4, m_.add_value(std::move(wv))}, y4);  // keeps the matmul's name (profiles)
    conv.attrs["kernel_shape"] = std::vector<int64_t>{1, 1};
    if (nhwc_) conv.attrs["kiln_nhwc"] = int64_t{1};
    out.push_back(std::move(conv));
    if (mt.bias) {
      ir::Value cv;
      cv.name = base + "_bias";
      cv.dtype = dt;
      const std::vector<int64_t> cd = nhwc_ ? std::vector<int64_t>{1, 1, 1, mt.N} : std::vector<int64_t>{1, mt.N, 1, 1};
      cv.shape = ir::static_shape(cd);
      cv.constant = mt.bias->reshaped(cd);
      const ir::ValueId yb = new_value(m_, base + "_yb", dt, four(mt.M, mt.N));
      out.push_back(make(n, "Add", "_bias", {y4, m_.add_value(std::move(cv))}, yb));
      y4 = yb;
    }
    out.push_back(make(n, "Reshape", "_from_conv", {y4, shape_constant(m_, base + "_ys", static_dims(m_, mt.y))}, mt.y));
  }
};

}  // namespace

int gemms_to_convs(ir::Model& m, bool nhwc) {
  const int n = GemmsToConvs(m, nhwc).run();
  if (n) log().debug("cuda: {} matmul(s) by constant weights as cuDNN 1x1 convolutions (KILN_CUDA_POINTWISE=cudnn)", n);
  return n;
}

}  // namespace kiln::targets::cuda
