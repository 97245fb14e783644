#include <fmt/ranges.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string_view>
#include <thread>

#include "runtime/output_buffers.h"
#include "runtime/program.h"
#include "support/error.h"

namespace kiln {

struct Program::Arena {
  explicit Arena(size_t n) : bytes(n) {
    if (n) data.reset(static_cast<uint8_t*>(std::aligned_alloc(64, (n + 63) / 64 * 64)));
  }
  struct Free { void operator()(uint8_t* p) const { std::free(p); } };
  size_t bytes;
  std::unique_ptr<uint8_t, Free> data;
};

void Program::bind_all(std::vector<const ir::Node*> nodes) {
  if (nodes.empty())
    for_each_graph(cp_.model.main, [&](ir::Graph& g) {
      for (auto& n : g.nodes) nodes.push_back(&n);
    });
  // Binding creates the oneDNN primitives (JIT code generation): most of a
  // cpu load. The nodes are independent, so up to build_threads_ threads bind
  // them. std::thread, not an OpenMP region: inside one, oneDNN would see a
  // single thread while planning each primitive's parallel work. Each worker
  // takes the session's thread count so that primitives plan for it.
  std::vector<targets::BoundKernel> bound(nodes.size());
  std::vector<std::exception_ptr> errors(nodes.size());
  std::atomic<size_t> next{0};
  // A device program's host segments run on the cpu target's kernels
  // (reference kernels where it has none: ONNX-domain nodes are never
  // lowered for cpu inside a cuda program).
  const std::string target = device_ || host_side_ ? std::string("cpu") : cp_.compat.target;
  auto work = [&] {
    omp_set_num_threads(build_threads_);
    for (size_t i; (i = next.fetch_add(1)) < nodes.size();) {
      try {
        bound[i] = targets::bind_kernel(target, *nodes[i], cp_.model);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  const size_t helpers = std::min<size_t>(static_cast<size_t>(build_threads_), std::max<size_t>(nodes.size(), 1)) - 1;
  std::vector<std::thread> pool;
  for (size_t t = 0; t < helpers; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  // The first failing node in graph order, as a serial bind would report.
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  for (size_t i = 0; i < nodes.size(); ++i) kernels_[nodes[i]] = std::move(bound[i]);
}

TensorInfo tensor_info(const ir::Value& v) {
  TensorInfo t;
  t.name = v.name;
  t.dtype = v.dtype;
  if (v.shape)
    for (auto& d : *v.shape) {
      t.dims.push_back(d.value);
      t.symbols.push_back(d.is_static() ? "" : d.symbol);
    }
  return t;
}

/// The host segments of a device program (targets::HostSegments): the
/// program's own host executor (Run) over main-graph node ranges.
class Program::HostSide final : public targets::HostSegments {
 public:
  explicit HostSide(const Program& p) : p_(p) {}
  std::vector<Tensor> environment() const override { return p_.base_env_; }
  void run(size_t first, size_t count, std::vector<Tensor>& env,
           const std::map<ir::ValueId, Tensor>& into) const override;

 private:
  const Program& p_;
};

Program::Program(artifact::CompiledProgram cp, int device) : cp_(std::move(cp)) {
  build_threads_ = std::max(1, omp_get_max_threads());
  for (auto id : cp_.model.main.inputs) inputs_.push_back(tensor_info(cp_.model.value(id)));
  for (auto id : cp_.model.main.outputs) outputs_.push_back(tensor_info(cp_.model.value(id)));
  base_env_.resize(cp_.model.values.size());
  for (size_t i = 0; i < cp_.model.values.size(); ++i)
    if (cp_.model.values[i].constant) base_env_[i] = *cp_.model.values[i].constant;
  if (!cp_.model.segments.empty()) {
    if (cp_.compat.target != "cuda")
      fail(ErrorCode::invalid_model, "the {} program has device segments (only cuda programs have them)",
           cp_.compat.target);
    // Host fallback: bind the host segments' nodes (and their subgraphs).
    host_side_ = std::make_unique<HostSide>(*this);
    std::vector<const ir::Node*> host_nodes;
    for (auto& s : cp_.model.segments)
      for (size_t i = s.first; i < s.first + s.count && s.device == "host"; ++i) {
        ir::Node& n = cp_.model.main.nodes.at(i);
        host_nodes.push_back(&n);
        for (auto& [k, a] : n.attrs)
          if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a))
            for_each_graph(**sg, [&](ir::Graph& g) {
              for (auto& inner : g.nodes) host_nodes.push_back(&inner);
            });
      }
    bind_all(std::move(host_nodes));
  }
  // Device targets run the whole program themselves (device memory, modules).
  device_ = targets::make_device_program(cp_, device, host_side_.get());
  if (device_) return;
  bind_all();
  // Heap values die after their last reader in the main graph.
  const auto& nodes = cp_.model.main.nodes;
  std::vector<int> last(cp_.model.values.size(), -1);
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i) {
    auto use = [&](ir::ValueId id) { if (id != ir::kNoValue) last[id] = i; };
    for (auto id : nodes[i].inputs) use(id);
    for (auto id : nodes[i].outputs) use(id);
    for (auto& [k, a] : nodes[i].attrs)
      if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a))
        for_each_graph(**sg, [&](ir::Graph& g) {
          for (auto& n : g.nodes) for (auto id : n.inputs) use(id);
          for (auto id : g.outputs) use(id);
        });
  }
  std::set<ir::ValueId> keep(cp_.model.main.outputs.begin(), cp_.model.main.outputs.end());
  free_after_.resize(nodes.size());
  for (size_t id = 0; id < last.size(); ++id)
    if (last[id] >= 0 && !keep.count(static_cast<ir::ValueId>(id)) && !cp_.model.values[id].constant)
      free_after_[last[id]].push_back(static_cast<ir::ValueId>(id));
}

