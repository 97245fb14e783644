// Int8Matmul (int8_matmul.h). oneDNN's products are exact only where its
// kernels multiply with VNNI (vpdpbusd) or AMX: without VNNI they pair
// products in saturating int16 (vpmaddubsw), hence int8_exact_isa.
#include "targets/cpu/run/int8_matmul.h"

#include <cstdlib>
#include <unordered_map>
#include <vector>

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

bool int8_products_exact_in_f32(const int8_t* w, int64_t outputs, int64_t reduce, int64_t o_stride,
                                int64_t r_stride) {
  constexpr int64_t kLimit = int64_t{1} << 24;  // float32 holds every integer up to 2^24
  for (int64_t o = 0; o < outputs; ++o) {
    int64_t s = 0;
    for (int64_t r = 0; r < reduce; ++r) s += std::abs(int64_t{w[o * o_stride + r * r_stride]});
    if (255 * s > kLimit) return false;
  }
  return true;
}

namespace {

/// 8-bit values (uint8 or int8) to float32, on the calling thread's OpenMP team.
void int8_to_f32(const void* a, DType type, int64_t count, float* out) {
#pragma omp parallel for schedule(static) if (count > (1 << 16))
  for (int64_t i = 0; i < count; ++i)
    out[i] = type == DType::u8 ? static_cast<float>(static_cast<const uint8_t*>(a)[i])
                               : static_cast<float>(static_cast<const int8_t*>(a)[i]);
}

}  // namespace

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
  if (!int8_exact_isa() || impl_.rfind("ref", 0) == 0) {
    if (!int8_products_exact_in_f32(b, N, K, 1, N))
      fail(ErrorCode::incompatible_artifact,
           "{}: oneDNN has no int8-exact optimised matmul on this machine (ISA {}, implementation {}), and the "
           "weights' column sums are too large for exact float32 products",
           n.label(), onednn_isa(), impl_);
    f32_ = true;
    pd = guarded(n, "float32 matmul primitive descriptor (int8 products)", [&] {
      md_t src({M, K}, dt::f32, tag::ab), wei({K, N}, dt::f32, tag::any), dst({M, N}, dt::f32, tag::ab);
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei, dst), attr, engine());
    });
    impl_ = std::string(pd.impl_info_str()) + " (f32)";
  }
  src_ = pd.src_desc();
  dst_ = pd.dst_desc();
  scratch_ = pd.scratchpad_desc();
  scratch_bytes_ = md_bytes(scratch_);
  guarded(n, "int8 weight reorder", [&] {
    std::vector<float> bf;
    if (f32_) {
      bf.resize(static_cast<size_t>(K * N));
      int8_to_f32(b, DType::i8, K * N, bf.data());
    }
    dnnl::memory plain(md_t({K, N}, f32_ ? dt::f32 : dt::s8, tag::ab), engine(),
                       f32_ ? static_cast<void*>(bf.data()) : const_cast<int8_t*>(b));
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
  // float32 mode: a as float32 in this thread's buffer 1, the float32 product in buffer 2.
  float* af = f32_ ? static_cast<float*>(thread_buffer(1, md_bytes(src_))) : nullptr;
  float* cf = f32_ ? static_cast<float*>(thread_buffer(2, md_bytes(dst_))) : nullptr;
  if (f32_) int8_to_f32(a, a_type_, M_ * K_, af);
  try {
    args[DNNL_ARG_SRC] = dnnl::memory(src_, engine(), f32_ ? static_cast<void*>(af) : const_cast<void*>(a));
    args[DNNL_ARG_WEIGHTS] = weights_;
    args[DNNL_ARG_DST] = dnnl::memory(dst_, engine(), f32_ ? static_cast<void*>(cf) : static_cast<void*>(c));
    if (scratch_bytes_) args[DNNL_ARG_SCRATCHPAD] = wrap(scratch_, thread_scratch(scratch_bytes_));
    prim_.execute(stream(), args);
    stream().wait();
  } catch (const dnnl::error& e) {
    fail(ErrorCode::internal, "{}: oneDNN int8 matmul failed: {}", n.label(), e.what());
  }
  if (f32_) {  // integers of magnitude <= 2^24 (int8_products_exact_in_f32): the conversion is exact
    const int64_t count = M_ * N_;
#pragma omp parallel for schedule(static) if (count > (1 << 16))
    for (int64_t i = 0; i < count; ++i) c[i] = static_cast<int32_t>(cf[i]);
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
