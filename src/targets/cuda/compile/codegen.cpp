// Shared codegen helpers and the device prelude (codegen.h).
#include "targets/cuda/compile/codegen.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "support/error.h"
#include "targets/cuda/run/cuda_ops.h"

namespace kiln::targets::cuda {

void refuse(const ir::Node& n, const std::string& why) {
  fail(ErrorCode::unsupported, "{} (op_type {}) cannot be compiled for target cuda: {}", n.label(), n.op_type, why);
}

std::string Lowering::kernel_name(const std::string& op) {
  std::string s = fmt::format("k{}_", next_kernel++);
  for (char c : op)
    if (std::isalnum(static_cast<unsigned char>(c))) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<int64_t> Lowering::dims(const ir::Node& n, ir::ValueId v) const {
  const ir::Value& val = model.value(v);
  if (!val.shape || !ir::is_static(*val.shape))
    refuse(n, fmt::format("value '{}' has shape {}; the cuda target needs static shapes (give them with --shape)",
                          val.name, ir::shape_str(val.shape)));
  return ir::to_sizes(*val.shape);
}

ir::Node Lowering::kernel_node(const ir::Node& from, const std::string& fn, std::vector<ir::ValueId> inputs,
                               std::vector<ir::ValueId> outputs, int64_t grid, int64_t block, int64_t smem) const {
  ir::Node k;
  k.op_type = "Kernel";
  k.domain = std::string(kCudaDomain);
  k.name = from.name;
  k.opset = from.opset;
  k.inputs = std::move(inputs);
  k.outputs = std::move(outputs);
  k.attrs["fn"] = fn;
  k.attrs["grid"] = std::vector<int64_t>{grid, 1, 1};
  k.attrs["block"] = std::vector<int64_t>{block, 1, 1};
  k.attrs["smem"] = smem;
  k.attrs["source_op"] = from.op_type;
  return k;
}

int64_t Lowering::grid_for(int64_t n, int64_t block) const {
  int64_t g = (n + block - 1) / block;
  return std::max<int64_t>(std::min<int64_t>(g, int64_t{sm_count} * 32), n > 0 ? 1 : 0);
}

std::optional<std::string> c_type(DType t) {
  switch (t) {
    case DType::f32: return "float";
    case DType::f64: return "double";
    case DType::i64: return "long long";
    case DType::i32: return "int";
    case DType::i16: return "short";
    case DType::i8: return "signed char";
    case DType::u8: return "unsigned char";
    case DType::u16: return "unsigned short";
    case DType::u32: return "unsigned int";
    case DType::u64: return "unsigned long long";
    case DType::boolean: return "bool";
    default: return std::nullopt;
  }
}

bool is_half(DType t) { return t == DType::f16 || t == DType::bf16; }

bool is_float_storage(DType t) { return t == DType::f32 || is_half(t); }

std::optional<std::string> storage_type(DType t) {
  return is_half(t) ? std::optional<std::string>("unsigned short") : c_type(t);
}

std::string load_fn(DType t) { return t == DType::f16 ? "kl_h2f" : t == DType::bf16 ? "kl_bf2f" : ""; }

std::string store_fn(DType t) { return t == DType::f16 ? "kl_f2h" : t == DType::bf16 ? "kl_f2bf" : ""; }

std::string load_float(DType t, const std::string& e) { return is_half(t) ? load_fn(t) + "(" + e + ")" : e; }

std::string store_float(DType t, const std::string& e) { return is_half(t) ? store_fn(t) + "(" + e + ")" : e; }

std::string raw_type(size_t bytes) {
  switch (bytes) {
    case 1: return "unsigned char";
    case 2: return "unsigned short";
    case 4: return "unsigned int";
    default: return "unsigned long long";
  }
}

std::string vector_type(size_t bytes) {
  switch (bytes) {
    case 1: return "unsigned char";
    case 2: return "unsigned short";
    case 4: return "unsigned int";
    case 8: return "uint2";
    case 16: return "uint4";
    default: fail(ErrorCode::internal, "vector_type: no {}-byte access", bytes);
  }
}

std::string aligned_condition(const std::vector<std::pair<std::string, size_t>>& ptrs) {
  if (ptrs.empty()) return "true";
  std::string s;
  for (auto& [p, a] : ptrs)
    s += fmt::format("{}(((unsigned long long)({})) & {}ull)", s.empty() ? "" : " | ", p, a - 1);
  return "(" + s + ") == 0ull";
}

int64_t numel(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (auto d : dims) n *= d;
  return n;
}

std::vector<int64_t> strides_of(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (int64_t i = static_cast<int64_t>(dims.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * dims[i + 1];
  return s;
}

std::string index_type(int64_t n) { return n < (int64_t{1} << 31) ? "unsigned" : "unsigned long long"; }

std::string broadcast_index(const std::string& var, const std::string& i, const std::vector<int64_t>& in,
                            const std::vector<int64_t>& out) {
  int64_t nin = numel(in), nout = numel(out);
  if (nin == 1) return fmt::format("I {} = 0;", var);
  std::vector<int64_t> padded(out.size(), 1);
  std::copy(in.begin(), in.end(), padded.end() - static_cast<std::ptrdiff_t>(in.size()));
  if (nin == nout && padded == out) return fmt::format("I {} = {};", var, i);
  std::vector<int64_t> st = strides_of(padded);
  std::string s = fmt::format("I {} = 0; {{ I r = {};", var, i);
  // Walk dims from the innermost; stop dividing after the outermost dim that matters.
  int64_t first = 0;
  while (first < static_cast<int64_t>(out.size()) && padded[first] == 1) ++first;
  for (int64_t d = static_cast<int64_t>(out.size()) - 1; d >= first; --d) {
    if (padded[d] != 1) s += fmt::format(" {} += (r % {}u) * {}u;", var, out[d], st[d]);
    if (d > first) s += fmt::format(" r /= {}u;", out[d]);
  }
  return s + " }";
}

std::string float_literal(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return fmt::format("__int_as_float(0x{:08x})", bits);
}

int64_t norm_axis(const ir::Node& n, int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= std::max<int64_t>(rank, 1)) refuse(n, fmt::format("axis {} is out of range for rank {}", axis, rank));
  return a;
}

std::optional<std::vector<int64_t>> const_ints(const ir::Model& m, const ir::Node& n, size_t i) {
  if (i >= n.inputs.size() || n.inputs[i] == ir::kNoValue) return std::nullopt;
  const ir::Value& v = m.value(n.inputs[i]);
  if (!v.constant) refuse(n, fmt::format("input {} ('{}') must be a constant", i, v.name));
  const Tensor& t = *v.constant;
  std::vector<int64_t> out(static_cast<size_t>(t.numel()));
  for (int64_t k = 0; k < t.numel(); ++k) {
    if (t.dtype() == DType::i64) out[k] = t.data<int64_t>()[k];
    else if (t.dtype() == DType::i32) out[k] = t.data<int32_t>()[k];
    else refuse(n, fmt::format("input {} ('{}') must be int64 or int32", i, v.name));
  }
  return out;
}

std::pair<std::vector<int64_t>, std::vector<int64_t>> window_pads(const ir::Node& n, const std::vector<int64_t>& in,
                                                                    const std::vector<int64_t>& out,
                                                                    const std::vector<int64_t>& kernel,
                                                                    const std::vector<int64_t>& strides,
                                                                    const std::vector<int64_t>& dilations) {
  size_t k = in.size();
  std::vector<int64_t> b(k, 0), e(k, 0);
  std::string ap = n.s("auto_pad", "NOTSET");
  if (ap == "NOTSET") {
    auto p = n.ints("pads");
    if (!p.empty() && p.size() != 2 * k) refuse(n, "pads must have 2 entries per spatial dim");
    for (size_t i = 0; i < k && !p.empty(); ++i) b[i] = p[i], e[i] = p[i + k];
  } else if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
    for (size_t i = 0; i < k; ++i) {
      int64_t total = std::max<int64_t>(0, (out[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in[i]);
      b[i] = ap == "SAME_UPPER" ? total / 2 : total - total / 2;
      e[i] = total - b[i];
    }
  } else if (ap != "VALID") {
    refuse(n, "auto_pad '" + ap + "'");
  }
  return {b, e};
}

const char* kernel_prelude() {
  return R"(// kiln cuda target: generated kernels (NVRTC). Shapes are baked in.
#define KL_D __device__ __forceinline__
KL_D float kl_exp(float x) { return expf(x); }
KL_D double kl_exp(double x) { return exp(x); }
KL_D float kl_log(float x) { return logf(x); }
KL_D double kl_log(double x) { return log(x); }
KL_D float kl_sqrt(float x) { return sqrtf(x); }
KL_D double kl_sqrt(double x) { return sqrt(x); }
KL_D float kl_tanh(float x) { return tanhf(x); }
KL_D double kl_tanh(double x) { return tanh(x); }
KL_D float kl_erf(float x) { return erff(x); }
KL_D double kl_erf(double x) { return erf(x); }
KL_D float kl_floor(float x) { return floorf(x); }
KL_D double kl_floor(double x) { return floor(x); }
KL_D float kl_ceil(float x) { return ceilf(x); }
KL_D double kl_ceil(double x) { return ceil(x); }
KL_D float kl_round(float x) { return rintf(x); }
KL_D double kl_round(double x) { return rint(x); }
KL_D float kl_sin(float x) { return sinf(x); }
KL_D double kl_sin(double x) { return sin(x); }
KL_D float kl_cos(float x) { return cosf(x); }
KL_D double kl_cos(double x) { return cos(x); }
KL_D float kl_pow(float x, float y) { return powf(x, y); }
KL_D float kl_fmod(float x, float y) { return fmodf(x, y); }
KL_D double kl_fmod(double x, double y) { return fmod(x, y); }
KL_D double kl_pow(double x, double y) { return pow(x, y); }
KL_D float kl_log1p(float x) { return log1pf(x); }
KL_D double kl_log1p(double x) { return log1p(x); }
#define KL_MATH1(NAME, F, D) KL_D float NAME(float x) { return F(x); } KL_D double NAME(double x) { return D(x); }
KL_MATH1(kl_tan, tanf, tan) KL_MATH1(kl_asin, asinf, asin) KL_MATH1(kl_acos, acosf, acos) KL_MATH1(kl_atan, atanf, atan)
KL_MATH1(kl_sinh, sinhf, sinh) KL_MATH1(kl_cosh, coshf, cosh) KL_MATH1(kl_asinh, asinhf, asinh)
KL_MATH1(kl_acosh, acoshf, acosh) KL_MATH1(kl_atanh, atanhf, atanh)
KL_D bool kl_isnan(float x) { return isnan(x); }
KL_D bool kl_isnan(double x) { return isnan(x); }
// float16 / bfloat16 are stored as 16-bit patterns and computed in float.
KL_D float kl_h2f(unsigned short h) { float f; asm("{ cvt.f32.f16 %0, %1; }" : "=f"(f) : "h"(h)); return f; }
KL_D unsigned short kl_f2h(float f) { unsigned short h; asm("{ cvt.rn.f16.f32 %0, %1; }" : "=h"(h) : "f"(f)); return h; }
KL_D unsigned short kl_f2h(double d) { return kl_f2h((float)d); }
KL_D float kl_bf2f(unsigned short h) { return __int_as_float(((unsigned)h) << 16); }
KL_D unsigned short kl_f2bf(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                                   // round to nearest even
  return (unsigned short)(u >> 16);
}
// Vector stores of a packed union (kl_stv(dst, u)): 16 and 8 bytes as one
// st.global.v4.u32 / v2.u32 (a union of 16-bit elements otherwise tends to be
// stored in pieces); `dst` points to global memory, aligned to the size.
KL_D void kl_stv(uint4* p, uint4 v) {
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
KL_D void kl_stv(uint2* p, uint2 v) { asm volatile("st.global.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(v.x), "r"(v.y) : "memory"); }
KL_D void kl_stv(unsigned int* p, unsigned int v) { *p = v; }
KL_D void kl_stv(unsigned short* p, unsigned short v) { *p = v; }
KL_D void kl_stv(unsigned char* p, unsigned char v) { *p = v; }
template <class T> KL_D T kl_abs(T x) { return x < T(0) ? T(-x) : x; }
template <class T> KL_D T kl_max(T a, T b) { return (a != a) ? a : (b != b) ? b : (a > b ? a : b); }
template <class T> KL_D T kl_min(T a, T b) { return (a != a) ? a : (b != b) ? b : (a < b ? a : b); }
template <class T> KL_D T kl_relu(T x) { return x > T(0) ? x : (x != x ? x : T(0)); }
template <class T> KL_D T kl_sign(T x) { return x > T(0) ? T(1) : x < T(0) ? T(-1) : T(0); }
template <class T> KL_D T kl_sigmoid(T x) { return x >= T(0) ? T(1) / (T(1) + kl_exp(-x)) : kl_exp(x) / (T(1) + kl_exp(x)); }
template <class T> KL_D T kl_softplus(T x) { return x > T(0) ? x + kl_log1p(kl_exp(-x)) : kl_log1p(kl_exp(x)); }

template <class T> KL_D T kl_warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <class T> KL_D T kl_warp_max(T v) {
  for (int o = 16; o > 0; o >>= 1) { T u = __shfl_xor_sync(0xffffffffu, v, o); v = kl_max(v, u); }
  return v;
}
template <class T> KL_D T kl_warp_min(T v) {
  for (int o = 16; o > 0; o >>= 1) { T u = __shfl_xor_sync(0xffffffffu, v, o); v = kl_min(v, u); }
  return v;
}
template <class T> KL_D T kl_warp_prod(T v) {
  for (int o = 16; o > 0; o >>= 1) v *= __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// Block-wide reductions (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
#define KL_BLOCK_REDUCE(NAME, WARP, IDENT)                                        \
  template <class T> KL_D T NAME(T v) {                                           \
    __shared__ T sh[32];                                                          \
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;                            \
    v = WARP(v);                                                                  \
    __syncthreads();                                                              \
    if (lane == 0) sh[w] = v;                                                     \
    __syncthreads();                                                              \
    T t = lane < (int)(blockDim.x >> 5) ? sh[lane] : (IDENT);                     \
    t = WARP(t);                                                                  \
    return t;                                                                     \
  }
KL_BLOCK_REDUCE(kl_block_sum, kl_warp_sum, T(0))
KL_BLOCK_REDUCE(kl_block_max, kl_warp_max, T(-__int_as_float(0x7f800000)))
KL_BLOCK_REDUCE(kl_block_min, kl_warp_min, T(__int_as_float(0x7f800000)))
KL_BLOCK_REDUCE(kl_block_prod, kl_warp_prod, T(1))
)";
}

}  // namespace kiln::targets::cuda
