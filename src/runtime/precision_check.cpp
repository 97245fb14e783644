// The precision check of 16-bit cuda compiles (precision_check.h).
#include "runtime/precision_check.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include "runtime/precision_check_run.h"
#include "runtime/precision_selection.h"
#include "runtime/program.h"
#include "runtime/sample_inputs.h"
#include "support/error.h"
#include "support/log.h"
#ifdef KILN_WITH_CUDA
#include "targets/cuda/compile/body_reads.h"
#include "targets/cuda/compile/precision.h"
#endif

namespace kiln {

namespace {

constexpr int kMaxRounds = 5;     ///< emulated runs at most (the last one only measures)
constexpr double kGrowth = 8;     ///< an amplifying node's error over its inputs'
constexpr uint64_t kSeed = 0;     ///< of the random sample inputs (fixed: the check is deterministic)

/// Ops that move bits without rounding or computing: a walk back from an
/// amplifying node passes through them to the node that made the value.
const std::set<std::string> kMoves = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Gather",
                                      "Concat", "Slice", "Split", "GatherElements", "GatherND", "Identity",
                                      "Expand", "Tile", "Pad", "DepthToSpace", "SpaceToDepth", "Dropout", "Trilu"};

/// The relative tolerance of `kiln verify` for the precision (verify.h:
/// Tolerance::defaults), one rounding (2^-11 for fp16, 2^-8 for bf16) and
/// the smallest normal number of the 16-bit type.
struct Bound {
  double rtol, unit, min_normal;
};
Bound bound_of(DType to) {
  return to == DType::f16 ? Bound{1e-2, std::ldexp(1.0, -11), std::ldexp(1.0, -14)}
                          : Bound{4e-2, std::ldexp(1.0, -8), std::ldexp(1.0, -126)};
}

/// The error of one value of the emulated run.
struct ValueError {
  double error = 0;    ///< max|got - ref| / max|ref| (1 when max|ref| is 0 and got is not)
  double ref_max = 0;  ///< max|ref| over the finite elements
};

ValueError value_error(const Tensor& got, const Tensor& ref) {
  const float* g = got.data<float>();
  const float* r = ref.data<float>();
  const int64_t n = ref.numel();
  // In float, branch-free: |g - r| and |r| are float values, so their maxima
  // are the same in float as in double, and exact in any order (the result
  // does not depend on the threads or on vectorization).
  float max_abs = 0, ref_max = 0;
  int inf = 0;
  constexpr float kMax = std::numeric_limits<float>::max();
#pragma omp parallel for simd schedule(static) reduction(max : max_abs, ref_max) reduction(| : inf) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    const float ri = r[i], gi = g[i];
    const bool fin_r = std::fabs(ri) <= kMax, fin_g = std::fabs(gi) <= kMax;  // false for NaN too
    // A non-finite reference must be matched exactly (NaN by NaN).
    inf |= (!fin_r && !(gi == ri || (gi != gi && ri != ri))) | (fin_r && !fin_g);
    const float a = fin_r ? std::fabs(ri) : 0.f, d = fin_r && fin_g ? std::fabs(gi - ri) : 0.f;
    ref_max = a > ref_max ? a : ref_max;
    max_abs = d > max_abs ? d : max_abs;
  }
  ValueError e;
  e.ref_max = ref_max;
  e.error = inf ? std::numeric_limits<double>::infinity()
            : e.ref_max > 0 ? static_cast<double>(max_abs) / e.ref_max
                            : (max_abs > 0 ? 1.0 : 0.0);
  return e;
}

bool comparable(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.dtype() == DType::f32 && b.dtype() == DType::f32 && a.numel() == b.numel();
}

std::string sci(double v) { return std::isfinite(v) ? fmt::format("{:.2e}", v) : "inf"; }

nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

