#include "runtime/compile.h"

#include <fmt/ranges.h>

#include <cstring>
#include <unordered_map>
#include <nlohmann/json.hpp>

#include "cache/cache.h"
#include "cache/model_digest.h"
#include "onnx/importer.h"
#include "passes/passes.h"
#include "runtime/bucket_plan.h"
#include "runtime/precision_check.h"
#include "runtime/precision_share.h"
#include "runtime/program.h"
#include "runtime/reference_nodes.h"
#include "support/error.h"
#include "support/hash.h"
#include "support/log.h"
#include "support/version.h"
#include "targets/host.h"
#include "targets/pipeline.h"

namespace kiln {

std::string options_text(const SessionOptions& opt) {
  auto tuning = opt.effective_tuning();
  std::string s = fmt::format("target={};precision={};tuning={}", opt.target.name(), precision_name(opt.precision),
                              tuning ? tuning_name(*tuning) : "none");
  if (!opt.arch.empty()) s += ";arch=" + opt.arch;
  // Appended only when on, so that the keys of fp32 programs stay what they were.
  if (opt.allow_tf32) s += ";tf32";
  for (auto& [name, dims] : opt.input_shapes) s += fmt::format(";shape:{}={}", name, fmt::join(dims, "x"));
  // The bucket set (not the programs compiled so far) is what the key covers.
  for (auto& [name, spec] : opt.dims) s += fmt::format(";dim:{}={}", name, spec.str());
  // Appended only when off, so that keys of the default stay put.
  if (!opt.specialize_shapes) s += ";no-shape-specialization";
  if (!opt.specialize_values) s += ";no-value-specialization";
  // The precision check decides which nodes of a 16-bit cuda program stay
  // float32: its settings are part of the key where they apply (appended
  // only when not the default, so that other keys stay put).
  if (opt.target.kind == Target::Kind::cuda && opt.precision != Precision::fp32) {
    if (opt.precision_check == PrecisionCheck::off) s += ";precision-check=off";
    if (!opt.precision_check_inputs.empty()) {
      Hasher128 h;
      for (auto& [name, t] : opt.precision_check_inputs) {
        h.field(name);
        h.field(fmt::format("{}{}", dtype_name(t.dtype()), fmt::join(t.shape(), "x")));
        h.update(t.raw(), t.nbytes());
      }
      s += ";precision-check-inputs=" + h.hex_digest();
    }
  }
  if (opt.target.kind == Target::Kind::cuda && opt.fallback == Fallback::error) s += ";fallback=error";
  // Measurement switches the lowering reads (set ones only, so that keys
  // without them stay put): a program built with KILN_CUDA_MERGE_QKV=0 is
  // another program.
  for (auto& [name, value] : targets::compile_env_switches()) s += fmt::format(";env:{}={}", name, value);
  return s;
}

artifact::CompatInfo build_facts(const SessionOptions& opt) {
  const Target& target = opt.target;
  artifact::CompatInfo host = target.kind == Target::Kind::cuda && !opt.arch.empty()
                                  ? targets::compile_facts_for_arch(target, opt.arch)
                                  : targets::host_facts(target);
  artifact::CompatInfo f;
  f.kiln_version = kiln::version();
  f.format_version = artifact::kFormatVersion;
  f.target = target.name();
  f.device_arch = host.device_arch;
  f.device_name = host.device_name;
  f.cpu_isa = targets::required_isa(target);
  f.library_versions = host.library_versions;
  return f;
}

artifact::CompatInfo request_compat(const std::string& model_digest, const SessionOptions& opt,
                                    const artifact::CompatInfo& facts) {
  artifact::CompatInfo c = facts;
  c.target = opt.target.name();
  c.precision = precision_text(opt.precision, opt.allow_tf32);
  auto tuning = opt.effective_tuning();
  c.tuning = tuning ? tuning_name(*tuning) : "none";
  Hasher128 h;
  h.field(options_text(opt));
  c.options_digest = h.hex_digest();
  c.model_digest = model_digest;
  c.input_signature.clear();
  c.cache_key.clear();
  return c;
}

artifact::CompatInfo build_facts(const Target& target) {
  SessionOptions opt;
  opt.target = target;
  return build_facts(opt);
}

std::vector<std::pair<std::string, std::string>> key_fields(const std::string& model_digest, const SessionOptions& opt,
                                                            const artifact::CompatInfo& facts) {
  return cache::key_fields(request_compat(model_digest, opt, facts));
}

std::vector<std::pair<std::string, std::string>> key_fields(const std::string& model_digest, const SessionOptions& opt) {
  return key_fields(model_digest, opt, build_facts(opt));
}

namespace {
std::string signature(const ir::Model& m) {
  std::string s;
  for (auto id : m.main.inputs) {
    auto& v = m.value(id);
    s += fmt::format("{}{}:{}{}", s.empty() ? "" : ";", v.name, dtype_name(v.dtype), ir::shape_str(v.shape));
  }
  return s;
}
}  // namespace

namespace {
// The imported model with opt.input_shapes bound, its bucket set and its
// (still symbolic) input signature.
struct Imported {
  ir::Model model;
  artifact::BucketSet set;
  std::string signature;
};

/// `known_set` / `imported` (compile_program's `preimported`): see compile_program.
Imported import_bound(const std::filesystem::path& onnx_path, const SessionOptions& opt,
                      const artifact::BucketSet* known_set = nullptr, ir::Model* imported = nullptr) {
  Imported im;
  if (imported) {
    im.model = std::move(*imported);
  } else {
    im.model = onnx_import::import_file(onnx_path);
    passes::bind_input_shapes(im.model, opt.input_shapes);
  }
  im.set = known_set ? *known_set : plan_buckets(im.model, opt.dims, opt.specialize_shapes, opt.specialize_values);
  im.signature = signature(im.model);
  return im;
}
}  // namespace

BucketSkeleton bucket_skeleton(const std::filesystem::path& onnx_path, const SessionOptions& opt) {
  Imported im = import_bound(onnx_path, opt);
  BucketSkeleton sk;
  for (auto id : im.model.main.inputs) sk.inputs.push_back(tensor_info(im.model.value(id)));
  for (auto id : im.model.main.outputs) sk.outputs.push_back(tensor_info(im.model.value(id)));
  sk.set = std::move(im.set);
  sk.signature = std::move(im.signature);
  sk.model = std::move(im.model);
  return sk;
}

artifact::CompiledProgram compile_program(const std::filesystem::path& onnx_path, const SessionOptions& opt,
                                          const artifact::CompatInfo& request, const std::string& cache_key,
                                          CompileResult* report, const std::vector<int64_t>& sizes,
                                          const ir::Model* layout_reference, const artifact::BucketSet* known_set,
                                          ir::Model* preimported) {
  Stopwatch sw;
  artifact::CompiledProgram cp;
  Imported im = import_bound(onnx_path, opt, known_set, preimported);
  cp.model = std::move(im.model);
  int imported = static_cast<int>(cp.model.main.nodes.size());
  if (sizes.size() != im.set.dims.size())
    fail(ErrorCode::internal, "compile_program: {} bucket sizes for {} bucketed dims", sizes.size(), im.set.dims.size());
  std::map<std::string, int64_t> bound, values;
  bool declared = false, batch_varies = false;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const artifact::BucketDim& d = im.set.dims[k];
    (d.kind == artifact::DimKind::value ? values : bound)[d.symbol] = sizes[k];
    declared |= d.kind == artifact::DimKind::declared;
    batch_varies |= d.kind == artifact::DimKind::specialized && d.pad == artifact::PadMode::batch;
  }
  passes::bind_symbols(cp.model, bound);
  passes::bind_input_values(cp.model, values);
  // Declared buckets share weight layouts (no Winograd on cpu); specialized
  // programs get the best layout for their sizes and share what fits; a
  // specialized batch (whose programs differ in the batch only, and whose
  // requests may be split over them) keeps layouts that run at any batch.
  // 16-bit cuda programs: the precision check, run by the lowering on the
  // graph it is about to convert (precision_check.h).
  std::optional<PrecisionCheckResult> check;
  targets::PrecisionHook hook;
  if (opt.target.kind == Target::Kind::cuda && opt.precision != Precision::fp32) {
    check.emplace();
    check->precision = precision_name(opt.precision);
    if (opt.precision_check == PrecisionCheck::on)
      hook = [&](const ir::Model& m, DType to) {
        check = check_precision(m, to, opt.precision_check_inputs, opt.threads);
        return check->keep_set();
      };
  }
  targets::PipelineStats stats;
  try {
    stats = targets::run_pipeline(cp, opt, declared, layout_reference, batch_varies, hook);
  } catch (const Error& e) {
    // With a value guard bound, a model that cannot be compiled is a request
    // (that value with these shapes) the model cannot run: name the value.
    if (values.empty() || e.code() != ErrorCode::invalid_model) throw;
    std::string given;
    for (auto& [name, v] : values) given += fmt::format("{}input '{}' = {}", given.empty() ? "" : ", ", name, v);
    std::string shapes;
    for (auto id : cp.model.main.inputs)
      shapes += fmt::format("{}{}{}", shapes.empty() ? "" : ", ", cp.model.value(id).name,
                            ir::shape_str(cp.model.value(id).shape));
    fail(ErrorCode::invalid_input, "{} selects a computation that cannot run for the inputs' shapes ({}): {}", given,
         shapes, e.what());
  }

