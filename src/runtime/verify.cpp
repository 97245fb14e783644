// kiln verify: the compiled program against the ref target (verify.h).
#include "runtime/verify.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "cache/model_digest.h"
#include "ops/util.h"
#include "runtime/compile.h"
#include "runtime/program.h"
#include "runtime/reference_nodes.h"
#include "support/error.h"
#include "support/half.h"
#include "support/log.h"
#include "targets/cpu/run/readback.h"

namespace kiln::verify {

Tolerance Tolerance::defaults(Precision p, bool tf32) {
  switch (p) {
    case Precision::fp16: return {1e-2, 1e-3};
    case Precision::bf16: return {4e-2, 4e-3};
    case Precision::fp32: break;
  }
  return tf32 ? Tolerance{1e-2, 1e-4} : Tolerance{1e-4, 1e-5};
}

const char* readback_name(Readback r) {
  switch (r) {
    case Readback::blocked: return "blocked";
    case Readback::nhwc: return "nhwc";
    case Readback::same: break;
  }
  return "same";
}

bool Report::ok() const {
  for (auto& v : values)
    if (!v.pass) return false;
  for (auto& v : outputs)
    if (!v.pass) return false;
  return true;
}

Downstream downstream(const Report& r) {
  Downstream d;
  if (r.first_failure < 0) return d;
  for (size_t i = static_cast<size_t>(r.first_failure) + 1; i < r.values.size(); ++i) {
    const ValueResult& v = r.values[i];
    ++d.compared;
    d.failing += !v.pass;
    if (d.worst < 0 || v.max_rel > d.worst_rel) {
      d.worst = static_cast<int>(i);
      d.worst_rel = v.max_rel;
    }
  }
  return d;
}

namespace {

/// The renaming suffixes of the targets, and the layout change each implies.
struct Suffix {
  const char* text;
  Readback readback;
};
constexpr Suffix kSuffixes[] = {
    {"/blocked", Readback::blocked},  // cpu: assign_layouts
    {"_nhwc", Readback::nhwc},        // cuda: layout_nhwc
    {"_f16", Readback::same},         // cuda: precision (casts, 16-bit internals of outputs)
    {"_bf16", Readback::same},
    {"_f32", Readback::same},
};

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::char_traits<char>::length(suffix);
  return s.size() > n && s.compare(s.size() - n, n, suffix) == 0;
}

enum class Kind { floating, float8, other };
Kind kind_of(DType t) {
  if (dtype_is_float(t)) return Kind::floating;
  if (dtype_is_float8(t)) return Kind::float8;
  return Kind::other;
}

std::string dims_str(const std::vector<int64_t>& d) { return fmt::format("[{}]", fmt::join(d, ",")); }

int64_t numel(const std::vector<int64_t>& d) {
  int64_t n = 1;
  for (auto x : d) n *= x;
  return n;
}

/// The main-graph values of the ref program by name: graph inputs, node
/// outputs and constants (the values a compiled value can stand for).
std::unordered_map<std::string, ir::ValueId> ref_names(const ir::Model& ref) {
  std::unordered_map<std::string, ir::ValueId> by_name;
  for (auto id : ref.main.inputs) by_name.emplace(ref.value(id).name, id);
  for (auto& n : ref.main.nodes)
    for (auto id : n.outputs)
      if (id != ir::kNoValue) by_name.emplace(ref.value(id).name, id);
  for (size_t i = 0; i < ref.values.size(); ++i)
    if (ref.values[i].constant) by_name.emplace(ref.values[i].name, static_cast<ir::ValueId>(i));
  return by_name;
}

/// Sets m.skip (and returns m).
Match skipped(Match m, std::string why) {
  m.skip = std::move(why);
  return m;
}

Match match_one(const ir::Model& compiled, size_t node, ir::ValueId id, const ir::Model& ref,
                const std::unordered_map<std::string, ir::ValueId>& names) {
  Match m;
  m.node = node;
  m.value = id;
  const ir::Value& v = compiled.value(id);
  std::string name = v.name;
  Readback rb = Readback::same;
  while (!names.count(name)) {
    const Suffix* hit = nullptr;
    for (auto& s : kSuffixes)
      if (ends_with(name, s.text)) hit = &s;
    if (!hit || (hit->readback != Readback::same && rb != Readback::same)) break;
    if (hit->readback != Readback::same) rb = hit->readback;
    name.resize(name.size() - std::char_traits<char>::length(hit->text));
  }
  auto it = names.find(name);
  if (it == names.end()) return skipped(m, "no value of this name in the ref program (made by the target's lowering)");
  const ir::Value& r = ref.value(it->second);
  m.ref_name = name;
  m.readback = rb;
  if (!v.shape || !ir::is_static(*v.shape) || !r.shape || !ir::is_static(*r.shape))
    return skipped(m, "no static shape");
  const Kind kv = kind_of(v.dtype), kr = kind_of(r.dtype);
  if (kv == Kind::float8 || kr == Kind::float8) return skipped(m, "8-bit float values are not compared");
  if (kv != kr || (kv == Kind::other && v.dtype != r.dtype))
    return skipped(m, fmt::format("dtype {} where the ref value '{}' is {}", dtype_name(v.dtype), name, dtype_name(r.dtype)));
  const std::vector<int64_t> vs = ir::to_sizes(*v.shape), rs = ir::to_sizes(*r.shape);
  switch (rb) {
    case Readback::same:
      if (vs == rs) return m;
      break;
    case Readback::nhwc:  // the cuda layout pass always permutes the dims (even when that leaves them equal)
      if (rs.size() == 4 && vs == std::vector<int64_t>{rs[0], rs[2], rs[3], rs[1]}) return m;
      return skipped(m, fmt::format("shape {} is not the ref value '{}' {} channels-last", dims_str(vs), name,
                                    dims_str(rs)));
    case Readback::blocked:  // cpu: a flat float32 buffer (cpu_kernels.h)
      if (v.dtype == DType::f32 && vs.size() == 1 && vs[0] >= numel(rs) && rs.size() >= 3 && rs.size() <= 5) return m;
      return skipped(m, fmt::format("shape {} cannot hold the ref value '{}' {} channel-blocked", dims_str(vs), name,
                                    dims_str(rs)));
  }
  return skipped(m, fmt::format("shape {} where the ref value '{}' is {}", dims_str(vs), name, dims_str(rs)));
}

/// The short kind of a skip reason, for Report::skip_counts.
std::string skip_kind(const std::string& why) {
  if (why.rfind("no value", 0) == 0) return "not in the ref program";
  if (why.rfind("shape", 0) == 0) return "other shape";
  if (why.rfind("dtype", 0) == 0 || why.rfind("8-bit", 0) == 0) return "other dtype";
  if (why.rfind("no static", 0) == 0) return "no static shape";
  return "cannot be read back";
}

std::string node_label(const ir::Node& n, size_t index) {
  return n.name.empty() ? fmt::format("{} #{}", n.op_type, index) : n.name;
}

std::string op_label(const ir::Node& n) { return n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type; }

}  // namespace

