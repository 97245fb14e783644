// Channel padding of RGB-stem convolutions (stem_pad.h: pad_stem_channels).
//
// Why: the first convolution of a CNN reads the image, 3 channels (1 for
// grayscale, 4 for RGBA). cuDNN's tensor-core NHWC kernels for 16-bit data
// load the channels of a pixel as 16-byte vectors, so they want C a multiple
// of 8 (a few accept 4); with C = 3 it falls back to a slow engine: ResNet-50
// fp16 batch 32 spent 0.243 ms of 1.08 ms in its 7x7 / 2 stem on the H200
// (issue #20's profile, bench/results/cuda/round15_profiles), ~7.5 GFLOP that
// tensor cores run in a few tens of microseconds, and its Relu stayed a
// kernel of its own. Zero channels added to x and zero weights added to the
// filter change no sum, so y is the same; the price is the padded input
// (C' / C times the bytes, written once by the kernel that already writes
// the NHWC input) and C' / C times the multiply-adds, which tensor cores
// afford far better than the fallback engine affords C = 3.
//
// Which convolutions: 0 < C < the multiple only, i.e. image stems. A C of
// 9..15 (YOLOv5's 12-channel Focus) would grow the work by up to 1.8x for an
// unmeasured gain; cuDNN's fast kernels already take every C >= 8 that the
// networks here have (multiples of 8).
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "support/log.h"
#include "targets/cuda/compile/lowering.h"
#include "targets/cuda/compile/stem_pad.h"

namespace kiln::targets::cuda {

namespace {

/// Filter w [K, R, S, C] as [K, R, S, cp] with zero weights in channels C..cp-1.
Tensor pad_filter(const Tensor& w, int64_t cp) {
  const auto& d = w.shape();
  const int64_t rows = d[0] * d[1] * d[2], c = d[3];
  const size_t e = dtype_size(w.dtype());
  Tensor out(w.dtype(), {d[0], d[1], d[2], cp});  // zero-filled
  const auto* src = static_cast<const uint8_t*>(w.raw());
  auto* dst = static_cast<uint8_t*>(out.raw());
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + static_cast<size_t>(r * cp) * e, src + static_cast<size_t>(r * c) * e, static_cast<size_t>(c) * e);
  return out;
}

/// ONNX Pad (constant 0) of rank-4 `x` adding `extra` entries at the end of axis 3.
ir::Node channel_pad(ir::Model& m, const std::string& name, int opset, ir::ValueId x, int64_t extra, ir::ValueId y) {
  const std::vector<int64_t> pads = {0, 0, 0, 0, 0, 0, 0, extra};
  ir::Value pv;
  pv.name = name + "_pads";
  pv.dtype = DType::i64;
  pv.shape = ir::static_shape({8});
  pv.constant = Tensor::from_bytes(DType::i64, {8}, pads.data(), pads.size() * sizeof(int64_t));
  ir::Node p;
  p.op_type = "Pad";
  p.name = name;
  p.opset = opset;
  p.attrs["mode"] = std::string("constant");
  p.inputs = {x, m.add_value(std::move(pv))};
  p.outputs = {y};
  return p;
}

/// Whether value v is read by node `reader` alone (no other node, no
/// subgraph, not a graph output).
bool only_reader(const Uses& u, ir::ValueId v, int reader) {
  return !u.is_output[v] && u.readers[v].size() == 1 && u.readers[v][0] == reader;
}

}  // namespace

int stem_pad_multiple() {
  const char* e = std::getenv("KILN_CUDA_STEM_PAD_C");
  // Default 4: ResNet-50 fp16 batch 32 on the H200 (session 16, scripts/device/stem_pad.sh): the 7x7 stem
  // took 0.202 ms unpadded, 0.137 ms padded to 4 (its ReLU fused) and 0.196 ms padded to 8; batch 1 the
  // same within noise (0.35 ms device I/O each).
  if (!e || !*e) return 4;
  const std::string s(e);
  if (s == "0" || s == "4" || s == "8") return std::stoi(s);
  log().warn("KILN_CUDA_STEM_PAD_C={} is not 0, 4 or 8: the default 4 is used", s);
  return 4;
}

