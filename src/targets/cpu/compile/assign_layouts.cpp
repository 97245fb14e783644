// Layout assignment: convolutions produce channel-blocked activations
// (nChw16c on AVX-512), the layout-agnostic kiln.cpu nodes that follow (pool,
// eltwise, binary, concat) keep it, and kiln.cpu.Reorder nodes convert only
// where a blocked value meets a node that needs the plain layout (any other
// operator, a graph output, a subgraph).
//
// A value's original id always means its plain (row-major) contents; its
// blocked twin is a new value of shape [bytes/4]. The plain version is made
// by a reorder just before its first plain reader, the blocked one just
// before its first blocked reader when the producer was plain.
#include <omp.h>

#include <unordered_map>
#include <unordered_set>

#include "support/error.h"
#include "support/log.h"
#include "targets/cpu/compile/lower_ops.h"
#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets::cpu {

namespace {

bool flexible(const ir::Node& n) {
  return is_cpu(n, "Conv") || is_cpu(n, "Pool") || is_cpu(n, "Eltwise") || is_cpu(n, "Binary") || is_cpu(n, "Concat") ||
         is_cpu(n, "Resample");
}

/// A computed broadcast operand up to this size is reordered to the blocked
/// layout for its reader (a [1,C,1,1] scale of up to 16K channels).
constexpr size_t kSmallOperandBytes = 64 << 10;

bool is_slice(const ir::Node& n) { return is_cpu(n, "Reorder") && n.has("slice_axis"); }

class Layouts {
 public:
  Layouts(ir::Model& m, ir::Graph& g, bool winograd, bool any_batch)
      : m_(m), g_(g), winograd_(winograd), any_batch_(any_batch), block_(channel_block()) {}

  int run() {
    std::vector<ir::Node> nodes = std::move(g_.nodes);
    g_.nodes.clear();
    for (auto& n : nodes) {
      if (is_cpu(n, "GroupConv") && place_group_conv(n)) continue;
      if (is_cpu(n, "Conv") && place_channels_last(n)) continue;
      if (flexible(n) && place_flexible(n)) continue;
      if (is_slice(n) && place_slice(n)) continue;
      place_plain(std::move(n));
    }
    for (auto id : g_.outputs) ensure_plain(id);
    return reorders_;
  }

 private:
  // ---- values ----
  bool has_blocked(ir::ValueId v) const { return blk_.count(v) != 0; }
  bool rank_ok(ir::ValueId v) const {
    auto d = static_dims(m_, v);
    return d && d->size() >= 3 && d->size() <= 5 && m_.value(v).dtype == DType::f32;
  }
  md_t blocked_of(ir::ValueId v) const {
    auto d = *static_dims(m_, v);
    return blocked_md(dims_t(d.begin(), d.end()), block_);
  }

  ir::Node reorder(const std::string& name, ir::ValueId from, const md_t& from_md, ir::ValueId to, const md_t& to_md) {
    ir::Node r;
    r.op_type = "Reorder";
    r.domain = std::string(kCpuDomain);
    r.name = name;
    r.opset = m_.opset;
    write_post_ops(r, {});
    r.inputs = {from};
    r.outputs = {to};
    set_md_attr(r, "md.src", from_md);
    set_md_attr(r, "md.dst", to_md);
    ++reorders_;
    return r;
  }

  /// v's twin and its layout, for a value whose plain version is pending.
  std::pair<ir::ValueId, md_t> twin_of(ir::ValueId v) const {
    if (auto it = blk_.find(v); it != blk_.end()) return {it->second, blocked_of(v)};
    return {cl_.at(v), channels_last_of(v)};
  }

  ir::ValueId ensure_plain(ir::ValueId v) {
    if (v == ir::kNoValue || !pending_plain_.count(v)) return v;
    auto d = *static_dims(m_, v);
    auto [from, from_md] = twin_of(v);
    g_.nodes.push_back(reorder(m_.value(v).name + "/to_plain", from, from_md, v, plain_md(dims_t(d.begin(), d.end()))));
    pending_plain_.erase(v);
    return v;
  }