std::vector<Match> match_values(const ir::Model& compiled, const ir::Model& ref) {
  const auto names = ref_names(ref);
  std::vector<Match> out;
  for (size_t i = 0; i < compiled.main.nodes.size(); ++i)
    for (auto id : compiled.main.nodes[i].outputs)
      if (id != ir::kNoValue) out.push_back(match_one(compiled, i, id, ref, names));
  return out;
}

std::vector<double> as_doubles(const Tensor& t) {
  const int64_t n = t.numel();
  std::vector<double> out(static_cast<size_t>(n));
  switch (t.dtype()) {
    case DType::f32: {
      const float* p = t.data<float>();
      for (int64_t i = 0; i < n; ++i) out[i] = p[i];
      return out;
    }
    case DType::u4: {
      for (int64_t i = 0; i < n; ++i) out[i] = t.data<uint8_t>()[i];
      return out;
    }
    case DType::i4: {
      for (int64_t i = 0; i < n; ++i) out[i] = t.data<int8_t>()[i];
      return out;
    }
    default:
      for (int64_t i = 0; i < n; ++i) out[i] = ops::element_as_double(t, i);
      return out;
  }
}

std::optional<std::vector<double>> read_back(Readback readback, const ir::Node& producer, const Tensor& got,
                                             const std::vector<int64_t>& ref_shape, std::string& why) {
  switch (readback) {
    case Readback::same:
      if (got.numel() != numel(ref_shape)) {
        why = fmt::format("it holds {} elements, the ref value {}", got.numel(), numel(ref_shape));
        return std::nullopt;
      }
      return as_doubles(got);
    case Readback::nhwc: {
      const auto& s = got.shape();
      if (ref_shape.size() != 4 || s != std::vector<int64_t>{ref_shape[0], ref_shape[2], ref_shape[3], ref_shape[1]}) {
        why = fmt::format("shape {} is not the ref value's {} channels-last", dims_str(s), dims_str(ref_shape));
        return std::nullopt;
      }
      const std::vector<double> nhwc = as_doubles(got);
      const int64_t N = ref_shape[0], C = ref_shape[1], H = ref_shape[2], W = ref_shape[3];
      std::vector<double> out(nhwc.size());
      for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t h = 0; h < H; ++h)
            for (int64_t w = 0; w < W; ++w)
              out[static_cast<size_t>(((n * C + c) * H + h) * W + w)] =
                  nhwc[static_cast<size_t>(((n * H + h) * W + w) * C + c)];
      return out;
    }
    case Readback::blocked: {
      std::optional<Tensor> plain = targets::cpu::blocked_output_to_plain(producer, got);
      if (!plain) {
        why = fmt::format("its producer {} does not describe a channel-blocked layout kiln can read back", producer.label());
        return std::nullopt;
      }
      if (plain->shape() != ref_shape) {
        why = fmt::format("its blocked layout holds {}, the ref value is {}", dims_str(plain->shape()), dims_str(ref_shape));
        return std::nullopt;
      }
      return as_doubles(*plain);
    }
  }
  why = "unknown layout";
  return std::nullopt;
}

