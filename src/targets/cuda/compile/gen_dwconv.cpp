// The depthwise convolution kernel (lowering.h: DwConvSpec, dwconv_source):
// group == C_in == C_out, any R x S window, one float dtype, float
// accumulation, the bias and a Relu / Clip fused.
//
// Why a kernel of kiln's own: a depthwise convolution does R*S multiply-adds
// per output element, so it is bound by memory traffic, yet cuDNN ran
// MobileNetV2's early 3x3 depthwise convolutions (fp16 NHWC, batch 32) at
// ~120 GB/s on an H200 (issue #20's profile: 0.6-0.7 ms each), a few
// percent of the GPU's bandwidth.
//
// Design (memory-bound):
//  - NHWC: consecutive threads take consecutive channel groups of one output
//    row segment, so a warp's loads and stores are contiguous; a thread holds
//    V channels (4, 2 or 1: one 16/8/4-byte access where C allows it) for P
//    consecutive output pixels along W. It walks the window's rows; in each
//    it reads the row's S weights (w is [R, S, C]: contiguous over channels
//    like x) and each input column once, adding it to every output of the P
//    whose window covers it. Neighbouring rows and threads re-read inputs
//    through L1 / L2, not DRAM.
//  - NCHW: one thread per output element, consecutive threads along W (the
//    float32 programs' layout; simple, coalesced, correct first).
//  - The vector accesses need every pointer aligned to V elements: the
//    arena's are, caller memory may not be (run_into), so a uniform branch
//    falls back to V = 1.
//  - A grid-stride loop over work items: any grid gives the same result,
//    and tune_kernel_grids may pick a smaller one.
#include <fmt/format.h>

#include "targets/cuda/compile/codegen.h"
#include "targets/cuda/compile/lowering.h"

