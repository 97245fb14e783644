// A 2-D kiln.cpu.Conv whose groups are 2 or 4 channels wide on both sides
// (ResNeXt's 32x4d blocks) becomes kiln.cpu.GroupConv, kiln's own kernel on
// channel-blocked activations (run/group_conv.cpp says why). The weights are
// packed here; a fused ReLU is kept as the kernel's own; any other post-op
// leaves the node to oneDNN. assign_layouts then gives it blocked input and
// output like a convolution.
#include "support/log.h"
#include "targets/cpu/compile/lower_ops.h"
#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets::cpu {

namespace {

/// The GroupConv form of Conv n, its weights packed into a new constant of
/// m, or nullopt when n has no such form.
std::optional<ir::Node> group_conv_twin(ir::Model& m, const ir::Node& n) {
  if (!n.has("md.wei_src") || n.outputs.size() != 1 || n.inputs.size() < 2) return std::nullopt;
  const md_t wsrc = md_attr(n, "md.wei_src");
  const auto wd = wsrc.dims();  // [G, O/G, I/G, KH, KW]
  if (wd.size() != 5 || wd[0] < 2 || wd[1] != wd[2] || (wd[1] != 2 && wd[1] != 4) || wsrc != plain_md(wd))
    return std::nullopt;
  auto xd = static_dims(m, n.inputs[0]), yd = static_dims(m, n.outputs[0]);
  const int64_t C = wd[0] * wd[1];
  if (!xd || !yd || xd->size() != 4 || yd->size() != 4 || (*xd)[1] != C || (*yd)[1] != C || C % channel_block())
    return std::nullopt;
  bool relu = false;
  for (auto& p : read_post_ops(n)) {
    if (p.kind != PostOp::eltwise || p.alg != static_cast<int64_t>(dnnl::algorithm::eltwise_relu) || p.alpha != 0.f ||
        p.scale != 1.f || relu)
      return std::nullopt;
    relu = true;
  }
  if (n.has("md.bias") && md_attr(n, "md.bias") != plain_md({C})) return std::nullopt;
  const Tensor* w = constant_of(m, n.inputs[1]);
  if (!w || w->dtype() != DType::f32 || w->numel() != C * wd[1] * wd[3] * wd[4]) return std::nullopt;
  const auto strides = n.ints("strides"), dilates = n.ints("dilates"), pb = n.ints("pads_begin");
  if (strides.size() != 2 || dilates.size() != 2 || pb.size() != 2) return std::nullopt;
  ir::Node g = n;
  g.op_type = "GroupConv";
  for (const char* a : {"md.wei", "md.wei_src", "impl", "alg"}) g.attrs.erase(a);
  write_post_ops(g, {});
  g.attrs["shape"] = std::vector<int64_t>{(*xd)[0], C, (*xd)[2], (*xd)[3], (*yd)[2], (*yd)[3], wd[3], wd[4]};
  g.attrs["dilations"] = std::vector<int64_t>{dilates[0] + 1, dilates[1] + 1};  // oneDNN's are ONNX's - 1
  g.attrs["width"] = wd[1];
  g.attrs["block"] = channel_block();
  g.attrs["relu"] = int64_t{relu};
  Tensor packed = pack_group_conv_weights(w->data<float>(), C, wd[1], wd[3], wd[4]);
  ir::ValueId id = add_value(m, m.value(n.inputs[1]).name + "/group_packed", DType::f32, packed.shape());
  m.value(id).constant = std::move(packed);
  g.inputs = {n.inputs[0], id};
  if (n.has("md.bias")) g.inputs.push_back(n.inputs[2]);
  return g;
}

}  // namespace

int group_convs(ir::Model& m) {
  int count = 0;
  for_each_graph(m.main, [&](ir::Graph& g) {
    for (auto& n : g.nodes) {
      if (!is_cpu(n, "Conv")) continue;
      auto c = group_conv_twin(m, n);
      if (!c) continue;
      log().debug("{}: runs as a GroupConv (groups of {})", n.label(), c->i("width"));
      n = std::move(*c);
      ++count;
    }
  });
  return count;
}

}  // namespace kiln::targets::cpu
