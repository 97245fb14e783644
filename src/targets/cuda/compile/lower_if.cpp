// ONNX If -> kiln.cuda.If: a conditional node of the program's CUDA graph
// (run/conditional.h), its branches lowered like the main graph (lowering.h).
#include <fmt/format.h>

#include <cstdlib>
#include <set>
#include <utility>

#include "support/error.h"
#include "targets/cuda/compile/lowering.h"
#include "targets/cuda/run/conditional.h"

namespace kiln::targets::cuda {

bool conditional_nodes_enabled() {
  const char* e = std::getenv("KILN_CUDA_CONDITIONAL");
  return !(e && std::string(e) == "0");
}

namespace {

/// "[2, 3]" of a value, for messages.
std::string shape_of(const ir::Model& m, ir::ValueId v) { return ir::shape_str(m.value(v).shape); }

}  // namespace

void check_body(const ir::Model& m, const ir::Node& n, const ir::Graph& g, const char* which) {
  for (auto& b : g.nodes) {
    for (auto& [k, a] : b.attrs)
      if (std::holds_alternative<std::shared_ptr<ir::Graph>>(a))
        refuse(n, fmt::format("its {} holds {} (nested control flow runs on the host)", which, b.label()));
    for (auto v : b.outputs)
      if (v != ir::kNoValue && (!m.value(v).shape || !ir::is_static(*m.value(v).shape)))
        refuse(n, fmt::format("in its {}, {} output '{}' has shape {}; a conditional body needs static shapes", which,
                              b.label(), m.value(v).name, shape_of(m, v)));
  }
}

namespace {

/// Restores the model's main graph when a branch's lowering ends (or throws).
struct MainSwap {
  ir::Model& m;
  ir::Graph saved;
  MainSwap(ir::Model& model, ir::Graph body) : m(model), saved(std::move(model.main)) { m.main = std::move(body); }
  ~MainSwap() { m.main = std::move(saved); }
  MainSwap(const MainSwap&) = delete;
  MainSwap& operator=(const MainSwap&) = delete;
};

}  // namespace

LowerOptions body_options(const LowerOptions& opt) {
  LowerOptions b = opt;
  b.dtype = DType::f32;
  b.tf32 = false;
  b.nhwc = false;
  b.precision_check = nullptr;
  return b;
}

ir::Graph lower_body(Lowering& L, const ir::Node& n, const ir::Graph& g, const char* which, const LowerOptions& opt,
                     LowerStats& st) {
  ir::Model& m = L.model;
  ir::Graph body;
  std::map<int, std::string> host;
  {
    MainSwap swap(m, g);
    // The main graph's own rewrites before lowering (lower_for_cuda), those
    // its kernels need: a Conv's bias as an Add (lower_conv takes none), a
    // MatMul's partly broadcast batch dims as an Expand.
    split_conv_bias(m);
    expand_matmul_batches(m);
    lower_graph_nodes(L, body_options(opt), st, host);
    body = m.main;
  }
  if (!host.empty()) {
    auto& [i, why] = *host.begin();
    refuse(n, fmt::format("its {} has {} node(s) the cuda target cannot lower (node {} of the {}: {}); a "
                          "conditional body cannot hold host work",
                          which, host.size(), i, which, why));
  }
  return body;
}

namespace {

/// Lowers branch `g` of If node `n` (lower_body) and makes it write the If's
/// outputs: a branch output produced by a node of the branch is renamed to
/// the If's output value (both branches then write the same buffers); one
/// read from outside (an outer value, a constant) or listed twice gets a
/// kiln.cuda.Copy.
std::shared_ptr<ir::Graph> lower_branch(Lowering& L, const ir::Node& n, const ir::Graph& g, const char* which,
                                        const LowerOptions& opt, LowerStats& st) {
  ir::Graph body = lower_body(L, n, g, which, opt, st);
  std::map<ir::ValueId, ir::ValueId> rename;  // branch output -> the If's output
  std::set<ir::ValueId> produced;
  for (auto& b : body.nodes)
    for (auto v : b.outputs)
      if (v != ir::kNoValue) produced.insert(v);
  std::vector<ir::Node> copies;
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    ir::ValueId from = g.outputs[k], to = n.outputs[k];
    if (to == ir::kNoValue) continue;
    if (produced.count(from) && !rename.count(from)) {
      rename[from] = to;
      continue;
    }
    ir::Node c;
    c.op_type = "Copy";
    c.domain = std::string(kCudaDomain);
    c.name = n.name + "/" + which + "/out" + std::to_string(k);
    c.inputs = {rename.count(from) ? rename[from] : from};
    c.outputs = {to};
    copies.push_back(std::move(c));
    ++st.copies;
  }
  auto map = [&](ir::ValueId v) { return rename.count(v) ? rename[v] : v; };
  for (auto& b : body.nodes) {
    for (auto& v : b.inputs) v = map(v);
    for (auto& v : b.outputs) v = map(v);
  }
  for (auto& c : copies) body.nodes.push_back(std::move(c));
  body.name = g.name;
  body.inputs.clear();
  body.outputs = n.outputs;
  return std::make_shared<ir::Graph>(std::move(body));
}

}  // namespace