Program::~Program() = default;


void Program::validate_inputs(const std::map<std::string, Tensor>& inputs) const {
  std::vector<std::string> names;
  for (auto id : cp_.model.main.inputs) names.push_back(cp_.model.value(id).name);
  for (auto& [name, t] : inputs)
    if (std::find(names.begin(), names.end(), name) == names.end())
      fail(ErrorCode::invalid_input, "unknown input '{}' (the model's inputs are: {})", name, fmt::join(names, ", "));
  std::map<std::string, int64_t> symbols;
  for (auto id : cp_.model.main.inputs) {
    const ir::Value& v = cp_.model.value(id);
    auto it = inputs.find(v.name);
    if (it == inputs.end())
      fail(ErrorCode::invalid_input, "missing input '{}' ({}{})", v.name, dtype_name(v.dtype), ir::shape_str(v.shape));
    const Tensor& t = it->second;
    if (t.dtype() != v.dtype)
      fail(ErrorCode::invalid_input, "input '{}' has dtype {}, the model expects {}", v.name, dtype_name(t.dtype()),
           dtype_name(v.dtype));
    if (!v.shape) continue;
    auto wrong = [&](const std::string& why) {
      fail(ErrorCode::invalid_input, "input '{}' has shape [{}], the model expects {}: {}", v.name,
           fmt::join(t.shape(), ","), ir::shape_str(v.shape), why);
    };
    if (static_cast<size_t>(t.rank()) != v.shape->size())
      wrong(fmt::format("rank {} instead of {}", t.rank(), v.shape->size()));
    for (size_t i = 0; i < v.shape->size(); ++i) {
      const ir::Dim& d = (*v.shape)[i];
      if (d.is_static() && d.value != t.dim(i)) wrong(fmt::format("dim {} is {} instead of {}", i, t.dim(i), d.value));
      if (!d.is_static() && !d.symbol.empty()) {
        auto [s, fresh] = symbols.emplace(d.symbol, t.dim(i));
        if (!fresh && s->second != t.dim(i))
          wrong(fmt::format("dim {} ('{}') is {} but '{}' is {} in another input", i, d.symbol, t.dim(i), d.symbol, s->second));
      }
    }
  }
}

std::unique_ptr<Program::Arena> Program::take_arena() const {
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    if (!pool_.empty()) {
      auto a = std::move(pool_.back());
      pool_.pop_back();
      return a;
    }
  }
  return std::make_unique<Arena>(cp_.plan.arena_bytes);
}

void Program::release_arenas() const {
  std::vector<std::unique_ptr<Arena>> drop;
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    drop.swap(pool_);
  }
}

void Program::give_back(std::unique_ptr<Arena> a) const {
  std::lock_guard<std::mutex> lock(pool_mu_);
  pool_.push_back(std::move(a));
}

/// The state of one run(): the value environment and the arena.
class Program::Run {
 public:
  Run(const Program& p, uint8_t* arena) : p_(p), arena_(arena), env_(p.base_env_) {}
  /// A run over an environment kept by the caller (a device program's host
  /// segments): no arena, every value in its own buffer.
  Run(const Program& p, std::vector<Tensor>&& env) : p_(p), arena_(nullptr), env_(std::move(env)) {}

