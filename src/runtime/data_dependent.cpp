// Data-dependent dims and their bounds (runtime/data_dependent.h).
#include "runtime/data_dependent.h"

#include <fmt/format.h>

#include <optional>
#include <set>

#include "ops/util.h"
#include "passes/passes.h"
#include "support/error.h"

namespace kiln {

namespace {

/// A size as a factor of a bound: its value, or its symbol (unknown value).
struct Factor {
  std::string text;
  int64_t value = -1;
};

Factor factor(const ir::Dim& d) { return d.is_static() ? Factor{std::to_string(d.value), d.value} : Factor{d.str(), -1}; }

/// The product of `fs` ("2 x batch x 3"), its value when every factor is
/// known; "sizes known only at run time" when a factor has no name either.
std::pair<std::string, int64_t> product(const std::vector<Factor>& fs) {
  std::string text;
  int64_t v = 1;
  for (auto& f : fs) {
    if (f.text == "?") return {"sizes known only at run time", -1};
    text += (text.empty() ? "" : " x ") + f.text;
    v = v >= 0 && f.value >= 0 ? v * f.value : -1;
  }
  return {text.empty() ? "1" : text, v};
}

/// The element count of a value, as a product of its dims (nullopt: rank unknown).
std::optional<std::vector<Factor>> elements(const ir::Value& v) {
  if (!v.shape) return std::nullopt;
  std::vector<Factor> fs;
  for (auto& d : *v.shape) fs.push_back(factor(d));
  return fs;
}

/// The size of axis `axis` of v (negative counts from the end).
std::optional<Factor> axis_size(const ir::Value& v, int64_t axis) {
  if (!v.shape) return std::nullopt;
  const int64_t r = static_cast<int64_t>(v.shape->size());
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return std::nullopt;
  return factor((*v.shape)[static_cast<size_t>(axis)]);
}

/// The bound the operator implies on its open output axis ("" when none).
std::pair<std::string, int64_t> bound_of(const ir::Model& m, const ir::Node& n) {
  auto in = [&](size_t i) -> const ir::Value* {
    return i < n.inputs.size() && n.inputs[i] != ir::kNoValue ? &m.value(n.inputs[i]) : nullptr;
  };
  const std::string& op = n.op_type;
  if (op == "NonMaxSuppression") {
    // selected_indices [num_selected, 3]: at most max_output_boxes_per_class per (batch, class).
    const ir::Value* scores = in(1);
    const ir::Value* max_out = in(2);
    if (!scores || !scores->shape || scores->shape->size() != 3) return {"", -1};
    const Factor b = factor((*scores->shape)[0]), c = factor((*scores->shape)[1]), boxes = factor((*scores->shape)[2]);
    if (!max_out) return {"<= 0 (no max_output_boxes_per_class: nothing is selected)", 0};
    if (!max_out->constant) {
      auto [t, v] = product({b, c, boxes});
      return {fmt::format("<= {} (batches x classes x boxes; max_output_boxes_per_class comes from data)", t), v};
    }
    int64_t k = ops::to_int64s(*max_out->constant).at(0);
    Factor per{std::to_string(k) + " (max_output_boxes_per_class)", k};
    if (boxes.value >= 0 && boxes.value < k) per = {std::to_string(boxes.value) + " (boxes)", boxes.value};
    auto [t, v] = product({b, c, per});
    return {fmt::format("<= {}{}", v >= 0 ? std::to_string(v) + " = " : "", t), v};
  }
  if (op == "NonZero" || op == "Unique" || (op == "Compress" && !n.has("axis"))) {
    if (op == "Unique" && n.has("axis")) {
      if (auto f = axis_size(*in(0), n.i("axis")))
        return {fmt::format("<= {} (the axis's size)", f->text == "?" ? "a size known only at run time" : f->text), f->value};
      return {"", -1};
    }
    auto fs = elements(*in(0));
    if (!fs) return {"", -1};
    auto [t, v] = product(*fs);
    return {fmt::format("<= {}{} (the input's elements)", v >= 0 ? std::to_string(v) + " = " : "", t), v};
  }
  if (op == "TopK" || op == "Compress") {
    const int64_t axis = n.i("axis", op == "TopK" ? -1 : 0);
    if (auto f = axis_size(*in(0), axis))
      return {fmt::format("<= {} (the size of axis {} of the input)", f->text == "?" ? "a size known only at run time" : f->text, axis),
              f->value};
    return {"", -1};
  }
  return {"", -1};  // Loop: the trip count comes from data
}

/// The output axis whose size the node computes from data (-1: any, a Loop's
/// scan outputs); the other axes keep their inputs' sizes.
int open_axis(const ir::Node& n, size_t out, size_t rank) {
  const std::string& op = n.op_type;
  auto norm = [&](int64_t a) { return static_cast<int>(a < 0 ? a + static_cast<int64_t>(rank) : a); };
  if (op == "NonZero") return 1;
  if (op == "NonMaxSuppression") return 0;
  if (op == "TopK") return norm(n.i("axis", -1));
  if (op == "Compress") return n.has("axis") ? norm(n.i("axis")) : 0;
  if (op == "Unique") return out == 0 && n.has("axis") ? norm(n.i("axis")) : 0;
  return -1;
}

bool origin_op(const std::string& op) {
  static const std::set<std::string> ops = {"NonZero", "NonMaxSuppression", "TopK", "Unique", "Compress", "Loop"};
  return ops.count(op) > 0;
}

}  // namespace

std::vector<DataDependentDim> data_dependent_dims(const ir::Model& model) {
  bool any = false;
  for (auto& n : model.main.nodes) any |= (n.domain.empty() || n.domain == "ai.onnx") && origin_op(n.op_type);
  if (!any) return {};
  ir::Model m = ir::deep_copy(model);
  try {
    passes::infer_and_fold(m);
  } catch (const Error&) {
    return {};
  }
  std::vector<DataDependentDim> out;
  for (size_t i = 0; i < m.main.nodes.size(); ++i) {
    const ir::Node& n = m.main.nodes[i];
    if (!(n.domain.empty() || n.domain == "ai.onnx") || !origin_op(n.op_type)) continue;
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      if (n.outputs[o] == ir::kNoValue) continue;
      const ir::Value& v = m.value(n.outputs[o]);
      if (!v.shape) continue;
      for (size_t a = 0; a < v.shape->size(); ++a) {
        const ir::Dim& d = (*v.shape)[a];
        if (d.is_static() || !d.symbol.empty()) continue;  // known, or an input's symbol
        const int open = open_axis(n, o, v.shape->size());
        if (open >= 0 && static_cast<size_t>(open) != a) continue;  // inherited from an input
        auto [bound, max] = bound_of(m, n);
        out.push_back({n.name.empty() ? fmt::format("{} #{}", n.op_type, i) : n.name, n.op_type, v.name,
                       static_cast<int>(a), bound, max});
      }
    }
  }
  return out;
}

}  // namespace kiln
