// The executor of the precision check (precision_check_run.h).
#include "runtime/precision_check_run.h"

#include <omp.h>

#include <cstdlib>
#include <memory>
#include <unordered_map>

#include "ops/gemm_kernel.h"
#include "ops/registry.h"
#include "support/error.h"
#include "support/half.h"
#include "targets/kernels.h"

namespace kiln {

namespace {

/// A 64-byte aligned buffer that is not zero-filled (Tensor's constructor
/// zero-fills, which for the check's fresh buffers of every value costs as
/// much as some kernels): kernels write every element of their outputs.
Tensor uninitialized(DType dt, const std::vector<int64_t>& shape) {
  size_t bytes = dtype_size(dt);
  for (auto d : shape) bytes *= static_cast<size_t>(d);
  if (bytes == 0 || dt == DType::undefined) return Tensor(dt, shape);
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) fail(ErrorCode::internal, "out of memory allocating {} bytes for the precision check", bytes);
  std::shared_ptr<void> owner(p, [](void* q) { std::free(q); });
  return Tensor::view(dt, shape, p, std::move(owner));
}

/// True when [a, a + an) and [b, b + bn) overlap.
bool overlaps(const void* a, size_t an, const void* b, size_t bn) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return an && bn && x < y + bn && y < x + an;
}

/// Restores OpenMP's thread count when the run ends (normally or by a throw).
struct ThreadScope {
  int saved = omp_get_max_threads();
  explicit ThreadScope(int threads) {
    if (threads > 0) omp_set_num_threads(threads);
  }
  ~ThreadScope() { omp_set_num_threads(saved); }
};

}  // namespace

void round_in_place(Tensor& t, DType to) {
  if (t.dtype() != DType::f32)
    fail(ErrorCode::internal, "round_in_place: {} is not float32", t.describe());
  float* p = t.data<float>();
  const int64_t n = t.numel();
  if (to == DType::f16) {
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) p[i] = round_to_half(p[i]);
  } else if (to == DType::bf16) {
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) p[i] = round_to_bf16(p[i]);
  } else {
    fail(ErrorCode::internal, "round_in_place: {} is not a 16-bit float type", dtype_name(to));
  }
}

namespace {

/// Values each main-graph node is the last to read, for freeing: its inputs,
/// and for an If / Loop / Scan the values its bodies read (outer ones: the
/// body runs inside the node) and the values the bodies make (left in the
/// environment by the body runner: dropped once the node has run). Graph
/// outputs are never freed.
std::vector<std::vector<ir::ValueId>> free_lists(const ir::Model& m) {
  const auto& nodes = m.main.nodes;
  std::vector<int> last(m.values.size(), -1);
  for (size_t i = 0; i < nodes.size(); ++i) {
    auto use = [&](ir::ValueId v) {
      if (v != ir::kNoValue) last[v] = static_cast<int>(i);
    };
    for (auto v : nodes[i].inputs) use(v);
    for (auto& [k, a] : nodes[i].attrs)
      if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a))
        ir::for_each_graph(**sg, [&](ir::Graph& g) {
          for (auto v : g.inputs) use(v);
          for (auto v : g.outputs) use(v);
          for (auto& n : g.nodes) {
            for (auto v : n.inputs) use(v);
            for (auto v : n.outputs) use(v);
          }
        });
  }
  for (auto v : m.main.outputs) last[v] = -1;
  std::vector<std::vector<ir::ValueId>> out(nodes.size());
  for (size_t v = 0; v < last.size(); ++v)
    if (last[v] >= 0 && !m.values[v].constant) out[static_cast<size_t>(last[v])].push_back(static_cast<ir::ValueId>(v));
  return out;
}

/// Whether anything reads value v after it is made: a main-graph or body
/// node, a graph's outputs.
std::vector<bool> read_values(const ir::Model& m) {
  std::vector<bool> read(m.values.size(), false);
  ir::for_each_graph(const_cast<ir::Graph&>(m.main), [&](ir::Graph& g) {
    for (auto v : g.outputs)
      if (v != ir::kNoValue) read[v] = true;
    for (auto& n : g.nodes)
      for (auto v : n.inputs)
        if (v != ir::kNoValue) read[v] = true;
  });
  return read;
}

}  // namespace

