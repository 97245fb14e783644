// 16-bit programs with host fallback: the nodes left to the host become
// float32 islands (lowering.h, fp32_host_nodes). The precision pass runs
// before the lowering knows which nodes it cannot lower (a refusal, a shape
// that only the data fixes), so a host node may have been made 16-bit there;
// the host kernels (cpu target, reference) compute in float32, and most have
// no 16-bit kernel at all.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "support/log.h"
#include "targets/cuda/compile/body_reads.h"
#include "targets/cuda/compile/lowering.h"

namespace kiln::targets::cuda {

namespace {

class HostIslands {
 public:
  HostIslands(ir::Model& m, DType half, const std::vector<DType>& before, PrecisionStats& st)
      : m_(m), half_(half), before_(before), st_(st), is_input_(m.values.size(), false) {
    for (auto v : m.main.inputs) is_input_[v] = true;
    for (auto& val : m.values) names_.insert(val.name);
    for (auto& n : m.main.nodes) {
      if (n.domain != kCudaDomain) continue;
      for (auto v : n.inputs)
        if (v != ir::kNoValue) device_read_.insert(v);
      for_each_body_read(n, [&](ir::ValueId& v) { device_read_.insert(v); });
    }
    for (size_t i = 0; i < st.half.size(); ++i)
      for (auto v : st.half[i].outputs)
        if (v != ir::kNoValue) half_by_output_.emplace(v, i);
  }

  int run() {
    std::vector<ir::Node> nodes = std::move(m_.main.nodes);
    m_.main.nodes.clear();
    for (auto& n : nodes) {
      if (n.domain == kCudaDomain) device(n);
      else host(n);
    }
    m_.main.nodes = std::move(out_);
    move_stats();
    st_.casts += casts_;
    return casts_;
  }

 private:
  /// A value the precision pass made 16-bit (a float32 value of the model).
  bool narrowed(ir::ValueId v) const {
    if (v == ir::kNoValue || m_.value(v).dtype != half_) return false;
    const size_t id = static_cast<size_t>(v);
    return id >= before_.size() || before_[id] != half_;
  }

  /// `name`, or `name` with a number appended where a value has it already.
  /// (Names ending in _f32 / _f16 / _bf16 are what `kiln verify` compares
  /// with the ref value of the name before the suffix.)
  std::string unique(const std::string& name) {
    std::string out = name;
    for (int k = 2; !names_.insert(out).second; ++k) out = fmt::format("{}_{}", name, k);
    return out;
  }

  /// Emits ONNX Cast(v, to) into the node list; returns its output, named `name`.
  ir::ValueId cast(ir::ValueId v, DType to, const std::string& name, int opset) {
    ir::Value nv = m_.value(v);
    nv.name = unique(name);
    nv.dtype = to;
    nv.constant.reset();
    ir::Node c;
    c.op_type = "Cast";
    c.name = nv.name;
    c.opset = opset;
    c.inputs = {v};
    c.attrs["to"] = static_cast<int64_t>(to);
    const ir::ValueId id = m_.add_value(std::move(nv));
    c.outputs = {id};
    out_.push_back(std::move(c));
    ++casts_;
    return id;
  }

  /// The float32 value a host node reads for 16-bit value v.
  ir::ValueId wide(ir::ValueId v, const ir::Node& reader) {
    if (auto it = to_f32_.find(v); it != to_f32_.end()) return it->second;
    ir::ValueId w = ir::kNoValue;
    // The float32 constant or model input v was converted from: exact, and
    // no Cast (constants and inputs keep their layout: shapes checked anyway).
    if (auto it = st_.wide.find(v); it != st_.wide.end()) {
      const ir::Value& src = m_.value(it->second);
      if ((src.constant || is_input_[it->second]) && src.dtype == DType::f32 && src.shape == m_.value(v).shape)
        w = it->second;
    }
    if (w == ir::kNoValue) w = cast(v, DType::f32, m_.value(v).name + "_f32", reader.opset);
    to_f32_.emplace(v, w);
    return w;
  }