namespace kiln::targets::cuda {

int64_t DwConvSpec::vec() const {
  if (!nhwc) return 1;
  return c % 4 == 0 ? 4 : c % 2 == 0 ? 2 : 1;
}

int64_t DwConvSpec::items() const {
  if (!nhwc) return n * c * oh * ow;
  const int64_t tiles = (ow + pixels - 1) / pixels;
  return n * oh * tiles * (c / vec());
}

std::string DwConvSpec::key() const {
  return fmt::format("dw {} {} x{}x{}x{}x{} y{}x{} k{}x{} s{}x{} p{}x{} b{} r{} lo{} hi{} P{}", dtype_name(dtype),
                     nhwc ? "nhwc" : "nchw", n, c, h, w, oh, ow, r, s, stride_h, stride_w, pad_h, pad_w, bias, relu,
                     lo ? fmt::format("{}", *lo) : "-", hi ? fmt::format("{}", *hi) : "-", pixels);
}

namespace {

/// Statements loading `v` elements of dtype `dt` from global pointer
/// expression `p` (read-only cache) into float array expression `d`
/// (d[0] .. d[v-1]), as one access of v elements.
std::string load_vec(DType dt, int64_t v, const std::string& p, const std::string& d) {
  if (v == 1) return fmt::format("{}[0] = {};", d, load_float(dt, fmt::format("__ldg({})", p)));
  if (dt == DType::f32) {
    if (v == 2) return fmt::format("{{ const float2 t = __ldg(reinterpret_cast<const float2*>({0})); {1}[0] = t.x; {1}[1] = t.y; }}", p, d);
    return fmt::format("{{ const float4 t = __ldg(reinterpret_cast<const float4*>({0})); {1}[0] = t.x; {1}[1] = t.y; "
                       "{1}[2] = t.z; {1}[3] = t.w; }}", p, d);
  }
  // 16-bit: element 2i is the low half of word i (little-endian).
  auto half = [&](const std::string& word, bool high) {
    return load_float(dt, fmt::format("(unsigned short)({}{})", word, high ? " >> 16" : " & 0xffffu"));
  };
  if (v == 2)
    return fmt::format("{{ const unsigned int t = __ldg(reinterpret_cast<const unsigned int*>({})); {}[0] = {}; {}[1] = {}; }}", p, d,
                       half("t", false), d, half("t", true));
  return fmt::format("{{ const uint2 t = __ldg(reinterpret_cast<const uint2*>({})); {}[0] = {}; {}[1] = {}; {}[2] = {}; {}[3] = {}; }}",
                     p, d, half("t.x", false), d, half("t.x", true), d, half("t.y", false), d, half("t.y", true));
}

/// Statements storing float array expression `d` (v elements) at global
/// pointer expression `p` as dtype `dt`, as one access.
std::string store_vec(DType dt, int64_t v, const std::string& p, const std::string& d) {
  if (v == 1) return fmt::format("({})[0] = {};", p, store_float(dt, d + "[0]"));
  if (dt == DType::f32) {
    if (v == 2) return fmt::format("*reinterpret_cast<float2*>({0}) = make_float2({1}[0], {1}[1]);", p, d);
    return fmt::format("*reinterpret_cast<float4*>({0}) = make_float4({1}[0], {1}[1], {1}[2], {1}[3]);", p, d);
  }
  auto word = [&](int i) {
    return fmt::format("((unsigned int){} | ((unsigned int){} << 16))", store_float(dt, fmt::format("{}[{}]", d, i)),
                       store_float(dt, fmt::format("{}[{}]", d, i + 1)));
  };
  if (v == 2) return fmt::format("kl_stv(reinterpret_cast<unsigned int*>({}), {});", p, word(0));
  return fmt::format("kl_stv(reinterpret_cast<uint2*>({}), make_uint2({}, {}));", p, word(0), word(2));
}

/// Statements turning float `t` (the sum plus the bias) into the epilogue's
/// result in place: Relu, or Clip's bounds (min first, as gen_elementwise
/// does; NaN passes both comparisons and stays NaN, as in the ref target).
std::string epilogue(const DwConvSpec& s, const std::string& t) {
  std::string e;
  if (s.relu) e += fmt::format(" {0} = kl_relu({0});", t);
  if (s.lo) e += fmt::format(" if ({0} < {1}) {0} = {1};", t, float_literal(*s.lo));
  if (s.hi) e += fmt::format(" if ({0} > {1}) {0} = {1};", t, float_literal(*s.hi));
  return e;
}

/// The NHWC loop body for one work item `item` with V = `v` channels per thread.
std::string nhwc_body(const DwConvSpec& s, int64_t v) {
  const DType dt = s.dtype;
  std::string b;
  b += fmt::format("    constexpr int V = {}, CV = {};\n", v, s.c / v);
  b += "    const int cv = (int)(item % (I)CV); I r = item / (I)CV;\n";
  b += "    const int ow0 = (int)(r % (I)OWT) * P; r /= (I)OWT;\n";
  b += "    const int oh = (int)(r % (I)OH); const long long n = (long long)(r / (I)OH);\n";
  b += "    const int c = cv * V;\n";
  b += "    float acc[P][V], bv[V];\n";
  b += "#pragma unroll\n    for (int p = 0; p < P; ++p)\n#pragma unroll\n      for (int e = 0; e < V; ++e) acc[p][e] = 0.f;\n";
  if (s.bias)
    b += "    " + load_vec(dt, v, "b + c", "bv") + "\n";
  else
    b += "#pragma unroll\n    for (int e = 0; e < V; ++e) bv[e] = 0.f;\n";
  b += "    const int ih0 = oh * SH - PH, iw0 = ow0 * SW - PW;\n";
  b += "    for (int kr = 0; kr < R; ++kr) {\n";
  b += "      const int ih = ih0 + kr;\n";
  b += "      if (ih < 0 || ih >= H) continue;\n";
  b += "      const ST* xr = x + ((n * H + ih) * (long long)W) * C + c;\n";
  b += "      const ST* wr = w + (long long)kr * (S * C) + c;\n";
  b += "      float wk[S][V];\n";
  b += "#pragma unroll\n      for (int ks = 0; ks < S; ++ks) " + load_vec(dt, v, "wr + ks * C", "wk[ks]") + "\n";
  // The input columns one thread's P outputs cover.
  b += "#pragma unroll\n      for (int j = 0; j < (P - 1) * SW + S; ++j) {\n";
  b += "        const int iw = iw0 + j;\n";
  b += "        if (iw < 0 || iw >= W) continue;\n";
  b += "        float xv[V];\n";
  b += "        " + load_vec(dt, v, "xr + (long long)iw * C", "xv") + "\n";
  // Column j is input kw = j - p * SW of output p (resolved at compile time once unrolled).
  b += "#pragma unroll\n        for (int p = 0; p < P; ++p) {\n";
  b += "          const int ks = j - p * SW;\n";
  b += "          if (ks >= 0 && ks < S) {\n";
  b += "#pragma unroll\n            for (int e = 0; e < V; ++e) acc[p][e] = fmaf(xv[e], wk[ks][e], acc[p][e]);\n";
  b += "          }\n        }\n      }\n    }\n";
  b += "#pragma unroll\n    for (int p = 0; p < P; ++p) {\n";
  b += "      if (ow0 + p >= OW) break;\n";
  b += "      float o[V];\n";
  b += "#pragma unroll\n      for (int e = 0; e < V; ++e) { float t = acc[p][e] + bv[e];" + epilogue(s, "t") + " o[e] = t; }\n";
  b += "      " + store_vec(dt, v, "y + ((n * OH + oh) * (long long)OW + ow0 + p) * C + c", "o") + "\n";
  b += "    }\n";
  return b;
}

/// The NCHW loop body: one output element `item` (y's flat index).
std::string nchw_body(const DwConvSpec& s) {
  const DType dt = s.dtype;
  std::string b;
  b += "    const int ow = (int)(item % (I)OW); I r = item / (I)OW;\n";
  b += "    const int oh = (int)(r % (I)OH); r /= (I)OH;\n";
  b += "    const int c = (int)(r % (I)C); const long long n = (long long)(r / (I)C);\n";
  b += "    const ST* xp = x + (n * C + c) * (long long)(H * W);\n";
  b += "    const ST* wp = w + (long long)c * (R * S);\n";
  b += "    float t = 0.f;\n";
  b += "    const int ih0 = oh * SH - PH, iw0 = ow * SW - PW;\n";
  b += "    for (int kr = 0; kr < R; ++kr) {\n";
  b += "      const int ih = ih0 + kr;\n";
  b += "      if (ih < 0 || ih >= H) continue;\n";
  b += "#pragma unroll\n      for (int ks = 0; ks < S; ++ks) {\n";
  b += "        const int iw = iw0 + ks;\n";
  b += "        if (iw < 0 || iw >= W) continue;\n";
  b += fmt::format("        t = fmaf({}, {}, t);\n", load_float(dt, "__ldg(xp + ih * W + iw)"),
                   load_float(dt, "__ldg(wp + kr * S + ks)"));
  b += "      }\n    }\n";
  if (s.bias) b += fmt::format("    t += {};\n", load_float(dt, "__ldg(b + c)"));
  b += "   " + epilogue(s, "t") + "\n";
  b += fmt::format("    y[item] = {};\n", store_float(dt, "t"));
  return b;
}

/// `for (item ...) { body }`: the grid-stride loop over `count` items.
std::string grid_loop(int64_t count, const std::string& body) {
  return fmt::format("  for (I item = (I)blockIdx.x * {0}u + threadIdx.x; item < (I){1}ull; item += (I)gridDim.x * {0}u) {{\n{2}  }}\n",
                     kDwConvBlock, count, body);
}

}  // namespace

std::string dwconv_source(const DwConvSpec& s, const std::string& fn) {
  const std::string st = *storage_type(s.dtype);
  std::string params = fmt::format("const {0}* __restrict__ x, const {0}* __restrict__ w, ", st);
  if (s.bias) params += fmt::format("const {}* __restrict__ b, ", st);
  params += fmt::format("{}* __restrict__ y", st);
  const int64_t v = s.vec();
  const int64_t items1 = s.nhwc ? s.items() * v : s.items();  // the one-channel fallback's items
  std::string body;
  if (!s.nhwc) {
    body = grid_loop(s.items(), nchw_body(s));
  } else if (v == 1) {
    body = grid_loop(items1, nhwc_body(s, 1));
  } else {
    const size_t bytes = static_cast<size_t>(v) * dtype_size(s.dtype);
    std::vector<std::pair<std::string, size_t>> ptrs = {{"x", bytes}, {"w", bytes}, {"y", bytes}};
    if (s.bias) ptrs.push_back({"b", bytes});
    body = fmt::format("  if ({}) {{\n{}  }} else {{\n{}  }}\n", aligned_condition(ptrs), grid_loop(s.items(), nhwc_body(s, v)),
                       grid_loop(items1, nhwc_body(s, 1)));
  }
  const int64_t tiles = (s.ow + s.pixels - 1) / s.pixels;
  return fmt::format(
      "\n// depthwise conv {} {} x [{},{},{},{}] (N,C,H,W) window {}x{} strides {},{} pads {},{}{}{}{}; {} output(s) per thread\n"
      "extern \"C\" __global__ void __launch_bounds__({}) {}({}) {{\n"
      "  typedef {} I;\n"
      "  typedef {} ST;\n"
      "  constexpr int C = {}, H = {}, W = {}, OH = {}, OW = {}, R = {}, S = {}, SH = {}, SW = {}, PH = {}, PW = {}, P = {}, OWT = {};\n"
      "{}}}\n",
      dtype_name(s.dtype), s.nhwc ? "NHWC" : "NCHW", s.n, s.c, s.h, s.w, s.r, s.s, s.stride_h, s.stride_w, s.pad_h,
      s.pad_w, s.bias ? " +bias" : "", s.relu ? " relu" : "", s.lo || s.hi ? " clip" : "", s.pixels, kDwConvBlock, fn,
      params, index_type(items1), st, s.c, s.h, s.w, s.oh, s.ow, s.r, s.s, s.stride_h, s.stride_w, s.pad_h, s.pad_w,
      s.pixels, tiles, body);
}

}  // namespace kiln::targets::cuda
