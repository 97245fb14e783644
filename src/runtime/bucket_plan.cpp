#include "runtime/bucket_plan.h"

#include "runtime/batch_prover.h"
#include "runtime/sequence_prover.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <set>

#include "passes/passes.h"
#include "support/error.h"
#include "support/log.h"

namespace kiln {

namespace {

artifact::IoSymbols io_symbols(const ir::Value& v, const std::set<std::string>& dims) {
  artifact::IoSymbols s;
  s.name = v.name;
  if (v.shape)
    for (auto& d : *v.shape) s.axes.push_back(!d.is_static() && dims.count(d.symbol) ? d.symbol : "");
  return s;
}

/// Input slots whose value sets a shape, an axis, a count or a branch: a
/// scalar input that reaches one of them is specialized on its value.
bool steering_slot(const ir::Node& n, size_t slot) {
  static const std::map<std::string, std::set<size_t>> slots = {
      {"If", {0}},          {"Loop", {0, 1}},      {"Reshape", {1}},        {"Expand", {1}},
      {"Tile", {1}},        {"ConstantOfShape", {0}}, {"Range", {0, 1, 2}}, {"Slice", {1, 2, 3, 4}},
      {"Pad", {1, 3}},      {"Resize", {2, 3}},    {"Upsample", {1}},       {"Split", {1}},
      {"Squeeze", {1}},     {"Unsqueeze", {1}},    {"TopK", {1}},           {"OneHot", {1}},
      {"NonMaxSuppression", {2}}, {"Trilu", {1}},  {"CumSum", {1}},         {"ReduceSum", {1}},
      {"ReduceMean", {1}},  {"ReduceMax", {1}},    {"ReduceMin", {1}},      {"ReduceProd", {1}},
      {"CenterCropPad", {1, 2}}, {"Col2Im", {1, 2}}, {"STFT", {1, 2, 3}}};
  if (!(n.domain.empty() || n.domain == "ai.onnx")) return false;
  auto it = slots.find(n.op_type);
  return it != slots.end() && it->second.count(slot) > 0;
}

/// Whether `input` reaches a steering slot (main graph and subgraphs, which
/// read outer values by id) through any chain of nodes.
bool steers(const ir::Model& m, ir::ValueId input) {
  std::vector<bool> reached(m.values.size(), false);
  reached[static_cast<size_t>(input)] = true;
  bool found = false;
  // Nodes are in topological order and subgraphs read only earlier outer
  // values, so one pass over the nested graphs in order sees every chain.
  std::function<void(const ir::Graph&)> walk = [&](const ir::Graph& g) {
    for (const ir::Node& n : g.nodes) {
      bool any = false;
      for (size_t i = 0; i < n.inputs.size(); ++i)
        if (n.inputs[i] != ir::kNoValue && reached[static_cast<size_t>(n.inputs[i])]) {
          any = true;
          if (steering_slot(n, i)) found = true;
        }
      for (auto& [k, a] : n.attrs)
        if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a)) {
          walk(**sg);
          for (auto o : (*sg)->outputs)
            if (o != ir::kNoValue && reached[static_cast<size_t>(o)]) any = true;
        }
      if (any)
        for (auto o : n.outputs)
          if (o != ir::kNoValue) reached[static_cast<size_t>(o)] = true;
    }
  };
  walk(m.main);
  return found;
}

/// A graph input that holds one integer or bool value (shape [] or [1]).
bool scalar_integer_input(const ir::Value& v) {
  const bool integer = v.dtype == DType::i64 || v.dtype == DType::i32 || v.dtype == DType::i16 ||
                       v.dtype == DType::i8 || v.dtype == DType::u8 || v.dtype == DType::u16 ||
                       v.dtype == DType::u32 || v.dtype == DType::boolean;
  if (!integer || !v.shape) return false;
  return v.shape->empty() || (v.shape->size() == 1 && (*v.shape)[0].is_static() && (*v.shape)[0].value == 1);
}

bool has_anonymous_dim(const ir::Value& v) {
  if (!v.shape) return true;
  for (auto& d : *v.shape)
    if (!d.is_static() && d.symbol.empty()) return true;
  return false;
}

/// "'x' axis 0, 'y' axis 2": the graph inputs' symbolic dims without a name.
std::string anonymous_inputs(const ir::Model& m) {
  std::string out;
  for (auto id : m.main.inputs)
    if (auto& sh = m.value(id).shape)
      for (size_t a = 0; a < sh->size(); ++a)
        if (!(*sh)[a].is_static() && (*sh)[a].symbol.empty())
          out += fmt::format("{}'{}' axis {}", out.empty() ? "" : ", ", m.value(id).name, a);
  return out;
}

}  // namespace

