// Weight packing: each constant weight of a kiln.cpu Conv / MatMul is
// reordered, at compile time, into the layout its primitive wants for the
// final source/destination layouts, and stored that way as a new constant;
// a load then maps it and does no reorder.
#include <map>

#include "support/error.h"
#include "support/log.h"
#include "targets/cpu/compile/lower_ops.h"
#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets::cpu {

namespace {

class Packer {
 public:
  Packer(ir::Model& m, const ir::Model* reference) : m_(m) {
    if (reference)
      for_each_graph(const_cast<ir::Graph&>(reference->main), [&](ir::Graph& g) {
        for (auto& n : g.nodes)
          if ((is_cpu(n, "Conv") || is_cpu(n, "MatMul")) && n.has("md.wei") && !n.has("md.wei_src") && !n.name.empty())
            hints_.emplace(n.name, &n);
      });
  }

  int graph(ir::Graph& g) {
    int n = 0;
    for (auto& node : g.nodes) {
      for (auto& [k, a] : node.attrs)
        if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a)) n += graph(**sg);
      if ((is_cpu(node, "Conv") || is_cpu(node, "MatMul")) && node.has("md.wei_src")) n += pack(node);
    }
    return n;
  }

 private:
  // Takes the reference node's weight layout (and algorithm) when oneDNN
  // runs it with an optimised kernel at this node's shapes.
  void follow_reference(ir::Node& n) {
    auto it = hints_.find(n.name);
    if (it == hints_.end()) return;
    const ir::Node& ref = *it->second;
    ir::Node trial = n;
    trial.attrs["md.wei"] = ref.attrs.at("md.wei");
    if (ref.has("alg")) trial.attrs["alg"] = ref.attrs.at("alg");
    else trial.attrs.erase("alg");
    if (md_attr(trial, "md.wei").dims() != md_attr(n, "md.wei").dims()) return;
    if (!fast_primitive(trial) || !primitive_ok(trial)) {
      log().debug("{}: the reference weight layout has no optimised kernel at these shapes; packed anew", n.label());
      return;
    }
    n.attrs["md.wei"] = trial.attrs["md.wei"];
    if (trial.has("alg")) n.attrs["alg"] = trial.attrs["alg"];
    else n.attrs.erase("alg");
  }

  int pack(ir::Node& n) {
    follow_reference(n);
    md_t wmd = is_cpu(n, "Conv") ? conv_pd(n).weights_desc() : matmul_pd(n).weights_desc();
    md_t src = md_attr(n, "md.wei_src");
    ir::ValueId w = n.inputs[1];
    const Tensor* t = constant_of(m_, w);
    KILN_CHECK(t && t->nbytes() >= md_bytes(src), "{}: weights are not a constant of the expected size", n.label());
    auto key = std::make_pair(w, md_to_ints(wmd));
    auto it = packed_.find(key);
    if (it == packed_.end()) {
      Tensor out = reorder_constant(*t, src, wmd);
      ir::ValueId id = add_value(m_, m_.value(w).name + "/packed", DType::f32, out.shape());
      m_.value(id).constant = out;
      it = packed_.emplace(key, id).first;
    }
    n.inputs[1] = it->second;
    set_md_attr(n, "md.wei", wmd);
    n.attrs.erase("md.wei_src");
    // The kernel the weights were packed for: a load checks it gets the same.
    n.attrs["impl"] = is_cpu(n, "Conv") ? conv_pd(n).impl_info_str() : matmul_pd(n).impl_info_str();
    return 1;
  }

  ir::Model& m_;
  std::map<std::string, const ir::Node*> hints_;  ///< reference Conv/MatMul nodes by name
  std::map<std::pair<ir::ValueId, std::vector<int64_t>>, ir::ValueId> packed_;
};

}  // namespace

int pack_weights(ir::Model& m, const ir::Model* layout_reference) { return Packer(m, layout_reference).graph(m.main); }

}  // namespace kiln::targets::cpu
