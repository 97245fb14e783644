// View folding around kiln.cpu.MatMul: oneDNN's matmul reads and writes any
// strides, so the Transpose / Reshape nodes that attention blocks put around
// their matmuls become descriptor strides instead of copies:
//   - an input produced by Reshape / Flatten / Squeeze / Unsqueeze of a plain
//     value reads that value directly (the bytes are the same);
//   - an input produced by Transpose, read as plain, reads the Transpose's
//     input with permuted strides;
//   - an output whose only reader is a Transpose is written straight into the
//     Transpose's output with permuted strides.
// The bypassed nodes become dead and dead-code elimination removes them.
#include "targets/cpu/compile/lower_ops.h"

namespace kiln::targets::cpu {

namespace {

bool is_reshape_like(const ir::Node& n) {
  return is_onnx(n, "Reshape") || is_onnx(n, "Flatten") || is_onnx(n, "Squeeze") || is_onnx(n, "Unsqueeze");
}

/// Plain strides of dims.
dims_t plain_strides(const std::vector<int64_t>& d) {
  dims_t s(d.size(), 1);
  for (size_t i = d.size(); i-- > 1;) s[i - 1] = s[i] * std::max<int64_t>(d[i], 1);
  return s;
}

/// True when md is the plain row-major layout of `dims` padded with leading 1s.
bool plain_over(const md_t& md, const std::vector<int64_t>& dims) {
  auto d = md.dims();
  if (d.size() < dims.size()) return false;
  for (size_t i = 0; i < d.size() - dims.size(); ++i)
    if (d[i] != 1) return false;
  std::vector<int64_t> tail(d.end() - static_cast<long>(dims.size()), d.end());
  return tail == dims && md == plain_md(d);
}

class Folder {
 public:
  Folder(ir::Model& m, ir::Graph& g) : m_(m), g_(g) {}

  int run() {
    int folded = 0;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (!is_cpu(g_.nodes[i], "MatMul")) continue;
      folded += fold_output(i);
      folded += fold_input(i, 0, "md.src");
      if (!g_.nodes[i].has("md.wei_src")) folded += fold_input(i, 1, "md.wei");
    }
    return folded;
  }

 private:
  int fold_input(size_t i, size_t k, const char* attr) {
    int folded = 0;
    for (;;) {
      ir::Node& n = g_.nodes[i];
      ir::ValueId v = n.inputs[k];
      auto prod = producers_of(g_, m_.values.size());
      int p = prod[v];
      if (p < 0) return folded;
      const ir::Node& src = g_.nodes[p];
      if (src.inputs.empty() || !is_static_f32(m_, src.inputs[0]) || !is_static_f32(m_, v)) return folded;
      ir::Node trial = n;
      trial.inputs[k] = src.inputs[0];
      if (is_reshape_like(src)) {
        // Same bytes: the descriptor stays.
      } else if (is_onnx(src, "Transpose")) {
        md_t md = md_attr(n, attr);
        auto vd = *static_dims(m_, v), ud = *static_dims(m_, src.inputs[0]);
        if (!plain_over(md, vd)) return folded;
        std::vector<int64_t> perm = src.ints("perm");
        if (perm.empty())
          for (size_t j = ud.size(); j-- > 0;) perm.push_back(static_cast<int64_t>(j));
        if (perm.size() != vd.size()) return folded;
        dims_t us = plain_strides(ud), dims = md.dims(), strides(dims.size(), 0);
        size_t lead = dims.size() - vd.size();
        for (size_t j = 0; j < lead; ++j) strides[j] = static_cast<int64_t>(md_bytes(plain_md(dims_t(ud.begin(), ud.end()))) / 4);
        for (size_t j = 0; j < vd.size(); ++j) strides[lead + j] = us[static_cast<size_t>(perm[j])];
        set_md_attr(trial, attr, md_t(dims, dnnl::memory::data_type::f32, strides));
      } else {
        return folded;
      }
      if (!primitive_ok(trial)) return folded;
      n = std::move(trial);
      ++folded;
    }
  }

  int fold_output(size_t i) {
    ir::Node& n = g_.nodes[i];
    ir::ValueId y = n.outputs[0];
    if (is_output(g_, y)) return 0;
    auto uses = uses_of(g_, m_.values.size());
    if (uses[y].size() != 1 || uses[y][0].input != 0) return 0;
    const ir::Node& t = g_.nodes[uses[y][0].node];
    if (!is_onnx(t, "Transpose") || !is_static_f32(m_, t.outputs[0])) return 0;
    md_t md = md_attr(n, "md.dst");
    auto yd = *static_dims(m_, y), zd = *static_dims(m_, t.outputs[0]);
    if (!plain_over(md, yd) || md.dims().size() != yd.size()) return 0;
    std::vector<int64_t> perm = t.ints("perm");
    if (perm.empty())
      for (size_t j = yd.size(); j-- > 0;) perm.push_back(static_cast<int64_t>(j));
    if (perm.size() != yd.size()) return 0;
    dims_t zs = plain_strides(zd), strides(yd.size());
    for (size_t k = 0; k < perm.size(); ++k) strides[static_cast<size_t>(perm[k])] = zs[k];
    ir::Node trial = n;
    trial.outputs[0] = t.outputs[0];
    set_md_attr(trial, "md.dst", md_t(md.dims(), dnnl::memory::data_type::f32, strides));
    if (!primitive_ok(trial)) return 0;
    n = std::move(trial);
    // The Transpose now has no input producer; it is dead once nothing reads
    // its (re-produced) output from it: drop it here so the graph stays SSA.
    g_.nodes.erase(g_.nodes.begin() + uses[y][0].node);
    return 1;
  }

  ir::Model& m_;
  ir::Graph& g_;
};

int fold_graph(ir::Model& m, ir::Graph& g) {
  int n = 0;
  for (auto& node : g.nodes)
    for (auto& [k, a] : node.attrs)
      if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a)) n += fold_graph(m, **sg);
  return n + Folder(m, g).run();
}

}  // namespace

int fold_matmul_views(ir::Model& m) { return fold_graph(m, m.main); }

}  // namespace kiln::targets::cpu