namespace {

/// The graph outputs with the shapes shape inference gives them where the
/// model declares none or leaves a dim anonymous (exporters often do): the
/// padding decision below needs to see which axis carries each symbol.
std::vector<ir::Value> output_values(const ir::Model& m, const std::optional<ir::Model>& inferred) {
  std::vector<ir::Value> out;
  for (auto id : m.main.outputs) {
    out.push_back(m.value(id));
    // Without inference (it failed) the compile reports the reason; the declared shapes decide here.
    if (inferred && has_anonymous_dim(out.back()) && !has_anonymous_dim(inferred->value(id)))
      out.back().shape = inferred->value(id).shape;
  }
  return out;
}

/// m with every value's dtype and shape inferred (symbolic dims kept, no
/// constant folded), once for all the padding decisions; nullopt when
/// inference fails.
std::optional<ir::Model> inferred_model(const ir::Model& m) {
  ir::Model probe = ir::deep_copy(m);  // a plain copy shares (and would fold) the subgraphs
  try {
    passes::infer_and_fold(probe, /*max_fold_bytes=*/0);
  } catch (const Error&) {
    return std::nullopt;
  }
  return probe;
}

/// Whether a specialized dim `name` carried by a keep-mask input may be
/// padded as a sequence (sequence_prover.h): the interface's outputs each
/// have it at most once (the runtime slices there). `max_size`: the largest
/// size it may be padded to (0: no limit).
bool sequence_padding_proven(const ir::Model& m, const artifact::BucketSet& set, const std::string& name,
                             const std::set<std::string>& input_symbols, int64_t* max_size) {
  if (keep_mask_inputs(m, name).empty()) return false;
  std::vector<int> output_axes;
  for (auto& io : set.outputs) {
    if (std::count(io.axes.begin(), io.axes.end(), name) > 1) return false;
    auto it = std::find(io.axes.begin(), io.axes.end(), name);
    output_axes.push_back(it == io.axes.end() ? -1 : static_cast<int>(it - io.axes.begin()));
  }
  std::string why;
  int64_t cap = 0;
  if (sequence_padding_safe(m, name, input_symbols, output_axes, &why, &cap)) {
    *max_size = cap < std::numeric_limits<int64_t>::max() ? cap : 0;
    return true;
  }
  log().info("dim '{}' stays one program per size: sequence padding not shown safe ({})", name, why);
  return false;
}

}  // namespace

std::vector<std::string> value_guard_inputs(const ir::Model& m) {
  std::vector<std::string> out;
  for (auto id : m.main.inputs)
    if (scalar_integer_input(m.value(id)) && steers(m, id)) out.push_back(m.value(id).name);
  return out;
}