  cp.compat = request;
  // A bucketed artifact serves many shapes: its signature keeps the symbols.
  cp.compat.input_signature = im.set.empty() ? signature(cp.model) : im.signature;
  cp.compat.cache_key = cache_key;
  cp.buckets = std::move(im.set);
  cp.sizes = sizes;

  nlohmann::json meta = {
      {"model_file", onnx_path.filename().string()},  // a name, never an absolute path
      {"producer", cp.model.producer},
      {"opset", cp.model.opset},
      {"options", options_text(opt)},
      {"buckets", describe(cp.buckets)},
      {"nodes_imported", imported},
      {"nodes_compiled", cp.model.main.nodes.size()},
      {"nodes_folded", stats.folded},
      {"nodes_dead", stats.dead},
      {"arena_bytes", cp.plan.arena_bytes},
      {"naive_bytes", cp.plan.naive_bytes},
  };
  if (check) meta["precision_check"] = check->to_json();
  if (stats.precision) meta["precision_share"] = precision_share_json(*stats.precision, precision_name(opt.precision));
  cp.metadata_json = meta.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (report) {
    report->compile_ms = sw.ms();
    report->nodes_imported = imported;
    report->nodes_compiled = static_cast<int>(cp.model.main.nodes.size());
    report->nodes_folded = stats.folded;
    report->arena_bytes = cp.plan.arena_bytes;
    report->naive_bytes = cp.plan.naive_bytes;
    report->model_digest = request.model_digest;
    report->cache_key = cache_key;
    if (check) report->notes.push_back(check->note());
    if (stats.precision) report->notes.push_back(precision_share_note(*stats.precision, precision_name(opt.precision)));
  }
  // Host fallback is worth a note wherever the program was compiled: the
  // caller's notes when it takes a report, else the log (a program a run
  // compiled for a new shape).
  if (std::string note = host_fallback_note(cp.model); !note.empty()) {
    if (report)
      report->notes.push_back(note);
    else
      log().warn("{}", note);
  }
  log().info("compiled '{}' for {} in {:.1f} ms ({} nodes -> {})", onnx_path.string(), opt.target.name(), sw.ms(),
             imported, cp.model.main.nodes.size());
  return cp;
}