  ir::ValueId new_blocked_value(ir::ValueId v) {
    md_t md = blocked_of(v);
    ir::ValueId b = add_value(m_, m_.value(v).name + "/blocked", DType::f32, {static_cast<int64_t>(md_bytes(md) / 4)});
    blk_[v] = b;
    return b;
  }

  ir::ValueId ensure_blocked(ir::ValueId v) {
    if (auto it = blk_.find(v); it != blk_.end()) return it->second;
    auto d = *static_dims(m_, v);
    ir::ValueId b = new_blocked_value(v);
    if (const Tensor* t = constant_of(m_, v)) {  // a constant is reordered now, not at every run
      m_.value(b).constant = reorder_constant(*t, plain_md(dims_t(d.begin(), d.end())), blocked_of(v));
      return b;
    }
    if (pending_plain_.count(v)) {  // only channels-last so far
      g_.nodes.push_back(reorder(m_.value(v).name + "/to_blocked", cl_.at(v), channels_last_of(v), b, blocked_of(v)));
      return b;
    }
    g_.nodes.push_back(reorder(m_.value(v).name + "/to_blocked", v, plain_md(dims_t(d.begin(), d.end())), b, blocked_of(v)));
    return b;
  }

  md_t channels_last_of(ir::ValueId v) const {
    auto d = *static_dims(m_, v);
    static const tag tags[] = {tag::nwc, tag::nhwc, tag::ndhwc};
    return md_t(dims_t(d.begin(), d.end()), dnnl::memory::data_type::f32, tags[d.size() - 3]);
  }

  /// v in the channels-last layout (nhwc), reordered from its blocked twin
  /// when it has one, else from its plain version.
  ir::ValueId ensure_channels_last(ir::ValueId v) {
    if (auto it = cl_.find(v); it != cl_.end()) return it->second;
    ir::ValueId c = add_value(m_, m_.value(v).name + "/nhwc", DType::f32,
                              {static_cast<int64_t>(md_bytes(channels_last_of(v)) / 4)});
    auto d = *static_dims(m_, v);
    auto [from, from_md] = has_blocked(v) ? std::pair(blk_.at(v), blocked_of(v))
                                          : std::pair(ensure_plain(v), plain_md(dims_t(d.begin(), d.end())));
    g_.nodes.push_back(reorder(m_.value(v).name + "/to_nhwc", from, from_md, c, channels_last_of(v)));
    cl_[v] = c;
    return c;
  }

  /// A grouped (not depthwise) convolution whose groups are not whole
  /// channel blocks (ResNeXt's 32 groups of 4 / 8 channels) runs channels-last:
  /// oneDNN 2.6 has only its reference or gemm kernel for it in the blocked
  /// and plain layouts, and a jit kernel in nhwc (measured 4.1 ms plain vs
  /// 0.5 ms nhwc for ResNeXt-50's first grouped conv on 2 AVX-512 cores),
  /// well worth the two reorders around it. False leaves n untouched.
  bool place_channels_last(ir::Node& n) {
    md_t wei = md_attr(n, "md.wei");
    ir::ValueId x = n.inputs[0], y = n.outputs[0];
    if (wei.data.ndims != md_attr(n, "md.src").data.ndims + 1 || !rank_ok(x) || !rank_ok(y)) return false;
    auto wd = wei.dims();  // [G, O/G, I/G, k...]
    if (wd[0] <= 1 || wd[2] == 1 || (wd[1] % block_ == 0 && wd[2] % block_ == 0)) return false;
    for (auto& p : read_post_ops(n))
      if (p.kind == PostOp::binary) return false;  // its operand would need the layout too
    ir::Node c = n;
    set_md_attr(c, "md.src", channels_last_of(x));
    set_md_attr(c, "md.dst", channels_last_of(y));
    if (!fast_primitive(c) || !primitive_ok(c)) return false;
    c.inputs[0] = ensure_channels_last(x);
    ir::ValueId out = add_value(m_, m_.value(y).name + "/nhwc", DType::f32,
                                {static_cast<int64_t>(md_bytes(channels_last_of(y)) / 4)});
    cl_[y] = out;
    c.outputs[0] = out;
    pending_plain_.insert(y);
    g_.nodes.push_back(std::move(c));
    return true;
  }

