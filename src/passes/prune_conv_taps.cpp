// Conv tap pruning: a kernel tap that reads only padding for every output
// position contributes zero, so a Conv whose outer taps all miss the input
// equals a Conv with a smaller kernel over less padding. DeepLab's atrous
// spatial pyramid pooling is the common case: 3x3 convolutions with dilation
// 12 / 24 / 36 over a 14x14 or 28x28 feature map, whose eight outer taps fall
// entirely into the padding once the dilation reaches the map's size; they
// are 1x1 convolutions, but as dilated 3x3 ones oneDNN runs them through an
// im2col GEMM nine times the size, mostly over zeros.
//
// Per spatial dim the taps that hit the input for some output position form
// [first, last]; the kernel is cut to them (weights sliced), the begin
// padding shrinks by first * dilation, the end padding becomes what the last
// window reaches past the input (the output size is unchanged). Only the
// ends are cut: an unused tap between used ones stays.
#include <algorithm>

#include "passes/graph_edit.h"
#include "passes/passes.h"

namespace kiln::passes {

namespace {

/// The new geometry of one spatial dim.
struct Cut {
  int64_t first = 0, taps = 0;       ///< first kept tap and the number kept
  int64_t pad_begin = 0, pad_end = 0;
};

/// The used taps of one spatial dim (nullopt: none can be cut, or the cut
/// would need a negative pad or change the output size).
std::optional<Cut> cut_dim(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t dil, int64_t pb) {
  int64_t first = -1, last = -1;
  for (int64_t t = 0; t < k; ++t) {
    bool used = false;
    for (int64_t o = 0; o < out && !used; ++o) {
      const int64_t pos = o * stride - pb + t * dil;
      used = pos >= 0 && pos < in;
    }
    if (!used) continue;
    if (first < 0) first = t;
    last = t;
  }
  if (first < 0) return std::nullopt;  // no tap reads the input: leave such an odd Conv alone
  Cut c;
  c.first = first;
  c.taps = last - first + 1;
  c.pad_begin = pb - first * dil;
  // The end padding the last window reaches into; a negative value (input
  // rows no window reads) is fine as 0 while it stays under one stride.
  const int64_t need = (out - 1) * stride + (c.taps - 1) * dil + 1 - in - c.pad_begin;
  c.pad_end = std::max<int64_t>(need, 0);
  if (c.pad_begin < 0 || c.pad_end - need >= stride) return std::nullopt;
  return c;
}

/// W [M, C/group, k...] cut to the kept taps of every spatial dim.
Tensor slice_weights(const Tensor& w, const std::vector<Cut>& cuts) {
  std::vector<int64_t> shape = w.shape();
  for (size_t i = 0; i < cuts.size(); ++i) shape[i + 2] = cuts[i].taps;
  Tensor out(DType::f32, shape);
  const std::vector<int64_t>& src = w.shape();
  const size_t r = src.size();
  std::vector<int64_t> idx(r, 0);
  const float* x = w.data<float>();
  float* y = out.data<float>();
  for (int64_t o = 0; o < out.numel(); ++o) {
    int64_t off = 0;
    for (size_t d = 0; d < r; ++d) off = off * src[d] + idx[d] + (d >= 2 ? cuts[d - 2].first : 0);
    y[o] = x[off];
    for (size_t d = r; d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

/// Cuts n's kernel when that changes something; true when it did.
bool prune(ir::Model& m, ir::Node& n) {
  if (!is_onnx_op(n, "Conv") || n.inputs.size() < 2 || n.outputs.size() != 1) return false;
  const ir::Value& wv = m.value(n.inputs[1]);
  if (!wv.constant || wv.constant->dtype() != DType::f32) return false;
  auto xd = static_f32_dims(m, n.inputs[0]), yd = static_f32_dims(m, n.outputs[0]);
  const std::vector<int64_t> wd = wv.constant->shape();
  if (!xd || !yd || xd->size() < 3 || xd->size() != wd.size() || yd->size() != wd.size()) return false;
  const size_t sp = xd->size() - 2;
  if (n.s("auto_pad", "NOTSET") != "NOTSET") return false;
  const auto strides = n.ints("strides", std::vector<int64_t>(sp, 1));
  const auto dil = n.ints("dilations", std::vector<int64_t>(sp, 1));
  const auto pads = n.ints("pads", std::vector<int64_t>(2 * sp, 0));
  if (strides.size() != sp || dil.size() != sp || pads.size() != 2 * sp) return false;
  std::vector<Cut> cuts;
  bool smaller = false;
  for (size_t i = 0; i < sp; ++i) {
    auto c = cut_dim((*xd)[i + 2], (*yd)[i + 2], wd[i + 2], strides[i], dil[i], pads[i]);
    if (!c) return false;
    smaller = smaller || c->taps < wd[i + 2];
    cuts.push_back(*c);
  }
  if (!smaller) return false;
  ir::Value w;
  w.name = wv.name + "/pruned_taps";
  w.dtype = DType::f32;
  w.constant = slice_weights(*wv.constant, cuts);
  w.shape = ir::static_shape(w.constant->shape());
  n.inputs[1] = m.add_value(std::move(w));
  std::vector<int64_t> kernel, new_pads(2 * sp), new_dil;
  for (size_t i = 0; i < sp; ++i) {
    kernel.push_back(cuts[i].taps);
    new_pads[i] = cuts[i].pad_begin;
    new_pads[i + sp] = cuts[i].pad_end;
    new_dil.push_back(cuts[i].taps == 1 ? 1 : dil[i]);  // a single tap has no spacing
  }
  n.attrs["kernel_shape"] = kernel;
  n.attrs["pads"] = new_pads;
  n.attrs["dilations"] = new_dil;
  return true;
}

}  // namespace

int prune_conv_taps(ir::Model& m) {
  return sum_over_graphs(m.main, [&](ir::Graph& g) {
    int n = 0;
    for (auto& node : g.nodes) n += prune(m, node);
    return n;
  });
}

}  // namespace kiln::passes
