#include "runtime/reference_nodes.h"

#include <fmt/format.h>

#include <set>

namespace kiln {

namespace {

/// Operators whose reference "kernel" costs nothing worth a note: views and
/// metadata (the executor aliases or reads shapes only).
bool free_op(const std::string& op) {
  static const std::set<std::string> ops = {"Identity", "Reshape",  "Flatten", "Squeeze", "Unsqueeze",
                                            "Shape",    "Constant", "Size",    "Dropout"};
  return ops.count(op) > 0;
}

bool elementwise_op(const std::string& op) {
  static const std::set<std::string> ops = {
      "Add",  "Sub",  "Mul",     "Div",   "Max",         "Min",     "Relu",    "Sigmoid", "Tanh",    "Exp",
      "Log",  "Sqrt", "Abs",     "Neg",   "Clip",        "Elu",     "Erf",     "Gelu",    "HardSigmoid",
      "HardSwish", "LeakyRelu", "Mish", "Softplus", "Pow", "Round", "Floor", "Ceil", "Reciprocal", "Swish"};
  return ops.count(op) > 0;
}

/// The first input or output of n whose shape is not static, or -1.
ir::ValueId dynamic_value(const ir::Model& m, const ir::Node& n) {
  auto dynamic = [&](ir::ValueId v) {
    if (v == ir::kNoValue) return false;
    const ir::Value& val = m.value(v);
    return !val.shape || !ir::is_static(*val.shape);
  };
  for (auto v : n.inputs)
    if (dynamic(v)) return v;
  for (auto v : n.outputs)
    if (dynamic(v)) return v;
  return ir::kNoValue;
}

/// An ONNX Cast between float16 / bfloat16 and float32: in a cuda program's
/// host segment, the boundary of the host's float32 computation (16-bit
/// programs; targets/cuda/compile/host_precision.cpp) or a precision-pass Cast.
bool half_float_cast(const ir::Model& m, const ir::Node& n) {
  if (!n.domain.empty() || n.op_type != "Cast" || n.inputs.size() != 1 || n.outputs.size() != 1 ||
      n.inputs[0] == ir::kNoValue || n.outputs[0] == ir::kNoValue)
    return false;
  auto half = [](DType t) { return t == DType::f16 || t == DType::bf16; };
  const DType a = m.value(n.inputs[0]).dtype, b = m.value(n.outputs[0]).dtype;
  return (half(a) && b == DType::f32) || (a == DType::f32 && half(b));
}

}  // namespace

std::vector<ReferenceNode> reference_nodes(const ir::Model& m, const std::string& target) {
  std::vector<ReferenceNode> out;
  if (target == "ref") return out;
  // Symbols of the program's inputs: a dynamic dim carrying one is open
  // because nobody fixed the input's shape (fixable); any other unknown dim
  // comes from tensor values (NonZero, TopK with a tensor K, a Loop's scan
  // outputs, ...): data-dependent, planned at run time.
  std::set<std::string> input_symbols;
  for (auto id : m.main.inputs)
    if (auto& sh = m.value(id).shape)
      for (auto& d : *sh)
        if (!d.is_static() && !d.symbol.empty()) input_symbols.insert(d.symbol);
  std::vector<bool> host(m.main.nodes.size(), false);
  for (auto& s : m.segments)
    for (size_t i = s.first; i < s.first + s.count && s.device == "host"; ++i) host.at(i) = true;
  for (size_t i = 0; i < m.main.nodes.size(); ++i) {
    const ir::Node& n = m.main.nodes[i];
    // Target kernels live in the target's own domain (kiln.cpu, kiln.cuda);
    // every other domain (ONNX, com.microsoft, ...) runs on reference kernels.
    if (n.domain.rfind("kiln.", 0) == 0 || free_op(n.op_type)) continue;
    ReferenceNode r;
    r.node = n.name.empty() ? fmt::format("{} #{}", n.op_type, i) : n.name;
    r.op = n.op_type;
    if (ir::ValueId v = dynamic_value(m, n); v != ir::kNoValue) {
      const ir::Value& val = m.value(v);
      bool from_inputs = false;
      if (val.shape)
        for (auto& d : *val.shape) from_inputs |= !d.is_static() && input_symbols.count(d.symbol) > 0;
      r.fixable = from_inputs;
      r.reason = from_inputs ? fmt::format("dynamic shape: '{}' is {}", val.name, ir::shape_str(val.shape))
                             : fmt::format("data-dependent shape: '{}' is {} (its size comes from tensor values)",
                                           val.name, ir::shape_str(val.shape));
    } else if (host[i] && half_float_cast(m, n)) {
      r.reason = "converts between the program's 16-bit values and float32, which host nodes compute in";
    } else if (ir::has_empty_tensor(m, n)) {
      r.reason = "empty tensor (a 0-sized dim)";
    } else if (elementwise_op(n.op_type) && !n.outputs.empty() && n.outputs[0] != ir::kNoValue) {
      int64_t elems = 1;
      for (auto& d : *m.value(n.outputs[0]).shape) elems *= d.value;
      r.reason = elems < 16384 ? fmt::format("small element-wise ({} elements): the reference kernel beats a "
                                             "library call",
                                             elems)
                               : fmt::format("no {} kernel for {} with these operands", target, n.op_type);
    } else {
      r.reason = fmt::format("no {} kernel for {}{}", target, n.domain.empty() ? "" : n.domain + ".", n.op_type);
    }
    if (host[i]) r.reason = "host segment (cuda host fallback): " + r.reason;
    out.push_back(std::move(r));
  }
  return out;
}

std::string host_fallback_note(const ir::Model& m) {
  int nodes = 0, segments = 0;
  size_t copies = 0;
  uint64_t bytes = 0;
  std::string list;
  for (auto& s : m.segments) {
    if (s.device != "host") continue;
    ++segments;
    for (size_t i = s.first; i < s.first + s.count; ++i) {
      const ir::Node& n = m.main.nodes.at(i);
      if (++nodes <= 8)
        list += fmt::format("{}{} '{}'", list.empty() ? "" : ", ", n.op_type, n.name.empty() ? "#" + std::to_string(i) : n.name);
    }
    for (const auto* side : {&s.to_host, &s.to_device})
      for (auto id : *side) {
        ++copies;
        const ir::Value& v = m.value(id);
        if (v.shape && ir::is_static(*v.shape)) {
          uint64_t b = dtype_size(v.dtype);
          for (auto d : ir::to_sizes(*v.shape)) b *= static_cast<uint64_t>(d);
          bytes += b;
        }
      }
  }
  if (!nodes) return {};
  return fmt::format("{} node(s) of the cuda program run on the host (host fallback): {}{} in {} host segment(s), {} "
                     "value(s) copied across the boundaries ({:.1f} KiB per run); --fallback error refuses instead",
                     nodes, list, nodes > 8 ? ", ..." : "", segments, copies, bytes / 1024.0);
}

std::string reference_nodes_note(const std::vector<ReferenceNode>& nodes) {
  std::string list;
  int count = 0;
  for (auto& r : nodes)
    if (r.fixable) {
      if (++count <= 4) list += fmt::format("{}{} '{}'", list.empty() ? "" : ", ", r.op, r.node);
    }
  if (!count) return {};
  return fmt::format("{} node(s) run on reference kernels because their shapes are dynamic ({}{}): fix the input "
                     "shapes (--shape / input_shapes) or keep shape specialization on; `kiln inspect` lists them",
                     count, list, count > 4 ? ", ..." : "");
}

}  // namespace kiln
