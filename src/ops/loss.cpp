// Loss operators: NegativeLogLikelihoodLoss-22 and SoftmaxCrossEntropyLoss-13
// (https://onnx.ai/onnx/operators/).
//
// Both see the scores as a view [N, C, inner] (inner = d1 * ... * dk) and the
// integer targets as [N, inner]. For each position, with t = target:
//   loss = -input[n, t, d] * w[t]     (w = 1 without the weight input)
// and a position whose target equals ignore_index contributes loss 0 and
// weight 0. reduction = none keeps the [N, d1..dk] losses; sum adds them;
// mean divides the sum by the total weight of the positions that are not
// ignored (0 / 0 gives NaN, as the spec's reference implementation does).
// SoftmaxCrossEntropyLoss first takes log_softmax over C (axis 1) and applies
// the same loss to it; its optional second output is that log_softmax.
// dtypes: scores and weights float32 / float64 (computed in double); targets
// int32 / int64. A target outside [0, C) that is not ignore_index is an
// invalid_input error.
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "ops/util.h"

namespace kiln::ops {

namespace {

enum class Reduction { none, sum, mean };

Reduction reduction_of(const ir::Node& n) {
  const std::string r = n.s("reduction", "mean");
  if (r == "none") return Reduction::none;
  if (r == "sum") return Reduction::sum;
  if (r == "mean") return Reduction::mean;
  fail(ErrorCode::invalid_model, "{}: reduction '{}' is not one of none, sum, mean", n.label(), r);
}

std::optional<int64_t> ignore_index_of(const ir::Node& n) {
  if (!n.has("ignore_index")) return std::nullopt;
  return n.i("ignore_index");
}

void check_float(const ir::Node& n, DType t, const char* what) {
  if (t != DType::f32 && t != DType::f64) unsupported_dtype(n, t, what);
}

void check_index(const ir::Node& n, DType t, const char* what) {
  if (t != DType::i32 && t != DType::i64) unsupported_dtype(n, t, what);
}

/// Output types shared by both losses: the loss (target's shape for
/// reduction none, a scalar otherwise) and, for SCE, log_prob like the scores.
std::vector<OutType> infer_loss(const InferContext& c) {
  const InType& x = c.in(0);
  const InType& t = c.in(1);
  check_float(c.node, x.dtype, "input 0 (scores)");
  check_index(c.node, t.dtype, "input 1 (target)");
  if (c.has(2)) check_float(c.node, c.in(2).dtype, "input 2 (weight)");
  if (x.shape && x.shape->size() < 2)
    fail(ErrorCode::invalid_model, "{}: scores {} must have rank >= 2 ([N, C, d1, ...])", c.node.label(),
         ir::shape_str(x.shape));
  if (x.shape && t.shape && t.shape->size() + 1 != x.shape->size())
    fail(ErrorCode::invalid_model, "{}: target {} must have rank {} (scores {} without dim 1)", c.node.label(),
         ir::shape_str(t.shape), x.shape->size() - 1, ir::shape_str(x.shape));
  std::vector<OutType> out(c.num_outputs);
  out[0].dtype = x.dtype;
  if (reduction_of(c.node) != Reduction::none) {
    out[0].shape = ir::Shape{};
  } else if (t.shape) {
    out[0].shape = t.shape;
  } else if (x.shape) {
    ir::Shape s = *x.shape;
    s.erase(s.begin() + 1);
    out[0].shape = s;
  }
  for (size_t i = 1; i < out.size(); ++i) out[i] = OutType{x.dtype, x.shape};
  return out;
}

/// Dimensions of the [N, C, inner] view, checked against the target's shape.
struct LossDims {
  int64_t N, C, inner;
};

LossDims loss_dims(const ir::Node& n, const Tensor& x, const Tensor& t) {
  if (x.rank() < 2)
    fail(ErrorCode::invalid_input, "{}: scores {} must have rank >= 2 ([N, C, d1, ...])", n.label(), x.describe());
  std::vector<int64_t> want = x.shape();
  want.erase(want.begin() + 1);
  if (t.shape() != want)
    fail(ErrorCode::invalid_input, "{}: target {} must have shape [{}] (scores {} without dim 1)", n.label(),
         t.describe(), shape_to_string(want), x.describe());
  return {x.dim(0), x.dim(1), prod(x.shape(), 2)};
}

/// The class weights as doubles (empty when the input is absent).
std::vector<double> class_weights(const ir::Node& n, const KernelContext& ctx, int64_t C) {
  if (!ctx.has(2)) return {};
  const Tensor& w = ctx.in(2);
  check_float(n, w.dtype(), "input 2 (weight)");
  if (w.rank() != 1 || w.dim(0) != C)
    fail(ErrorCode::invalid_input, "{}: weight {} must have shape [{}] (one per class)", n.label(), w.describe(), C);
  std::vector<double> v(static_cast<size_t>(C));
  for (int64_t i = 0; i < C; ++i) v[i] = element_as_double(w, i);
  return v;
}

/// Writes the loss of log-probabilities lp ([N, C, inner] doubles) into
/// output 0, following the file comment.
void nll_from(KernelContext& ctx, const std::vector<double>& lp, const LossDims& d, const Tensor& target,
              DType dtype) {
  const ir::Node& n = ctx.node;
  const std::vector<int64_t> tv = to_int64s(target);
  const std::vector<double> w = class_weights(n, ctx, d.C);
  const std::optional<int64_t> ignore = ignore_index_of(n);
  const Reduction red = reduction_of(n);
  std::vector<double> loss(tv.size());
  double total = 0, total_w = 0;
  for (int64_t b = 0; b < d.N; ++b)
    for (int64_t i = 0; i < d.inner; ++i) {
      const size_t p = static_cast<size_t>(b * d.inner + i);
      const int64_t cls = tv[p];
      if (ignore && cls == *ignore) {
        loss[p] = 0;
        continue;
      }
      if (cls < 0 || cls >= d.C)
        fail(ErrorCode::invalid_input, "{}: target value {} at position {} is outside [0, {})", n.label(), cls, p,
             d.C);
      const double wt = w.empty() ? 1.0 : w[static_cast<size_t>(cls)];
      loss[p] = -lp[static_cast<size_t>((b * d.C + cls) * d.inner + i)] * wt;
      total += loss[p];
      total_w += wt;
    }
  std::vector<int64_t> shape = target.shape();
  if (red != Reduction::none) {
    shape.clear();
    loss.assign(1, red == Reduction::sum ? total : total / total_w);
  }
  Tensor& y = ctx.output(0, dtype, shape);
  KILN_DISPATCH_FLOAT(dtype, n, "output 0", {
    for (size_t i = 0; i < loss.size(); ++i) y.data<scalar_t>()[i] = static_cast<scalar_t>(loss[i]);
  });
}

/// A float32/float64 tensor's elements as doubles.
std::vector<double> as_doubles(const ir::Node& n, const Tensor& x) {
  std::vector<double> v(static_cast<size_t>(x.numel()));
  KILN_DISPATCH_FLOAT(x.dtype(), n, "input 0", {
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(x.data<scalar_t>()[i]);
  });
  return v;
}

void kernel_nll(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& t = ctx.in(1);
  check_float(ctx.node, x.dtype(), "input 0 (input)");
  check_index(ctx.node, t.dtype(), "input 1 (target)");
  const LossDims d = loss_dims(ctx.node, x, t);
  nll_from(ctx, as_doubles(ctx.node, x), d, t, x.dtype());
}

/// log_softmax over C of each (n, i) column of the [N, C, inner] view, in place.
void log_softmax_dim1(std::vector<double>& v, const LossDims& d) {
  for (int64_t b = 0; b < d.N; ++b)
    for (int64_t i = 0; i < d.inner; ++i) {
      double* p = v.data() + b * d.C * d.inner + i;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t c = 0; c < d.C; ++c) mx = std::max(mx, p[c * d.inner]);
      double s = 0;
      for (int64_t c = 0; c < d.C; ++c) s += std::exp(p[c * d.inner] - mx);
      const double lse = mx + std::log(s);
      for (int64_t c = 0; c < d.C; ++c) p[c * d.inner] -= lse;
    }
}

void kernel_sce(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& t = ctx.in(1);
  check_float(ctx.node, x.dtype(), "input 0 (scores)");
  check_index(ctx.node, t.dtype(), "input 1 (labels)");
  const LossDims d = loss_dims(ctx.node, x, t);
  std::vector<double> lp = as_doubles(ctx.node, x);
  log_softmax_dim1(lp, d);
  nll_from(ctx, lp, d, t, x.dtype());
  if (ctx.num_outputs() > 1) {
    Tensor& y = ctx.output(1, x.dtype(), x.shape());
    KILN_DISPATCH_FLOAT(x.dtype(), ctx.node, "output 1", {
      for (size_t i = 0; i < lp.size(); ++i) y.data<scalar_t>()[i] = static_cast<scalar_t>(lp[i]);
    });
  }
}

}  // namespace

/// Registers NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.
void register_loss(Registry& r) {
  r.add({"", "NegativeLogLikelihoodLoss", infer_loss, kernel_nll});
  r.add({"", "SoftmaxCrossEntropyLoss", infer_loss, kernel_sce});
}

}  // namespace kiln::ops