/// The smallest axis size of the Gathers that index with integer input
/// `v` (directly or through Cast / Reshape-like nodes); 0 when none does.
/// Random token ids must stay inside the embedding tables.
int64_t index_limit(const ir::Model& m, ir::ValueId v) {
  static const std::set<std::string> kThrough = {"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity"};
  int64_t limit = 0;
  std::vector<ir::ValueId> todo = {v};
  std::set<ir::ValueId> seen;
  while (!todo.empty()) {
    const ir::ValueId u = todo.back();
    todo.pop_back();
    if (!seen.insert(u).second) continue;
    for (auto& n : m.main.nodes) {
      if (!n.domain.empty()) continue;
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        if (n.inputs[i] != u) continue;
        if (kThrough.count(n.op_type) && i == 0) {
          for (auto o : n.outputs) todo.push_back(o);
        } else if ((n.op_type == "Gather" || n.op_type == "GatherElements") && i == 1) {
          const ir::Value& data = m.value(n.inputs[0]);
          if (!data.shape || data.shape->empty()) continue;
          int64_t axis = n.i("axis", 0);
          if (axis < 0) axis += static_cast<int64_t>(data.shape->size());
          if (axis < 0 || axis >= static_cast<int64_t>(data.shape->size())) continue;
          const auto& d = (*data.shape)[static_cast<size_t>(axis)];
          if (d.is_static() && d.value > 0) limit = limit ? std::min(limit, d.value) : d.value;
        }
      }
    }
  }
  return limit;
}

/// A random integer input made to fit: ids below `limit` (when > 0), and an
/// input named like a mask all ones (nothing masked, as in most requests).
void fit_integers(Tensor& t, const std::string& name, int64_t limit) {
  std::string lower = name;
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const bool mask = lower.find("mask") != std::string::npos;
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype() == DType::i64) {
      int64_t& x = t.data<int64_t>()[i];
      x = mask ? 1 : limit > 0 ? x % limit : x;
    } else if (t.dtype() == DType::i32) {
      int32_t& x = t.data<int32_t>()[i];
      x = mask ? 1 : limit > 0 ? static_cast<int32_t>(x % limit) : x;
    }
  }
}

/// The sample inputs: `given` where it fits the model's input, else random.
std::map<std::string, Tensor> sample_inputs(const ir::Model& m, const std::map<std::string, Tensor>& given,
                                            std::string& how) {
  std::mt19937_64 rng(kSeed);
  std::map<std::string, Tensor> in;
  std::vector<std::string> used, replaced;
  for (auto id : m.main.inputs) {
    const TensorInfo info = tensor_info(m.value(id));
    auto it = given.find(info.name);
    if (it != given.end() && it->second.dtype() == info.dtype && it->second.shape() == info.dims) {
      in[info.name] = it->second;
      used.push_back(info.name);
      continue;
    }
    if (it != given.end()) replaced.push_back(info.name);
    Tensor t = random_input(info, rng, nullptr, "the precision check");
    fit_integers(t, info.name, index_limit(m, id));
    in[info.name] = t;
  }
  how = used.empty() ? fmt::format("random (seed {})", kSeed) : fmt::format("given for {}", fmt::join(used, ", "));
  if (!used.empty() && used.size() < m.main.inputs.size()) how += fmt::format(", random (seed {}) for the rest", kSeed);
  if (!replaced.empty())
    how += fmt::format("; {} given with another dtype or shape than this program's, random instead",
                       fmt::join(replaced, ", "));
  return in;
}

#ifdef KILN_WITH_CUDA
using targets::cuda::precision_node_key;

/// What node `n` reads: its inputs and, for an If / Loop / Scan, the values
/// its bodies read (the outer ones among them are its float inputs too;
/// values made in a body are never compared, so they count for nothing).
std::vector<ir::ValueId> float_reads(const ir::Node& n) {
  std::vector<ir::ValueId> out;
  for (auto v : n.inputs)
    if (v != ir::kNoValue) out.push_back(v);
  if (targets::cuda::is_control_flow(n))
    targets::cuda::for_each_body_read(n, [&](const ir::ValueId& v) { out.push_back(v); });
  return out;
}

/// Per main-graph node of `m`, whether it feeds one of `targets` (value
/// ids), through its outputs or what the bodies it feeds read.
std::vector<bool> feeding(const ir::Model& m, const std::vector<ir::ValueId>& targets) {
  std::vector<int> producer(m.values.size(), -1);
  for (size_t i = 0; i < m.main.nodes.size(); ++i)
    for (auto v : m.main.nodes[i].outputs)
      if (v != ir::kNoValue) producer[v] = static_cast<int>(i);
  std::vector<bool> feeds(m.main.nodes.size(), false);
  std::vector<ir::ValueId> todo = targets;
  while (!todo.empty()) {
    const ir::ValueId v = todo.back();
    todo.pop_back();
    if (v == ir::kNoValue || producer[v] < 0 || feeds[static_cast<size_t>(producer[v])]) continue;
    feeds[static_cast<size_t>(producer[v])] = true;
    for (auto u : float_reads(m.main.nodes[static_cast<size_t>(producer[v])])) todo.push_back(u);
  }
  return feeds;
}