  /// A device node: reads the 16-bit twins of host outputs made float32.
  void device(ir::Node& n) {
    if (!to_half_.empty()) {
      for (auto& v : n.inputs)
        if (auto it = to_half_.find(v); it != to_half_.end()) v = it->second;
      bool body = false;
      for_each_body_read(n, [&](ir::ValueId& v) { body |= to_half_.count(v) > 0; });
      if (body) {
        own_subgraphs(n);
        for_each_body_read(n, [&](ir::ValueId& v) {
          if (auto it = to_half_.find(v); it != to_half_.end()) v = it->second;
        });
      }
    }
    out_.push_back(std::move(n));
  }

  void host(ir::Node& n) {
    // Cast converts 16-bit values itself; Shape and Size read no elements.
    const bool as_is = n.domain.empty() && (n.op_type == "Cast" || n.op_type == "Shape" || n.op_type == "Size");
    if (!as_is) {
      for (auto& v : n.inputs)
        if (narrowed(v)) v = wide(v, n);
      // An If / Loop / Scan body reading a 16-bit outer value: the body runs
      // on the host too, so it reads the float32 value.
      bool body = false;
      for_each_body_read(n, [&](ir::ValueId& v) { body |= narrowed(v); });
      if (body) {
        own_subgraphs(n);
        std::vector<ir::ValueId*> reads;
        for_each_body_read(n, [&](ir::ValueId& v) {
          if (narrowed(v)) reads.push_back(&v);
        });
        for (ir::ValueId* v : reads) *v = wide(*v, n);
      }
    }
    std::vector<ir::ValueId> twins;  // outputs made float32 that device nodes read
    bool changed = false;
    for (auto v : n.outputs) {
      if (!narrowed(v)) continue;
      m_.value(v).dtype = DType::f32;
      changed = true;
      if (device_read_.count(v)) twins.push_back(v);
    }
    if (changed && n.domain.empty() && n.op_type == "Cast") n.attrs["to"] = static_cast<int64_t>(DType::f32);
    if (changed) {
      for (auto v : n.outputs)
        if (auto it = half_by_output_.find(v); it != half_by_output_.end()) {
          moved_.insert(it->second);
          break;
        }
    }
    const int opset = n.opset;
    out_.push_back(std::move(n));
    for (auto v : twins)
      to_half_.emplace(v, cast(v, half_, fmt::format("{}_{}", m_.value(v).name, half_ == DType::bf16 ? "bf16" : "f16"),
                               opset));
  }

  /// The 16-bit nodes now float32 on the host move from st.half to st.fp32,
  /// at their place in graph order.
  void move_stats() {
    if (moved_.empty()) return;
    std::vector<size_t> order(moved_.rbegin(), moved_.rend());  // last first: earlier places stay valid
    for (size_t i : order) {
      const HalfNode& h = st_.half[i];
      st_.fp32.insert(st_.fp32.begin() + static_cast<std::ptrdiff_t>(std::min(h.fp32_at, st_.fp32.size())),
                      Fp32Node{h.node, h.op, "runs on the host (host fallback), whose kernels compute in float32"});
    }
    std::vector<HalfNode> kept;
    for (size_t i = 0; i < st_.half.size(); ++i)
      if (!moved_.count(i)) kept.push_back(std::move(st_.half[i]));
    st_.half = std::move(kept);
    st_.nodes_16bit -= static_cast<int>(moved_.size());
    st_.fp32_nodes += static_cast<int>(moved_.size());
    log().debug("cuda precision: {} 16-bit node(s) run on the host in float32 ({} boundary Casts)", moved_.size(),
                casts_);
  }

  ir::Model& m_;
  DType half_;
  const std::vector<DType>& before_;
  PrecisionStats& st_;
  std::vector<bool> is_input_;
  std::set<std::string> names_;
  std::set<ir::ValueId> device_read_;  ///< values read by device nodes (their bodies included)
  std::map<ir::ValueId, size_t> half_by_output_;  ///< output -> index into st.half
  std::map<ir::ValueId, ir::ValueId> to_f32_;   ///< 16-bit value -> what host nodes read instead
  std::map<ir::ValueId, ir::ValueId> to_half_;  ///< host output made float32 -> its 16-bit twin for the device
  std::set<size_t> moved_;  ///< indices into st.half of nodes now float32
  std::vector<ir::Node> out_;
  int casts_ = 0;
};

}  // namespace

int fp32_host_nodes(ir::Model& m, DType half, const std::vector<DType>& before, PrecisionStats& st) {
  return HostIslands(m, half, before, st).run();
}

}  // namespace kiln::targets::cuda
