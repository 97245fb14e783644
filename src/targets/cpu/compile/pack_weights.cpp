// Weight packing: each constant weight of a kiln.cpu Conv / MatMul is
// reordered, at compile time, into the layout its primitive wants for the
// final source/destination layouts, and stored that way as a new constant;
// a load then maps it and does no reorder. Plain row-major matmul weights
// whose rows are a multiple of 256 bytes get one cache line of padding per
// row (padded_rows below).
#include <map>
#include <optional>

#include "support/error.h"
#include "support/log.h"
#include "targets/cpu/compile/lower_ops.h"
#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets::cpu {

namespace {

// Floats of padding added to each row of plain matmul weights: one cache line,
// so that every row still starts 64-byte aligned.
constexpr int64_t kRowPad = 16;

// oneDNN's gemm-based matmul (its only f32 matmul kernel without AVX-512 in
// oneDNN 2.x) takes plain K x N weights, and its sgemm copies panels of them
// on every call, walking down the K rows at a stride of one row. With rows of
// a multiple of 256 bytes (N = 768, 1024, 3072, 4096: every transformer
// width) those reads land on a few cache sets and alias each other's 4 KiB
// pages: on one AVX2 core (EPYC) a 128x768 by 768x3072 product took 19 ms
// with 3072-float rows and 9 ms with 3088, 768x768 10-15% faster padded, 128x1024
// by 1024x4096 37 ms against 19. Returns the padded descriptor of wmd when
// wmd is such a plain layout and the node's kernel takes it unchanged
// (same implementation), else nullopt.
std::optional<md_t> padded_rows(const ir::Node& n, const md_t& wmd) {
  if (!is_cpu(n, "MatMul") || wmd.data.ndims != 2 || wmd.data.format_kind != dnnl_blocked) return std::nullopt;
  const auto& blk = wmd.data.format_desc.blocking;
  const int64_t K = wmd.data.dims[0], N = wmd.data.dims[1];
  if (blk.inner_nblks != 0 || blk.strides[1] != 1 || blk.strides[0] != N || N % 64 != 0 || K < 2)
    return std::nullopt;
  md_t padded({K, N}, dnnl::memory::data_type::f32, dims_t{N + kRowPad, 1});
  ir::Node trial = n;
  set_md_attr(trial, "md.wei", padded);
  auto impl = primitive_impl(trial);
  if (!impl || *impl != matmul_pd(n).impl_info_str() || matmul_pd(trial).weights_desc() != padded) return std::nullopt;
  return padded;
}

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
    if (auto padded = padded_rows(n, wmd)) wmd = *padded;
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