/// One round: the 16-bit program with `keep` in float32, emulated; the
/// error of every value it shares with `ref` (by name).
std::unordered_map<std::string, ValueError> emulated_errors(const ir::Model& m, DType to,
                                                            const std::set<std::string>& keep,
                                                            const std::map<std::string, Tensor>& inputs,
                                                            const std::unordered_map<std::string, Tensor>& ref,
                                                            int threads,
                                                            std::unordered_map<std::string, DType>& dtypes,
                                                            targets::cuda::ConvertedConstants& constants,
                                                            const std::unordered_set<std::string>& excluded) {
  ir::Model conv = m;
  targets::cuda::convert_precision(conv, to, keep, &constants);  // the weights converted once for all rounds
  dtypes.clear();
  for (auto& v : conv.values) dtypes[v.name] = v.dtype;
  std::vector<DType> round;
  targets::cuda::emulate_16bit(conv, &round);
  std::unordered_map<std::string, ValueError> errors;
  run_for_check(conv, inputs, round, threads, [&](ir::ValueId id, const Tensor& t) {
    auto it = ref.find(conv.value(id).name);
    if (it != ref.end() && comparable(t, it->second) && !excluded.count(it->first))
      errors[it->first] = value_error(t, it->second);
  });
  return errors;
}

/// The outputs stay above the bound with no amplifying node: 16-bit rounding
/// accumulates at many nodes, each amplifying what came before it a little
/// (a deep network whose outputs are a small residue of large activations,
/// e.g. a classifier with random weights). The rounding made earliest passes
/// through the most of that amplification, so the earliest 16-bit computing
/// nodes (graph order: topological) stay in float32: 8 in the first such
/// round, 16 more in the next, 32 more in the next, and every one left in the
/// check's last round that can still change the program (the check then ends
/// within its bound, at worst with the program in float32). Measured with
/// the emulation on mobilenet_v2 (152 nodes, output error 1.98e-2): the 8
/// earliest -> 1.31e-2, 24 -> 6.9e-3; ranking by the error each node adds, or
/// latest first, needed 109 and 150 nodes.
/// `feeds` (empty: every node): per main-graph node, whether it feeds the
/// check's outputs (with a selection, nodes that only feed selection-
/// dependent values are no candidates).
std::vector<PrecisionCheckNode> accumulating(const ir::Model& m,
                                             const std::unordered_map<std::string, ValueError>& errors,
                                             const std::unordered_map<std::string, DType>& dtypes,
                                             const std::set<std::string>& keep, const Bound& b, int round,
                                             int accumulation_round, double out_error, const std::vector<bool>& feeds) {
  std::vector<const ir::Node*> cands;
  for (size_t i = 0; i < m.main.nodes.size(); ++i) {
    const ir::Node& n = m.main.nodes[i];
    if (n.domain.empty() && kMoves.count(n.op_type)) continue;  // moves bits, rounds nothing
    if (!feeds.empty() && !feeds[i]) continue;  // after a selection only: its rounding reaches no compared output
    if (keep.count(precision_node_key(m, n))) continue;
    bool sixteen = false;
    for (auto v : n.outputs)
      if (v != ir::kNoValue)
        if (auto dt = dtypes.find(m.value(v).name); dt != dtypes.end()) sixteen |= dt->second != DType::f32;
    if (sixteen) cands.push_back(&n);
  }
  const bool last = round >= kMaxRounds - 1;
  const size_t take = last ? cands.size() : std::min(cands.size(), size_t{8} << (accumulation_round - 1));
  std::vector<PrecisionCheckNode> out;
  for (size_t i = 0; i < take; ++i) {
    const ir::Node& n = *cands[i];
    double err = 0, in_err = b.unit;
    for (auto v : n.outputs)
      if (v != ir::kNoValue)
        if (auto it = errors.find(m.value(v).name); it != errors.end()) err = std::max(err, it->second.error);
    for (auto v : n.inputs)
      if (v != ir::kNoValue)
        if (auto it = errors.find(m.value(v).name); it != errors.end()) in_err = std::max(in_err, it->second.error);
    out.push_back({precision_node_key(m, n), n.op_type,
                   fmt::format("16-bit rounding accumulates over the graph (outputs {} of their scale, bound {}, no "
                               "single amplifying node): one of the {} earliest 16-bit nodes left",
                               sci(out_error), sci(b.rtol), take),
                   err, in_err, round});
  }
  return out;
}

