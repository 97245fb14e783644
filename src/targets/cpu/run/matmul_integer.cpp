// kiln.cpu.MatMulInteger: ONNX MatMulInteger with constant 2-D weights on
// oneDNN's int8 matmul (u8/s8 x s8 -> s32), bit-exact to the reference kernel.
//
// The lowering (compile/lower_integer.cpp) stores the weights as s8 B' (uint8
// weights shifted by -128, their zero point likewise), so with a = A's data,
// az its zero point and bz B''s zero point:
//   sum_k (a - az)(B' - bz) = sum_k a B'  - az colsum(B')[n]
//                             - bz[n] rowsum(a)[m] + K az[m] bz[n]
// oneDNN computes the first term without any zero point (its plainest and
// fastest int8 path); the kernel adds the others. Every term is taken modulo
// 2^32 (unsigned arithmetic), as the reference's int32 accumulation wraps, so
// the result is the reference's bit for bit. oneDNN's products are exact only
// where its kernels multiply with VNNI (vpdpbusd) or AMX: without VNNI they
// pair products in saturating int16 (vpmaddubsw), so the lowering and the
// kernel both require an int8-exact ISA (int8_exact_isa).
#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "support/error.h"
#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets::cpu {

bool int8_exact_isa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx2_vnni:
    case dnnl::cpu_isa::avx512_core_vnni:
    case dnnl::cpu_isa::avx512_core_bf16:
    case dnnl::cpu_isa::avx512_core_amx: return true;
    default: return false;
  }
}

dnnl::memory::data_type int8_type(DType t) {
  return t == DType::u8 ? dnnl::memory::data_type::u8 : dnnl::memory::data_type::s8;
}

namespace {

using dt = dnnl::memory::data_type;

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

/// Element i of a u8 / s8 tensor as int32.
int32_t int8_at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::u8 ? static_cast<int32_t>(t.data<uint8_t>()[i]) : t.data<int8_t>()[i];
}

struct MmiState {
  MmiDims d;
  dnnl::matmul prim;
  md_t src, dst, scratch;
  size_t scratch_bytes = 0;
  dnnl::memory weights;          ///< B' in the layout the primitive wants (owned)
  std::vector<uint32_t> colsum;  ///< sum_k B'[k, n], modulo 2^32
  std::vector<uint32_t> bz;      ///< B''s zero point: 1 or N values (empty: none)
  std::vector<int64_t> out_shape;

  /// y[m, n] += K az bz - az colsum[n] - bz rowsum[m], all modulo 2^32.
  void correct(const Tensor& a, const Tensor* az_t, int32_t* y) const {
    const int64_t M = d.M, N = d.N, K = d.K;
    const bool any_az = az_t != nullptr, any_bz = !bz.empty();
    if (!any_az && !any_bz) return;
    std::vector<uint32_t> rowsum(any_bz ? static_cast<size_t>(M) : 0, 0u);
    if (any_bz) {
      if (a.dtype() == DType::u8) {
        const uint8_t* p = a.data<uint8_t>();
        for (int64_t r = 0; r < M; ++r) {
          uint32_t s = 0;
          for (int64_t k = 0; k < K; ++k) s += p[r * K + k];
          rowsum[static_cast<size_t>(r)] = s;
        }
      } else {
        const int8_t* p = a.data<int8_t>();
        for (int64_t r = 0; r < M; ++r) {
          uint32_t s = 0;
          for (int64_t k = 0; k < K; ++k) s += static_cast<uint32_t>(static_cast<int32_t>(p[r * K + k]));
          rowsum[static_cast<size_t>(r)] = s;
        }
      }
    }
    const uint32_t uK = static_cast<uint32_t>(K);
#pragma omp parallel for schedule(static) if (M * N > (1 << 16))
    for (int64_t r = 0; r < M; ++r) {
      const uint32_t az = any_az ? static_cast<uint32_t>(int8_at(*az_t, az_t->numel() == 1 ? 0 : r)) : 0u;
      const uint32_t rs = any_bz ? rowsum[static_cast<size_t>(r)] : 0u;
      uint32_t* row = reinterpret_cast<uint32_t*>(y + r * N);
      if (bz.size() == 1) {
        const uint32_t c = uK * az * bz[0] - bz[0] * rs;
        for (int64_t c2 = 0; c2 < N; ++c2) row[c2] += c - az * colsum[static_cast<size_t>(c2)];
      } else {
        for (int64_t c2 = 0; c2 < N; ++c2) {
          const uint32_t b = any_bz ? bz[static_cast<size_t>(c2)] : 0u;
          row[c2] += uK * az * b - b * rs - az * colsum[static_cast<size_t>(c2)];
        }
      }
    }
  }

