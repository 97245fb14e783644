#include "runtime/output_buffers.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

#include "support/error.h"

namespace kiln {

std::map<std::string, std::vector<int64_t>> shapes_of(const std::map<std::string, Tensor>& tensors) {
  std::map<std::string, std::vector<int64_t>> out;
  for (auto& [name, t] : tensors) out.emplace(name, t.shape());
  return out;
}

std::map<std::string, std::vector<int64_t>> known_output_shapes(
    const std::vector<TensorInfo>& outputs, const std::vector<TensorInfo>& inputs_info,
    const std::map<std::string, std::vector<int64_t>>& input_shapes) {
  // Size of each symbol some given input carries.
  std::map<std::string, int64_t> symbols;
  for (auto& in : inputs_info) {
    auto it = input_shapes.find(in.name);
    if (it == input_shapes.end()) continue;
    for (size_t a = 0; a < in.symbols.size() && a < it->second.size(); ++a)
      if (in.dims[a] < 0 && !in.symbols[a].empty()) symbols.emplace(in.symbols[a], it->second[a]);
  }
  std::map<std::string, std::vector<int64_t>> known;
  for (auto& o : outputs) {
    std::vector<int64_t> shape = o.dims;
    bool all = true;
    for (size_t a = 0; a < shape.size() && all; ++a) {
      if (shape[a] >= 0) continue;
      auto it = a < o.symbols.size() ? symbols.find(o.symbols[a]) : symbols.end();
      all = it != symbols.end();
      if (all) shape[a] = it->second;
    }
    if (all) known.emplace(o.name, std::move(shape));
  }
  return known;
}

void check_output_buffers(const std::map<std::string, Tensor>& buffers, const std::vector<TensorInfo>& outputs,
                          const std::map<std::string, std::vector<int64_t>>& known) {
  std::vector<std::string> names;
  for (auto& o : outputs) names.push_back(o.name);
  for (auto& [name, t] : buffers)
    if (std::find(names.begin(), names.end(), name) == names.end())
      fail(ErrorCode::invalid_input, "run_into: unknown output '{}' (the model's outputs are: {})", name,
           fmt::join(names, ", "));
  for (auto& o : outputs) {
    auto it = buffers.find(o.name);
    if (it == buffers.end())
      fail(ErrorCode::invalid_input, "run_into: output '{}' is missing (every output needs a buffer)", o.name);
    const Tensor& t = it->second;
    if (t.dtype() != o.dtype)
      fail(ErrorCode::invalid_input, "run_into: output '{}' has dtype {}, the model produces {}", o.name,
           dtype_name(t.dtype()), dtype_name(o.dtype));
    if (t.nbytes() && !t.raw()) fail(ErrorCode::invalid_input, "run_into: output '{}' has no buffer", o.name);
    if (auto k = known.find(o.name); k != known.end() && k->second != t.shape())
      fail(ErrorCode::invalid_input, "run_into: output '{}' has shape [{}], the model produces [{}] for these inputs",
           o.name, fmt::join(t.shape(), ","), fmt::join(k->second, ","));
  }
}

void deliver_outputs(const std::map<std::string, Tensor>& values, const std::map<std::string, Tensor>& buffers) {
  for (auto& [name, dst] : buffers) {
    auto it = values.find(name);
    if (it == values.end()) fail(ErrorCode::internal, "run_into: the program computed no output '{}'", name);
    const Tensor& v = it->second;
    if (v.dtype() != dst.dtype())
      fail(ErrorCode::invalid_input, "run_into: output '{}' has dtype {}, the model produced {}", name,
           dtype_name(dst.dtype()), dtype_name(v.dtype()));
    if (v.shape() != dst.shape())
      fail(ErrorCode::invalid_input, "run_into: output '{}' has shape [{}], the model produced [{}] for these inputs",
           name, fmt::join(dst.shape(), ","), fmt::join(v.shape(), ","));
  }
  for (auto& [name, dst] : buffers) {
    const Tensor& v = values.at(name);
    Tensor d = dst;  // shares the caller's buffer
    if (v.nbytes() && v.raw() != d.raw()) std::memcpy(d.raw(), v.raw(), v.nbytes());
  }
}

}  // namespace kiln