  /// Main-graph nodes [first, first + count) (a host segment; no arena:
  /// outputs in their own buffers or in write_into's).
  void nodes(size_t first, size_t count) {
    const auto& nodes = p_.cp_.model.main.nodes;
    for (size_t i = first; i < first + count; ++i) node(nodes.at(i), /*planned=*/!into_.empty());
  }
  std::vector<Tensor> take_env() { return std::move(env_); }

  void bind(ir::ValueId id, Tensor t) { env_[id] = std::move(t); }
  /// Caller-owned buffers of graph outputs (run_into), by value id: the node
  /// computing one allocates it there when dtype and shape match.
  void write_into(std::map<ir::ValueId, Tensor> buffers) { into_ = std::move(buffers); }
  Tensor& at(ir::ValueId id) { return env_[id]; }

  void main_graph(RunProfile* profile, const targets::ValueObserver* observe = nullptr) {
    using clock = std::chrono::steady_clock;
    const auto& nodes = p_.cp_.model.main.nodes;
    for (size_t i = 0; i < nodes.size(); ++i) {
      const auto t0 = profile ? clock::now() : clock::time_point();
      node(nodes[i], /*planned=*/true);
      if (observe)
        for (auto id : nodes[i].outputs)
          if (id != ir::kNoValue) (*observe)(i, id, env_[id]);
      for (auto id : p_.free_after_[i]) env_[id] = Tensor();
      if (profile) {
        const ir::Node& n = nodes[i];
        profile->nodes.push_back(
            {n.name.empty() ? fmt::format("{} #{}", n.op_type, i) : n.name,
             n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type,
             std::chrono::duration<double, std::milli>(clock::now() - t0).count()});
      }
    }
  }

  std::vector<Tensor> subgraph(const ir::Graph& g, const std::vector<Tensor>& inputs) {
    if (inputs.size() != g.inputs.size())
      fail(ErrorCode::invalid_model, "subgraph '{}' takes {} inputs, {} were given", g.name, g.inputs.size(), inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) env_[g.inputs[i]] = inputs[i];
    for (auto& n : g.nodes) node(n, /*planned=*/false);
    std::vector<Tensor> out;
    for (auto id : g.outputs) out.push_back(env_[id]);
    return out;
  }

 private:
  void node(const ir::Node& n, bool planned) {
    std::vector<const Tensor*> ins;
    ins.reserve(n.inputs.size());
    for (auto id : n.inputs) {
      if (id == ir::kNoValue) {
        ins.push_back(nullptr);
        continue;
      }
      if (!env_[id].defined())
        fail(ErrorCode::internal, "{}: input '{}' has no value at run time", n.label(), p_.cp_.model.value(id).name);
      ins.push_back(&env_[id]);
    }
    ops::KernelContext::Allocator alloc;
    if (planned && (arena_ || !into_.empty())) {
      alloc = [this, &n](size_t k, DType dt, const std::vector<int64_t>& shape) {
        ir::ValueId id = n.outputs[k];
        if (auto it = into_.find(id); it != into_.end() && it->second.dtype() == dt && it->second.shape() == shape)
          return it->second;
        if (!arena_) return Tensor(dt, shape);
        size_t bytes = dtype_size(dt);
        for (auto d : shape) bytes *= static_cast<size_t>(d);
        if (id != ir::kNoValue && p_.cp_.plan.offsets[id] >= 0 && bytes <= p_.cp_.plan.sizes[id])
          return Tensor::view(dt, shape, arena_ + p_.cp_.plan.offsets[id], nullptr);
        return Tensor(dt, shape);
      };
    }
    ops::KernelContext ctx(n, std::move(ins), alloc,
                           [this](const ir::Graph& g, const std::vector<Tensor>& in) { return subgraph(g, in); });
    try {
      p_.kernels_.at(&n)(ctx);
    } catch (const Error& e) {
      // Errors raised below the kernel (a tensor too large to allocate, ...)
      // do not know the node: name it, unless the message already does.
      const std::string label = n.label();
      if (std::string_view(e.what()).find(label) != std::string_view::npos) throw;
      throw Error(e.code(), label + ": " + e.what());
    }
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      if (n.outputs[k] == ir::kNoValue) continue;
      if (!ctx.outputs()[k].defined())
        fail(ErrorCode::internal, "{}: the kernel produced no output {}", n.label(), k);
      env_[n.outputs[k]] = std::move(ctx.outputs()[k]);
    }
  }

  const Program& p_;
  uint8_t* arena_;
  std::vector<Tensor> env_;
  std::map<ir::ValueId, Tensor> into_;
};

