// Shape inference + constant propagation (see passes.h).
#include "ops/registry.h"
#include <memory>
#include <variant>

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
    for (auto& n : g.nodes) emit(std::move(n), kept);
    g.nodes = std::move(kept);
  }

 private:
  /// Infers (and folds) one node into `kept`; an If with a constant
  /// condition becomes the nodes of the branch it takes.
  void emit(ir::Node n, std::vector<ir::Node>& kept) {
    bool cond = false;
    if (constant_if(n, cond)) {
      ++stats.inlined_ifs;
      const char* taken = cond ? "then_branch" : "else_branch";
      auto body = std::get<std::shared_ptr<ir::Graph>>(n.attrs.at(taken));
      // The branch's nodes read outer values by id: copied out as they are
      // (copied, not moved: a copied ir::Model shares its subgraphs).
      for (const auto& bn : body->nodes) emit(bn, kept);
      for (size_t i = 0; i < n.outputs.size(); ++i) {
        if (n.outputs[i] == ir::kNoValue) continue;
        if (i >= body->outputs.size())
          fail(ErrorCode::invalid_model, "{}: branch '{}' has {} outputs, the If has {}", n.label(), taken,
               body->outputs.size(), n.outputs.size());
        ir::Node id;
        id.op_type = "Identity";
        id.name = n.name.empty() ? std::string() : n.name + "/" + taken + "/out" + std::to_string(i);
        id.opset = n.opset;
        id.inputs = {body->outputs[i]};
        id.outputs = {n.outputs[i]};
        emit(std::move(id), kept);
      }
      return;
    }
    if (!node(n)) kept.push_back(std::move(n));
  }

  /// Infers an If branch. A branch whose inference fails for these shapes
  /// (e.g. the 8 kHz branch of a model fed 16 kHz-sized input) is one the
  /// run will not take with them: it keeps its nodes as they were, its
  /// values what inference gave before the failure, and runs on reference
  /// kernels if ever taken, where the run raises the error.
  void branch(const ir::Node& n, const std::string& attr, ir::Graph& g) {
    std::vector<ir::Node> before = g.nodes;
    try {
      graph(g);
    } catch (const Error& e) {
      g.nodes = std::move(before);
      log().debug("{}: {} is not inferred for these shapes ({}); left to the run", n.label(), attr, e.what());
    }
  }

  /// An ONNX If whose condition is a constant (e.g. after value specialization).
  bool constant_if(const ir::Node& n, bool& cond) const {
    if (n.op_type != "If" || !n.domain.empty() || n.inputs.empty() || n.inputs[0] == ir::kNoValue) return false;
    if (!n.has("then_branch") || !n.has("else_branch")) return false;
    const ir::Value& c = m_.value(n.inputs[0]);
    if (!c.constant || !c.constant->defined() || c.constant->numel() != 1) return false;
    const Tensor& t = *c.constant;
    switch (t.dtype()) {
      case DType::boolean:
      case DType::u8: cond = *static_cast<const uint8_t*>(t.raw()) != 0; return true;
      case DType::i64: cond = *t.data<int64_t>() != 0; return true;
      case DType::i32: cond = *t.data<int32_t>() != 0; return true;
      case DType::f32: cond = *t.data<float>() != 0; return true;
      default: return false;
    }
  }

  // Returns true when the node was folded away.
  bool node(ir::Node& n) {
    type_body_inputs(n);
    bool has_subgraph = false;
    for (auto& [k, a] : n.attrs)
      if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a)) {
        has_subgraph = true;
        if (n.op_type == "If" && n.domain.empty())
          branch(n, k, **sg);
        else
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
    if (has_subgraph) {
      fill_from_subgraphs(n, outs);
      loop_shapes(n, outs);
    }
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

  /// Static output shapes of a Loop or Scan whose body's are static: a
  /// carried value whose body output has its initial value's static shape
  /// keeps it (every iteration, and with no iteration at all); a scan
  /// output stacks its body part along its axis when the trip count is
  /// static (a Scan's scan-axis length; a Loop's constant M without a
  /// condition input). Anything else stays open (the run decides).
  void loop_shapes(const ir::Node& n, std::vector<ops::OutType>& outs) {
    if (!n.domain.empty() || (n.op_type != "Loop" && n.op_type != "Scan") || !n.has("body")) return;
    const ir::Graph& g = n.graph("body");
    auto dims_of = [&](ir::ValueId v) -> std::optional<std::vector<int64_t>> {
      if (v == ir::kNoValue) return std::nullopt;
      const auto& val = m_.value(v);
      if (!val.shape || !ir::is_static(*val.shape)) return std::nullopt;
      return ir::to_sizes(*val.shape);
    };
    const bool loop = n.op_type == "Loop";
    const size_t in0 = loop ? 2 : 0, out0 = loop ? 1 : 0;  // first carried input / body output
    const size_t scans_in = loop ? 0 : static_cast<size_t>(std::max<int64_t>(0, n.i("num_scan_inputs", 0)));
    if (n.inputs.size() < in0 + scans_in || g.outputs.size() != outs.size() + out0) return;
    const size_t k = n.inputs.size() - in0 - scans_in;
    if (k > outs.size()) return;
    for (size_t i = 0; i < k; ++i) {
      auto init = dims_of(n.inputs[in0 + i]), next = dims_of(g.outputs[out0 + i]);
      if (!outs[i].shape && init && next && *init == *next) outs[i].shape = ir::static_shape(*init);
    }
    std::optional<int64_t> trips;
    if (loop) {
      const bool no_cond = n.inputs.size() < 2 || n.inputs[1] == ir::kNoValue;
      const ir::Value* mv = n.inputs.empty() || n.inputs[0] == ir::kNoValue ? nullptr : &m_.value(n.inputs[0]);
      if (no_cond && mv && mv->constant && mv->constant->numel() == 1 && mv->constant->dtype() == DType::i64)
        trips = std::max<int64_t>(0, mv->constant->data<int64_t>()[0]);
    } else {
      auto axes = n.ints("scan_input_axes", std::vector<int64_t>(scans_in, 0));
      for (size_t j = 0; j < scans_in && axes.size() == scans_in; ++j) {
        auto d = dims_of(n.inputs[k + j]);
        const int64_t r = d ? static_cast<int64_t>(d->size()) : 0, a = axes[j] < 0 ? axes[j] + r : axes[j];
        if (!d || a < 0 || a >= r || (trips && *trips != (*d)[static_cast<size_t>(a)])) return;
        trips = (*d)[static_cast<size_t>(a)];
      }
    }
    if (!trips) return;
    const size_t scans_out = outs.size() - k;
    auto out_axes = loop ? std::vector<int64_t>(scans_out, 0)
                         : n.ints("scan_output_axes", std::vector<int64_t>(scans_out, 0));
    if (out_axes.size() != scans_out) return;
    for (size_t j = 0; j < scans_out; ++j) {
      auto part = dims_of(g.outputs[out0 + k + j]);
      if (outs[k + j].shape || !part) continue;
      const int64_t r = static_cast<int64_t>(part->size()) + 1, a = out_axes[j] < 0 ? out_axes[j] + r : out_axes[j];
      if (a < 0 || a >= r) continue;
      part->insert(part->begin() + a, *trips);
      outs[k + j].shape = ir::static_shape(*part);
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
