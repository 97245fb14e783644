// Conv tap splitting: a dilated convolution over a map not much larger than
// its dilation reads padding for most (tap, output position) pairs. DeepLab's
// atrous pyramid is the case: a 3x3 with dilation 12 and pads 12 over a 14x14
// map (960 -> 256 channels). Only the centre tap reads the input everywhere;
// the four edge taps read it for 2 of 14 rows or columns, the corners for 2x2
// positions: 324 of the 1764 position products, 18%. oneDNN 2.6 computes all
// of them (5.97 ms on 2 AVX2 cores, where ONNX Runtime's MLAS, which skips
// padding, takes 1.85 ms).
//
// Such a Conv becomes one 1x1 Conv per tap over the input rectangle that tap
// reads (a Slice of the input), each result zero-padded (Pad) to the output's
// size, summed by Add. The bias goes to a tap that covers the whole output,
// else to a final Add. The sum's order differs from the direct convolution's
// (the result moves in the last bits), its value does not.
//
// Taken when the taps' valid products are at most kMaxWork of the direct
// convolution's; stride 1 and 2-D only (what atrous convolutions are), after
// prune_conv_taps has removed the taps that never read the input.
#include <algorithm>
#include <string>

#include "passes/graph_edit.h"
#include "passes/passes.h"

namespace kiln::passes {

namespace {

/// Split when the taps' valid (tap, position) products are at most this share
/// of the direct convolution's: below it the per-tap nodes (a Slice, a Pad,
/// an Add each, on maps of a few thousand elements) cost less than the
/// padding products they remove.
constexpr double kMaxWork = 0.5;
/// At most this many taps (nodes made: up to 4 per tap).
constexpr int64_t kMaxTaps = 25;

/// The output positions [begin, end) at which tap t of one spatial dim
/// (stride 1) reads the input, and the input position of `begin`.
struct Range {
  int64_t begin = 0, end = 0, in_begin = 0;
  int64_t size() const { return std::max<int64_t>(end - begin, 0); }
};

Range valid(int64_t in, int64_t out, int64_t t, int64_t dil, int64_t pad_begin) {
  // Output o reads input o - pad_begin + t * dil.
  const int64_t shift = t * dil - pad_begin;
  Range r;
  r.begin = std::max<int64_t>(0, -shift);
  r.end = std::min<int64_t>(out, in - shift);
  r.in_begin = r.begin + shift;
  return r;
}

class Splitter {
 public:
  Splitter(ir::Model& m, ir::Graph& g) : m_(m), g_(g) {}

  int run() {
    return replace_nodes(g_, [&](const ir::Node& n) { return rewrite(n); });
  }