  // ---- nodes ----
  /// kiln.cpu.GroupConv reads and writes only the blocked layout.
  bool place_group_conv(ir::Node& n) {
    ir::ValueId x = n.inputs[0], y = n.outputs[0];
    // group_convs made it for this machine's block and 4-D float32 values: nothing else can read it.
    KILN_CHECK(rank_ok(x) && rank_ok(y) && n.i("block", 0) == block_, "{}: a GroupConv for block {} here ({})",
               n.label(), n.i("block", 0), block_);
    ir::Node b = n;
    set_md_attr(b, "md.src", blocked_of(x));
    set_md_attr(b, "md.dst", blocked_of(y));
    b.inputs[0] = ensure_blocked(x);
    b.outputs[0] = new_blocked_value(y);
    pending_plain_.insert(y);
    g_.nodes.push_back(std::move(b));
    return true;
  }

  void place_plain(ir::Node n) {
    for (auto& id : n.inputs) ensure_plain(id);
    std::vector<ir::ValueId> inner;
    for (auto& [k, a] : n.attrs)
      if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a)) {
        for (auto& u : uses_in(**sg)) ensure_plain(u);
        reorders_ += Layouts(m_, **sg, winograd_, any_batch_).run();
      }
    g_.nodes.push_back(std::move(n));
  }

  /// Values of this graph read inside subgraph sg.
  std::vector<ir::ValueId> uses_in(const ir::Graph& sg) {
    ir::Graph wrapper;
    ir::Node holder;
    holder.attrs["g"] = std::make_shared<ir::Graph>(sg);
    wrapper.nodes.push_back(std::move(holder));
    std::vector<ir::ValueId> out;
    auto u = uses_of(wrapper, m_.values.size());
    for (size_t v = 0; v < u.size(); ++v)
      if (!u[v].empty() && pending_plain_.count(static_cast<ir::ValueId>(v))) out.push_back(static_cast<ir::ValueId>(v));
    return out;
  }

  /// The md attribute name of each activation input of a flexible node, and
  /// whether the input must have the node's full output dims to be blocked.
  std::vector<std::pair<size_t, std::string>> activation_inputs(const ir::Node& n) const {
    std::vector<std::pair<size_t, std::string>> out;
    if (is_cpu(n, "Conv") || is_cpu(n, "Pool") || is_cpu(n, "Eltwise") || is_cpu(n, "Resample"))
      out.push_back({0, "md.src"});
    if (is_cpu(n, "Binary")) out = {{0, "md.src0"}, {1, "md.src1"}};
    if (is_cpu(n, "Concat"))
      for (size_t i = 0; i < n.inputs.size(); ++i) out.push_back({i, "md.src" + std::to_string(i)});
    for (auto& p : read_post_ops(n))
      if (p.kind == PostOp::binary) out.push_back({static_cast<size_t>(p.input), "md.post" + std::to_string(p.input)});
    return out;
  }

  /// Tries the blocked layout for a flexible node; false leaves n untouched.
  bool place_flexible(ir::Node& n) {
    ir::ValueId y = n.outputs[0];
    if (!rank_ok(y)) return false;
    auto yd = *static_dims(m_, y);
    auto ins = activation_inputs(n);
    // A convolution makes blocked output unless it maps a plain input to few
    // channels (a head like YOLO's DFL: blocking would pad 1 channel to 16).
    bool any_blocked = is_cpu(n, "Conv") && (has_blocked(n.inputs[0]) || yd[1] >= block_ / 2);
    for (auto& [i, name] : ins)
      if (has_blocked(n.inputs[i]) &&
          (*static_dims(m_, n.inputs[i]) == yd || is_cpu(n, "Concat") ||
           (i == 0 && (is_cpu(n, "Resample") || is_cpu(n, "Pool")))))
        any_blocked = true;
    if (!any_blocked) return false;

    ir::Node b = n;
    std::vector<bool> want(ins.size()), full(ins.size());
    for (size_t k = 0; k < ins.size(); ++k) {
      auto [i, name] = ins[k];
      ir::ValueId x = n.inputs[i];
      auto xd = *static_dims(m_, x);
      full[k] = xd == yd || (i == 0 && (is_cpu(n, "Conv") || is_cpu(n, "Pool") || is_cpu(n, "Resample"))) ||
                (is_cpu(n, "Concat") && xd.size() == yd.size());
      if (full[k]) {
        want[k] = rank_ok(x);
        // A first convolution reads its few plain input channels directly.
        if (is_cpu(n, "Conv") && i == 0 && xd[1] <= 4 && !has_blocked(x)) want[k] = false;
      } else {
        // A broadcast operand is blocked too when oneDNN accepts it: oneDNN
        // 2.6's jit binary wants both sources in one layout (else its
        // reference kernel runs). A constant (a per-channel scale) is
        // blocked at compile time, a small computed one (a squeeze-excite
        // scale) by a reorder that costs less than the reference kernel.
        want[k] = rank_ok(x) && xd.size() == yd.size() &&
                  (has_blocked(x) || constant_of(m_, x) || md_bytes(blocked_of(x)) <= kSmallOperandBytes);
      }
      md_t md = want[k] ? blocked_of(x) : full[k] ? plain_md(dims_t(xd.begin(), xd.end())) : md_attr(n, name);
      set_md_attr(b, name, md);
    }
    if (is_cpu(n, "Eltwise") && !want[0]) return false;
    set_md_attr(b, is_cpu(n, "Eltwise") ? "md.src" : "md.dst", blocked_md(dims_t(yd.begin(), yd.end()), block_));
    if (!(is_cpu(n, "Concat") ? concat_ok(b) : primitive_ok(b))) {
      // Retry with the broadcast operands plain.
      bool changed = false;
      for (size_t k = 0; k < ins.size(); ++k)
        if (want[k] && !full[k]) {
          want[k] = false;
          set_md_attr(b, ins[k].second, md_attr(n, ins[k].second));
          changed = true;
        }
      if (!changed || !primitive_ok(b)) return false;
    }
    if (is_cpu(n, "Conv") && winograd_) try_winograd(b, any_batch_);
    std::vector<bool> choice_blocked = want;
    for (size_t k = 0; k < ins.size(); ++k) {
      size_t i = ins[k].first;
      b.inputs[i] = choice_blocked[k] ? ensure_blocked(n.inputs[i]) : ensure_plain(n.inputs[i]);
    }
    b.outputs[0] = new_blocked_value(y);
    pending_plain_.insert(y);
    g_.nodes.push_back(std::move(b));
    return true;
  }

  /// A 3x3 stride-1 convolution on blocked layouts runs as Winograd F(2,3)
  /// when oneDNN has an optimised kernel for it: about 1.7x faster than the
  /// direct kernel for ResNet-sized layers, and as accurate for fp32 here.
  static void try_winograd(ir::Node& c, bool any_batch) {
    auto k = md_attr(c, "md.wei").dims();
    if (k.size() != 4 || k[2] != 3 || k[3] != 3) return;
    for (auto s : c.ints("strides"))
      if (s != 1) return;
    for (auto d : c.ints("dilates"))
      if (d != 0) return;
    ir::Node w = c;
    w.attrs["alg"] = static_cast<int64_t>(dnnl::algorithm::convolution_winograd);
    auto impl = primitive_impl(w);
    if (!impl || impl->find("wino") == std::string::npos || !primitive_ok(w)) return;
    // oneDNN picks the Winograd weight layout from the thread count it sees:
    // keep Winograd only when the layout chosen here is accepted under every
    // thread count a load may run with (so a load never has to repack).
    ir::Node fixed = w;
    set_md_attr(fixed, "md.wei", conv_pd(w).weights_desc());
    int saved = omp_get_max_threads();
    bool portable = true;
    for (int t : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256}) {
      omp_set_num_threads(t);
      if (!primitive_ok(fixed)) portable = false;
      if (!portable) break;
    }
    omp_set_num_threads(saved);
    // A program of a specialized batch dim shares its weights with the
    // set's other batch sizes (pack_weights follows the first program's
    // layouts): oneDNN picks the Winograd layout by minibatch too, so keep
    // Winograd only where the layout chosen here runs at every batch size;
    // else each batch would store its own transformed copy (16/9 the bytes).
    for (int64_t mb : {1, 2, 3, 4, 8, 16, 32, 64, 128, 256}) {
      if (!portable || !any_batch) break;
      portable = primitive_ok(with_batch(fixed, mb));
      if (!portable) log().debug("{}: direct, not Winograd: its weight layout does not run at batch {}", c.label(), mb);
    }
    if (portable) c = std::move(w);
  }

  /// `n` with every activation descriptor (source, destination, post-op
  /// operands: those whose dim 0 is the batch) resized to `mb` rows, same layout.
  static ir::Node with_batch(const ir::Node& n, int64_t mb) {
    ir::Node t = n;
    const dims_t src = md_attr(n, "md.src").dims(), dst = md_attr(n, "md.dst").dims();
    for (auto& [name, a] : n.attrs) {
      if (name.rfind("md.", 0) != 0 || name == "md.wei" || name == "md.bias") continue;
      md_t md = md_attr(n, name);
      dims_t d = md.dims();
      if (d != src && d != dst) continue;  // a broadcast operand (per channel) keeps its shape
      d[0] = mb;
      set_md_attr(t, name, is_blocked(md) ? blocked_md(d, channel_block()) : plain_md(d));
    }
    return t;
  }

  /// A Split part of a blocked value along the channels, at a multiple of
  /// the block, stays blocked: a reorder from a sub-memory of the blocked input.
  bool place_slice(ir::Node& n) {
    ir::ValueId x = n.inputs[0], y = n.outputs[0];
    if (!has_blocked(x) || !rank_ok(x) || n.i("slice_axis") != 1 || n.i("slice_offset") % block_ != 0) return false;
    auto yd = *static_dims(m_, y);
    ir::Node b = n;
    dims_t offs(yd.size(), 0);
    offs[1] = n.i("slice_offset");
    try {
      set_md_attr(b, "md.src", blocked_of(x).submemory_desc(dims_t(yd.begin(), yd.end()), offs));
    } catch (const dnnl::error&) {
      return false;
    }
    set_md_attr(b, "md.dst", blocked_md(dims_t(yd.begin(), yd.end()), block_));
    if (!primitive_ok(b)) return false;
    b.inputs[0] = ensure_blocked(x);
    b.outputs[0] = new_blocked_value(y);
    pending_plain_.insert(y);
    g_.nodes.push_back(std::move(b));
    return true;
  }

  bool concat_ok(const ir::Node& n) const {
    if (!is_cpu(n, "Concat")) return false;
    try {
      std::vector<md_t> srcs;
      for (size_t i = 0; i < n.inputs.size(); ++i) srcs.push_back(md_attr(n, "md.src" + std::to_string(i)));
      dnnl::concat::primitive_desc(md_attr(n, "md.dst"), static_cast<int>(n.i("axis")), srcs, engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    } catch (const Error&) {
      return false;
    }
  }

  ir::Model& m_;
  ir::Graph& g_;
  bool winograd_;
  bool any_batch_;
  int64_t block_;
  int reorders_ = 0;
  std::unordered_map<ir::ValueId, ir::ValueId> blk_;   ///< value -> its blocked twin
  std::unordered_map<ir::ValueId, ir::ValueId> cl_;    ///< value -> its channels-last (nhwc) twin
  std::unordered_set<ir::ValueId> pending_plain_;      ///< values only available blocked so far
};

}  // namespace

int assign_layouts(ir::Model& m, bool winograd, bool any_batch) {
  return Layouts(m, m.main, winograd, any_batch).run();
}

}  // namespace kiln::targets::cpu
