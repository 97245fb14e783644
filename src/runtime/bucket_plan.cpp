#include "runtime/bucket_plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "passes/passes.h"
#include "support/error.h"

namespace kiln {

namespace {

artifact::IoSymbols io_symbols(const ir::Value& v, const std::map<std::string, DimSpec>& dims) {
  artifact::IoSymbols s;
  s.name = v.name;
  if (v.shape)
    for (auto& d : *v.shape) s.axes.push_back(!d.is_static() && dims.count(d.symbol) ? d.symbol : "");
  return s;
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

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

/// The graph outputs with the shapes shape inference gives them where the
/// model declares none or leaves a dim anonymous (exporters often do): the
/// padding decision below needs to see which axis carries each symbol.
std::vector<ir::Value> output_values(const ir::Model& m) {
  std::vector<ir::Value> out;
  bool need = false;
  for (auto id : m.main.outputs) {
    out.push_back(m.value(id));
    need |= has_anonymous_dim(out.back());
  }
  if (!need) return out;
  ir::Model probe = m;
  try {
    passes::infer_and_fold(probe, /*max_fold_bytes=*/0);
  } catch (const Error&) {
    return out;  // the compile reports the reason; the declared shapes decide here
  }
  for (size_t i = 0; i < out.size(); ++i) {
    const ir::Value& v = probe.value(m.main.outputs[i]);
    if (has_anonymous_dim(out[i]) && !has_anonymous_dim(v)) out[i].shape = v.shape;
  }
  return out;
}

artifact::BucketSet plan_buckets(const ir::Model& m, const std::map<std::string, DimSpec>& dims) {
  artifact::BucketSet set;
  if (dims.empty()) return set;
  const std::vector<ir::Value> outputs = output_values(m);
  for (auto id : m.main.inputs) set.inputs.push_back(io_symbols(m.value(id), dims));
  for (auto& v : outputs) set.outputs.push_back(io_symbols(v, dims));
  std::set<std::string> input_symbols;
  for (auto id : m.main.inputs)
    if (auto& sh = m.value(id).shape)
      for (auto& d : *sh)
        if (!d.is_static() && !d.symbol.empty()) input_symbols.insert(d.symbol);
  bool outputs_declared = true;
  for (auto& v : outputs) outputs_declared &= !has_anonymous_dim(v);

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
      // Batch: the dim leads every input and output that has it, so the
      // program treats rows independently as far as the interface shows.
      bool leading = true;
      for (auto* io : {&set.inputs, &set.outputs})
        for (auto& s : *io)
          for (size_t a = 0; a < s.axes.size(); ++a)
            if (s.axes[a] == name && a != 0) leading = false;
      // Sequence: positions past the request's length are excluded by a
      // zero attention mask, so padding them cannot change real positions.
      // Only an integer or bool mask is taken for a keep-mask (1 attend, 0
      // not): a float mask may be additive (added to the scores, 0 meaning
      // attend), where zero padding would let the padded keys in.
      bool masked = false;
      for (size_t i = 0; i < set.inputs.size(); ++i) {
        const auto& s = set.inputs[i];
        const DType dt = m.value(m.main.inputs[i]).dtype;
        const bool keep_mask_dtype = dt == DType::boolean || dt == DType::i64 || dt == DType::i32 || dt == DType::u8 ||
                                     dt == DType::i8;
        if (keep_mask_dtype && lower(s.name).find("mask") != std::string::npos &&
            std::find(s.axes.begin(), s.axes.end(), name) != s.axes.end())
          masked = true;
      }
      d.pad = leading ? artifact::PadMode::batch : masked ? artifact::PadMode::sequence : artifact::PadMode::none;
    }
    set.dims.push_back(std::move(d));
  }
  return set;
}

std::vector<std::vector<int64_t>> all_buckets(const artifact::BucketSet& set) {
  size_t n = 1;
  for (auto& d : set.dims) {
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
  for (auto& d : set.dims)
    s += fmt::format("{}{}={}..{}:{} (pad {})", s.empty() ? "" : "; ", d.symbol, d.min, d.max, fmt::join(d.sizes, ","),
                     artifact::pad_mode_name(d.pad));
  return s;
}

}  // namespace kiln
