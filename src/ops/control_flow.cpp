// Control flow: If, Loop, Scan (https://onnx.ai/onnx/operators/, newest opset
// semantics). Bodies are ir::Graph attributes run through
// KernelContext::run_subgraph; the runner binds the graph inputs and resolves
// outer-scope values.
//
// Shape inference returns an undefined dtype and unknown shape for every
// output: the graph-level inference pass fills them from the body graphs,
// because only it sees the value table those graphs refer to.
#include <cstring>

#include "ops/util.h"

namespace kiln::ops {
namespace {

std::vector<OutType> infer_from_body(const InferContext& c) { return std::vector<OutType>(c.num_outputs); }

/// True when a one-element tensor (of any numeric or bool dtype) is non-zero.
bool truth(const ir::Node& n, const Tensor& t, const char* what) {
  if (t.numel() != 1) fail(ErrorCode::invalid_input, "{}: {} must have one element, got {}", n.label(), what, t.describe());
  return element_as_double(t, 0) != 0.0;
}

/// Runs a body and checks it returned `expected` outputs.
std::vector<Tensor> run_body(const KernelContext& c, const ir::Graph& g, const std::vector<Tensor>& in,
                             size_t expected) {
  auto out = c.run_subgraph(g, in);
  if (out.size() != expected)
    fail(ErrorCode::invalid_model, "{}: body '{}' returned {} outputs, expected {}", c.node.label(), g.name, out.size(),
         expected);
  return out;
}

/// Slice i of x along axis, with that axis removed (a Scan input element).
Tensor take(const ir::Node& n, const Tensor& x, int64_t axis, int64_t i) {
  std::vector<int64_t> shape = x.shape();
  shape.erase(shape.begin() + axis);
  Tensor y(x.dtype(), shape);
  size_t es = dtype_size(x.dtype());
  if (es == 0) unsupported_dtype(n, x.dtype(), "scan input");
  int64_t outer = prod(x.shape(), 0, axis), dim = x.dim(axis);
  size_t block = static_cast<size_t>(prod(x.shape(), axis + 1)) * es;
  for (int64_t o = 0; o < outer && block; ++o)
    std::memcpy(static_cast<char*>(y.raw()) + o * block, static_cast<const char*>(x.raw()) + (o * dim + i) * block,
                block);
  return y;
}

/// Stacks equally shaped parts along a new axis (reversed order when `reverse`).
/// With no parts the element shape is unknown: the result is float32 [0].
Tensor stack(const ir::Node& n, const std::vector<Tensor>& parts, int64_t axis, bool reverse, size_t output) {
  if (parts.empty()) return Tensor(DType::f32, {0});
  const Tensor& p0 = parts[0];
  for (auto& p : parts)
    if (p.dtype() != p0.dtype() || p.shape() != p0.shape())
      fail(ErrorCode::invalid_input, "{}: scan output {} changes from {} to {} between iterations", n.label(), output,
           p0.describe(), p.describe());
  int64_t len = static_cast<int64_t>(parts.size());
  axis = normalize_axis(n, axis, p0.rank() + 1, "scan output axis");
  std::vector<int64_t> shape = p0.shape();
  shape.insert(shape.begin() + axis, len);
  Tensor y(p0.dtype(), shape);
  size_t es = dtype_size(p0.dtype());
  int64_t outer = prod(p0.shape(), 0, axis);
  size_t block = static_cast<size_t>(prod(p0.shape(), axis)) * es;
  for (int64_t t = 0; t < len && block; ++t) {
    const char* src = static_cast<const char*>(parts[reverse ? len - 1 - t : t].raw());
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(static_cast<char*>(y.raw()) + (o * len + t) * block, src + o * block, block);
  }
  return y;
}

Tensor scalar_i64(int64_t v) {
  Tensor t(DType::i64, {});
  t.data<int64_t>()[0] = v;
  return t;
}

Tensor scalar_bool(bool v) {
  Tensor t(DType::boolean, {});
  t.data<bool>()[0] = v;
  return t;
}

// ---- If -------------------------------------------------------------------------------------

/// Runs then_branch or else_branch (no inputs) by the one-element `cond`.
void kernel_if(KernelContext& c) {
  bool taken = truth(c.node, c.in(0), "cond");
  const ir::Graph& g = c.node.graph(taken ? "then_branch" : "else_branch");
  auto out = run_body(c, g, {}, c.num_outputs());
  for (size_t i = 0; i < out.size(); ++i) c.set_output(i, out[i]);
}

// ---- Loop -------------------------------------------------------------------------------------

/// Loop-21: inputs (M?, cond?, carried...), body (iter, cond, carried...) ->
/// (cond, carried..., scan...). The body's cond only matters when the cond
/// input is given (the spec's "for" form ignores it). Scan outputs are stacked
/// on a new axis 0.
void kernel_loop(KernelContext& c) {
  const ir::Graph& body = c.node.graph("body");
  // Trailing empty inputs may have been dropped, so M and cond may be missing entirely.
  size_t carried_n = c.num_inputs() > 2 ? c.num_inputs() - 2 : 0;
  if (body.outputs.size() < 1 + carried_n || c.num_outputs() != body.outputs.size() - 1)
    fail(ErrorCode::invalid_model, "{}: body has {} outputs for {} loop-carried values and {} node outputs",
         c.node.label(), body.outputs.size(), carried_n, c.num_outputs());
  size_t scan_n = body.outputs.size() - 1 - carried_n;
  std::optional<int64_t> trips;
  if (c.has(0)) {
    if (c.in(0).numel() != 1) fail(ErrorCode::invalid_input, "{}: M must have one element", c.node.label());
    trips = to_int64s(c.in(0))[0];
  }
  bool use_cond = c.has(1), cond = use_cond ? truth(c.node, c.in(1), "cond") : true;
  if (!trips && !use_cond)
    fail(ErrorCode::unsupported, "{}: a Loop without trip count and condition never ends", c.node.label());
  std::vector<Tensor> carried;
  for (size_t i = 0; i < carried_n; ++i) carried.push_back(c.in(2 + i));
  std::vector<std::vector<Tensor>> scans(scan_n);
  for (int64_t it = 0; (!trips || it < *trips) && cond; ++it) {
    std::vector<Tensor> in{scalar_i64(it), scalar_bool(cond)};
    in.insert(in.end(), carried.begin(), carried.end());
    auto out = run_body(c, body, in, body.outputs.size());
    if (use_cond) cond = truth(c.node, out[0], "body cond output");
    // Clone: the runner may hand back memory it reuses on the next iteration.
    for (size_t i = 0; i < carried_n; ++i) carried[i] = out[1 + i].clone();
    for (size_t k = 0; k < scan_n; ++k) scans[k].push_back(out[1 + carried_n + k].clone());
  }
  for (size_t i = 0; i < carried_n; ++i) c.set_output(i, carried[i]);
  for (size_t k = 0; k < scan_n; ++k) c.set_output(carried_n + k, stack(c.node, scans[k], 0, false, k));
}

// ---- Scan ---------------------------------------------------------------------------------------

/// Per-input/output attribute list, default `def` for each of n entries.
std::vector<int64_t> per_entry(const ir::Node& n, const char* attr, size_t count, int64_t def) {
  auto v = n.ints(attr, std::vector<int64_t>(count, def));
  if (v.size() != count)
    fail(ErrorCode::invalid_model, "{}: {} has {} entries, expected {}", n.label(), attr, v.size(), count);
  return v;
}

/// Scan-16: inputs (state..., scan inputs...), body (state..., elements...) ->
/// (state..., scan output elements...). Each scan input is cut along its axis
/// (from the end when its direction is 1), each scan output stacked along its axis.
void kernel_scan(KernelContext& c) {
  const ir::Graph& body = c.node.graph("body");
  int64_t m = c.node.i("num_scan_inputs");
  if (m < 1 || static_cast<size_t>(m) > c.num_inputs())
    fail(ErrorCode::invalid_model, "{}: num_scan_inputs = {} with {} inputs", c.node.label(), m, c.num_inputs());
  size_t scan_in = static_cast<size_t>(m), state_n = c.num_inputs() - scan_in;
  if (body.outputs.size() != c.num_outputs() || c.num_outputs() < state_n)
    fail(ErrorCode::invalid_model, "{}: body has {} outputs, node has {} ({} state values)", c.node.label(),
         body.outputs.size(), c.num_outputs(), state_n);
  size_t scan_out = c.num_outputs() - state_n;
  auto in_dirs = per_entry(c.node, "scan_input_directions", scan_in, 0);
  auto in_axes = per_entry(c.node, "scan_input_axes", scan_in, 0);
  auto out_dirs = per_entry(c.node, "scan_output_directions", scan_out, 0);
  auto out_axes = per_entry(c.node, "scan_output_axes", scan_out, 0);
  int64_t len = -1;
  for (size_t j = 0; j < scan_in; ++j) {
    const Tensor& x = c.in(state_n + j);
    in_axes[j] = normalize_axis(c.node, in_axes[j], x.rank(), "scan_input_axes entry");
    if (len >= 0 && x.dim(in_axes[j]) != len)
      fail(ErrorCode::invalid_input, "{}: scan input {} has {} iterations along axis {}, expected {}", c.node.label(),
           j, x.dim(in_axes[j]), in_axes[j], len);
    len = x.dim(in_axes[j]);
  }
  std::vector<Tensor> state;
  for (size_t i = 0; i < state_n; ++i) state.push_back(c.in(i));
  std::vector<std::vector<Tensor>> scans(scan_out);
  for (int64_t t = 0; t < len; ++t) {
    std::vector<Tensor> in = state;
    for (size_t j = 0; j < scan_in; ++j)
      in.push_back(take(c.node, c.in(state_n + j), in_axes[j], in_dirs[j] ? len - 1 - t : t));
    auto out = run_body(c, body, in, c.num_outputs());
    for (size_t i = 0; i < state_n; ++i) state[i] = out[i].clone();
    for (size_t k = 0; k < scan_out; ++k) scans[k].push_back(out[state_n + k].clone());
  }
  for (size_t i = 0; i < state_n; ++i) c.set_output(i, state[i]);
  for (size_t k = 0; k < scan_out; ++k)
    c.set_output(state_n + k, stack(c.node, scans[k], out_axes[k], out_dirs[k] != 0, k));
}

}  // namespace

void register_control_flow(Registry& r) {
  r.add({"", "If", infer_from_body, kernel_if});
  r.add({"", "Loop", infer_from_body, kernel_loop});
  r.add({"", "Scan", infer_from_body, kernel_scan});
}

}  // namespace kiln::ops