namespace {

/// XXH3-64 of a constant's bytes -> the first bucket's tensor with them.
using ConstantIndex = std::unordered_multimap<uint64_t, Tensor>;

void index_constants(const ir::Model& m, ConstantIndex& index) {
  for (auto& v : m.values)
    if (v.constant && v.constant->defined() && v.constant->nbytes() > 0)
      index.emplace(hash64(v.constant->raw(), v.constant->nbytes()), *v.constant);
}

/// Points every constant of `m` equal (dtype, shape, bytes) to one in
/// `index` at that tensor, so a bucket's own copy is released as soon as it
/// is compiled: compiling N buckets then holds the weights about once, not N
/// times, until the writer stores them once anyway.
void share_constants(ir::Model& m, const ConstantIndex& index) {
  for (auto& v : m.values) {
    if (!v.constant || !v.constant->defined() || v.constant->nbytes() == 0) continue;
    const Tensor& t = *v.constant;
    auto [it, end] = index.equal_range(hash64(t.raw(), t.nbytes()));
    for (; it != end; ++it) {
      const Tensor& c = it->second;
      if (c.dtype() == t.dtype() && c.shape() == t.shape() && std::memcmp(c.raw(), t.raw(), t.nbytes()) == 0) {
        v.constant = c;
        break;
      }
    }
  }
}

}  // namespace

