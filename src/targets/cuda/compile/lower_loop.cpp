// ONNX Loop / Scan -> kiln.cuda.Loop: a WHILE conditional node of the
// program's CUDA graph (run/conditional.h), its body lowered like the main
// graph (lowering.h, lower_body) and driven by a control kernel that counts
// the iterations on the device.
#include <fmt/format.h>

#include <optional>
#include <utility>

#include "passes/passes.h"
#include "support/error.h"
#include "targets/cuda/compile/lowering.h"
#include "targets/cuda/run/conditional.h"

namespace kiln::targets::cuda {
namespace {

/// "[2, 3]" of a value, for messages.
std::string shape_of(const ir::Model& m, ir::ValueId v) { return ir::shape_str(m.value(v).shape); }

int64_t product(const std::vector<int64_t>& d, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= d[i];
  return p;
}

/// A Loop or a Scan in one form: what the node reads, which body values
/// play which part, and how the scan inputs and outputs are cut.
struct LoopForm {
  ir::ValueId max_trip = ir::kNoValue;  ///< Loop's M (int64, one element), or none
  ir::ValueId cond0 = ir::kNoValue;     ///< Loop's cond (bool, one element), or none
  std::vector<ir::ValueId> initial;     ///< node inputs: initial loop-carried values
  std::vector<ir::ValueId> scan_in;     ///< Scan: node inputs cut along in_axes
  std::vector<int64_t> in_axes, in_reverse, out_axes, out_reverse;
  ir::ValueId iter = ir::kNoValue, cond_in = ir::kNoValue;  ///< body inputs (new values for a Scan)
  ir::ValueId cond_out = ir::kNoValue;                      ///< the body's condition output
  std::vector<ir::ValueId> state_in, state_out;             ///< body: carried values in and out
  std::vector<ir::ValueId> slices;                          ///< body: each scan input's slice
  std::vector<ir::ValueId> scan_parts;                      ///< body: each scan output's slice
  int64_t trips = -1;  ///< trip count known at compile time, -1 when not
};

bool constant_true(const ir::Model& m, ir::ValueId v) {
  const ir::Value& val = m.value(v);
  return val.constant && val.constant->dtype() == DType::boolean && val.constant->numel() == 1 &&
         *static_cast<const uint8_t*>(val.constant->raw()) != 0;
}

/// `v` with the ONNX Identity nodes of body `g` that produced it skipped
/// (exporters pass the condition through one: cond_out = Identity(cond_in)).
ir::ValueId through_identities(const ir::Graph& g, ir::ValueId v) {
  for (bool found = true; found;) {
    found = false;
    for (auto& b : g.nodes)
      if (b.domain.empty() && b.op_type == "Identity" && b.outputs.size() == 1 && b.outputs[0] == v &&
          b.inputs.size() == 1 && b.inputs[0] != ir::kNoValue) {
        v = b.inputs[0];
        found = true;
        break;
      }
  }
  return v;
}

/// One element of `dtype` (a Loop's M or cond), or a refusal naming `what`.
void check_scalar(const ir::Model& m, const ir::Node& n, ir::ValueId v, DType dtype, const char* what) {
  const ir::Value& val = m.value(v);
  if (val.dtype != dtype || !val.shape || !ir::is_static(*val.shape) || product(ir::to_sizes(*val.shape), 0,
                                                                                val.shape->size()) != 1)
    refuse(n, fmt::format("its {} '{}' is {} {}, not one {}", what, val.name, dtype_name(val.dtype), shape_of(m, v),
                          dtype_name(dtype)));
}

LoopForm loop_form(const ir::Model& m, const ir::Node& n) {
  LoopForm f;
  const ir::Graph& g = n.graph("body");
  if (n.inputs.size() > 0) f.max_trip = n.inputs[0];
  if (n.inputs.size() > 1) f.cond0 = n.inputs[1];
  for (size_t i = 2; i < n.inputs.size(); ++i) f.initial.push_back(n.inputs[i]);
  const size_t k = f.initial.size();
  f.iter = g.inputs.at(0);
  f.cond_in = g.inputs.at(1);
  f.cond_out = g.outputs.at(0);
  for (size_t i = 0; i < k; ++i) f.state_in.push_back(g.inputs.at(2 + i)), f.state_out.push_back(g.outputs.at(1 + i));
  for (size_t i = 1 + k; i < g.outputs.size(); ++i) f.scan_parts.push_back(g.outputs[i]);
  f.out_axes.assign(f.scan_parts.size(), 0);
  f.out_reverse.assign(f.scan_parts.size(), 0);
  if (f.max_trip == ir::kNoValue && f.cond0 == ir::kNoValue) refuse(n, "it has neither M nor cond (it never ends)");
  if (f.max_trip != ir::kNoValue) check_scalar(m, n, f.max_trip, DType::i64, "trip count M");
  if (f.cond0 != ir::kNoValue) check_scalar(m, n, f.cond0, DType::boolean, "condition");
  check_scalar(m, n, f.iter, DType::i64, "body's iteration number");
  check_scalar(m, n, f.cond_in, DType::boolean, "body's condition input");
  if (f.cond0 != ir::kNoValue) check_scalar(m, n, f.cond_out, DType::boolean, "body's condition output");
  // The condition ends the loop early unless it is absent (the "for" form
  // ignores the body's condition) or true and passed through unchanged.
  const ir::ValueId passed = through_identities(g, f.cond_out);
  const bool early_exit = f.cond0 != ir::kNoValue &&
                          !(constant_true(m, f.cond0) && (passed == f.cond_in || constant_true(m, passed)));
  const ir::Value* mv = f.max_trip == ir::kNoValue ? nullptr : &m.value(f.max_trip);
  if (mv && mv->constant && !early_exit) f.trips = std::max<int64_t>(0, *static_cast<const int64_t*>(mv->constant->raw()));
  if (!f.scan_parts.empty() && f.trips < 0) {
    // A scan output has one row per iteration: its shape would depend on data.
    std::string why = !mv ? "it has no M (it runs while its condition holds)"
                      : !mv->constant ? fmt::format("M '{}' is computed at run time", mv->name)
                                      : fmt::format("its condition '{}' may end it early",
                                                    m.value(f.cond0 != ir::kNoValue && !constant_true(m, f.cond0)
                                                                ? f.cond0
                                                                : f.cond_out).name);
    refuse(n, fmt::format("its {} scan output(s) need a trip count known at compile time and {}", f.scan_parts.size(),
                          why));
  }
  return f;
}

/// ONNX's per-entry attribute (scan_input_axes, ...): `count` entries, `def` when absent.
std::vector<int64_t> per_entry(const ir::Node& n, const char* attr, size_t count) {
  auto v = n.ints(attr, std::vector<int64_t>(count, 0));
  if (v.size() != count) refuse(n, fmt::format("{} has {} entries for {} values", attr, v.size(), count));
  return v;
}

LoopForm scan_form(ir::Model& m, const ir::Node& n) {
  LoopForm f;
  const ir::Graph& g = n.graph("body");
  const int64_t ns = n.i("num_scan_inputs");
  if (ns < 1 || static_cast<size_t>(ns) > n.inputs.size()) refuse(n, fmt::format("num_scan_inputs is {}", ns));
  const size_t k = n.inputs.size() - static_cast<size_t>(ns);
  for (size_t i = 0; i < n.inputs.size(); ++i) (i < k ? f.initial : f.scan_in).push_back(n.inputs[i]);
  for (size_t i = 0; i < k; ++i) f.state_in.push_back(g.inputs.at(i)), f.state_out.push_back(g.outputs.at(i));
  for (size_t i = k; i < g.inputs.size(); ++i) f.slices.push_back(g.inputs[i]);
  for (size_t i = k; i < g.outputs.size(); ++i) f.scan_parts.push_back(g.outputs[i]);
  f.in_axes = per_entry(n, "scan_input_axes", f.scan_in.size());
  f.in_reverse = per_entry(n, "scan_input_directions", f.scan_in.size());
  f.out_axes = per_entry(n, "scan_output_axes", f.scan_parts.size());
  f.out_reverse = per_entry(n, "scan_output_directions", f.scan_parts.size());
  for (size_t j = 0; j < f.scan_in.size(); ++j) {
    if (f.scan_in[j] == ir::kNoValue) refuse(n, fmt::format("its scan input {} is missing", j));
    auto d = ir::to_sizes(*m.value(f.scan_in[j]).shape);
    const int64_t r = static_cast<int64_t>(d.size());
    int64_t& a = f.in_axes[j];
    if (a < -r || a >= r) refuse(n, fmt::format("scan_input_axes entry {} is {} for rank {}", j, a, r));
    if (a < 0) a += r;
    const int64_t len = d[static_cast<size_t>(a)];
    if (f.trips >= 0 && len != f.trips)
      refuse(n, fmt::format("its scan inputs have {} and {} iterations along their axes", f.trips, len));
    f.trips = len;
  }
  // A Scan has neither iteration number nor condition: the control kernel
  // still writes them, to values of their own.
  ir::Value iv;
  iv.name = n.name + "/iteration";
  iv.dtype = DType::i64;
  iv.shape = ir::Shape{};
  f.iter = m.add_value(iv);
  ir::Value cv;
  cv.name = n.name + "/cond";
  cv.dtype = DType::boolean;
  cv.shape = ir::Shape{};
  f.cond_in = f.cond_out = m.add_value(cv);
  return f;
}

/// A kiln.cuda.Kernel moving slice *iter (or trips - 1 - *iter, `reverse`)
/// along `axis` of `full` (dims `dims`, static) between `full` and `part`
/// (full's dims without the axis): reads the slice into part (`write`
/// false: a Scan input's element) or writes part into it (a scan output's
/// row). Parameters (const T* src, const long long* iter, T* dst).
ir::Node slice_kernel(Lowering& L, const ir::Node& n, ir::ValueId full, ir::ValueId part, ir::ValueId iter,
                      const std::vector<int64_t>& dims, int64_t axis, bool reverse, bool write) {
  const ir::Model& m = L.model;
  const size_t es = dtype_size(m.value(full).dtype);
  const auto a = static_cast<size_t>(axis);
  const int64_t outer = product(dims, 0, a), len = dims[a], inner = product(dims, a + 1, dims.size());
  const std::string fn = L.kernel_name(write ? "scan_write" : "scan_read");
  const std::string t = raw_type(es), at = "(o * " + std::to_string(len) + "ll + idx) * " + std::to_string(inner) + "ll + r";
  L.source += fmt::format(
      "extern \"C\" __global__ void __launch_bounds__(256) {}(const {}* src, const long long* iter, {}* dst) {{\n"
      "  const long long i = *iter;\n"
      "  const long long idx = {};\n"
      "  for (long long e = (long long)blockIdx.x * 256 + threadIdx.x; e < {}ll; e += (long long)gridDim.x * 256) {{\n"
      "    const long long o = e / {}ll, r = e - o * {}ll;\n"
      "    {};\n"
      "  }}\n"
      "}}\n",
      fn, t, t, reverse ? fmt::format("{}ll - 1 - i", len) : "i", outer * inner, inner, inner,
      write ? "dst[" + at + "] = src[e]" : "dst[e] = src[" + at + "]");
  const int64_t grid = std::max<int64_t>(1, L.grid_for(outer * inner, 256));
  return write ? L.kernel_node(n, fn, {part, iter}, {full}, grid, 256) : L.kernel_node(n, fn, {full, iter}, {part}, grid, 256);
}

/// Refuses unless body value `v` has exactly `dims` and `dtype` (a carried
/// value or a scan slice: its buffer is the same every iteration).
void expect_dims(const ir::Model& m, const ir::Node& n, ir::ValueId v, const std::vector<int64_t>& dims, DType dtype,
                 const std::string& what) {
  const ir::Value& val = m.value(v);
  if (!val.shape || !ir::is_static(*val.shape) || ir::to_sizes(*val.shape) != dims || val.dtype != dtype)
    refuse(n, fmt::format("{} '{}' is {} {} in the body, not {} {} (a loop-carried value or slice needs one static "
                          "shape every iteration)",
                          what, val.name, dtype_name(val.dtype), shape_of(m, v), dtype_name(dtype),
                          ir::shape_str(ir::static_shape(dims))));
}

/// Exporters leave a Loop body's carried inputs untyped (inference then
/// gives them only their rank) and the body's values without static
/// shapes. Where the loop's initial values (and a Scan's inputs) are static,
/// returns a copy of body `g` inferred again with those shapes on its inputs
/// (each carried value keeps its shape: lower_loop checks the body's outputs
/// against it afterwards, so the assumption holds every iteration); the
/// body's values are typed in m (the caller restores them on refusal).
/// nullopt when every body input is static already.
std::optional<ir::Graph> typed_body(ir::Model& m, const LoopForm& f, const ir::Graph& g) {
  bool changed = false;
  auto give = [&](ir::ValueId v, std::vector<int64_t> dims) {
    ir::Value& val = m.value(v);
    if (val.shape && ir::is_static(*val.shape)) return;
    if (val.shape && val.shape->size() != dims.size()) return;  // a rank of its own: expect_dims refuses it
    val.shape = ir::static_shape(dims);
    changed = true;
  };
  for (size_t i = 0; i < f.initial.size(); ++i)
    if (f.initial[i] != ir::kNoValue) give(f.state_in[i], ir::to_sizes(*m.value(f.initial[i]).shape));
  for (size_t j = 0; j < f.scan_in.size(); ++j) {
    auto dims = ir::to_sizes(*m.value(f.scan_in[j]).shape);
    dims.erase(dims.begin() + f.in_axes[j]);
    give(f.slices[j], dims);
  }
  if (!changed) return std::nullopt;
  ir::Graph body = g;  // nodes copied: inference may fold some
  std::swap(m.main, body);
  try {
    passes::infer_and_fold(m);
  } catch (...) {
    std::swap(m.main, body);
    throw;
  }
  std::swap(m.main, body);
  return body;
}

/// lower_loop once the body `g` (typed_body's, or the node's own) is known.
ir::Node lower_loop_body(Lowering& L, const ir::Node& n, const ir::Graph& g, LoopForm& f, const LowerOptions& opt,
                         LowerStats& st) {
  ir::Model& m = L.model;
  const size_t k = f.initial.size();
  if (n.outputs.size() != k + f.scan_parts.size())
    refuse(n, fmt::format("it has {} outputs for {} carried values and {} scan outputs", n.outputs.size(), k,
                          f.scan_parts.size()));
  check_body(m, n, g, "body");
  // Every loop-carried value keeps the initial value's shape and dtype.
  std::vector<std::pair<ir::ValueId, ir::Shape>> out_shapes;  // outputs whose shape is filled in at the end
  auto expect_output = [&](ir::ValueId o, const std::vector<int64_t>& dims) {
    if (o == ir::kNoValue) return;
    const ir::Value& ov = m.value(o);
    if (ov.shape && ir::is_static(*ov.shape) && ir::to_sizes(*ov.shape) != dims)
      refuse(n, fmt::format("output '{}' is declared {}, the loop gives {}", ov.name, shape_of(m, o),
                            ir::shape_str(ir::static_shape(dims))));
    out_shapes.push_back({o, ir::static_shape(dims)});
  };
  for (size_t i = 0; i < k; ++i) {
    if (f.initial[i] == ir::kNoValue) refuse(n, fmt::format("its loop-carried input {} is missing", i));
    const ir::Value& init = m.value(f.initial[i]);
    if (dtype_size(init.dtype) == 0) refuse(n, fmt::format("loop-carried '{}' is {}", init.name, dtype_name(init.dtype)));
    auto dims = ir::to_sizes(*init.shape);
    expect_dims(m, n, f.state_in[i], dims, init.dtype, "loop-carried input");
    expect_dims(m, n, f.state_out[i], dims, init.dtype, "loop-carried output");
    expect_output(n.outputs[i], dims);
  }
  for (size_t j = 0; j < f.scan_in.size(); ++j) {
    auto dims = ir::to_sizes(*m.value(f.scan_in[j]).shape);
    dims.erase(dims.begin() + f.in_axes[j]);
    expect_dims(m, n, f.slices[j], dims, m.value(f.scan_in[j]).dtype, "scan input element");
  }
  std::vector<std::vector<int64_t>> scan_dims;  // each scan output's full dims
  for (size_t j = 0; j < f.scan_parts.size(); ++j) {
    const ir::Value& p = m.value(f.scan_parts[j]);
    if (!p.shape || !ir::is_static(*p.shape) || dtype_size(p.dtype) == 0)
      refuse(n, fmt::format("scan output element '{}' is {} {}; it needs a static shape", p.name, dtype_name(p.dtype),
                            shape_of(m, f.scan_parts[j])));
    auto dims = ir::to_sizes(*p.shape);
    const int64_t r = static_cast<int64_t>(dims.size()) + 1;
    int64_t& a = f.out_axes[j];
    if (a < -r || a >= r) refuse(n, fmt::format("scan_output_axes entry {} is {} for rank {}", j, a, r));
    if (a < 0) a += r;
    dims.insert(dims.begin() + a, f.trips);
    expect_output(n.outputs[k + j], dims);
    scan_dims.push_back(std::move(dims));
  }
  ir::Graph lowered = lower_body(L, n, g, "body", opt, st);
  // The body: each scan input's slice, the body's nodes, each scan output's row.
  ir::Graph body;
  body.name = g.name;
  for (size_t j = 0; j < f.scan_in.size(); ++j)
    body.nodes.push_back(slice_kernel(L, n, f.scan_in[j], f.slices[j], f.iter, ir::to_sizes(*m.value(f.scan_in[j]).shape),
                                      f.in_axes[j], f.in_reverse[j] != 0, false));
  for (auto& b : lowered.nodes) body.nodes.push_back(std::move(b));
  for (size_t j = 0; j < f.scan_parts.size(); ++j) {
    ir::ValueId o = n.outputs[k + j];
    if (o == ir::kNoValue) continue;
    body.nodes.push_back(slice_kernel(L, n, o, f.scan_parts[j], f.iter, scan_dims[j], f.out_axes[j],
                                      f.out_reverse[j] != 0, true));
  }
  st.kernels += static_cast<int>(body.nodes.size() - lowered.nodes.size());
  body.inputs = {f.iter, f.cond_in};
  body.inputs.insert(body.inputs.end(), f.state_in.begin(), f.state_in.end());
  body.outputs = {f.cond_out};
  body.outputs.insert(body.outputs.end(), f.state_out.begin(), f.state_out.end());
  for (size_t j = 0; j < f.scan_parts.size(); ++j)
    if (n.outputs[k + j] != ir::kNoValue) body.outputs.push_back(n.outputs[k + j]);
  const std::string fn = L.kernel_name("loop");
  L.source += loop_control_kernel(fn, n.op_type == "Scan" ? f.trips : -1);
  for (auto& [o, shape] : out_shapes) m.value(o).shape = shape;  // nothing refuses after this
  ir::Node c;
  c.op_type = "Loop";
  c.domain = std::string(kCudaDomain);
  c.name = n.name;
  c.opset = n.opset;
  c.inputs = {f.max_trip, f.cond0};
  c.inputs.insert(c.inputs.end(), f.initial.begin(), f.initial.end());
  c.inputs.insert(c.inputs.end(), f.scan_in.begin(), f.scan_in.end());
  c.outputs = n.outputs;
  c.attrs["body"] = std::make_shared<ir::Graph>(std::move(body));
  c.attrs["control_fn"] = fn;
  c.attrs["carried"] = static_cast<int64_t>(k);
  c.attrs["trip_count"] = f.trips;
  c.attrs["source_op"] = n.op_type;
  return c;
}

}  // namespace

ir::Node lower_loop(Lowering& L, const ir::Node& n, const LowerOptions& opt, LowerStats& st) {
  ir::Model& m = L.model;
  if (!conditional_nodes_enabled()) refuse(n, "conditional nodes are off (KILN_CUDA_CONDITIONAL=0)");
  LoopForm f = n.op_type == "Loop" ? loop_form(m, n) : scan_form(m, n);
  const std::vector<ir::Value> saved = m.values;  // typed_body types body values in place
  try {
    std::optional<ir::Graph> typed = typed_body(m, f, n.graph("body"));
    return lower_loop_body(L, n, typed ? *typed : n.graph("body"), f, opt, st);
  } catch (...) {
    m.values.assign(saved.begin(), saved.end());  // the ONNX Loop runs on the host as it came
    throw;
  }
}

}  // namespace kiln::targets::cuda