 private:
  /// The replacement of Conv n (empty: keep it).
  std::vector<ir::Node> rewrite(const ir::Node& n) {
    if (!is_onnx_op(n, "Conv") || n.inputs.size() < 2 || n.outputs.size() != 1) return {};
    if (n.i("group", 1) != 1 || n.s("auto_pad", "NOTSET") != "NOTSET") return {};
    const ir::Value& wv = m_.value(n.inputs[1]);
    if (!wv.constant || wv.constant->dtype() != DType::f32) return {};
    auto xd = static_f32_dims(m_, n.inputs[0]), yd = static_f32_dims(m_, n.outputs[0]);
    // A copy: adding values below moves the model's value table.
    const Tensor weights = *wv.constant;
    const std::vector<int64_t> wd = weights.shape();
    if (!xd || !yd || xd->size() != 4 || yd->size() != 4 || wd.size() != 4) return {};
    const bool has_bias = n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue;
    if (has_bias) {
      const ir::Value& b = m_.value(n.inputs[2]);
      if (!b.constant || b.constant->dtype() != DType::f32 || b.constant->numel() != wd[0]) return {};
    }
    if (n.ints("strides", {1, 1}) != std::vector<int64_t>{1, 1}) return {};
    const auto dil = n.ints("dilations", {1, 1}), pads = n.ints("pads", {0, 0, 0, 0});
    if (dil.size() != 2 || pads.size() != 4) return {};
    const int64_t kh = wd[2], kw = wd[3], oh = (*yd)[2], ow = (*yd)[3];
    if (kh * kw > kMaxTaps || kh * kw < 2) return {};
    // Work per tap; a tap that reads nothing is dropped.
    struct Tap {
      int64_t th, tw;
      Range rows, cols;
    };
    std::vector<Tap> taps;
    int64_t work = 0;
    for (int64_t th = 0; th < kh; ++th)
      for (int64_t tw = 0; tw < kw; ++tw) {
        Tap t{th, tw, valid((*xd)[2], oh, th, dil[0], pads[0]), valid((*xd)[3], ow, tw, dil[1], pads[1])};
        if (t.rows.size() == 0 || t.cols.size() == 0) continue;
        work += t.rows.size() * t.cols.size();
        taps.push_back(t);
      }
    if (taps.empty() || static_cast<double>(work) > kMaxWork * static_cast<double>(kh * kw * oh * ow)) return {};

    // Slice and Pad with their operands as inputs: opset 13 at least.
    make_ = NodeMaker(m_, (n.name.empty() ? m_.value(n.outputs[0]).name : n.name) + "/tap", std::max(n.opset, 13));
    const int64_t N = (*yd)[0], M = (*yd)[1], C = (*xd)[1];
    auto full = [&](const Tap& t) { return t.rows.size() == oh && t.cols.size() == ow; };
    // The bias rides on the first tap covering the whole output, if any.
    int bias_tap = -1;
    for (size_t i = 0; i < taps.size() && has_bias; ++i)
      if (full(taps[i])) {
        bias_tap = static_cast<int>(i);
        break;
      }
    const bool final_bias = has_bias && bias_tap < 0;
    std::vector<ir::Node> out;
    ir::ValueId acc = ir::kNoValue;
    for (size_t i = 0; i < taps.size(); ++i) {
      const Tap& t = taps[i];
      const std::string tag = std::to_string(t.th) + "_" + std::to_string(t.tw);
      const bool last = i + 1 == taps.size() && !final_bias;
      // The input rectangle this tap reads.
      ir::ValueId x = n.inputs[0];
      const int64_t h = t.rows.size(), w = t.cols.size();
      if (h != (*xd)[2] || w != (*xd)[3]) {
        const ir::ValueId s = make_.temp({N, C, h, w}, tag + "_in");
        const ir::ValueId starts = make_.ints({t.rows.in_begin, t.cols.in_begin}, tag + "_starts");
        const ir::ValueId ends = make_.ints({t.rows.in_begin + h, t.cols.in_begin + w}, tag + "_ends");
        out.push_back(make_.node("Slice", {x, starts, ends, make_.ints({2, 3}, tag + "_axes")}, s, tag + "_in"));
        x = s;
      }
      // Its 1x1 product.
      const bool padded = !full(t);
      const bool direct = last && !padded && acc == ir::kNoValue;
      ir::ValueId y = direct ? n.outputs[0] : make_.temp({N, M, h, w}, tag + "_conv");
      std::vector<ir::ValueId> conv_in{x, tap_weights(weights, t.th, t.tw, tag)};
      if (static_cast<int>(i) == bias_tap) conv_in.push_back(n.inputs[2]);
      out.push_back(make_.node("Conv", conv_in, y, tag + "_conv"));
      // Placed in the output.
      if (padded) {
        const bool into_out = last && acc == ir::kNoValue;
        const ir::ValueId p = into_out ? n.outputs[0] : make_.temp({N, M, oh, ow}, tag + "_placed");
        const ir::ValueId pads_v =
            make_.ints({0, 0, t.rows.begin, t.cols.begin, 0, 0, oh - t.rows.end, ow - t.cols.end}, tag + "_pads");
        out.push_back(make_.node("Pad", {y, pads_v}, p, tag + "_placed"));
        y = p;
      }
      if (acc == ir::kNoValue) {
        acc = y;
        continue;
      }
      const ir::ValueId sum = last ? n.outputs[0] : make_.temp({N, M, oh, ow}, tag + "_sum");
      out.push_back(make_.node("Add", {acc, y}, sum, tag + "_sum"));
      acc = sum;
    }
    if (final_bias) {
      const Tensor b = *m_.value(n.inputs[2]).constant;
      Tensor b4(DType::f32, {1, M, 1, 1});
      std::copy_n(b.data<float>(), M, b4.data<float>());
      out.push_back(make_.node("Add", {acc, make_.constant(std::move(b4), "bias")}, n.outputs[0], "bias"));
    }
    return out;
  }

  /// w[:, :, th, tw] as a [M, C, 1, 1] constant.
  ir::ValueId tap_weights(const Tensor& w, int64_t th, int64_t tw, const std::string& tag) {
    const auto& d = w.shape();
    Tensor t(DType::f32, {d[0], d[1], 1, 1});
    for (int64_t o = 0; o < d[0] * d[1]; ++o) t.data<float>()[o] = w.data<float>()[(o * d[2] + th) * d[3] + tw];
    return make_.constant(std::move(t), tag + "_w");
  }

  ir::Model& m_;
  ir::Graph& g_;
  NodeMaker make_{m_, "", 0};
};

}  // namespace

int split_conv_taps(ir::Model& m) {
  return sum_over_graphs(m.main, [&](ir::Graph& g) { return Splitter(m, g).run(); });
}

}  // namespace kiln::passes
