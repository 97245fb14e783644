// Conv -> kiln.cuda.Conv (cuDNN) with the algorithm chosen on the device and
// stored: a graph-API engine when a device is at hand, else (cross-compiling,
// ConvTranspose, or no graph engine) the legacy API's algorithm; the bias
// split off as an element-wise Add (lowering.h).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>

#include "support/error.h"
#include "support/log.h"
#include "targets/cuda/compile/lowering.h"
#include "targets/cuda/compile/pointwise_cudnn.h"
#include "targets/cuda/compile/tuning.h"
#include "targets/cuda/run/cuda_ops.h"
#include "targets/cuda/run/cudnn_conv.h"
#include "targets/cuda/run/cudnn_graph.h"
#include "targets/cuda/run/driver.h"

namespace kiln::targets::cuda {

int split_conv_bias(ir::Model& m) {
  int split = 0;
  std::vector<ir::Node> out;
  for (auto& n : m.main.nodes) {
    if (!n.domain.empty() || (n.op_type != "Conv" && n.op_type != "ConvTranspose") || n.inputs.size() < 3 ||
        n.inputs[2] == ir::kNoValue) {
      out.push_back(n);
      continue;
    }
    const ir::Value& y = m.value(n.outputs[0]);
    const ir::Value& b = m.value(n.inputs[2]);
    if (!y.shape || !ir::is_static(*y.shape) || !b.shape || !ir::is_static(*b.shape) || y.shape->size() < 3) {
      out.push_back(n);  // lower_conv refuses it with the reason
      continue;
    }
    // Bias [K] -> [K, 1, .., 1] so that it broadcasts over the spatial dims.
    ir::Value bv = b;
    bv.name = b.name + "_cuda_bias";
    std::vector<int64_t> dims = {ir::to_sizes(*b.shape).at(0)};
    dims.resize(y.shape->size() - 1, 1);
    bv.shape = ir::Shape();
    for (auto d : dims) bv.shape->push_back(ir::Dim{d, ""});
    if (b.constant) bv.constant = b.constant->reshaped(dims);
    ir::ValueId bias_id = ir::kNoValue;
    if (b.constant) {
      bias_id = m.add_value(bv);
    } else {
      out.push_back(n);  // a non-constant bias: refused by lower_conv
      continue;
    }
    ir::Value raw = m.value(n.outputs[0]);
    raw.name += "_nobias";
    raw.constant.reset();
    ir::ValueId raw_id = m.add_value(raw);
    ir::Node conv = n;
    conv.inputs.resize(2);
    ir::ValueId y_id = conv.outputs[0];
    conv.outputs[0] = raw_id;
    ir::Node add;
    add.op_type = "Add";
    add.name = n.name + "_bias";
    add.opset = n.opset;
    add.inputs = {raw_id, bias_id};
    add.outputs = {y_id};
    out.push_back(std::move(conv));
    out.push_back(std::move(add));
    ++split;
  }
  m.main.nodes = std::move(out);
  return split;
}

ConvSpec conv_spec_for(Lowering& L, const ir::Node& n, const LowerOptions& opt) {
  ir::Model& m = L.model;
  // x, w and y share one dtype: float32, float16 or bfloat16 (the precision
  // pass converts a convolution's inputs to the program's dtype).
  const DType dt = m.value(n.inputs[0]).dtype;
  if (dt != DType::f32 && dt != DType::f16 && dt != DType::bf16)
    refuse(n, fmt::format("input '{}' is {}; convolutions are float32, float16 or bfloat16 only in this version",
                          m.value(n.inputs[0]).name, dtype_name(dt)));
  for (ir::ValueId v : {n.inputs[0], n.inputs.size() > 1 ? n.inputs[1] : ir::kNoValue, n.outputs[0]})
    if (v != ir::kNoValue && m.value(v).dtype != dt)
      refuse(n, fmt::format("'{}' is {}, input '{}' {}; a convolution's tensors must share one dtype", m.value(v).name,
                            dtype_name(m.value(v).dtype), m.value(n.inputs[0]).name, dtype_name(dt)));
  if (n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue) refuse(n, "a bias that is not a constant");
  ConvSpec s;
  s.dtype = dt;
  s.tf32 = dt == DType::f32 && opt.tf32;
  s.x = L.dims(n, n.inputs[0]);
  s.w = L.dims(n, n.inputs[1]);
  s.y = L.dims(n, n.outputs[0]);
  if (n.i("kiln_nhwc", 0) != 0) {  // to_nhwc: [N,H,W,C] data, [K,R,S,C/g] filter; the spec keeps NCHW dims
    if (s.x.size() != 4 || s.w.size() != 4 || s.y.size() != 4 || n.op_type != "Conv")
      refuse(n, "an NHWC convolution must be a 2-D Conv");
    for (auto* v : {&s.x, &s.w, &s.y}) *v = {(*v)[0], (*v)[3], (*v)[1], (*v)[2]};
    s.nhwc = true;
  }
  if (s.x.size() < 3 || s.x.size() > 5) refuse(n, "only 1-D, 2-D and 3-D convolutions");
  size_t k = s.x.size() - 2;
  std::vector<int64_t> in(s.x.begin() + 2, s.x.end()), out(s.y.begin() + 2, s.y.end());
  std::vector<int64_t> kernel(s.w.begin() + 2, s.w.end());
  s.strides = n.ints("strides", std::vector<int64_t>(k, 1));
  s.dilations = n.ints("dilations", std::vector<int64_t>(k, 1));
  s.group = n.i("group", 1);
  std::vector<int64_t> pb(k), pe(k);
  if (n.op_type == "ConvTranspose") {
    s.transposed = true;
    // y = s*(x-1) + output_padding + ((k-1)*d+1) - pad_begin - pad_end
    auto op = n.ints("output_padding", std::vector<int64_t>(k, 0));
    auto pads = n.ints("pads");
    bool derive = n.s("auto_pad", "NOTSET") != "NOTSET" || n.has("output_shape") || pads.empty();
    for (size_t i = 0; i < k; ++i) {
      int64_t total = s.strides[i] * (in[i] - 1) + (op.size() > i ? op[i] : 0) + (kernel[i] - 1) * s.dilations[i] + 1 - out[i];
      if (!derive) {
        if (pads.size() != 2 * k) refuse(n, "pads must have 2 entries per spatial dim");
        pb[i] = pads[i], pe[i] = pads[i + k];
        if (pb[i] + pe[i] != total) refuse(n, "pads and output_padding do not give the output shape");
      } else {
        if (total < 0 || total % 2) refuse(n, "the padding the output shape needs is asymmetric");
        pb[i] = pe[i] = total / 2;
      }
      if ((op.size() > i ? op[i] : 0) >= s.strides[i]) refuse(n, "output_padding >= stride");
    }
    // cuDNN's "input" of the convolution is our output: in/out swap in the window checks below.
  } else {
    std::tie(pb, pe) = window_pads(n, in, out, kernel, s.strides, s.dilations);
  }
  if (pb != pe) refuse(n, fmt::format("asymmetric pads [{}] / [{}]", fmt::join(pb, ","), fmt::join(pe, ",")));
  s.pads = pb;
  if (k == 1) {  // cuDNN wants at least 2 spatial dims: add a unit one
    for (auto* v : {&s.x, &s.w, &s.y}) v->push_back(1);
    s.pads.push_back(0), s.strides.push_back(1), s.dilations.push_back(1);
  }
  return s;
}

bool graph_convs_enabled(const LowerOptions& opt) {
  // Measurement aid (docs/cuda.md): KILN_CUDA_CONV_GRAPH=0 keeps cuDNN's
  // legacy convolution API and the separate epilogue kernels.
  static const bool on = [] {
    const char* e = std::getenv("KILN_CUDA_CONV_GRAPH");
    return !(e && std::string(e) == "0");
  }();
  return on && opt.device >= 0;
}

ir::Node graph_conv_node(const ir::Node& n, const ConvSpec& s, const ConvEpilogue& ep, const GraphEngine& e,
                         std::vector<ir::ValueId> inputs, ir::ValueId output) {
  ir::Node c;
  c.op_type = "Conv";
  c.domain = std::string(kCudaDomain);
  c.name = n.name;
  c.opset = n.opset;
  c.inputs = std::move(inputs);
  c.outputs = {output};
  c.attrs["source_op"] = n.op_type;
  set_conv_attrs(c, s);
  set_graph_conv_attrs(c, ep, e);
  return c;
}

ir::Node lower_conv(Lowering& L, const ir::Node& n, const LowerOptions& opt) {
  ConvSpec s = conv_spec_for(L, n, opt);
  if (!s.transposed && graph_convs_enabled(opt))
    if (auto e = tune_conv_graph(s, ConvEpilogue{}, opt.tuning, opt.device, n.label(), L.tuning, pointwise_on_cudnn(opt))) {
      // Timed tuning compares the graph engine with the legacy API's best
      // algorithm (cudnnFind tries every one; the graph side only the
      // heuristic's best few) and keeps the faster.
      const ConvAlgo legacy = opt.tuning == Tuning::heuristic ? ConvAlgo{} : tune_conv(s, opt.tuning, opt.device, n.label(), L.tuning);
      if (legacy.ms <= 0 || e->ms <= legacy.ms)
        return graph_conv_node(n, s, ConvEpilogue{}, *e, {n.inputs[0], n.inputs[1]}, n.outputs[0]);
      log().debug("{}: the legacy API's algorithm {} ({:.4f} ms) beats the graph's {} ({:.4f} ms)", n.label(), legacy.algo,
                  legacy.ms, e->describe(), e->ms);
    }
  ir::Node c;
  c.op_type = "Conv";
  c.domain = std::string(kCudaDomain);
  c.name = n.name;
  c.opset = n.opset;
  c.inputs = {n.inputs[0], n.inputs[1]};
  c.outputs = {n.outputs[0]};
  c.attrs["source_op"] = n.op_type;
  set_conv_attrs(c, s);
  if (opt.device < 0) {
    c.attrs["algo"] = static_cast<int64_t>(kConvAlgoAtLoad);
    c.attrs["workspace"] = static_cast<int64_t>(kMaxConvWorkspace);
    return c;
  }
  ConvAlgo chosen = tune_conv(s, opt.tuning, opt.device, n.label(), L.tuning);
  c.attrs["algo"] = static_cast<int64_t>(chosen.algo);
  c.attrs["workspace"] = static_cast<int64_t>(chosen.workspace);
  return c;
}

}  // namespace kiln::targets::cuda