  void run(ops::KernelContext& ctx) const {
    const Tensor& a = ctx.in(0);
    if (a.numel() != d.M * d.K || a.dtype() != d.a_type)
      fail(ErrorCode::invalid_input, "{}: A is {}, expected {} elements of {}", ctx.node.label(), a.describe(),
           d.M * d.K, dtype_name(d.a_type));
    const Tensor* az = d.a_zero && ctx.has(2) ? &ctx.in(2) : nullptr;
    if (az && ((az->dtype() != DType::u8 && az->dtype() != DType::i8) || (az->numel() != 1 && az->numel() != d.M)))
      fail(ErrorCode::invalid_input, "{}: a_zero_point must be uint8 or int8 with 1 or {} values, got {}",
           ctx.node.label(), d.M, az->describe());
    Tensor& y = ctx.output(0, DType::i32, out_shape);
    std::unordered_map<int, dnnl::memory> args;
    args[DNNL_ARG_SRC] = dnnl::memory(src, engine(), const_cast<void*>(a.raw()));
    args[DNNL_ARG_WEIGHTS] = weights;
    args[DNNL_ARG_DST] = dnnl::memory(dst, engine(), y.raw());
    if (scratch_bytes) args[DNNL_ARG_SCRATCHPAD] = wrap(scratch, thread_scratch(scratch_bytes));
    try {
      prim.execute(stream(), args);
      stream().wait();
    } catch (const dnnl::error& e) {
      fail(ErrorCode::internal, "{}: oneDNN int8 matmul failed: {}", ctx.node.label(), e.what());
    }
    correct(a, az, y.data<int32_t>());
  }
};

}  // namespace

dnnl::matmul::primitive_desc matmul_integer_pd(const ir::Node& n, const ir::Model& m) {
  const MmiDims d = mmi_dims(n, m);
  return guarded(n, "int8 matmul primitive descriptor", [&] {
    md_t src({d.M, d.K}, int8_type(d.a_type), tag::ab);
    md_t wei({d.K, d.N}, dt::s8, tag::any);
    md_t dst({d.M, d.N}, dt::s32, tag::ab);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei, dst), attr, engine());
  });
}

BoundKernel make_matmul_integer(const ir::Node& n, const ir::Model& m) {
  auto st = std::make_shared<MmiState>();
  st->d = mmi_dims(n, m);
  st->out_shape = ir::to_sizes(*m.value(n.outputs[0]).shape);
  auto pd = matmul_integer_pd(n, m);
  if (!int8_exact_isa() || std::string(pd.impl_info_str()).rfind("ref", 0) == 0)
    fail(ErrorCode::incompatible_artifact,
         "{}: oneDNN has no int8-exact optimised matmul on this machine (ISA {}, implementation {})", n.label(),
         onednn_isa(), pd.impl_info_str());
  st->src = pd.src_desc();
  st->dst = pd.dst_desc();
  st->scratch = pd.scratchpad_desc();
  st->scratch_bytes = md_bytes(st->scratch);
  // Pack B' once, at load, into the primitive's layout.
  const Tensor& b = *m.value(n.inputs[1]).constant;
  const int64_t K = st->d.K, N = st->d.N;
  guarded(n, "int8 weight reorder", [&] {
    dnnl::memory plain(md_t({K, N}, dt::s8, tag::ab), engine(), const_cast<void*>(b.raw()));
    st->weights = dnnl::memory(pd.weights_desc(), engine());
    dnnl::reorder(plain, st->weights).execute(stream(), plain, st->weights);
    stream().wait();
    return 0;
  });
  st->colsum.assign(static_cast<size_t>(N), 0u);
  const int8_t* bp = b.data<int8_t>();
  for (int64_t k = 0; k < K; ++k)
    for (int64_t c = 0; c < N; ++c)
      st->colsum[static_cast<size_t>(c)] += static_cast<uint32_t>(static_cast<int32_t>(bp[k * N + c]));
  if (st->d.b_zero) {
    const Tensor& bz = *m.value(n.inputs[3]).constant;
    for (int64_t i = 0; i < bz.numel(); ++i) st->bz.push_back(static_cast<uint32_t>(bz.data<int32_t>()[i]));
  }
  st->prim = guarded(n, "int8 matmul primitive", [&] { return dnnl::matmul(pd); });
  return [st](ops::KernelContext& ctx) { st->run(ctx); };
}

}  // namespace kiln::targets::cpu
