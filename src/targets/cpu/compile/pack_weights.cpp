// Weight packing: each constant weight of a kiln.cpu Conv / MatMul is
// reordered, at compile time, into the layout its primitive wants for the
// final source/destination layouts, and stored that way as a new constant;
// a load then maps it and does no reorder.
#include <map>

#include "support/error.h"
#include "targets/cpu/compile/lower_ops.h"
#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets::cpu {

namespace {

class Packer {
 public:
  explicit Packer(ir::Model& m) : m_(m) {}

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
  int pack(ir::Node& n) {
    md_t wmd = is_cpu(n, "Conv") ? conv_pd(n).weights_desc() : matmul_pd(n).weights_desc();
    md_t src = md_attr(n, "md.wei_src");
    ir::ValueId w = n.inputs[1];
    const Tensor* t = constant_of(m_, w);
    KILN_CHECK(t && t->nbytes() >= md_bytes(src), "{}: weights are not a constant of the expected size", n.label());
    auto key = std::make_pair(w, md_to_ints(wmd));
    auto it = packed_.find(key);
    if (it == packed_.end()) {
      Tensor out(DType::f32, {static_cast<int64_t>(md_bytes(wmd) / 4)});
      dnnl::memory from = wrap(src, t->raw()), to = wrap(wmd, out.raw());
      dnnl::reorder(from, to).execute(stream(), from, to);
      stream().wait();
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
  std::map<std::pair<ir::ValueId, std::vector<int64_t>>, ir::ValueId> packed_;
};

}  // namespace

int pack_weights(ir::Model& m) { return Packer(m).graph(m.main); }

}  // namespace kiln::targets::cpu