/// Every program an ahead-of-time compile makes: each declared bucket size
/// times each value given (opt.values) for each value guard.
std::vector<std::vector<int64_t>> aot_programs(const artifact::BucketSet& set, const SessionOptions& opt) {
  std::vector<std::vector<int64_t>> out{{}};
  for (auto& d : set.dims) {
    std::vector<int64_t> options = d.sizes;
    if (d.kind == artifact::DimKind::value) {
      auto it = opt.values.find(d.symbol);
      if (it == opt.values.end() || it->second.empty())
        fail(ErrorCode::invalid_option,
             "values: input '{}' holds one integer that the model's control flow or shapes depend on; give the "
             "value(s) to compile for with --value {}=N (repeat for several programs), or turn value specialization "
             "off (--no-value-specialization)",
             d.symbol, d.symbol);
      options = it->second;
    } else if (d.kind == artifact::DimKind::specialized) {
      fail(ErrorCode::internal, "an ahead-of-time compile has specialized dim '{}'", d.symbol);
    }
    std::vector<std::vector<int64_t>> next;
    for (auto& prefix : out)
      for (auto v : options) {
        next.push_back(prefix);
        next.back().push_back(v);
      }
    out = std::move(next);
    if (out.size() > artifact::detail::kMaxPrograms)
      fail(ErrorCode::invalid_option, "dims: more than {} programs; use fewer buckets or values",
           artifact::detail::kMaxPrograms);
  }
  return out;
}

CompileResult compile(const std::filesystem::path& onnx_path, const std::filesystem::path& out, const SessionOptions& opt) {
  opt.validate();
  // Ahead of time there are no requests to specialize to: symbolic dims are
  // fixed by input_shapes / dims or stay symbolic; value guards take opt.values.
  SessionOptions aot = opt;
  aot.specialize_shapes = false;
  for (auto& [name, vals] : opt.values)
    if (vals.empty()) fail(ErrorCode::invalid_option, "values: no value given for input '{}'", name);
  CompileResult r;
  auto request = request_compat(cache::digest_model(onnx_path).digest, aot, build_facts(aot));
  std::string key = cache::derive_key(cache::key_fields(request));
  artifact::CompiledProgram cp;
  BucketSkeleton sk = bucket_skeleton(onnx_path, aot);
  for (auto& [name, vals] : opt.values) {
    bool guard = false;
    for (auto& d : sk.set.dims) guard |= d.kind == artifact::DimKind::value && d.symbol == name;
    if (!guard)
      fail(ErrorCode::invalid_option,
           "values: input '{}' is not a value-guard input of this model (one integer or bool that an If, a Loop or a "
           "shape depends on){}",
           name, aot.specialize_values ? "" : "; value specialization is off");
  }
  if (sk.set.empty()) {
    cp = compile_program(onnx_path, aot, request, key, &r, {}, nullptr, &sk.set, &*sk.model);
  } else {
    // Ahead of time: every bucket / value, one program each, constants shared.
    auto all = aot_programs(sk.set, opt);
    ConstantIndex shared;
    double ms = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      CompileResult one;
      // Later buckets pack their weights like the first (stored once).
      auto p = compile_program(onnx_path, aot, request, key, i ? &one : &r, all[i], i ? &cp.model : nullptr, &sk.set);
      ms += i ? one.compile_ms : r.compile_ms;
      if (i == 0) {
        cp = std::move(p);
        index_constants(cp.model, shared);
      } else {
        share_constants(p.model, shared);  // frees this bucket's copies now, not at the write
        cp.more.push_back({std::move(p.sizes), std::move(p.model), std::move(p.plan)});
      }
    }
    r.compile_ms = ms;
    r.programs = static_cast<int>(all.size());
  }
  Stopwatch sw;
  artifact::write_file(out, cp, Links::follow);  // the user's -o
  r.write_ms = sw.ms();
  std::error_code ec;
  r.artifact_bytes = std::filesystem::file_size(out, ec);
  return r;
}

}  // namespace kiln