/// The nodes to keep in float32 after a round with `errors` (precision_check.h).
std::vector<PrecisionCheckNode> amplifying(const ir::Model& m, const std::unordered_map<std::string, ValueError>& errors,
                                           const std::unordered_map<std::string, DType>& dtypes,
                                           const std::set<std::string>& keep, const Bound& b, int round) {
  std::vector<int> producer(m.values.size(), -1);
  for (size_t i = 0; i < m.main.nodes.size(); ++i)
    for (auto v : m.main.nodes[i].outputs)
      if (v != ir::kNoValue) producer[v] = static_cast<int>(i);
  auto error_of = [&](ir::ValueId v) -> const ValueError* {
    auto it = errors.find(m.value(v).name);
    return it == errors.end() ? nullptr : &it->second;
  };
  auto is_activation = [&](ir::ValueId v) {
    return v != ir::kNoValue && m.value(v).dtype == DType::f32 && !m.value(v).constant && producer[v] >= 0;
  };
  std::vector<PrecisionCheckNode> out;
  std::set<std::string> added;
  auto add = [&](const ir::Node& n, std::string reason, double err, double in_err) {
    const std::string key = precision_node_key(m, n);
    if (keep.count(key) || !added.insert(key).second) return;
    out.push_back({key, n.op_type, std::move(reason), err, in_err, round});
  };
  for (const ir::Node& n : m.main.nodes) {
    double err = 0, ref_max = 0;
    bool any = false;
    for (auto v : n.outputs)
      if (v != ir::kNoValue)
        if (const ValueError* e = error_of(v)) {
          any = true;
          if (e->error >= err) ref_max = e->ref_max;
          err = std::max(err, e->error);
        }
    double in_err = b.unit;
    for (auto v : float_reads(n))
      if (m.value(v).dtype == DType::f32)
        if (const ValueError* e = error_of(v)) in_err = std::max(in_err, e->error);
    if (!any || !(err > b.rtol)) continue;
    const std::string key = precision_node_key(m, n);
    // Values below the 16-bit type's normal range lose bits at every node:
    // a node computing 16-bit values there is kept whatever its inputs bring.
    bool sixteen = false;
    for (auto v : n.outputs)
      if (v != ir::kNoValue)
        if (auto dt = dtypes.find(m.value(v).name); dt != dtypes.end()) sixteen |= dt->second != DType::f32;
    if (sixteen && std::isfinite(err) && ref_max > 0 && ref_max < b.min_normal) {
      add(n,
          fmt::format("its values are below the 16-bit normal range: scale {:.3g} (smallest normal {:.3g}), error {} "
                      "of it",
                      ref_max, b.min_normal, sci(err)),
          err, in_err);
      continue;
    }
    if (!(err > kGrowth * in_err)) continue;  // it inherits its error, it does not make it
    std::string reason =
        !std::isfinite(err) && ref_max > 65504
            ? fmt::format("overflows the 16-bit range: its float32 values reach {:.3g} (fp16's largest is 65504)",
                          ref_max)
        : !std::isfinite(err)
            ? std::string("its 16-bit result is not finite where the float32 one is")
            : fmt::format("amplifies the 16-bit rounding of its inputs: error {} of its scale from {} ({:.0f}x)",
                          sci(err), sci(in_err), err / in_err);
    // An If / Loop / Scan runs float32 already (its bodies as written):
    // what it amplifies is the rounding of the values it reads.
    const bool control = targets::cuda::is_control_flow(n);
    if (!control) add(n, reason, err, in_err);
    // The nearest 16-bit computing producers of its float inputs.
    std::set<int> seen;
    std::function<void(ir::ValueId)> back = [&](ir::ValueId v) {
      if (!is_activation(v)) return;
      const int p = producer[v];
      if (!seen.insert(p).second) return;
      const ir::Node& pn = m.main.nodes[static_cast<size_t>(p)];
      auto dt = dtypes.find(m.value(v).name);
      const bool f32_already = keep.count(precision_node_key(m, pn)) || (dt != dtypes.end() && dt->second == DType::f32);
      if (f32_already || (pn.domain.empty() && kMoves.count(pn.op_type))) {
        for (auto u : float_reads(pn)) back(u);
        return;
      }
      const ValueError* pe = error_of(v);
      add(pn,
          control ? fmt::format("feeds '{}' ({}), whose float32 bodies amplify its 16-bit rounding", key, n.op_type)
                  : fmt::format("feeds '{}' ({}), which amplifies its 16-bit rounding", key, n.op_type),
          pe ? pe->error : 0, b.unit);
    };
    for (auto v : float_reads(n)) back(v);
  }
  return out;
}
#endif

}  // namespace

