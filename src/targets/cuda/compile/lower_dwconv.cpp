// Depthwise convolutions on kiln's generated kernel (gen_dwconv.cpp) instead
// of cuDNN, with their bias and Relu / Clip fused: which convolutions
// qualify, and the choice (lowering.h: lower_depthwise_convs).
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <mutex>

#include "support/error.h"
#include "support/half.h"
#include "support/log.h"
#include "targets/cuda/compile/lowering.h"
#include "targets/cuda/compile/tuning.h"

namespace kiln::targets::cuda {

DwConvMode dwconv_mode() {
  // Read at every compile (not cached): the GPU tests switch it between compiles.
  const char* e = std::getenv("KILN_CUDA_DWCONV");
  if (e && std::string(e) == "0") return DwConvMode::off;
  if (e && std::string(e) == "1") return DwConvMode::always;
  return DwConvMode::decide;
}

namespace {

/// A depthwise Conv and the epilogue nodes after it that the kernel absorbs.
struct Match {
  DwConvSpec spec;            ///< pixels not chosen yet
  std::vector<int> absorbed;  ///< the Conv, then the bias Add, then the Relu / Clip
  ir::ValueId x = ir::kNoValue, w = ir::kNoValue, bias = ir::kNoValue, y = ir::kNoValue;
};

/// The value of a one-element float constant (float32, float16, bfloat16), else nullopt.
std::optional<float> scalar_constant(const ir::Value& v) {
  if (!v.constant || v.constant->numel() != 1) return std::nullopt;
  const Tensor& t = *v.constant;
  if (t.dtype() == DType::f32) return t.data<float>()[0];
  if (t.dtype() == DType::f16) return half_to_float(t.data<uint16_t>()[0]);
  if (t.dtype() == DType::bf16) return bf16_to_float(t.data<uint16_t>()[0]);
  return std::nullopt;
}

std::optional<std::vector<int64_t>> static_dims(const ir::Value& v) {
  if (!v.shape || !ir::is_static(*v.shape)) return std::nullopt;
  return ir::to_sizes(*v.shape);
}

/// Fills s's window from Conv `n` (dims in NCHW order), or returns false
/// when the kernel does not take it.
bool window_of(const ir::Node& n, const std::vector<int64_t>& x, const std::vector<int64_t>& y, DwConvSpec& s) {
  const auto strides = n.ints("strides", {1, 1}), dil = n.ints("dilations", {1, 1});
  if (strides.size() != 2 || dil.size() != 2 || dil[0] != 1 || dil[1] != 1) return false;
  for (auto st : strides)
    if (st != 1 && st != 2) return false;  // the strides the GPU tests cover
  const std::string ap = n.s("auto_pad", "NOTSET");
  if (ap != "NOTSET" && ap != "SAME_UPPER" && ap != "SAME_LOWER" && ap != "VALID") return false;
  const auto pads = n.ints("pads");
  if (!pads.empty() && pads.size() != 4) return false;
  auto [pb, pe] = window_pads(n, {x[2], x[3]}, {y[2], y[3]}, {s.r, s.s}, strides, dil);
  if (pb != pe) return false;  // asymmetric (SAME_* with an odd total)
  s.stride_h = strides[0], s.stride_w = strides[1], s.pad_h = pb[0], s.pad_w = pb[1];
  // The output dims must be what this window gives (floor mode), else the
  // kernel would read or write outside its buffers.
  return y[2] == (x[2] + 2 * s.pad_h - s.r) / s.stride_h + 1 && y[3] == (x[3] + 2 * s.pad_w - s.s) / s.stride_w + 1 &&
         y[2] >= 1 && y[3] >= 1;
}

/// Conv node `i` of `nodes` with the epilogue it can absorb, when it is a
/// depthwise convolution the kernel takes (lowering.h lists the conditions).
std::optional<Match> match(const Lowering& L, int i, const std::vector<ir::Node>& nodes, const Uses& uses,
                           const std::vector<bool>& done) {
  const ir::Node& n = nodes[i];
  if (done[i] || !n.domain.empty() || n.op_type != "Conv" || n.inputs.size() < 2) return std::nullopt;
  if (n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue) return std::nullopt;  // a bias split_conv_bias left (not constant)
  const ir::Model& m = L.model;
  const ir::Value &xv = m.value(n.inputs[0]), &wv = m.value(n.inputs[1]), &yv = m.value(n.outputs[0]);
  const DType dt = xv.dtype;
  if (!is_float_storage(dt) || wv.dtype != dt || yv.dtype != dt || !wv.constant) return std::nullopt;
  auto xs = static_dims(xv), ws = static_dims(wv), ys = static_dims(yv);
  if (!xs || !ws || !ys || xs->size() != 4 || ws->size() != 4 || ys->size() != 4) return std::nullopt;
  const bool nhwc = n.i("kiln_nhwc", 0) != 0;
  // Dims in NCHW order (to_nhwc stores x, y [N, H, W, C] and w [K, R, S, C/group]).
  auto nchw = [&](const std::vector<int64_t>& d) { return nhwc ? std::vector<int64_t>{d[0], d[3], d[1], d[2]} : d; };
  const auto x = nchw(*xs), w = nchw(*ws), y = nchw(*ys);
  const int64_t c = x[1];
  if (n.i("group", 1) != c || w[0] != c || w[1] != 1 || y[1] != c || y[0] != x[0]) return std::nullopt;
  Match mt;
  DwConvSpec& s = mt.spec;
  s.dtype = dt, s.nhwc = nhwc;
  s.n = x[0], s.c = c, s.h = x[2], s.w = x[3], s.oh = y[2], s.ow = y[3], s.r = w[2], s.s = w[3];
  // 15: the window's columns live in registers (fully unrolled loops).
  if (s.r < 1 || s.s < 1 || s.r > 15 || s.s > 15 || !window_of(n, x, y, s)) return std::nullopt;
  mt.absorbed = {i};
  mt.x = n.inputs[0], mt.w = n.inputs[1], mt.y = n.outputs[0];

  // The epilogue: [Add per-channel constant] -> [Relu | Clip(constant bounds)].
  const std::vector<int64_t> ydims = *ys;
  const size_t axis = nhwc ? 3 : 1;
  auto sole_reader = [&](ir::ValueId v) -> int {
    if (uses.is_output[v] || uses.readers[v].size() != 1) return -1;
    const int r = uses.readers[v][0];
    if (done[r] || !nodes[r].domain.empty() || nodes[r].outputs.size() != 1) return -1;
    auto od = static_dims(m.value(nodes[r].outputs[0]));
    return od && *od == ydims && m.value(nodes[r].outputs[0]).dtype == dt ? r : -1;
  };
  int r = sole_reader(mt.y);
  if (r >= 0 && nodes[r].op_type == "Add" && nodes[r].inputs.size() == 2 && nodes[r].inputs[0] != nodes[r].inputs[1]) {
    const ir::ValueId other = nodes[r].inputs[0] == mt.y ? nodes[r].inputs[1] : nodes[r].inputs[0];
    if (is_channel_bias(m.value(other), ydims, axis, dt)) {
      s.bias = true, mt.bias = other;
      mt.absorbed.push_back(r), mt.y = nodes[r].outputs[0];
      r = sole_reader(mt.y);
    }
  }
  if (r >= 0 && nodes[r].op_type == "Relu" && nodes[r].inputs.size() == 1) {
    s.relu = true;
    mt.absorbed.push_back(r), mt.y = nodes[r].outputs[0];
  } else if (r >= 0 && nodes[r].op_type == "Clip" && nodes[r].inputs[0] == mt.y) {
    const auto& in = nodes[r].inputs;
    std::optional<float> lo, hi;
    bool ok = true;
    if (in.size() > 1 && in[1] != ir::kNoValue) ok = (lo = scalar_constant(m.value(in[1]))).has_value();
    if (ok && in.size() > 2 && in[2] != ir::kNoValue) ok = (hi = scalar_constant(m.value(in[2]))).has_value();
    if (ok) {
      s.lo = lo, s.hi = hi;
      mt.absorbed.push_back(r), mt.y = nodes[r].outputs[0];
    }
  }
  return mt;
}

/// Outputs per thread without timing: 4 along W (each input column is then
/// read once for up to 4 outputs), halved while the grid would give fewer
/// than 1024 threads per multiprocessor (small images at batch 1: more
/// threads hide more memory latency than the reuse saves), at most OW.
int64_t rule_pixels(DwConvSpec s, int sm_count) {
  if (!s.nhwc) return 1;
  s.pixels = 4;
  while (s.pixels > 1 && (s.pixels > s.ow || s.items() < int64_t{sm_count} * 1024)) s.pixels /= 2;
  return s.pixels;
}

/// Without timing (cross-compiling, heuristic tuning): kiln's kernel for
/// 16-bit convolutions at batch >= 8. There cuDNN measured ~120 GB/s on the
/// H200 (MobileNetV2 fp16 NHWC batch 32, issue #20) against the GPU's 4.8
/// TB/s. At small batches and in float32 (NCHW) cuDNN was not measured
/// losing, so it stays; a compile with a device times both instead.
bool kiln_by_rule(const DwConvSpec& s) { return is_half(s.dtype) && s.n >= 8; }

/// Bytes of each kernel parameter of `s` (x, w, [bias], y).
std::vector<size_t> param_bytes(const DwConvSpec& s) {
  const size_t e = dtype_size(s.dtype);
  std::vector<size_t> b = {static_cast<size_t>(s.n * s.c * s.h * s.w) * e, static_cast<size_t>(s.c * s.r * s.s) * e};
  if (s.bias) b.push_back(static_cast<size_t>(s.c) * e);
  b.push_back(static_cast<size_t>(s.n * s.c * s.oh * s.ow) * e);
  return b;
}

/// cuDNN's best time (ms) for the convolution of `n` (graph API without
/// epilogue and legacy API, as lower_conv would choose; both memoized, so
/// lower_conv reuses them), or 0 when cuDNN has no algorithm or gave no time.
double cudnn_ms(Lowering& L, const ir::Node& n, const LowerOptions& opt, ConvSpec& cs) {
  double best = 0;
  auto take = [&](double ms) {
    if (ms > 0 && (best <= 0 || ms < best)) best = ms;
  };
  try {
    cs = conv_spec_for(L, n, opt);
    if (graph_convs_enabled(opt))
      if (auto e = tune_conv_graph(cs, ConvEpilogue{}, opt.tuning, opt.device, n.label(), L.tuning)) take(e->ms);
    take(tune_conv(cs, opt.tuning, opt.device, n.label(), L.tuning).ms);
  } catch (const Error& e) {
    log().debug("{}: cuDNN gives no time for the depthwise convolution ({})", n.label(), e.what());
  }
  return best;
}

/// Timed choice for each of `found` (P = outputs per thread, 0 = cuDNN),
/// memoized per problem, device and tuning mode.
std::vector<int64_t> decide_timed(Lowering& L, const std::vector<ir::Node>& nodes, const std::vector<Match>& found,
                                  const LowerOptions& opt) {
  static std::mutex mu;
  static std::map<std::string, int64_t> memo;
  std::vector<std::string> keys;
  std::vector<size_t> misses;
  std::vector<int64_t> out(found.size(), -1);
  {
    std::lock_guard<std::mutex> lock(mu);
    for (size_t k = 0; k < found.size(); ++k) {
      keys.push_back(fmt::format("{} dev{} {}", found[k].spec.key(), opt.device, tuning_name(opt.tuning)));
      if (auto it = memo.find(keys[k]); it != memo.end()) out[k] = it->second, ++L.tuning.reused;
    }
  }
  std::map<std::string, size_t> first;  // key -> the miss that times it
  for (size_t k = 0; k < found.size(); ++k)
    if (out[k] < 0 && first.emplace(keys[k], k).second) misses.push_back(k);
  if (misses.empty()) return out;
  Stopwatch sw;
  // Every candidate of every new problem in one NVRTC compile.
  std::string source;
  std::vector<TimedLaunch> launches;
  std::vector<std::pair<size_t, int64_t>> owner;  // launch -> (miss, pixels)
  // Candidates: the rule's outputs per thread and 4 (NVRTC takes ~0.05-0.1 s
  // per kernel, so not every width).
  for (size_t k : misses)
    for (int64_t p : {rule_pixels(found[k].spec, L.sm_count), int64_t{4}}) {
      DwConvSpec s = found[k].spec;
      if (p == 4 && (!s.nhwc || p > s.ow || (owner.size() && owner.back() == std::make_pair(k, p)))) continue;
      s.pixels = p;
      const std::string fn = fmt::format("kl_dwconv_time{}", launches.size());
      source += dwconv_source(s, fn);
      launches.push_back({fn, L.grid_for(s.items(), kDwConvBlock), kDwConvBlock, param_bytes(s)});
      owner.emplace_back(k, p);
    }
  std::vector<float> ms;
  try {
    ms = time_kernel_launches(source, launches, opt);
  } catch (const Error& e) {
    log().warn("cuda: timing the depthwise convolution kernels failed, the rule decides ({})", e.what());
    for (size_t k : misses) out[k] = kiln_by_rule(found[k].spec) ? rule_pixels(found[k].spec, L.sm_count) : 0;
    return out;
  }
  L.tuning.timed += static_cast<int>(launches.size());
  for (size_t k : misses) {
    const Match& mt = found[k];
    float best = -1;
    int64_t best_p = 1;
    for (size_t j = 0; j < owner.size(); ++j)
      if (owner[j].first == k && (best < 0 || ms[j] < best)) best = ms[j], best_p = owner[j].second;
    ConvSpec cs;
    double lib = cudnn_ms(L, nodes[static_cast<size_t>(mt.absorbed[0])], opt, cs);
    // cuDNN's epilogue fusions take a bias and a Relu but no Clip: with cuDNN
    // a Clip stays an element-wise kernel of its own.
    const bool clip = mt.spec.lo || mt.spec.hi;
    if (lib > 0 && clip) lib += epilogue_kernel_ms(cs, ConvEpilogue{});
    const bool kiln = lib <= 0 || best < lib;
    log().debug("{}: depthwise {}: kiln's kernel ({} per thread) {:.4f} ms, cuDNN {:.4f} ms{}: {}",
                nodes[static_cast<size_t>(mt.absorbed[0])].label(), mt.spec.key(), best_p, best, lib,
                clip ? " (with the Clip's kernel)" : "", kiln ? "kiln" : "cuDNN");
    out[k] = kiln ? best_p : 0;
    ++L.tuning.tuned;
  }
  std::lock_guard<std::mutex> lock(mu);  // not held while timing: other compiles go on
  for (size_t k : misses) memo[keys[k]] = out[k];
  for (size_t k = 0; k < found.size(); ++k)
    if (out[k] < 0) out[k] = out[first.at(keys[k])], ++L.tuning.reused;  // a repeat of a problem timed above
  L.tuning.ms += sw.ms();
  return out;
}

/// The kiln.cuda.Kernel of match `mt` with `pixels` outputs per thread.
ir::Node kernel_for(Lowering& L, const ir::Node& conv, const Match& mt, int64_t pixels) {
  ir::Model& m = L.model;
  DwConvSpec s = mt.spec;
  s.pixels = pixels;
  ir::ValueId w = mt.w;
  if (s.nhwc) {  // [C, R, S, 1] -> [R, S, C]: a row of the window's weights lies like x's channels
    ir::Value rsc = m.value(mt.w);
    rsc.name += "_rsc";
    rsc.constant = permute_constant(*rsc.constant, {1, 2, 0, 3}).reshaped({s.r, s.s, s.c});
    rsc.shape = ir::Shape{ir::Dim{s.r, ""}, ir::Dim{s.s, ""}, ir::Dim{s.c, ""}};
    w = m.add_value(std::move(rsc));
  }
  const std::string fn = L.kernel_name("dwconv");
  L.source += dwconv_source(s, fn);
  std::vector<ir::ValueId> inputs = {mt.x, w};
  if (s.bias) inputs.push_back(mt.bias);
  ir::Node k = L.kernel_node(conv, fn, std::move(inputs), {mt.y}, L.grid_for(s.items(), kDwConvBlock), kDwConvBlock);
  k.attrs["grid_stride"] = int64_t{1};  // any grid computes the same: tune_kernel_grids may change it
  return k;
}

}  // namespace

std::vector<ConvLowered> lower_depthwise_convs(Lowering& L, const std::vector<ir::Node>& nodes, const Uses& uses,
                                               const LowerOptions& opt, const std::vector<bool>& done) {
  const DwConvMode mode = dwconv_mode();
  if (mode == DwConvMode::off) return {};
  std::vector<Match> found;
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i)
    if (auto mt = match(L, i, nodes, uses, done)) found.push_back(std::move(*mt));
  if (found.empty()) return {};
  std::vector<int64_t> pixels(found.size(), 0);
  if (mode == DwConvMode::decide && opt.device >= 0 && opt.tuning != Tuning::heuristic) {
    pixels = decide_timed(L, nodes, found, opt);
  } else {
    for (size_t k = 0; k < found.size(); ++k)
      if (mode == DwConvMode::always || kiln_by_rule(found[k].spec)) pixels[k] = rule_pixels(found[k].spec, L.sm_count);
  }
  std::vector<ConvLowered> out;
  for (size_t k = 0; k < found.size(); ++k) {
    if (pixels[k] <= 0) continue;
    const ir::Node& conv = nodes[static_cast<size_t>(found[k].absorbed[0])];
    out.push_back({kernel_for(L, conv, found[k], pixels[k]), found[k].absorbed});
  }
  return out;
}

}  // namespace kiln::targets::cuda
