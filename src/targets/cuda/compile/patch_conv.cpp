// Patch-embedding convolutions as a transpose and a matmul (patch_conv.h:
// patch_convs_to_gemm).
//
// Why: a Conv whose kernel equals its stride (no padding, no dilation, one
// group) reads every input pixel exactly once; it is a matmul of the image cut
// into non-overlapping patches: vision transformers' patch embedding (ViT-B/16:
// 16x16 / 16 from 3 to 768 channels), Swin's and ConvNeXt's 4x4 / 4 stems.
// cuDNN handles the large kernel badly: ViT-B/16's patch embedding at batch
// 32 in fp16 took 0.288 ms on the H200 (issue #20's profile, 8% of the model)
// for 7.4 GFLOP, which cuBLASLt runs in a few tens of microseconds. Cutting
// the patches is one transpose of the input (the image is small: 3 channels),
// and the result comes back NHWC-ordered, which the model's own Transpose /
// Reshape to tokens (or an NHWC region) then reads.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "support/log.h"
#include "targets/cuda/compile/patch_conv.h"
#include "targets/cuda/compile/lowering.h"

namespace kiln::targets::cuda {

namespace {


/// The static dims [N, C, H, W], [K, C, kh, kw] and [N, K, OH, OW] of Conv `n`
/// when it is a patch convolution this pass takes; else false.
bool patch_dims(const ir::Model& m, const ir::Node& n, std::vector<int64_t>& x, std::vector<int64_t>& w,
                std::vector<int64_t>& y) {
  if (!n.domain.empty() || n.op_type != "Conv" || n.inputs.size() < 2 || n.outputs.size() != 1) return false;
  if (n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue) return false;  // split_conv_bias left a bias: not constant
  if (n.i("kiln_nhwc", 0) != 0 || n.i("group", 1) != 1) return false;
  const std::string pad = n.s("auto_pad", "NOTSET");
  if (pad != "NOTSET" && pad != "VALID") return false;
  const ir::Value &xv = m.value(n.inputs[0]), &wv = m.value(n.inputs[1]), &yv = m.value(n.outputs[0]);
  if (!wv.constant || !xv.shape || !wv.shape || !yv.shape || !ir::is_static(*xv.shape) ||
      !ir::is_static(*wv.shape) || !ir::is_static(*yv.shape))
    return false;
  if (!is_float_storage(xv.dtype) || wv.dtype != xv.dtype || yv.dtype != xv.dtype) return false;
  x = ir::to_sizes(*xv.shape), w = ir::to_sizes(*wv.shape), y = ir::to_sizes(*yv.shape);
  if (x.size() != 4 || w.size() != 4 || y.size() != 4 || w[1] != x[1]) return false;
  const int64_t kh = w[2], kw = w[3];
  if (kh * kw < 4) return false;  // 1x1 is lower_pointwise_conv's / to_nhwc's
  const auto strides = n.ints("strides", {1, 1});
  const auto dil = n.ints("dilations", {1, 1});
  const auto pads = n.ints("pads", {0, 0, 0, 0});
  if (strides.size() != 2 || strides[0] != kh || strides[1] != kw) return false;
  for (auto d : dil)
    if (d != 1) return false;
  for (auto p : pads)
    if (p != 0) return false;
  // Whole patches only (the floor of a remainder would need a Slice first).
  if (x[2] % kh != 0 || x[3] % kw != 0 || y[0] != x[0] || y[1] != w[0] || y[2] != x[2] / kh || y[3] != x[3] / kw)
    return false;
  // Rows of both matmul operands and of D 16-byte aligned (cuBLASLt's
  // vectorized kernels); otherwise cuDNN keeps it.
  const int64_t per16 = 16 / static_cast<int64_t>(dtype_size(xv.dtype));
  return (x[1] * kh * kw) % per16 == 0 && w[0] % per16 == 0;
}

/// Whether values a and b have the same static shape.
bool y_same(const ir::Model& m, ir::ValueId a, ir::ValueId b) {
  const ir::Value &va = m.value(a), &vb = m.value(b);
  return va.shape && vb.shape && ir::is_static(*va.shape) && ir::is_static(*vb.shape) &&
         ir::to_sizes(*va.shape) == ir::to_sizes(*vb.shape);
}

/// Filter w [K, C, kh, kw] as the matmul's B [C*kh*kw, K] (element size
/// only matters: a transpose of a [K, C*kh*kw] matrix).
Tensor filter_as_b(const Tensor& w, const std::vector<int64_t>& dims) {
  const int64_t k = dims[0], r = dims[1] * dims[2] * dims[3];
  const size_t e = dtype_size(w.dtype());
  Tensor b(w.dtype(), {r, k});
  const auto* src = static_cast<const uint8_t*>(w.raw());
  auto* dst = static_cast<uint8_t*>(b.raw());
  for (int64_t o = 0; o < k; ++o)
    for (int64_t i = 0; i < r; ++i) std::memcpy(dst + (i * k + o) * e, src + (o * r + i) * e, e);
  return b;
}

/// The bias split_conv_bias gave Conv output `y` ([K, 1, 1] constant of y's
/// dtype added by y's only reader), as a [K] constant; that reader's index
/// in `nodes`, else -1.
int bias_reader(ir::Model& m, const std::vector<ir::Node>& nodes, size_t conv, ir::ValueId y, int64_t K,
                ir::ValueId& bias) {
  if (std::find(m.main.outputs.begin(), m.main.outputs.end(), y) != m.main.outputs.end()) return -1;
  int reader = -1;
  for (size_t j = conv + 1; j < nodes.size(); ++j)
    for (auto v : nodes[j].inputs)
      if (v == y) {
        if (reader >= 0 && reader != static_cast<int>(j)) return -1;
        reader = static_cast<int>(j);
      }
  for (auto& n : nodes)  // read by a subgraph (captured by name): leave it
    for (auto& [k, a] : n.attrs)
      if (std::holds_alternative<std::shared_ptr<ir::Graph>>(a)) return -1;
  if (reader < 0) return -1;
  const ir::Node& add = nodes[reader];
  if (!add.domain.empty() || add.op_type != "Add" || add.inputs.size() != 2 || add.inputs[0] != y) return -1;
  const ir::Value& c = m.value(add.inputs[1]);
  const ir::Value& z = m.value(add.outputs[0]);
  if (!c.constant || c.dtype != m.value(y).dtype || z.dtype != c.dtype || c.constant->numel() != K || !c.shape ||
      ir::to_sizes(*c.shape) != std::vector<int64_t>{K, 1, 1} || !z.shape || !y_same(m, y, add.outputs[0]))
    return -1;
  ir::Value bv = c;
  bv.name = c.name + "_row";
  bv.shape = ir::static_shape({K});
  bv.constant = Tensor::from_bytes(c.dtype, {K}, c.constant->raw(), static_cast<size_t>(K) * dtype_size(c.dtype));
  bias = m.add_value(std::move(bv));
  return reader;
}

ir::Node make_node(const ir::Node& conv, const std::string& op, const std::string& suffix,
                   std::vector<ir::ValueId> inputs, ir::ValueId out) {
  ir::Node n;
  n.op_type = op;
  n.name = conv.name + suffix;
  n.opset = conv.opset;
  n.inputs = std::move(inputs);
  n.outputs = {out};
  return n;
}

}  // namespace

int patch_convs_to_gemm(ir::Model& m) {
  if (const char* e = std::getenv("KILN_CUDA_PATCH_GEMM"); e && std::string(e) == "0") return 0;  // measurement aid
  int rewritten = 0;
  std::vector<ir::Node> out;
  std::vector<ir::Node>& nodes = m.main.nodes;
  std::vector<bool> absorbed(nodes.size(), false);
  out.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    ir::Node& n = nodes[i];
    std::vector<int64_t> x, w, y;
    if (absorbed[i]) continue;
    if (!patch_dims(m, n, x, w, y)) {
      out.push_back(std::move(n));
      continue;
    }
    const DType dt = m.value(n.inputs[0]).dtype;
    const int64_t N = x[0], C = x[1], kh = w[2], kw = w[3], K = w[0], OH = y[2], OW = y[3];
    const std::string base = m.value(n.outputs[0]).name + "_patch";
    // x [N, C, OH, kh, OW, kw] -> [N, OH, OW, C, kh, kw] -> rows of C*kh*kw, one per patch.
    const ir::ValueId x6 = new_value(m, base + "_x6", dt, {N, C, OH, kh, OW, kw});
    const ir::ValueId xt = new_value(m, base + "_xt", dt, {N, OH, OW, C, kh, kw});
    const ir::ValueId a = new_value(m, base + "_rows", dt, {N * OH * OW, C * kh * kw});
    ir::ValueId d = new_value(m, base + "_gemm", dt, {N * OH * OW, K});
    const ir::ValueId d4 = new_value(m, base + "_nhwc", dt, {N, OH, OW, K});
    ir::Value bv;
    bv.name = base + "_filter";
    bv.dtype = dt;
    bv.shape = ir::static_shape({C * kh * kw, K});
    bv.constant = filter_as_b(*m.value(n.inputs[1]).constant, w);
    const ir::ValueId b = m.add_value(std::move(bv));
    out.push_back(make_node(n, "Reshape", "_patch_split", {n.inputs[0], shape_constant(m, base + "_s6", {N, C, OH, kh, OW, kw})}, x6));
    ir::Node t = make_node(n, "Transpose", "_patch_gather", {x6}, xt);
    t.attrs["perm"] = std::vector<int64_t>{0, 2, 4, 1, 3, 5};
    out.push_back(std::move(t));
    out.push_back(make_node(n, "Reshape", "_patch_rows", {xt, shape_constant(m, base + "_s2", {N * OH * OW, C * kh * kw})}, a));
    // The bias split off the Conv, added before the patches go back to NCHW:
    // a [K] row vector after the matmul, which lower_gemm fuses as its epilogue.
    ir::ValueId bias = ir::kNoValue, result = n.outputs[0];
    const int add = bias_reader(m, nodes, i, n.outputs[0], K, bias);
    if (add >= 0) {
      ir::ValueId dm = d;
      d = new_value(m, base + "_biased", dt, {N * OH * OW, K});
      out.push_back(make_node(n, "MatMul", "", {a, b}, dm));  // keeps the Conv's name (profiles, notes)
      out.push_back(make_node(nodes[add], "Add", "", {dm, bias}, d));
      absorbed[add] = true;
      result = nodes[add].outputs[0];
    } else {
      out.push_back(make_node(n, "MatMul", "", {a, b}, d));
    }
    out.push_back(make_node(n, "Reshape", "_patch_nhwc", {d, shape_constant(m, base + "_s4", {N, OH, OW, K})}, d4));
    ir::Node back = make_node(n, "Transpose", "_patch_nchw", {d4}, result);
    back.attrs["perm"] = std::vector<int64_t>{0, 3, 1, 2};
    out.push_back(std::move(back));
    ++rewritten;
  }
  m.main.nodes = std::move(out);
  if (rewritten) log().debug("cuda: {} patch convolution(s) (kernel = stride) as a transpose and a matmul", rewritten);
  return rewritten;
}

}  // namespace kiln::targets::cuda
