#include "runtime/program_set.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "runtime/buckets.h"
#include "runtime/output_buffers.h"
#include "runtime/reference_nodes.h"
#include "support/error.h"
#include "support/hash.h"
#include "support/log.h"

namespace kiln {

namespace {

// TensorInfo with each bucketed axis shown as its symbol (-1).
std::vector<TensorInfo> symbolic(std::vector<TensorInfo> infos, const std::vector<artifact::IoSymbols>& io) {
  for (auto& t : infos)
    for (auto& s : io)
      if (s.name == t.name)
        for (size_t a = 0; a < s.axes.size() && a < t.dims.size(); ++a)
          if (!s.axes[a].empty()) {
            t.dims[a] = -1;
            t.symbols[a] = s.axes[a];
          }
  return infos;
}

int64_t volume(const std::vector<int64_t>& sizes) {
  int64_t v = 1;
  for (auto s : sizes) v *= s;
  return v;
}

}  // namespace

ProgramSet::ProgramSet(artifact::CompiledProgram cp, Grow grow, OutOfBucket policy, int device, int max_loaded)
    : compat_(cp.compat),
      set_(std::move(cp.buckets)),
      grow_(std::move(grow)),
      policy_(policy),
      device_(device),
      max_loaded_(max_loaded) {
  // Target-defined sections belong to the artifact; every program gets them.
  kernels_ = std::move(cp.kernels);
  tuning_ = std::move(cp.tuning);
  metadata_json_ = std::move(cp.metadata_json);
  std::vector<artifact::ProgramVariant> more = std::move(cp.more);
  add(cp.sizes, std::move(cp.model), std::move(cp.plan), /*share=*/false);
  for (auto& v : more) add(std::move(v.sizes), std::move(v.model), std::move(v.plan), /*share=*/false);
  inputs_ = symbolic(programs_.front().program->inputs(), set_.inputs);
  outputs_ = symbolic(programs_.front().program->outputs(), set_.outputs);
}

ProgramSet::ProgramSet(artifact::CompatInfo compat, artifact::BucketSet set, std::vector<TensorInfo> inputs,
                       std::vector<TensorInfo> outputs, Grow grow, OutOfBucket policy, int device, int max_loaded)
    : compat_(std::move(compat)),
      set_(std::move(set)),
      grow_(std::move(grow)),
      policy_(policy),
      device_(device),
      max_loaded_(max_loaded),
      inputs_(std::move(inputs)),
      outputs_(std::move(outputs)) {
  if (set_.empty()) fail(ErrorCode::internal, "a program set without programs must be bucketed");
}

void ProgramSet::index_constants(const ir::Model& model) const {
  for (auto& v : model.values)
    if (v.constant && v.constant->defined() && v.constant->nbytes() > 0)
      constants_.emplace(hash64(v.constant->raw(), v.constant->nbytes()), *v.constant);
}

void ProgramSet::add(std::vector<int64_t> sizes, ir::Model model, ir::MemoryPlan plan, bool share) const {
  // Equal constants (most weights are the same in every bucket) share one
  // buffer, so a bucket compiled in this process does not keep its own copy.
  if (share && !programs_.empty()) {
    if (!indexed_) {
      for (auto& e : programs_) index_constants(e.model());
      indexed_ = true;
    }
    for (auto& v : model.values) {
      if (!v.constant || !v.constant->defined() || v.constant->nbytes() == 0) continue;
      const Tensor& t = *v.constant;
      uint64_t h = hash64(t.raw(), t.nbytes());
      bool shared = false;
      for (auto [it, end] = constants_.equal_range(h); it != end && !shared; ++it) {
        const Tensor& c = it->second;
        if (c.raw() == t.raw() ||
            (c.dtype() == t.dtype() && c.shape() == t.shape() && std::memcmp(c.raw(), t.raw(), t.nbytes()) == 0)) {
          v.constant = c;
          shared = true;
        }
      }
      if (!shared) constants_.emplace(h, t);
    }
  } else if (indexed_) {
    index_constants(model);
  }
  auto cp = std::make_shared<artifact::CompiledProgram>();
  cp->compat = compat_;
  cp->kernels = kernels_;
  cp->tuning = tuning_;
  cp->metadata_json = metadata_json_;
  cp->model = std::move(model);
  cp->plan = std::move(plan);
  Entry e{std::move(sizes), nullptr, std::move(cp)};
  if (programs_.empty()) built(e);
  programs_.push_back(std::move(e));
}

const std::shared_ptr<const Program>& ProgramSet::built(const Entry& e) const {
  if (!e.program) {
    Stopwatch sw;
    // A copy (the IR; constants are shared, not copied): if binding throws,
    // the pending program stays intact and the next run reports the same error.
    e.program = std::make_shared<const Program>(artifact::CompiledProgram(*e.pending), device_);
    e.pending.reset();
    if (!set_.empty()) log().debug("bucket {}: kernels bound in {:.2f} ms", buckets::sizes_str(set_, e.sizes), sw.ms());
  }
  return e.program;
}

static int64_t next_power_of_two(int64_t v) {
  int64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

void ProgramSet::round_specialized(const std::map<std::string, Tensor>& inputs, const std::vector<int64_t>& request,
                                   std::vector<int64_t>& sizes, int skip) const {
  for (size_t k = 0; k < set_.dims.size(); ++k) {
    const artifact::BucketDim& d = set_.dims[k];
    if (static_cast<int>(k) == skip) continue;
    if (d.kind != artifact::DimKind::specialized || d.pad == artifact::PadMode::none || request[k] < 1) continue;
    // A sequence is padded only when every row of its keep-mask attends to
    // its first position (buckets::masks_attend); else it runs unpadded.
    if (d.pad == artifact::PadMode::sequence && !buckets::masks_attend(set_, inputs, k)) continue;
    std::set<int64_t> seen;
    for (auto& e : programs_) seen.insert(e.sizes[k]);
    // Exact while the dim has shown at most two sizes; from the third on, a
    // bucket: the smallest program held between the request and the next
    // power of two, else that power of two (compiled, then reused).
    if (seen.count(request[k]) || seen.size() < 2) continue;
    // A sequence the prover bounded (d.max: an index that grows with the
    // padded size stays within its table up to there) pads no further.
    if (d.max > 0 && request[k] > d.max) continue;
    const int64_t cap = d.max > 0 ? std::min(next_power_of_two(request[k]), d.max) : next_power_of_two(request[k]);
    auto it = seen.lower_bound(request[k]);
    sizes[k] = it != seen.end() && *it <= cap ? *it : cap;
  }
}

int ProgramSet::split_dim(const std::vector<int64_t>& request) const {
  if (!grow_) return -1;  // an explicit artifact runs what it holds, as it holds it
  for (size_t k = 0; k < set_.dims.size(); ++k) {
    const artifact::BucketDim& d = set_.dims[k];
    if (d.kind != artifact::DimKind::specialized || d.pad != artifact::PadMode::batch || request[k] < 1) continue;
    std::set<int64_t> seen;
    for (auto& e : programs_) seen.insert(e.sizes[k]);
    return seen.size() >= 2 ? static_cast<int>(k) : -1;
  }
  return -1;
}

double ProgramSet::estimate_ms(const std::vector<const Entry*>& same, size_t k, int64_t size) const {
  if (row_cost_ && !same.empty()) {
    std::vector<int64_t> sizes = same.front()->sizes;
    sizes[k] = size;
    return row_cost_(sizes);
  }
  for (auto* e : same)
    if (e->sizes[k] == size && e->runs > 0) return e->run_ms;
  // A line through the measured programs: a fixed cost per call plus a cost
  // per row (least squares; on a GPU the fixed part dominates small batches,
  // on a CPU the rows do). Without measurements: one row's worth per call.
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (auto* e : same)
    if (e->runs > 0) {
      double x = static_cast<double>(e->sizes[k]), y = e->run_ms;
      n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
    }
  const double x = static_cast<double>(size);
  if (n == 0) return x + 1;
  double per_row = sy / (sx + n), fixed = per_row;  // one point: a call costs one row more
  if (double den = n * sxx - sx * sx; n >= 2 && den > 0) {
    per_row = (n * sxy - sx * sy) / den;
    fixed = (sy - per_row * sx) / n;
    if (per_row <= 0 || fixed < 0) {  // noise: fall back to proportional
      per_row = sy / sx;
      fixed = 0;
    }
  }
  return fixed + per_row * x;
}

const ProgramSet::Entry& ProgramSet::grow_program(const std::vector<int64_t>& sizes, const std::string& req) const {
  Stopwatch sw;
  bool compiled = true;
  const ir::Model* reference = programs_.empty() ? nullptr : &programs_.front().model();
  artifact::ProgramVariant v = grow_(sizes, set_, reference, compiled);
  if (compiled) {
    ++compiles_;
    compile_ms_ += sw.ms();
  }
  log().info("bucket {} for a request of {}: {} in {:.1f} ms", buckets::sizes_str(set_, sizes), req,
             compiled ? "compiled" : "loaded", sw.ms());
  add(sizes, std::move(v.model), std::move(v.plan), /*share=*/true);
  return programs_.back();
}

std::vector<ProgramSet::Part> ProgramSet::split_rows(size_t k, const std::vector<int64_t>& request,
                                                     std::vector<int64_t> sizes) const {
  std::vector<const Entry*> same;
  for (auto& e : programs_) {
    bool match = true;
    for (size_t j = 0; j < sizes.size() && match; ++j) match = j == k || e.sizes[j] == sizes[j];
    if (match) same.push_back(&e);
  }
  std::vector<std::pair<int64_t, double>> held;
  for (auto* e : same) held.emplace_back(e->sizes[k], estimate_ms(same, k, e->sizes[k]));
  const int64_t n = request[k], pow2 = next_power_of_two(n);
  double cost = 0;
  std::vector<buckets::RowPart> plan = buckets::plan_rows(n, held, &cost);
  bool have_pow2 = false;
  for (auto* e : same) have_pow2 |= e->sizes[k] == pow2;
  // Compile the power-of-two bucket only when the programs held cannot run
  // the rows within kCompileMargin of what it would take: a CPU runs 37 rows
  // as 32 + 4 + 1 about as fast as 37 (its time grows with the rows), a GPU
  // pads them to 64 (its time per call hardly does).
  constexpr double kCompileMargin = 1.25;
  if (!have_pow2 && (plan.empty() || cost > kCompileMargin * estimate_ms(same, k, pow2))) {
    sizes[k] = pow2;
    grow_program(sizes, buckets::sizes_str(set_, request));
    plan = {{n, pow2}};
  }
  std::vector<Part> parts;
  for (auto& rp : plan) {
    sizes[k] = rp.program;
    for (auto& e : programs_)
      if (e.sizes == sizes) {
        e.last_use = uses_;
        parts.push_back({built(e), e.sizes, rp.rows});
        break;
      }
  }
  if (parts.size() > 1 && split_runs_++ == 0)
    log().info("dim '{}' of {} rows runs as {} parts on the programs held (rows are independent; cheaper than "
               "compiling {} rows)",
               set_.dims[k].symbol, n, parts.size(), pow2);
  return parts;
}

void ProgramSet::record_run(const std::vector<int64_t>& sizes, double ms) const {
  for (auto& e : programs_)
    if (e.sizes == sizes) {
      // The first runs pay for the arena's first touch: the second replaces
      // the first, later ones are smoothed.
      e.run_ms = e.runs < 2 ? ms : 0.8 * e.run_ms + 0.2 * ms;
      ++e.runs;
      return;
    }
}

void ProgramSet::unload_least_recent() const {
  if (max_loaded_ <= 0) return;
  size_t loaded = 0;
  for (auto& e : programs_) loaded += e.program != nullptr;
  while (loaded > static_cast<size_t>(max_loaded_)) {
    Entry* oldest = nullptr;
    for (auto& e : programs_)
      if (e.program && e.program != last_ && (!oldest || e.last_use < oldest->last_use)) oldest = &e;
    if (!oldest) return;
    // Back to its compiled form (IR + shared constants): bound kernels and
    // arenas are released; a later request builds it again without compiling.
    oldest->pending = std::make_shared<artifact::CompiledProgram>(oldest->program->compiled());
    oldest->program.reset();
    --loaded;
    log().info("unloaded the least recently used program ({}) to stay within max_loaded_programs {}",
               buckets::sizes_str(set_, oldest->sizes), max_loaded_);
  }
}

std::vector<ProgramSet::Part> ProgramSet::pick(const std::map<std::string, Tensor>& inputs,
                                               const std::vector<int64_t>& request, int& split) const {
  buckets::Choice c = buckets::choose(set_, request);
  std::lock_guard<std::mutex> lock(mu_);
  ++uses_;
  split = -1;
  // The steady state: a program for exactly the choice is held. Only a miss
  // pays for rounding specialized dims against the sizes held.
  bool exact_held = false;
  for (auto& e : programs_) exact_held |= e.sizes == c.sizes;
  if (!exact_held) {
    split = split_dim(request);
    round_specialized(inputs, request, c.sizes, split);
    if (split >= 0) {
      auto parts = split_rows(static_cast<size_t>(split), request, c.sizes);
      unload_least_recent();
      return parts;
    }
  }
  for (auto& e : programs_)
    if (e.sizes == c.sizes) {
      e.last_use = uses_;
      Part p{built(e), e.sizes, 0};
      unload_least_recent();
      return {p};
    }
  std::string req = buckets::sizes_str(set_, request);
  if (!c.inside && policy_ == OutOfBucket::error)
    fail(ErrorCode::invalid_input, "the input shape ({}) is outside every bucket: {} (out_of_bucket is error)", req,
         c.why);
  if (grow_) {
    const Entry& e = grow_program(c.sizes, req);
    e.last_use = uses_;
    Part p{built(e), e.sizes, 0};
    unload_least_recent();
    return {p};
  }
  // No compiler (an explicit artifact): the smallest program that can take
  // the request padded, else an error naming what the artifact holds.
  const Entry* best = nullptr;
  for (auto& e : programs_)
    if (buckets::serves(set_, e.sizes, request) && (!best || volume(e.sizes) < volume(best->sizes))) best = &e;
  if (best) return {Part{built(*best), best->sizes, 0}};
  std::string held;
  for (auto& e : programs_) held += (held.empty() ? "" : "; ") + buckets::sizes_str(set_, e.sizes);
  fail(ErrorCode::invalid_input, "no program of this artifact can run the input shape ({}){}; it holds: {}", req,
       c.inside ? "" : ": " + c.why, held);
}

void ProgramSet::run_device(const std::map<std::string, DeviceTensor>& inputs,
                            const std::map<std::string, DeviceTensor>& outputs) const {
  // Device tensors carry no shapes: only a set with one program of
  // specialized dims (no buckets to choose or pad, no value guards) can run them.
  bool single = false;
  if (!set_.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    single = programs_.size() == 1;
    for (auto& d : set_.dims) single &= d.kind == artifact::DimKind::specialized;
    if (single) {
      built(programs_.front())->run_device(inputs, outputs);
      return;
    }
  }
  if (!set_.empty())
    fail(ErrorCode::invalid_option,
         "run_device: this session holds {} programs for its buckets / specialized shapes / value guards and picks one "
         "per request from the input shapes, which device tensors do not carry; use run(), or fix the shapes "
         "(input_shapes) so that one program serves",
         programs_.size());
  programs_.front().program->run_device(inputs, outputs);
}

std::map<std::string, Tensor> ProgramSet::run(const std::map<std::string, Tensor>& inputs, int threads,
                                              RunProfile* profile) const {
  if (set_.empty()) return programs_.front().program->run(inputs, threads, profile);
  return run_bucketed(inputs, threads, profile, nullptr);
}

void ProgramSet::run_into(const std::map<std::string, Tensor>& inputs, const std::map<std::string, Tensor>& outputs,
                          int threads) const {
  if (set_.empty()) return programs_.front().program->run_into(inputs, outputs, threads);
  // Names and dtypes first: a padded or split request must not run for nothing.
  check_output_buffers(outputs, outputs_, output_shapes(inputs));
  auto values = run_bucketed(inputs, threads, nullptr, &outputs);
  if (!values.empty()) deliver_outputs(values, outputs);
}

std::map<std::string, std::vector<int64_t>> ProgramSet::output_shapes(const std::map<std::string, Tensor>& inputs) const {
  if (set_.empty()) return programs_.front().program->output_shapes(inputs);
  const std::vector<int64_t> request = buckets::request_sizes(set_, inputs);
  for (auto r : request)
    if (r < 0) return {};  // an input missing: run() names it
  const buckets::Choice c = buckets::choose(set_, request);
  std::lock_guard<std::mutex> lock(mu_);
  // Only a program held for exactly the choice is certain to be the one
  // run() takes (pick()'s steady state); it is static in the bucketed dims.
  for (auto& e : programs_) {
    if (e.sizes != c.sizes) continue;
    const ir::Model& m = e.model();
    std::vector<TensorInfo> outs, ins;
    for (auto id : m.main.outputs) outs.push_back(tensor_info(m.value(id)));
    for (auto id : m.main.inputs) ins.push_back(tensor_info(m.value(id)));
    // Sets each bucketed axis (per `ios`) of the shapes in `shapes` from `sizes`.
    auto set_axes = [&](const std::vector<artifact::IoSymbols>& ios, std::map<std::string, std::vector<int64_t>>& shapes,
                        const std::vector<int64_t>& sizes) {
      for (auto& io : ios)
        if (auto it = shapes.find(io.name); it != shapes.end())
          for (size_t a = 0; a < io.axes.size() && a < it->second.size(); ++a)
            for (size_t k = 0; k < set_.dims.size(); ++k)
              if (!io.axes[a].empty() && set_.dims[k].symbol == io.axes[a]) it->second[a] = sizes[k];
    };
    // The program's input shapes are the request's padded to its sizes; its
    // outputs come back sliced to the request (slice_outputs).
    auto shapes = shapes_of(inputs);
    set_axes(set_.inputs, shapes, c.sizes);
    auto known = known_output_shapes(outs, ins, shapes);
    set_axes(set_.outputs, known, request);
    return known;
  }
  return {};
}

std::map<std::string, Tensor> ProgramSet::run_bucketed(const std::map<std::string, Tensor>& inputs, int threads,
                                                       RunProfile* profile,
                                                       const std::map<std::string, Tensor>* into) const {
  std::vector<int64_t> request = buckets::request_sizes(set_, inputs);
  int split = -1;
  std::vector<Part> parts = pick(inputs, request, split);
  {
    // Scratch memory is kept for the programs in use only: a stream over
    // many buckets would otherwise hold one arena per bucket (BERT at 32x512:
    // hundreds of MB each). The parts of a split batch keep theirs.
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& p : in_use_)
      if (std::none_of(parts.begin(), parts.end(), [&](const Part& q) { return q.program == p; }))
        p->release_arenas();
    in_use_.clear();
    for (auto& q : parts) in_use_.push_back(q.program);
    last_ = parts.back().program;
  }
  // One program run of `in` (request sizes `want`) on part `q`, timed.
  auto run_part = [&](const Part& q, const std::map<std::string, Tensor>& in, const std::vector<int64_t>& want) {
    Stopwatch sw;
    auto out = q.sizes == want ? q.program->run(in, threads, profile)
                               : q.program->run(buckets::pad_inputs(set_, in, q.sizes), threads, profile);
    double ms = sw.ms();
    {
      std::lock_guard<std::mutex> lock(mu_);
      record_run(q.sizes, ms);
    }
    if (q.sizes != want) buckets::slice_outputs(set_, out, want);
    return out;
  };
  if (split < 0 && into && parts.front().sizes == request) {
    const Part& q = parts.front();
    Stopwatch sw;
    q.program->run_into(inputs, *into, threads);
    std::lock_guard<std::mutex> lock(mu_);
    record_run(q.sizes, sw.ms());
    return {};
  }
  if (split < 0) return run_part(parts.front(), inputs, request);
  const auto k = static_cast<size_t>(split);
  std::vector<std::map<std::string, Tensor>> outs;
  int64_t offset = 0;
  for (auto& q : parts) {
    std::vector<int64_t> want = request;
    want[k] = q.rows;
    outs.push_back(run_part(q, buckets::slice_rows(set_, k, inputs, offset, q.rows), want));
    offset += q.rows;
  }
  return outs.size() == 1 ? std::move(outs.front()) : buckets::concat_rows(set_, k, outs);
}

std::vector<ReferenceNode> ProgramSet::reference_nodes() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (last_) return kiln::reference_nodes(last_->compiled().model, compat_.target);
  if (programs_.empty()) return {};
  return kiln::reference_nodes(programs_.front().model(), compat_.target);
}