void run_for_check(const ir::Model& m, const std::map<std::string, Tensor>& inputs, const std::vector<DType>& round,
                   int threads, const CheckObserver& observe) {
  const auto& nodes = m.main.nodes;
  // Main-graph nodes and, for If / Loop / Scan, the nodes of their bodies
  // (run by the control-flow kernel through the body runner below).
  std::unordered_map<const ir::Node*, targets::BoundKernel> kernels;
  ir::for_each_graph(const_cast<ir::Graph&>(m.main), [&](ir::Graph& g) {
    for (const ir::Node& n : g.nodes) kernels.emplace(&n, targets::bind_kernel("ref", n, m));
  });
  const auto free_after = free_lists(m);
  const std::vector<bool> read = read_values(m);
  std::vector<Tensor> env(m.values.size());
  for (size_t v = 0; v < m.values.size(); ++v)
    if (m.values[v].constant) env[v] = *m.values[v].constant;
  for (auto id : m.main.inputs) {
    auto it = inputs.find(m.value(id).name);
    if (it == inputs.end()) fail(ErrorCode::internal, "run_for_check: no input '{}'", m.value(id).name);
    env[id] = it->second;
  }
  ThreadScope scope(threads);
  // Conv, MatMul and Gemm multiply through oneDNN's JIT-compiled sgemm (the
  // built-in one is portable SSE2, several times slower on AVX2 / AVX-512).
  const ops::SgemmOverride gemm(targets::library_sgemm);
  const ops::KernelContext::Allocator alloc = [](size_t, DType dt, const std::vector<int64_t>& shape) {
    return uninitialized(dt, shape);
  };
  // Runs one node; returns its context (outputs in ctx.outputs()) and the
  // inputs it read. Bodies run through `body`, which writes their values
  // into the one environment (ir::Model's value table is shared by all
  // graphs), unrounded: they run in float32 on cuda.
  ops::SubgraphRunner body;
  auto run_node = [&](const ir::Node& n, std::vector<const Tensor*>& ins) {
    ins.clear();
    for (auto id : n.inputs) {
      if (id != ir::kNoValue && !env[id].defined())
        fail(ErrorCode::internal, "{}: input '{}' has no value at run time", n.label(), m.value(id).name);
      ins.push_back(id == ir::kNoValue ? nullptr : &env[id]);
    }
    ops::KernelContext ctx(n, ins, alloc, body);
    try {
      kernels.at(&n)(ctx);
    } catch (const Error& e) {
      const std::string label = n.label();
      if (std::string_view(e.what()).find(label) != std::string_view::npos) throw;
      throw Error(e.code(), label + ": " + e.what());
    }
    for (size_t k = 0; k < n.outputs.size(); ++k)
      if (n.outputs[k] != ir::kNoValue && !ctx.outputs()[k].defined())
        fail(ErrorCode::internal, "{}: the kernel produced no output {}", n.label(), k);
    return std::move(ctx.outputs());
  };
  body = [&](const ir::Graph& g, const std::vector<Tensor>& in) {
    if (in.size() != g.inputs.size())
      fail(ErrorCode::invalid_model, "subgraph '{}' takes {} inputs, {} were given", g.name, g.inputs.size(),
           in.size());
    for (size_t i = 0; i < in.size(); ++i) env[g.inputs[i]] = in[i];
    std::vector<const Tensor*> ins;
    for (const ir::Node& n : g.nodes) {
      auto outs = run_node(n, ins);
      for (size_t k = 0; k < n.outputs.size(); ++k)
        if (n.outputs[k] != ir::kNoValue) env[n.outputs[k]] = std::move(outs[k]);
    }
    std::vector<Tensor> out;
    for (auto id : g.outputs) out.push_back(env[id]);
    return out;
  };
  std::vector<const Tensor*> ins;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ir::Node& n = nodes[i];
    auto outs = run_node(n, ins);
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const ir::ValueId v = n.outputs[k];
      if (v == ir::kNoValue) continue;
      Tensor t = std::move(outs[k]);
      const DType to = static_cast<size_t>(v) < round.size() ? round[v] : DType::undefined;
      if (to != DType::undefined && t.dtype() == DType::f32) {
        // A kernel may return a view of an input (Reshape, Identity): round
        // a copy, never a value something else reads.
        for (const Tensor* in : ins)
          if (in && overlaps(in->raw(), in->nbytes(), t.raw(), t.nbytes())) {
            t = t.clone();
            break;
          }
        round_in_place(t, to);
      }
      if (t.dtype() == DType::f32 && observe) observe(v, t);
      if (read[v]) env[v] = std::move(t);  // else nothing reads it
    }
    for (auto id : free_after[i]) env[id] = Tensor();
  }
}

}  // namespace kiln