artifact::BucketSet plan_buckets(const ir::Model& m, const std::map<std::string, DimSpec>& dims, bool specialize_shapes,
                                 bool specialize_values) {
  artifact::BucketSet set;
  std::set<std::string> input_symbols;
  for (auto id : m.main.inputs)
    if (auto& sh = m.value(id).shape)
      for (auto& d : *sh)
        if (!d.is_static() && !d.symbol.empty()) input_symbols.insert(d.symbol);
  // Symbols nobody fixed (no input_shapes, no dims): specialized per size seen.
  std::set<std::string> free, bucketed;
  for (auto& [name, spec] : dims) bucketed.insert(name);
  if (specialize_shapes)
    for (auto& sym : input_symbols)
      if (!dims.count(sym)) free.insert(sym), bucketed.insert(sym);
  std::vector<std::string> guards = specialize_values ? value_guard_inputs(m) : std::vector<std::string>{};
  if (bucketed.empty() && guards.empty()) return set;
  const std::optional<ir::Model> inferred = inferred_model(m);
  const std::vector<ir::Value> outputs = output_values(m, inferred);
  for (auto id : m.main.inputs) set.inputs.push_back(io_symbols(m.value(id), bucketed));
  for (auto& v : outputs) set.outputs.push_back(io_symbols(v, bucketed));
  bool outputs_declared = true;
  for (auto& v : outputs) outputs_declared &= !has_anonymous_dim(v);
  // Batch padding needs every input having the dim and every output to carry
  // it at axis 0 in the interface the runtime pads and slices by.
  auto interface_leads = [&](const std::string& name) {
    for (auto& io : set.inputs)
      for (size_t a = 0; a < io.axes.size(); ++a)
        if (io.axes[a] == name && a != 0) return false;
    for (auto& io : set.outputs)
      if (io.axes.empty() || io.axes[0] != name) return false;
    return true;
  };

  for (auto& name : free) {
    artifact::BucketDim d{name, 0, 0, {}, artifact::PadMode::none, artifact::DimKind::specialized};
    // Guards (value specialization) change what the graph computes, so rows
    // are only shown independent in a model without them.
    if (outputs_declared && guards.empty() && interface_leads(name) &&
        (batch_rows_independent(inferred, name) || batch_rows_independent_bound(m, name, input_symbols)))
      d.pad = artifact::PadMode::batch;
    else if (outputs_declared && guards.empty() && sequence_padding_proven(m, set, name, input_symbols, &d.max))
      d.pad = artifact::PadMode::sequence;
    set.dims.push_back(std::move(d));
  }
  for (auto& name : guards) set.dims.push_back({name, 0, 0, {}, artifact::PadMode::none, artifact::DimKind::value});

  for (auto& [name, spec] : dims) {
    if (!input_symbols.count(name))
      fail(ErrorCode::invalid_option, "dims '{}': the model's inputs have no symbolic dim named '{}' (they have: {}; a dim fixed with "
           "input_shapes/--shape is no longer symbolic)",
           name, name, !input_symbols.empty() ? fmt::format("{}", fmt::join(input_symbols, ", "))
                       : anonymous_inputs(m).empty() ? std::string("none; every input dim is fixed")
                                                     : fmt::format("none with a name; unnamed symbolic dims at {}, which "
                                                                   "--dim cannot name: fix them with --shape",
                                                                   anonymous_inputs(m)));
    artifact::BucketDim d{name, spec.min, spec.max, spec.sizes, artifact::PadMode::none};
    if (spec.pad == DimSpec::Pad::auto_ && outputs_declared) {
      // Batch padding only where the graph provably keeps rows apart;
      // sequence padding of declared buckets only when asked for
      // (/pad=sequence; the sequence prover serves specialized dims).
      // The runtime pads and slices by the interface's axes (declared or
      // inferred output shapes): every input having the dim and every output
      // must carry it at axis 0 there too (an output declared with another
      // symbol would come back unsliced).
      if (interface_leads(name) &&
          (batch_rows_independent(inferred, name) || batch_rows_independent_bound(m, name, input_symbols)))
        d.pad = artifact::PadMode::batch;
    } else if (spec.pad == DimSpec::Pad::sequence && outputs_declared) {
      // Sequence (asked for): positions past the request's length are
      // excluded by a zero attention mask, so padding them cannot change
      // real positions as long as the mask gates every mixing of positions.
      // Only an integer or bool mask is taken for a keep-mask (1 attend, 0
      // not): a float mask may be additive (added to the scores, 0 meaning
      // attend), where zero padding would let the padded keys in.
      const bool masked = !keep_mask_inputs(m, name).empty();
      if (!masked)
        fail(ErrorCode::invalid_option,
             "dims '{}': /pad=sequence needs an integer or bool input named *mask* having the dim (the runtime "
             "extends it with zeros so that padded positions are masked out)",
             name);
      d.pad = artifact::PadMode::sequence;
    }
    set.dims.push_back(std::move(d));
  }
  return set;
}

std::vector<std::vector<int64_t>> all_buckets(const artifact::BucketSet& set) {
  size_t n = 1;
  for (auto& d : set.dims) {
    if (d.kind != artifact::DimKind::declared)
      fail(ErrorCode::invalid_option, "dims: '{}' has no declared buckets (it is specialized to the shapes or values "
           "given); fix it with --shape / input_shapes or declare buckets with --dim", d.symbol);
    n *= d.sizes.size();
    if (n > artifact::detail::kMaxPrograms)
      fail(ErrorCode::invalid_option, "dims: the bucket set has more than {} combinations; use fewer buckets",
           artifact::detail::kMaxPrograms);
  }
  std::vector<std::vector<int64_t>> out{{}};
  for (auto& d : set.dims) {
    std::vector<std::vector<int64_t>> next;
    for (auto& prefix : out)
      for (auto s : d.sizes) {
        next.push_back(prefix);
        next.back().push_back(s);
      }
    out = std::move(next);
  }
  return out;
}

std::string describe(const artifact::BucketSet& set) {
  std::string s;
  for (auto& d : set.dims) {
    if (d.kind == artifact::DimKind::specialized)
      s += fmt::format("{}{}=specialized per size (pad {})", s.empty() ? "" : "; ", d.symbol,
                       artifact::pad_mode_name(d.pad));
    else if (d.kind == artifact::DimKind::value)
      s += fmt::format("{}input '{}'=specialized per value", s.empty() ? "" : "; ", d.symbol);
    else
      s += fmt::format("{}{}={}..{}:{} (pad {})", s.empty() ? "" : "; ", d.symbol, d.min, d.max,
                       fmt::join(d.sizes, ","), artifact::pad_mode_name(d.pad));
  }
  return s;
}

}  // namespace kiln