void Program::HostSide::run(size_t first, size_t count, std::vector<Tensor>& env,
                            const std::map<ir::ValueId, Tensor>& into) const {
  Run r(p_, std::move(env));
  if (!into.empty()) r.write_into(into);
  try {
    r.nodes(first, count);
  } catch (...) {
    env = r.take_env();
    throw;
  }
  env = r.take_env();
}

void Program::run_device(const std::map<std::string, DeviceTensor>& inputs,
                         const std::map<std::string, DeviceTensor>& outputs) const {
  if (!device_)
    fail(ErrorCode::invalid_option, "run_device: target {} runs on the host; pass host tensors to run()",
         cp_.compat.target);
  device_->run_device(inputs, outputs);
}

std::map<std::string, Tensor> Program::run_observed(const std::map<std::string, Tensor>& inputs, int threads,
                                                    const targets::ValueObserver& observe) const {
  validate_inputs(inputs);
  omp_set_num_threads(threads > 0 ? std::min(threads, build_threads_) : build_threads_);
  if (device_) return device_->run_observed(inputs, observe);
  // No arena: every value gets its own buffer, so nothing the observer sees
  // is overwritten by a later node.
  Run r(*this, nullptr);
  for (auto id : cp_.model.main.inputs) r.bind(id, inputs.at(cp_.model.value(id).name));
  r.main_graph(nullptr, &observe);
  std::map<std::string, Tensor> out;
  for (auto id : cp_.model.main.outputs) out[cp_.model.value(id).name] = r.at(id).clone();
  return out;
}

std::map<std::string, Tensor> Program::run(const std::map<std::string, Tensor>& inputs, int threads,
                                           RunProfile* profile) const {
  const auto start = std::chrono::steady_clock::now();
  if (profile) *profile = RunProfile{};
  validate_inputs(inputs);
  if (device_) {
    if (host_side_) omp_set_num_threads(threads > 0 ? std::min(threads, build_threads_) : build_threads_);
    auto out = device_->run(inputs, profile);
    if (profile)
      profile->total_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    return out;
  }
  omp_set_num_threads(threads > 0 ? std::min(threads, build_threads_) : build_threads_);
  auto arena = take_arena();
  std::map<std::string, Tensor> out;
  try {
    Run r(*this, arena->data.get());
    for (auto id : cp_.model.main.inputs) r.bind(id, inputs.at(cp_.model.value(id).name));
    r.main_graph(profile);
    for (auto id : cp_.model.main.outputs) {
      Tensor& t = r.at(id);
      // Outputs that are constants or inputs are copied: the caller may write to them.
      bool shared = cp_.model.value(id).constant.has_value() ||
                    std::find(cp_.model.main.inputs.begin(), cp_.model.main.inputs.end(), id) != cp_.model.main.inputs.end();
      out[cp_.model.value(id).name] = shared ? t.clone() : t;
    }
  } catch (...) {
    give_back(std::move(arena));
    throw;
  }
  give_back(std::move(arena));
  if (profile)
    profile->total_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return out;
}

std::map<std::string, std::vector<int64_t>> Program::output_shapes(const std::map<std::string, Tensor>& inputs) const {
  return known_output_shapes(outputs_, inputs_, shapes_of(inputs));
}

void Program::run_into(const std::map<std::string, Tensor>& inputs, const std::map<std::string, Tensor>& outputs,
                       int threads) const {
  validate_inputs(inputs);
  check_output_buffers(outputs, outputs_, output_shapes(inputs));
  omp_set_num_threads(threads > 0 ? std::min(threads, build_threads_) : build_threads_);
  if (device_) {
    device_->run_into(inputs, outputs);
    return;
  }
  auto arena = take_arena();
  try {
    Run r(*this, arena->data.get());
    std::map<ir::ValueId, Tensor> buffers;
    for (auto id : cp_.model.main.outputs) buffers.emplace(id, outputs.at(cp_.model.value(id).name));
    r.write_into(std::move(buffers));
    for (auto id : cp_.model.main.inputs) r.bind(id, inputs.at(cp_.model.value(id).name));
    r.main_graph(nullptr);
    // Outputs not computed in place (graph inputs or constants passed
    // through, a symbolic shape the caller got wrong) are checked and copied.
    std::map<std::string, Tensor> values;
    for (auto id : cp_.model.main.outputs) values.emplace(cp_.model.value(id).name, r.at(id));
    deliver_outputs(values, outputs);
  } catch (...) {
    give_back(std::move(arena));
    throw;
  }
  give_back(std::move(arena));
}

}  // namespace kiln