ir::Node lower_if(Lowering& L, const ir::Node& n, const LowerOptions& opt, LowerStats& st) {
  const ir::Model& m = L.model;
  if (!conditional_nodes_enabled()) refuse(n, "conditional nodes are off (KILN_CUDA_CONDITIONAL=0)");
  if (n.inputs.empty() || n.inputs[0] == ir::kNoValue) refuse(n, "it has no condition");
  const ir::Value& cond = m.value(n.inputs[0]);
  if (cond.dtype != DType::boolean || !cond.shape || !ir::is_static(*cond.shape) || ir::to_sizes(*cond.shape).size() > 1 ||
      (!ir::to_sizes(*cond.shape).empty() && ir::to_sizes(*cond.shape)[0] != 1))
    refuse(n, fmt::format("its condition '{}' is {} {}, not one bool", cond.name, dtype_name(cond.dtype),
                          shape_of(m, n.inputs[0])));
  const ir::Graph& then_g = n.graph("then_branch");
  const ir::Graph& else_g = n.graph("else_branch");
  for (auto* g : {&then_g, &else_g})
    if (g->outputs.size() != n.outputs.size())
      refuse(n, fmt::format("a branch has {} outputs, the node {}", g->outputs.size(), n.outputs.size()));
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    ir::ValueId o = n.outputs[k], a = then_g.outputs[k], b = else_g.outputs[k];
    if (o == ir::kNoValue) continue;
    const ir::Value& ov = m.value(o);
    for (auto [v, which] : {std::pair{a, "then_branch"}, std::pair{b, "else_branch"}}) {
      const ir::Value& bv = m.value(v);
      // Both branches write one buffer per output: their shapes must be the
      // output's (value specialization takes the other case on the host).
      if (!bv.shape || !ir::is_static(*bv.shape) || !ov.shape || !ir::is_static(*ov.shape) ||
          ir::to_sizes(*bv.shape) != ir::to_sizes(*ov.shape) || bv.dtype != ov.dtype)
        refuse(n, fmt::format("the branches' outputs differ in shape or dtype: output {} '{}' is {} {}, its {} gives "
                              "'{}' {} {} (both branches write one buffer)",
                              k, ov.name, dtype_name(ov.dtype), shape_of(m, o), which, bv.name, dtype_name(bv.dtype),
                              shape_of(m, v)));
    }
  }
  check_body(m, n, then_g, "then_branch");
  check_body(m, n, else_g, "else_branch");
  auto then_body = lower_branch(L, n, then_g, "then_branch", opt, st);
  auto else_body = lower_branch(L, n, else_g, "else_branch", opt, st);
  const std::string fn = L.kernel_name("set_if");
  L.source += set_conditional_kernel(fn, "bool");
  ir::Node c;
  c.op_type = "If";
  c.domain = std::string(kCudaDomain);
  c.name = n.name;
  c.inputs = {n.inputs[0]};
  c.outputs = n.outputs;
  c.attrs["then_branch"] = then_body;
  c.attrs["else_branch"] = else_body;
  c.attrs["cond_fn"] = fn;
  return c;
}

}  // namespace kiln::targets::cuda