void compare_values(const std::vector<double>& got, const std::vector<double>& ref, bool exact, const Tolerance& tol,
                    ValueResult& r, DType held) {
  if (got.size() != ref.size())
    fail(ErrorCode::internal, "verify: {} elements compared with {}", got.size(), ref.size());
  const double inf = std::numeric_limits<double>::infinity();
  const bool sixteen = !exact && (held == DType::f16 || held == DType::bf16);
  auto saturated = [&](size_t i) { return sixteen && held_saturated(got[i], ref[i], held == DType::bf16); };
  r.exact = exact;
  r.elements = static_cast<int64_t>(ref.size());
  r.ref_max_abs = 0;
  r.saturated = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    if (std::isfinite(ref[i]) && !saturated(i)) r.ref_max_abs = std::max(r.ref_max_abs, std::fabs(ref[i]));
  const double bound = exact ? 0.0 : tol.atol + tol.rtol * r.ref_max_abs;
  r.max_abs = 0;
  r.bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (saturated(i)) {
      ++r.saturated;
      continue;
    }
    const double a = got[i], b = ref[i];
    double e;
    if (std::isnan(a) || std::isnan(b)) e = std::isnan(a) && std::isnan(b) ? 0.0 : inf;
    else if (std::isinf(a) || std::isinf(b)) e = a == b ? 0.0 : inf;
    else e = std::fabs(a - b);
    r.max_abs = std::max(r.max_abs, e);
    r.bad += e > bound;
  }
  r.max_rel = r.max_abs == 0 ? 0.0 : r.ref_max_abs > 0 ? r.max_abs / r.ref_max_abs : inf;
  r.pass = r.bad == 0;
}

