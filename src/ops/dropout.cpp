// Dropout-22 (https://onnx.ai/onnx/operators/onnx__Dropout.html), inference.
//
// Inputs: data, optional ratio (scalar float, default 0.5), optional
// training_mode (scalar bool, default false). Outputs: output, optional mask
// (bool, data's shape). Without training (or with ratio 0, where nothing is
// dropped and the 1/(1-ratio) scale is 1) the output is a copy of data and the
// mask is all true. Training with ratio > 0 draws random numbers, which no
// stored expected output can match and a compiled program should not depend
// on: it is rejected as unsupported, at compile time when training_mode and
// ratio are constants, else when the kernel sees their values. data may be of
// any fixed-size dtype (it is only copied).
#include <cstring>

#include "ops/util.h"

namespace kiln::ops {

namespace {

/// The training_mode input's value (false when absent).
bool training(const Tensor* t) { return t && element_as_double(*t, 0) != 0.0; }

/// The ratio input's value (0.5 when absent, as the spec's default).
double ratio_of(const Tensor* t) { return t ? element_as_double(*t, 0) : 0.5; }

[[noreturn]] void reject_training(const ir::Node& n, double ratio) {
  fail(ErrorCode::unsupported,
       "{}: training_mode=true with ratio {} drops random elements, which kiln does not support (only inference, "
       "or ratio 0)",
       n.label(), ratio);
}

void check_scalar(const ir::Node& n, const Tensor& t, const char* what) {
  if (t.numel() != 1) fail(ErrorCode::invalid_input, "{}: {} {} must be a scalar", n.label(), what, t.describe());
}

std::vector<OutType> infer_dropout(const InferContext& c) {
  const InType& x = c.in(0);
  if (dtype_size(x.dtype) == 0) unsupported_dtype(c.node, x.dtype, "input 0");
  if (c.has(1) && !dtype_is_float(c.in(1).dtype)) unsupported_dtype(c.node, c.in(1).dtype, "input 1 (ratio)");
  if (c.has(2) && c.in(2).dtype != DType::boolean)
    unsupported_dtype(c.node, c.in(2).dtype, "input 2 (training_mode)");
  // Reject at compile time when the values are known; otherwise the kernel decides.
  if (c.has(2) && c.in(2).value && training(c.in(2).value) && (!c.has(1) || c.in(1).value)) {
    const double r = ratio_of(c.has(1) ? c.in(1).value : nullptr);
    if (r != 0.0) reject_training(c.node, r);
  }
  std::vector<OutType> out(c.num_outputs, OutType{DType::boolean, x.shape});
  out[0].dtype = x.dtype;
  return out;
}

void kernel_dropout(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  if (dtype_size(x.dtype()) == 0) unsupported_dtype(n, x.dtype(), "input 0");
  const Tensor* ratio = ctx.has(1) ? &ctx.in(1) : nullptr;
  const Tensor* mode = ctx.has(2) ? &ctx.in(2) : nullptr;
  if (ratio) check_scalar(n, *ratio, "ratio");
  if (mode) check_scalar(n, *mode, "training_mode");
  if (training(mode)) {
    const double r = ratio_of(ratio);
    if (r != 0.0) reject_training(n, r);
  }
  Tensor& y = ctx.output(0, x.dtype(), x.shape());
  if (x.nbytes()) std::memcpy(y.raw(), x.raw(), x.nbytes());
  if (ctx.num_outputs() > 1) {
    Tensor& mask = ctx.output(1, DType::boolean, x.shape());
    for (int64_t i = 0; i < mask.numel(); ++i) mask.data<bool>()[i] = true;
  }
}

}  // namespace

/// Registers Dropout (inference form; see the file comment).
void register_dropout(Registry& r) { r.add({"", "Dropout", infer_dropout, kernel_dropout}); }

}  // namespace kiln::ops
