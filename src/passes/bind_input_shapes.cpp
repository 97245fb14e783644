#include <fmt/ranges.h>

#include <set>

#include "passes/graph_edit.h"
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
    if (size < 0) fail(ErrorCode::invalid_option, "dims: size {} for '{}' is negative", size, sym);
  }
  for (auto id : m.main.inputs)
    if (auto& sh = m.value(id).shape)
      for (auto& d : *sh)
        if (!d.is_static())
          if (auto it = sizes.find(d.symbol); it != sizes.end() && !d.symbol.empty()) d = ir::Dim::known(it->second);
}

void bind_input_values(ir::Model& m, const std::map<std::string, int64_t>& values) {
  for (auto& [name, value] : values) {
    ir::ValueId id = ir::kNoValue;
    for (auto in : m.main.inputs)
      if (m.value(in).name == name) id = in;
    if (id == ir::kNoValue) fail(ErrorCode::invalid_option, "values: the model has no input named '{}'", name);
    const ir::Value& in = m.value(id);
    const bool scalar = in.shape && (in.shape->empty() || (in.shape->size() == 1 && (*in.shape)[0].value == 1));
    if (!scalar) fail(ErrorCode::invalid_option, "values: input '{}' does not hold one value", name);
    std::vector<int64_t> dims = in.shape->empty() ? std::vector<int64_t>{} : std::vector<int64_t>{1};
    Tensor t(in.dtype, dims);
    switch (in.dtype) {
      case DType::i64: *t.data<int64_t>() = value; break;
      case DType::i32: *t.data<int32_t>() = static_cast<int32_t>(value); break;
      case DType::i16: *t.data<int16_t>() = static_cast<int16_t>(value); break;
      case DType::i8: *t.data<int8_t>() = static_cast<int8_t>(value); break;
      case DType::u8: *t.data<uint8_t>() = static_cast<uint8_t>(value); break;
      case DType::u16: *t.data<uint16_t>() = static_cast<uint16_t>(value); break;
      case DType::u32: *t.data<uint32_t>() = static_cast<uint32_t>(value); break;
      case DType::boolean: *static_cast<uint8_t*>(t.raw()) = value != 0; break;
      default: fail(ErrorCode::invalid_option, "values: input '{}' is {}, not an integer or bool", name, dtype_name(in.dtype));
    }
    ir::Value c;
    c.name = name + "/value";
    c.dtype = in.dtype;
    c.shape = ir::static_shape(dims);
    c.constant = std::move(t);
    ir::ValueId cid = m.add_value(std::move(c));
    // Graph outputs that pass the input through keep reading it (the request's own value).
    replace_uses(m.main, id, cid, /*outputs=*/false);
  }
}

}  // namespace kiln::passes