std::set<std::string> PrecisionCheckResult::keep_set() const {
  std::set<std::string> s;
  for (auto& k : kept) s.insert(k.node);
  return s;
}

std::string PrecisionCheckResult::note() const {
  if (state == "off") return fmt::format("precision check ({}) off: every node follows the precision policy", precision);
  if (state == "skipped") return fmt::format("precision check ({}) skipped: {}", precision, reason);
  if (kept.empty())
    return fmt::format("precision check ({}): no node amplifies 16-bit rounding ({} nodes, outputs within {} of "
                       "their scale on {} inputs){}",
                       precision, nodes, sci(output_error_after), inputs, selection_note());
  std::string list;
  for (size_t i = 0; i < kept.size() && i < 8; ++i)
    list += fmt::format("{}{} ({})", i ? ", " : "", kept[i].node, kept[i].op);
  if (kept.size() > 8) list += fmt::format(", ... ({} more)", kept.size() - 8);
  return fmt::format("precision check ({}): kept {} of {} nodes in float32: {}; first: {} {}; output error {} -> {}{} "
                     "(`kiln inspect` lists each and why)",
                     precision, kept.size(), nodes, list, kept[0].node, kept[0].reason, sci(output_error_before),
                     sci(output_error_after), selection_note());
}

std::string PrecisionCheckResult::selection_note() const {
  if (boundaries.empty()) return "";
  std::string list;
  for (size_t i = 0; i < boundaries.size() && i < 4; ++i)
    list += fmt::format("{}{} ({})", i ? ", " : "", boundaries[i].node, boundaries[i].op);
  if (boundaries.size() > 4) list += fmt::format(", ... ({} more)", boundaries.size() - 4);
  return fmt::format("; {} selection-dependent values not compared, bounded by {} selecting node(s): {}",
                     selection_dependent, boundaries.size(), list);
}

nlohmann::json PrecisionCheckResult::to_json() const {
  nlohmann::json k = nlohmann::json::array();
  for (auto& n : kept)
    k.push_back({{"node", n.node}, {"op", n.op}, {"reason", n.reason}, {"error", number(n.error)},
                 {"input_error", number(n.input_error)}, {"round", n.round}});
  nlohmann::json j = {{"state", state}, {"precision", precision}};
  if (state == "skipped") j["reason"] = reason;
  if (state == "checked") {
    j.update({{"method", method}, {"inputs", inputs}, {"bound", bound}, {"growth", growth}, {"nodes", nodes},
              {"rounds", rounds}, {"output_error_before", number(output_error_before)},
              {"output_error_after", number(output_error_after)}, {"kept", k}, {"ms", ms}});
    // Optional fields (absent in older artifacts, and for models without
    // control flow or selection, whose JSON stays what it was).
    if (control_flow) j["control_flow"] = control_flow;
    if (!boundaries.empty()) {
      nlohmann::json bs = nlohmann::json::array();
      for (auto& sb : boundaries)
        bs.push_back({{"node", sb.node}, {"op", sb.op}, {"values", sb.values}, {"error", number(sb.error)}});
      j["selection_dependent"] = selection_dependent;
      j["boundaries"] = bs;
    }
  }
  return j;
}

