// kiln.cpu.MatMulInteger: ONNX MatMulInteger with constant 2-D weights on
// oneDNN's int8 matmul (u8/s8 x s8 -> s32), bit-exact to the reference kernel.
//
// The lowering (compile/lower_integer.cpp) stores the weights as s8 B' (uint8
// weights shifted by -128, their zero point likewise); Int8Matmul
// (int8_matmul.h) computes sum_k (a - az)(B' - bz) with oneDNN's plain int8
// product and kiln's zero-point terms, modulo 2^32 like the reference.
#include <memory>

#include "support/error.h"
#include "targets/cpu/run/cpu_kernels.h"
#include "targets/cpu/run/int8_matmul.h"

namespace kiln::targets::cpu {

namespace {

/// The dims and operand types of a kiln.cpu.MatMulInteger node.
struct MmiDims {
  int64_t M = 0, K = 0, N = 0;
  DType a_type = DType::u8;
  bool a_zero = false, b_zero = false;
};

MmiDims mmi_dims(const ir::Node& n, const ir::Model& m) {
  if (n.inputs.size() < 2 || n.outputs.size() != 1 || n.outputs[0] == ir::kNoValue)
    fail(ErrorCode::corrupt_artifact, "{}: a MatMulInteger needs A, B and one output", n.label());
  MmiDims d;
  d.M = n.i("M", 0);
  d.K = n.i("K", 0);
  d.N = n.i("N", 0);
  const ir::Value& a = m.value(n.inputs[0]);
  const ir::Value& b = m.value(n.inputs[1]);
  const ir::Value& y = m.value(n.outputs[0]);
  d.a_type = a.dtype;
  auto numel = [](const ir::Value& v) {
    int64_t e = 1;
    for (auto s : ir::to_sizes(*v.shape)) e *= s;
    return e;
  };
  auto fixed = [](const ir::Value& v) { return v.shape && ir::is_static(*v.shape); };
  if (d.M <= 0 || d.K <= 0 || d.N <= 0 || (a.dtype != DType::u8 && a.dtype != DType::i8) || !fixed(a) ||
      numel(a) != d.M * d.K || b.dtype != DType::i8 || !b.constant || b.constant->numel() != d.K * d.N ||
      y.dtype != DType::i32 || !fixed(y) || numel(y) != d.M * d.N)
    fail(ErrorCode::corrupt_artifact,
         "{}: MatMulInteger operands do not match M={} K={} N={} (A u8/s8 of M*K, constant s8 B of K*N, i32 output)",
         n.label(), d.M, d.K, d.N);
  d.a_zero = n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue;
  d.b_zero = n.inputs.size() > 3 && n.inputs[3] != ir::kNoValue;
  if (d.b_zero) {
    const ir::Value& bz = m.value(n.inputs[3]);
    if (bz.dtype != DType::i32 || !bz.constant || (bz.constant->numel() != 1 && bz.constant->numel() != d.N))
      fail(ErrorCode::corrupt_artifact, "{}: b_zero_point must be a constant int32 of 1 or {} values", n.label(), d.N);
  }
  return d;
}

struct MmiState {
  MmiDims d;
  std::unique_ptr<Int8Matmul> mm;
  std::vector<int64_t> out_shape;

  void run(ops::KernelContext& ctx) const {
    const Tensor& a = ctx.in(0);
    if (a.numel() != d.M * d.K || a.dtype() != d.a_type)
      fail(ErrorCode::invalid_input, "{}: A is {}, expected {} elements of {}", ctx.node.label(), a.describe(),
           d.M * d.K, dtype_name(d.a_type));
    std::vector<int32_t> az;
    if (d.a_zero && ctx.has(2)) {
      const Tensor& z = ctx.in(2);
      if ((z.dtype() != DType::u8 && z.dtype() != DType::i8) || (z.numel() != 1 && z.numel() != d.M))
        fail(ErrorCode::invalid_input, "{}: a_zero_point must be uint8 or int8 with 1 or {} values, got {}",
             ctx.node.label(), d.M, z.describe());
      for (int64_t i = 0; i < z.numel(); ++i)
        az.push_back(z.dtype() == DType::u8 ? int32_t{z.data<uint8_t>()[i]} : int32_t{z.data<int8_t>()[i]});
    }
    Tensor& y = ctx.output(0, DType::i32, out_shape);
    mm->run(ctx.node, a.raw(), az.data(), static_cast<int64_t>(az.size()), y.data<int32_t>());
  }
};

}  // namespace

dnnl::matmul::primitive_desc matmul_integer_pd(const ir::Node& n, const ir::Model& m) {
  const MmiDims d = mmi_dims(n, m);
  return guarded(n, "int8 matmul primitive descriptor", [&] { return int8_matmul_pd(d.M, d.K, d.N, d.a_type); });
}

BoundKernel make_matmul_integer(const ir::Node& n, const ir::Model& m) {
  auto st = std::make_shared<MmiState>();
  st->d = mmi_dims(n, m);
  st->out_shape = ir::to_sizes(*m.value(n.outputs[0]).shape);
  std::vector<int32_t> bz;
  if (st->d.b_zero) {
    const Tensor& t = *m.value(n.inputs[3]).constant;
    bz.assign(t.data<int32_t>(), t.data<int32_t>() + t.numel());
  }
  st->mm = std::make_unique<Int8Matmul>(n, st->d.M, st->d.K, st->d.N, st->d.a_type,
                                        m.value(n.inputs[1]).constant->data<int8_t>(), std::move(bz));
  return [st](ops::KernelContext& ctx) { st->run(ctx); };
}

}  // namespace kiln::targets::cpu