BucketStats ProgramSet::stats() const {
  BucketStats s;
  for (auto& d : set_.dims) {
    s.dims.push_back(d.symbol);
    if (d.kind == artifact::DimKind::value)
      s.modes.push_back("value guard: one program per value");
    else if (d.kind == artifact::DimKind::declared)
      s.modes.push_back(fmt::format("declared buckets (pad {})", artifact::pad_mode_name(d.pad)));
    else if (d.pad == artifact::PadMode::batch)
      s.modes.push_back("specialized: one program per size; from the third size, a batch runs on the programs "
                        "held (split into row parts or padded) or on a new power-of-two bucket, whichever is "
                        "estimated faster (batch rows proven independent)");
    else if (d.pad == artifact::PadMode::sequence)
      s.modes.push_back(fmt::format(
          "specialized: one program per size; from the third size, power-of-two buckets{} (sequence "
          "padding proven safe: the keep-mask extended with zeros masks out every padded position; a "
          "request whose mask does not attend to the first position of every row runs unpadded)",
          d.max > 0 ? fmt::format(" up to {} (indices that grow with the padded size stay within their tables "
                                  "there; a longer request runs unpadded)", d.max)
                    : std::string()));
    else
      s.modes.push_back("specialized: one program per size (padding not proven safe)");
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& e : programs_) s.programs.push_back(e.sizes);
  s.compiled_by_run = compiles_;
  s.split_runs = split_runs_;
  s.compile_ms = compile_ms_;
  return s;
}

}  // namespace kiln