PrecisionCheckResult check_precision(const ir::Model& m, DType to, const std::map<std::string, Tensor>& given,
                                     int threads) {
  if (to != DType::f16 && to != DType::bf16)
    fail(ErrorCode::internal, "check_precision: {} is not a 16-bit float type", dtype_name(to));
  Stopwatch sw;
  PrecisionCheckResult r;
  r.precision = to == DType::f16 ? "fp16" : "bf16";
  r.nodes = static_cast<int>(m.main.nodes.size());
  const Bound b = bound_of(to);
  r.bound = b.rtol;
  r.growth = kGrowth;
  r.method = "ref kernels on the host, matrix products through oneDNN's sgemm: float32 against the 16-bit program "
             "emulated in float32 (each 16-bit value rounded to nearest even where it is made)";
#ifndef KILN_WITH_CUDA
  (void)given;
  (void)threads;
  r.state = "skipped";
  r.reason = "this kiln was built without the cuda target";
  return r;
#else
  for (auto& n : m.main.nodes) r.control_flow += targets::cuda::is_control_flow(n) ? 1 : 0;
  try {
    const auto inputs = sample_inputs(m, given, r.inputs);
    std::unordered_map<std::string, Tensor> ref;
    run_for_check(m, inputs, {}, threads, [&](ir::ValueId id, const Tensor& t) { ref[m.value(id).name] = t; });
    // Discrete selection (precision_selection.h): selection-dependent
    // values are not compared; the check's outputs are the model outputs
    // that are not, and the float values deciding each selection.
    const SelectionAnalysis sel = analyse_selection(m);
    std::unordered_set<std::string> excluded;
    std::vector<ir::ValueId> check_outputs;
    for (size_t v = 0; v < sel.dependent.size(); ++v)
      if (sel.dependent[v]) excluded.insert(m.values[v].name);
    for (auto v : m.main.outputs)
      if (!sel.dependent[v]) check_outputs.push_back(v);
    for (auto& sb : sel.boundaries) {
      PrecisionCheckBoundary pb{sb.node, sb.op, {}, 0};
      for (auto v : sb.values) {
        pb.values.push_back(m.value(v).name);
        check_outputs.push_back(v);
      }
      r.boundaries.push_back(std::move(pb));
    }
    r.selection_dependent = sel.dependent_floats;
    const std::vector<bool> feeds = sel.any() ? feeding(m, check_outputs) : std::vector<bool>{};
    std::set<std::string> keep;
    std::unordered_map<std::string, DType> dtypes;
    targets::cuda::ConvertedConstants constants;
    int accumulation_rounds = 0;
    double previous = 0;
    for (int round = 1; round <= kMaxRounds; ++round) {
      const auto errors = emulated_errors(m, to, keep, inputs, ref, threads, dtypes, constants, excluded);
      r.rounds = round;
      double out = 0;
      for (auto v : check_outputs)
        if (auto it = errors.find(m.value(v).name); it != errors.end()) out = std::max(out, it->second.error);
      for (auto& pb : r.boundaries) {
        pb.error = 0;
        for (auto& name : pb.values)
          if (auto it = errors.find(name); it != errors.end()) pb.error = std::max(pb.error, it->second.error);
      }
      if (round == 1) r.output_error_before = out;
      r.output_error_after = out;
      log().debug("precision check round {}: output error {} with {} nodes kept", round, sci(out), keep.size());
      if (round == kMaxRounds) break;
      auto more = amplifying(m, errors, dtypes, keep, b, round);
      // No single node makes the error (or keeping the amplifying ones no
      // longer brings the outputs down), yet the outputs are off: the
      // rounding accumulates over depth. From then on aim at half the bound:
      // the samples are not the user's, and this error spreads over every
      // output element.
      const double target = accumulation_rounds ? b.rtol / 2 : b.rtol;
      const bool stalled = round > 1 && out > 0.7 * previous;
      if (out > target && (more.empty() || stalled)) {
        std::set<std::string> flagged;
        for (auto& k : more) flagged.insert(k.node);
        for (auto& k : accumulating(m, errors, dtypes, keep, b, round, ++accumulation_rounds, out, feeds))
          if (flagged.insert(k.node).second) more.push_back(std::move(k));
      }
      previous = out;
      if (more.empty()) break;
      for (auto& k : more) keep.insert(k.node);
      r.kept.insert(r.kept.end(), more.begin(), more.end());
    }
    r.state = "checked";
  } catch (const Error& e) {
    r.state = "skipped";
    r.reason = fmt::format("the ref kernels cannot run it: {}", e.what());
    r.kept.clear();
    r.boundaries.clear();
    r.selection_dependent = 0;
  }
  r.ms = sw.ms();
  log().info("{} ({:.0f} ms)", r.note(), r.ms);
  return r;
#endif
}

}  // namespace kiln