int pad_stem_channels(ir::Model& m, int multiple) {
  if (multiple != 4 && multiple != 8) return 0;
  const Uses u = uses_of(m);
  std::vector<ir::Node>& nodes = m.main.nodes;
  std::vector<bool> dropped(nodes.size(), false);
  std::vector<std::vector<ir::Node>> before(nodes.size());  // nodes emitted just before node i
  int padded = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    ir::Node& n = nodes[i];
    if (!n.domain.empty() || n.op_type != "Conv" || n.i("kiln_nhwc", 0) == 0 || n.i("group", 1) != 1 ||
        n.inputs.size() != 2 || n.outputs.size() != 1)
      continue;
    const ir::ValueId x = n.inputs[0];
    {
      const ir::Value &xv = m.value(x), &wv = m.value(n.inputs[1]);
      if (!is_half(xv.dtype) || wv.dtype != xv.dtype || !wv.constant) continue;
    }
    const auto xd = static_dims(m, x), wd = static_dims(m, n.inputs[1]);
    if (xd.size() != 4 || wd.size() != 4 || wd[3] != xd[3]) continue;
    const int64_t C = xd[3];
    if (C <= 0 || C >= multiple) continue;
    // Copies: add_value below may move m.values.
    const std::string xname = m.value(x).name;
    const DType dt = m.value(x).dtype;
    ir::Value nw = m.value(n.inputs[1]);
    const std::string base = fmt::format("{}_cpad{}", xname, multiple);
    const std::vector<int64_t> pd = {xd[0], xd[1], xd[2], multiple};
    const ir::ValueId xp = new_value(m, base, dt, pd);
    // The entry of the region: Cast(x32) -> Transpose(0,2,3,1) -> this Conv,
    // each value read only by the next. Reordered to Transpose (float32) ->
    // Pad -> Cast: Cast and Pad commute (Cast(0) is 0), and so the Pad, a
    // gather through the Transpose, joins the Cast's kernel.
    const int t = u.producer[x];
    const int c = t >= 0 ? u.producer[nodes[t].inputs[0]] : -1;
    const bool entry = t >= 0 && c >= 0 && only_reader(u, x, static_cast<int>(i)) && nodes[t].domain.empty() &&
                       nodes[t].op_type == "Transpose" && nodes[t].ints("perm") == std::vector<int64_t>{0, 2, 3, 1} &&
                       only_reader(u, nodes[t].inputs[0], t) && nodes[c].domain.empty() && nodes[c].op_type == "Cast" &&
                       nodes[c].outputs.size() == 1 && m.value(nodes[c].inputs[0]).dtype == DType::f32;
    if (entry) {
      const ir::ValueId x32 = nodes[c].inputs[0];
      const ir::ValueId xt = new_value(m, fmt::format("{}_f32", xname), DType::f32, xd);
      const ir::ValueId xp32 = new_value(m, fmt::format("{}_f32", base), DType::f32, pd);
      ir::Node tr = nodes[t];
      tr.inputs = {x32};
      tr.outputs = {xt};
      ir::Node cast = nodes[c];
      cast.outputs = {xp};
      cast.inputs = {xp32};
      before[i].push_back(std::move(tr));
      before[i].push_back(channel_pad(m, base + "_pad", n.opset, xt, multiple - C, xp32));
      before[i].push_back(std::move(cast));
      dropped[static_cast<size_t>(t)] = dropped[static_cast<size_t>(c)] = true;
    } else {
      before[i].push_back(channel_pad(m, base + "_pad", n.opset, x, multiple - C, xp));
    }
    nw.name += fmt::format("_cpad{}", multiple);
    nw.constant = pad_filter(*nw.constant, multiple);
    nw.shape = ir::static_shape(nw.constant->shape());
    n.inputs = {xp, m.add_value(std::move(nw))};
    log().debug("cuda: {}: {} input channel(s) padded to {}{}", n.label(), C, multiple,
                entry ? " (in the model input's cast and transpose)" : "");
    ++padded;
  }
  if (!padded) return 0;
  std::vector<ir::Node> out;
  out.reserve(nodes.size() + 3 * static_cast<size_t>(padded));
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (auto& b : before[i]) out.push_back(std::move(b));
    if (!dropped[i]) out.push_back(std::move(nodes[i]));
  }
  nodes = std::move(out);
  return padded;
}

}  // namespace kiln::targets::cuda
