// Common subexpression elimination: equal constants become one value, and a
// node computing the same operator on the same inputs with the same
// attributes as an earlier node is replaced by that node's outputs.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>

#include "passes/graph_edit.h"
#include "passes/passes.h"
#include "support/hash.h"

namespace kiln::passes {

namespace {

constexpr size_t kMaxConstantBytes = 64 * 1024;  ///< larger constants (weights) are not compared

bool nondeterministic(const ir::Node& n) {
  return n.op_type.rfind("Random", 0) == 0 || n.op_type == "Multinomial" || n.op_type == "Bernoulli";
}

/// A canonical text of the node's operator, inputs and attributes; empty
/// when the node must not be merged (tensor or graph attributes, randomness).
std::string node_key(const ir::Node& n) {
  if (nondeterministic(n) || n.outputs.empty()) return {};
  std::string k = fmt::format("{}|{}|{}|{}|", n.domain, n.op_type, n.opset, n.outputs.size());
  for (auto id : n.inputs) k += fmt::format("{},", id);
  for (auto& [name, a] : n.attrs) {
    k += "|" + name + "=";
    if (auto* i = std::get_if<int64_t>(&a)) k += fmt::format("i{}", *i);
    else if (auto* f = std::get_if<float>(&a)) {
      uint32_t bits;
      std::memcpy(&bits, f, 4);
      k += fmt::format("f{}", bits);
    } else if (auto* s = std::get_if<std::string>(&a)) k += fmt::format("s{}:{}", s->size(), *s);
    else if (auto* is = std::get_if<std::vector<int64_t>>(&a)) k += fmt::format("I{}", fmt::join(*is, ","));
    else if (auto* fs = std::get_if<std::vector<float>>(&a)) {
      k += "F";
      for (float f : *fs) {
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        k += fmt::format("{},", bits);
      }
    } else if (auto* ss = std::get_if<std::vector<std::string>>(&a)) {
      k += "S";
      for (auto& s : *ss) k += fmt::format("{}:{},", s.size(), s);
    } else {
      return {};  // tensor or graph attribute
    }
  }
  return k;
}

int merge_constants(ir::Model& m) {
  int merged = 0;
  std::unordered_map<std::string, ir::ValueId> seen;
  std::vector<char> is_input(m.values.size(), 0);
  for (auto id : m.main.inputs) is_input[id] = 1;
  for (size_t i = 0; i < m.values.size(); ++i) {
    const ir::Value& v = m.values[i];
    if (!v.constant || is_input[i] || v.constant->nbytes() > kMaxConstantBytes) continue;
    const Tensor& t = *v.constant;
    Hasher128 h;
    h.field(fmt::format("{}|{}", static_cast<int>(t.dtype()), fmt::join(t.shape(), "x")));
    h.update(t.raw(), t.nbytes());
    std::string key = h.hex_digest();
    auto [it, fresh] = seen.emplace(key, static_cast<ir::ValueId>(i));
    if (fresh) continue;
    const Tensor& o = *m.values[it->second].constant;
    if (o.nbytes() != t.nbytes() || std::memcmp(o.raw(), t.raw(), t.nbytes()) != 0) continue;
    replace_uses(m.main, static_cast<ir::ValueId>(i), it->second);
    ++merged;
  }
  return merged;
}

int cse_graph(ir::Model& m, ir::Graph& g) {
  int merged = 0;
  std::unordered_map<std::string, size_t> seen;  // key -> index in kept
  std::vector<ir::Node> kept;
  kept.reserve(g.nodes.size());
  for (auto& n : g.nodes) {
    for (auto& [k, a] : n.attrs)
      if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a)) merged += cse_graph(m, **sg);
    std::string key = node_key(n);
    bool outputs_free = true;
    for (auto id : n.outputs)
      if (id != ir::kNoValue && std::find(g.outputs.begin(), g.outputs.end(), id) != g.outputs.end()) outputs_free = false;
    if (!key.empty() && outputs_free) {
      auto it = seen.find(key);
      if (it != seen.end()) {
        const ir::Node& first = kept[it->second];
        bool ok = true;
        for (size_t o = 0; o < n.outputs.size(); ++o)
          if ((n.outputs[o] == ir::kNoValue) != (first.outputs[o] == ir::kNoValue)) ok = false;
        if (ok) {
          // Later nodes (not yet copied into kept) still live in g.nodes.
          for (size_t o = 0; o < n.outputs.size(); ++o)
            if (n.outputs[o] != ir::kNoValue) replace_uses(g, n.outputs[o], first.outputs[o]);
          ++merged;
          continue;
        }
      }
      seen.emplace(key, kept.size());
    }
    kept.push_back(std::move(n));
  }
  g.nodes = std::move(kept);
  return merged;
}

}  // namespace

int eliminate_common_subexpressions(ir::Model& m) {
  int merged = merge_constants(m);
  return merged + cse_graph(m, m.main);
}

}  // namespace kiln::passes