namespace {

/// The value of `t` as one integer (a value-guard input).
int64_t scalar_value(const std::string& name, const Tensor& t) {
  if (t.numel() != 1)
    fail(ErrorCode::invalid_input, "input '{}' must hold one value (the model's control flow or shapes depend on it)",
         name);
  switch (t.dtype()) {
    case DType::i64: return *t.data<int64_t>();
    case DType::i32: return *t.data<int32_t>();
    case DType::boolean: return *static_cast<const uint8_t*>(t.raw()) != 0;
    default:
      fail(ErrorCode::invalid_input, "input '{}' is {}, the model expects one integer", name, dtype_name(t.dtype()));
  }
}

/// `opt` made ready for verify's two compiles: no cache, shapes fixed to
/// `inputs`' where the model leaves dims symbolic; `sizes` gets the value of
/// each value guard (compile_program's bucket sizes).
SessionOptions fix_shapes(const std::filesystem::path& onnx, const SessionOptions& opt,
                          const std::map<std::string, Tensor>& inputs, std::vector<int64_t>& sizes) {
  SessionOptions o = opt;
  o.use_cache = false;
  o.specialize_shapes = false;
  if (!o.dims.empty())
    fail(ErrorCode::invalid_option, "dims: kiln verify compiles one program for the inputs' shapes; give no buckets");
  BucketSkeleton sk = bucket_skeleton(onnx, o);
  std::vector<std::string> names;
  for (auto& info : sk.inputs) names.push_back(info.name);
  for (auto& [name, t] : inputs)
    if (std::find(names.begin(), names.end(), name) == names.end())
      fail(ErrorCode::invalid_input, "unknown input '{}' (the model's inputs are: {})", name, fmt::join(names, ", "));
  for (auto& info : sk.inputs) {
    auto it = inputs.find(info.name);
    if (it == inputs.end())
      fail(ErrorCode::invalid_input, "missing input '{}' ({})", info.name, dtype_name(info.dtype));
    if (info.dims.empty() && it->second.rank() == 0) continue;
    if (static_cast<size_t>(it->second.rank()) != info.dims.size())
      fail(ErrorCode::invalid_input, "input '{}' has shape {}, the model expects rank {}", info.name,
           dims_str(it->second.shape()), info.dims.size());
    bool symbolic = false;
    for (auto d : info.dims) symbolic |= d < 0;
    if (symbolic && !o.input_shapes.count(info.name)) o.input_shapes[info.name] = it->second.shape();
  }
  // The bucket set with every shape fixed holds only value guards now.
  sk = bucket_skeleton(onnx, o);
  sizes.clear();
  for (auto& d : sk.set.dims) {
    if (d.kind != artifact::DimKind::value)
      fail(ErrorCode::invalid_option, "kiln verify: dim '{}' is still symbolic after fixing the input shapes", d.symbol);
    sizes.push_back(scalar_value(d.symbol, inputs.at(d.symbol)));
  }
  return o;
}

/// Compiles `onnx` in memory for o.target; the compile's notes (the
/// precision check's) are appended to `notes`.
artifact::CompiledProgram compile_in_memory(const std::filesystem::path& onnx, const SessionOptions& o,
                                            const std::string& digest, const std::vector<int64_t>& sizes,
                                            std::vector<std::string>& notes) {
  o.validate();
  CompileResult r;
  auto cp = compile_program(onnx, o, request_compat(digest, o, build_facts(o)), "", &r, sizes);
  notes.insert(notes.end(), r.notes.begin(), r.notes.end());
  return cp;
}

}  // namespace

