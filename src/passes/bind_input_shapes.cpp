#include <fmt/ranges.h>

#include <set>

#include "passes/passes.h"
#include "support/error.h"

namespace kiln::passes {

void bind_input_shapes(ir::Model& m, const std::map<std::string, std::vector<int64_t>>& shapes) {
  std::map<std::string, int64_t> symbols;
  for (auto& [name, dims] : shapes) {
    ir::Value* v = nullptr;
    std::vector<std::string> names;
    for (auto id : m.main.inputs) {
      names.push_back(m.value(id).name);
      if (m.value(id).name == name) v = &m.value(id);
    }
    if (!v) fail(ErrorCode::invalid_option, "shape: the model has no input named '{}' (its inputs: {})", name, fmt::join(names, ", "));
    if (v->shape && v->shape->size() != dims.size())
      fail(ErrorCode::invalid_option, "shape: input '{}' has rank {} {}, the given shape {} has rank {}", name,
           v->shape->size(), ir::shape_str(v->shape), fmt::join(dims, "x"), dims.size());
    ir::Shape s = v->shape ? *v->shape : ir::Shape(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) {
      if (s[i].is_static() && s[i].value != dims[i])
        fail(ErrorCode::invalid_option, "shape: input '{}' dim {} is fixed to {} in the model, the given shape says {}",
             name, i, s[i].value, dims[i]);
      if (!s[i].is_static() && !s[i].symbol.empty()) {
        auto [it, fresh] = symbols.emplace(s[i].symbol, dims[i]);
        if (!fresh && it->second != dims[i])
          fail(ErrorCode::invalid_option, "shape: dim '{}' is given as {} and as {} in different inputs", s[i].symbol,
               it->second, dims[i]);
      }
      s[i] = ir::Dim::known(dims[i]);
    }
    v->shape = s;
  }
  // A symbol fixed through one input is fixed everywhere it appears among the inputs.
  for (auto id : m.main.inputs) {
    auto& v = m.value(id);
    if (!v.shape) continue;
    for (auto& d : *v.shape)
      if (!d.is_static() && symbols.count(d.symbol)) d = ir::Dim::known(symbols[d.symbol]);
  }
}

void bind_symbols(ir::Model& m, const std::map<std::string, int64_t>& sizes) {
  std::set<std::string> present;
  for (auto id : m.main.inputs)
    if (auto& sh = m.value(id).shape)
      for (auto& d : *sh)
        if (!d.is_static() && !d.symbol.empty()) present.insert(d.symbol);
  for (auto& [sym, size] : sizes) {
    if (!present.count(sym))
      fail(ErrorCode::invalid_option, "dims: the model's inputs have no symbolic dim named '{}' (they have: {})", sym,
           present.empty() ? std::string("none; every input dim is fixed") : fmt::format("{}", fmt::join(present, ", ")));
    if (size < 1) fail(ErrorCode::invalid_option, "dims: size {} for '{}' is below 1", size, sym);
  }
  for (auto id : m.main.inputs)
    if (auto& sh = m.value(id).shape)
      for (auto& d : *sh)
        if (!d.is_static())
          if (auto it = sizes.find(d.symbol); it != sizes.end() && !d.symbol.empty()) d = ir::Dim::known(it->second);
}

}  // namespace kiln::passes
