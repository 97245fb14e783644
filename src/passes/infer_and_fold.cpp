// Shape inference + constant propagation (see passes.h).
#include "ops/registry.h"
#include "passes/passes.h"
#include "support/error.h"
#include "support/log.h"

namespace kiln::passes {

namespace {

uint64_t static_bytes(const ops::OutType& t) {
  if (!t.shape || !ir::is_static(*t.shape)) return UINT64_MAX;
  uint64_t n = dtype_size(t.dtype);
  for (auto& d : *t.shape) n *= static_cast<uint64_t>(d.value);
  return n;
}

/// Inferred facts win over the exporter's value_info, except where inference
/// left a dim unknown and value_info states it.
void merge_type(ir::Value& v, const ops::OutType& t) {
  if (t.dtype != DType::undefined) v.dtype = t.dtype;
  if (!t.shape) return;
  if (v.shape && v.shape->size() == t.shape->size()) {
    ir::Shape merged = *t.shape;
    for (size_t i = 0; i < merged.size(); ++i)
      if (!merged[i].is_static() && ((*v.shape)[i].is_static() || merged[i].symbol.empty())) merged[i] = (*v.shape)[i];
    v.shape = merged;
  } else {
    v.shape = t.shape;
  }
}

class Folder {
 public:
  Folder(ir::Model& m, uint64_t max_bytes) : m_(m), max_bytes_(max_bytes) {}
  FoldStats stats;

  void graph(ir::Graph& g) {
    std::vector<ir::Node> kept;
    kept.reserve(g.nodes.size());
    for (auto& n : g.nodes)
      if (!node(n)) kept.push_back(std::move(n));
    g.nodes = std::move(kept);
  }

 private:
  // Returns true when the node was folded away.
  bool node(ir::Node& n) {
    type_body_inputs(n);
    bool has_subgraph = false;
    for (auto& [k, a] : n.attrs)
      if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a)) {
        has_subgraph = true;
        graph(**sg);
      }
    std::vector<ops::InType> ins;
    bool all_const = true;
    for (auto id : n.inputs) {
      ops::InType t;
      if (id != ir::kNoValue) {
        auto& v = m_.value(id);
        t.dtype = v.dtype;
        t.shape = v.shape;
        t.value = v.constant ? &*v.constant : nullptr;
        if (t.dtype == DType::undefined)
          fail(ErrorCode::invalid_model, "{}: the type of input '{}' is unknown", n.label(), v.name);
        if (!v.constant) all_const = false;
      }
      ins.push_back(t);
    }
    auto outs = ops::infer(n, ins);
    if (outs.size() != n.outputs.size())
      fail(ErrorCode::internal, "{}: inference returned {} outputs for {}", n.label(), outs.size(), n.outputs.size());
    if (has_subgraph) fill_from_subgraphs(n, outs);
    for (size_t i = 0; i < outs.size(); ++i)
      if (n.outputs[i] != ir::kNoValue) {
        merge_type(m_.value(n.outputs[i]), outs[i]);
        ++stats.inferred;
      }
    if (has_subgraph) return false;
    bool shape_only = (n.op_type == "Shape" || n.op_type == "Size") && n.domain.empty() && !ins.empty() &&
                      ins[0].shape && ir::is_static(*ins[0].shape);
    if (!(all_const || shape_only)) return false;
    for (auto& o : outs)
      if (o.shape && ir::is_static(*o.shape) && static_bytes(o) > max_bytes_) return false;
    return evaluate(n, ins, shape_only && !all_const);
  }

  bool evaluate(ir::Node& n, const std::vector<ops::InType>& ins, bool shape_only) {
    std::vector<Tensor> holders(ins.size());
    std::vector<const Tensor*> ptrs;
    for (size_t i = 0; i < ins.size(); ++i) {
      if (!ins[i].present()) {
        ptrs.push_back(nullptr);
      } else if (ins[i].value) {
        ptrs.push_back(ins[i].value);
      } else {
        // Shape/Size read only the shape: a view without data is enough.
        holders[i] = Tensor::view(ins[i].dtype, ir::to_sizes(*ins[i].shape), nullptr, nullptr);
        ptrs.push_back(&holders[i]);
      }
    }
    (void)shape_only;
    ops::KernelContext ctx(n, ptrs, nullptr);
    try {
      ops::run_kernel(ctx);
    } catch (const Error& e) {
      fail(e.code() == ErrorCode::unsupported ? ErrorCode::unsupported : ErrorCode::invalid_model,
           "while evaluating constant {} at compile time: {}", n.label(), e.what());
    }
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (n.outputs[i] == ir::kNoValue) continue;
      auto& v = m_.value(n.outputs[i]);
      const Tensor& t = ctx.outputs()[i];
      if (t.nbytes() > max_bytes_) return false;  // too big to store; keep computing it at run time
      v.dtype = t.dtype();
      v.shape = ir::static_shape(t.shape());
      v.constant = t;
    }
    ++stats.folded_nodes;
    return true;
  }

  // Loop bodies take (iteration i64[], cond bool[], carried...) and exporters
  // often leave those inputs untyped: give them the types the Loop feeds.
  void type_body_inputs(ir::Node& n) {
    if (n.op_type != "Loop" || !n.has("body")) return;
    auto& g = const_cast<ir::Graph&>(n.graph("body"));
    auto fill = [&](size_t idx, DType dt, std::optional<ir::Shape> shape) {
      if (idx >= g.inputs.size()) return;
      auto& v = m_.value(g.inputs[idx]);
      if (v.dtype == DType::undefined) v.dtype = dt;
      if (!v.shape) v.shape = shape;
    };
    fill(0, DType::i64, ir::Shape{});
    fill(1, DType::boolean, ir::Shape{});
    for (size_t k = 2; k < n.inputs.size(); ++k)
      if (n.inputs[k] != ir::kNoValue) {
        auto& src = m_.value(n.inputs[k]);
        // A carried value may change shape between iterations: keep only the rank.
        std::optional<ir::Shape> shape;
        if (src.shape) shape = ir::Shape(src.shape->size(), ir::Dim::sym(""));
        fill(k, src.dtype, shape);
      }
  }

  // If / Loop / Scan outputs take their types from the body's outputs.
  void fill_from_subgraphs(const ir::Node& n, std::vector<ops::OutType>& outs) {
    auto body_out = [&](const char* attr, size_t idx) -> const ir::Value* {
      if (!n.has(attr)) return nullptr;
      const ir::Graph& g = n.graph(attr);
      return idx < g.outputs.size() ? &m_.value(g.outputs[idx]) : nullptr;
    };
    for (size_t i = 0; i < outs.size(); ++i) {
      if (outs[i].dtype != DType::undefined) continue;
      const ir::Value* src = nullptr;
      if (n.op_type == "If") src = body_out("then_branch", i);
      else if (n.op_type == "Loop") src = body_out("body", i + 1);
      else if (n.op_type == "Scan") src = body_out("body", i);
      if (!src) continue;
      outs[i].dtype = src->dtype;
      if (n.op_type == "If") {
        const ir::Value* other = body_out("else_branch", i);
        if (other && other->shape && src->shape && *other->shape == *src->shape) outs[i].shape = src->shape;
      }
    }
  }

  ir::Model& m_;
  uint64_t max_bytes_;
};

}  // namespace

FoldStats infer_and_fold(ir::Model& m, uint64_t max_fold_bytes) {
  Folder f(m, max_fold_bytes);
  f.graph(m.main);
  log().debug("infer_and_fold: {} nodes folded, {} values typed", f.stats.folded_nodes, f.stats.inferred);
  return f.stats;
}

}  // namespace kiln::passes
