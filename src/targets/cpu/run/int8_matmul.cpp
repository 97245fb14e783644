// Int8Matmul (int8_matmul.h). oneDNN's products are exact only where its
// kernels multiply with VNNI (vpdpbusd) or AMX: without VNNI they pair
// products in saturating int16 (vpmaddubsw), hence int8_exact_isa.
#include "targets/cpu/run/int8_matmul.h"

#include <unordered_map>

#include "support/error.h"

namespace kiln::targets::cpu {

using dt = dnnl::memory::data_type;

bool int8_exact_isa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx2_vnni:
    case dnnl::cpu_isa::avx512_core_vnni:
    case dnnl::cpu_isa::avx512_core_bf16:
    case dnnl::cpu_isa::avx512_core_amx: return true;
    default: return false;
  }
}

dnnl::memory::data_type int8_type(DType t) { return t == DType::u8 ? dt::u8 : dt::s8; }

dnnl::matmul::primitive_desc int8_matmul_pd(int64_t M, int64_t K, int64_t N, DType a_type) {
  md_t src({M, K}, int8_type(a_type), tag::ab), wei({K, N}, dt::s8, tag::any), dst({M, N}, dt::s32, tag::ab);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei, dst), attr, engine());
}

Int8Matmul::Int8Matmul(const ir::Node& n, int64_t M, int64_t K, int64_t N, DType a_type, const int8_t* b,
                       std::vector<int32_t> bz)
    : M_(M), K_(K), N_(N), a_type_(a_type) {
  auto pd = guarded(n, "int8 matmul primitive descriptor", [&] { return int8_matmul_pd(M, K, N, a_type); });
  impl_ = pd.impl_info_str();
  if (!int8_exact_isa() || impl_.rfind("ref", 0) == 0)
    fail(ErrorCode::incompatible_artifact,
         "{}: oneDNN has no int8-exact optimised matmul on this machine (ISA {}, implementation {})", n.label(),
         onednn_isa(), impl_);
  src_ = pd.src_desc();
  dst_ = pd.dst_desc();
  scratch_ = pd.scratchpad_desc();
  scratch_bytes_ = md_bytes(scratch_);
  guarded(n, "int8 weight reorder", [&] {
    dnnl::memory plain(md_t({K, N}, dt::s8, tag::ab), engine(), const_cast<int8_t*>(b));
    weights_ = dnnl::memory(pd.weights_desc(), engine());
    dnnl::reorder(plain, weights_).execute(stream(), plain, weights_);
    stream().wait();
    return 0;
  });
  colsum_.assign(static_cast<size_t>(N), 0u);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t c = 0; c < N; ++c) colsum_[static_cast<size_t>(c)] += static_cast<uint32_t>(int32_t{b[k * N + c]});
  for (int32_t z : bz) bz_.push_back(static_cast<uint32_t>(z));
  bool any = false;
  for (uint32_t z : bz_) any |= z != 0;
  if (!any) bz_.clear();
  prim_ = guarded(n, "int8 matmul primitive", [&] { return dnnl::matmul(pd); });
}

void Int8Matmul::run(const ir::Node& n, const void* a, const int32_t* az, int64_t az_count, int32_t* c) const {
  std::unordered_map<int, dnnl::memory> args;
  try {
    args[DNNL_ARG_SRC] = dnnl::memory(src_, engine(), const_cast<void*>(a));
    args[DNNL_ARG_WEIGHTS] = weights_;
    args[DNNL_ARG_DST] = dnnl::memory(dst_, engine(), c);
    if (scratch_bytes_) args[DNNL_ARG_SCRATCHPAD] = wrap(scratch_, thread_scratch(scratch_bytes_));
    prim_.execute(stream(), args);
    stream().wait();
  } catch (const dnnl::error& e) {
    fail(ErrorCode::internal, "{}: oneDNN int8 matmul failed: {}", n.label(), e.what());
  }
  correct(a, az, az_count, c);
}

void Int8Matmul::correct(const void* a, const int32_t* az, int64_t az_count, int32_t* c) const {
  bool any_az = false;
  for (int64_t i = 0; i < az_count; ++i) any_az |= az[i] != 0;
  const bool any_bz = !bz_.empty();
  if (!any_az && !any_bz) return;
  const int64_t M = M_, N = N_, K = K_;
  std::vector<uint32_t> rowsum(any_bz ? static_cast<size_t>(M) : 0, 0u);
  for (int64_t r = 0; any_bz && r < M; ++r) {
    uint32_t s = 0;
    if (a_type_ == DType::u8)
      for (const uint8_t *p = static_cast<const uint8_t*>(a) + r * K, *e = p + K; p < e; ++p) s += *p;
    else
      for (const int8_t *p = static_cast<const int8_t*>(a) + r * K, *e = p + K; p < e; ++p)
        s += static_cast<uint32_t>(int32_t{*p});
    rowsum[static_cast<size_t>(r)] = s;
  }
  const uint32_t uK = static_cast<uint32_t>(K);
#pragma omp parallel for schedule(static) if (M * N > (1 << 16))
  for (int64_t r = 0; r < M; ++r) {
    const uint32_t z = any_az ? static_cast<uint32_t>(az[az_count == 1 ? 0 : r]) : 0u;
    const uint32_t rs = any_bz ? rowsum[static_cast<size_t>(r)] : 0u;
    uint32_t* row = reinterpret_cast<uint32_t*>(c + r * N);
    if (bz_.size() <= 1) {
      const uint32_t b = any_bz ? bz_[0] : 0u, k = uK * z * b - b * rs;
      for (int64_t j = 0; j < N; ++j) row[j] += k - z * colsum_[static_cast<size_t>(j)];
    } else {
      for (int64_t j = 0; j < N; ++j) {
        const uint32_t b = bz_[static_cast<size_t>(j)];
        row[j] += uK * z * b - b * rs - z * colsum_[static_cast<size_t>(j)];
      }
    }
  }
}

}  // namespace kiln::targets::cpu