Report verify_model(const std::filesystem::path& onnx_path, const SessionOptions& opt,
                    const std::map<std::string, Tensor>& inputs, const Tolerance& tol, int threads) {
  Report rep;
  rep.target = opt.target.name();
  rep.precision = precision_text(opt.precision, opt.allow_tf32);
  rep.tol = tol;
  if (!(tol.rtol >= 0) || !(tol.atol >= 0) || !std::isfinite(tol.rtol) || !std::isfinite(tol.atol))
    fail(ErrorCode::invalid_option, "tolerance: rtol {} and atol {} must be finite and non-negative", tol.rtol, tol.atol);

  Stopwatch compile_sw;
  std::vector<int64_t> sizes;
  const SessionOptions topt = fix_shapes(onnx_path, opt, inputs, sizes);
  SessionOptions ropt = topt;
  ropt.target = Target::ref();
  ropt.precision = Precision::fp32;
  ropt.allow_tf32 = false;
  ropt.tuning.reset();
  ropt.arch.clear();
  const std::string digest = cache::digest_model(onnx_path).digest;
  const Program compiled(compile_in_memory(onnx_path, topt, digest, sizes, rep.notes), topt.target.device);
  const Program ref(compile_in_memory(onnx_path, ropt, digest, sizes, rep.notes));
  rep.compile_ms = compile_sw.ms();

  const ir::Model& cm = compiled.compiled().model;
  const ir::Model& rm = ref.compiled().model;
  rep.nodes = static_cast<int>(cm.main.nodes.size());
  rep.reference_nodes = reference_nodes(cm, rep.target);
  if (opt.target.kind == Target::Kind::ref) rep.notes.push_back("the ref target compared with itself");

  std::vector<Match> matches = match_values(cm, rm);
  std::unordered_map<ir::ValueId, size_t> match_of;
  std::unordered_set<std::string> wanted;
  for (size_t k = 0; k < matches.size(); ++k) {
    match_of.emplace(matches[k].value, k);
    if (matches[k].skip.empty()) wanted.insert(matches[k].ref_name);
  }
  const auto names = ref_names(rm);
  std::vector<int> ref_producer(rm.values.size(), -1);
  for (size_t i = 0; i < rm.main.nodes.size(); ++i)
    for (auto id : rm.main.nodes[i].outputs)
      if (id != ir::kNoValue) ref_producer[id] = static_cast<int>(i);

  Stopwatch run_sw;
  // The ref run keeps the values the compiled program's are compared with.
  std::unordered_map<ir::ValueId, Tensor> ref_values;
  for (auto id : rm.main.inputs) ref_values[id] = inputs.at(rm.value(id).name);
  const auto ref_out = ref.run_observed(inputs, threads, [&](size_t, ir::ValueId id, const Tensor& t) {
    if (wanted.count(rm.value(id).name)) ref_values[id] = t;
  });

  auto skip = [&](const Match& m, const std::string& why) {
    const ir::Node& n = cm.main.nodes[m.node];
    rep.skipped.push_back({node_label(n, m.node), op_label(n), cm.value(m.value).name, why});
    ++rep.skip_counts[skip_kind(why)];
  };
  const auto got_out = compiled.run_observed(inputs, threads, [&](size_t node, ir::ValueId id, const Tensor& t) {
    auto it = match_of.find(id);
    if (it == match_of.end()) return;
    const Match& m = matches[it->second];
    if (!m.skip.empty()) return skip(m, m.skip);
    const ir::ValueId rid = names.at(m.ref_name);
    const ir::Value& rv = rm.value(rid);
    const Tensor* r = nullptr;
    if (auto f = ref_values.find(rid); f != ref_values.end()) r = &f->second;
    else if (rv.constant) r = &*rv.constant;
    if (!r || !r->defined()) return skip(m, "cannot be read back: the ref run produced no value for it");
    const ir::Node& n = cm.main.nodes[node];
    std::string why;
    auto values = read_back(m.readback, n, t, r->shape(), why);
    if (!values) return skip(m, "cannot be read back: " + why);
    ValueResult v;
    v.node = node;
    v.node_name = node_label(n, node);
    v.op = op_label(n);
    v.value = cm.value(id).name;
    v.ref_value = m.ref_name;
    if (ref_producer[rid] >= 0) {
      const ir::Node& rn = rm.main.nodes[static_cast<size_t>(ref_producer[rid])];
      v.ref_node = node_label(rn, static_cast<size_t>(ref_producer[rid]));
      v.ref_op = op_label(rn);
    }
    v.dtype = std::string(dtype_name(t.dtype()));
    v.shape = r->shape();
    v.readback = m.readback;
    compare_values(*values, as_doubles(*r), !dtype_is_float(r->dtype()), tol, v, t.dtype());
    rep.values.push_back(std::move(v));
  });

  for (auto id : cm.main.outputs) {
    const std::string& name = cm.value(id).name;
    auto g = got_out.find(name);
    auto r = ref_out.find(name);
    if (g == got_out.end() || r == ref_out.end()) continue;
    ValueResult v;
    v.node_name = "output";
    v.value = v.ref_value = name;
    v.dtype = std::string(dtype_name(g->second.dtype()));
    v.shape = r->second.shape();
    if (g->second.numel() != r->second.numel() || kind_of(g->second.dtype()) != kind_of(r->second.dtype())) {
      // Both programs come from one model: outputs of another size are a bug.
      fail(ErrorCode::internal, "verify: output '{}' is {} on {} and {} on ref", name, g->second.describe(), rep.target,
           r->second.describe());
    }
    compare_values(as_doubles(g->second), as_doubles(r->second), !dtype_is_float(r->second.dtype()), tol, v);
    rep.outputs.push_back(std::move(v));
  }
  rep.run_ms = run_sw.ms();
  for (size_t i = 0; i < rep.values.size(); ++i)
    if (!rep.values[i].pass) {
      rep.first_failure = static_cast<int>(i);
      break;
    }
  log().info("verify: {} values compared, {} skipped, first failure {}", rep.values.size(), rep.skipped.size(),
             rep.first_failure);
  return rep;
}

}  // namespace kiln::verify
