// Load-time checks of kiln.cuda nodes (node_checks.h).
#include "targets/cuda/run/node_checks.h"

#include <fmt/format.h>

#include "support/error.h"

namespace kiln::targets::cuda {

size_t value_bytes(const ir::Model& m, ir::ValueId id, const ir::Node* n) {
  const ir::Value& v = m.value(id);
  if (!v.shape || !ir::is_static(*v.shape))
    fail(ErrorCode::invalid_model, "the cuda program's value '{}'{} has no static shape", v.name,
         n ? " (" + n->label() + ")" : "");
  size_t b = dtype_size(v.dtype);
  for (auto d : ir::to_sizes(*v.shape)) b *= static_cast<size_t>(d);
  return b;
}

void check_conv_operands(const ir::Model& m, const ir::Node& n, const ConvSpec& spec, const ConvEpilogue& ep) {
  const size_t elem = dtype_size(spec.dtype);
  auto expect = [&](ir::ValueId v, size_t bytes, const char* what) {
    const size_t have = value_bytes(m, v, &n);
    if (have != bytes)
      fail(ErrorCode::invalid_model, "{}: {} '{}' holds {} bytes, the convolution's spec needs {}", n.label(), what,
           m.value(v).name, have, bytes);
  };
  auto count = [](const std::vector<int64_t>& d) {
    size_t c = 1;
    for (auto x : d) c *= static_cast<size_t>(x);
    return c;
  };
  if (n.inputs.size() < 2 || n.outputs.empty() || n.inputs[0] == ir::kNoValue || n.inputs[1] == ir::kNoValue)
    fail(ErrorCode::invalid_model, "{}: a convolution needs inputs x and w and an output", n.label());
  expect(n.inputs[0], count(spec.x) * elem, "input");
  expect(n.inputs[1], count(spec.w) * elem, "filter");
  expect(n.outputs[0], count(spec.y) * elem, "output");
  if (ep.bias) expect(n.inputs.at(2), static_cast<size_t>(spec.y.at(1)) * elem, "bias");
  if (ep.residual) expect(n.inputs.back(), count(spec.y) * elem, "residual");
}

void check_launch(const ir::Model& m, const ir::Node& n) {
  const std::vector<int64_t> grid = n.ints("grid"), block = n.ints("block");
  if (grid.size() != 3 || block.size() != 3) fail(ErrorCode::invalid_model, "{}: grid/block must have 3 dims", n.label());
  bool empty_grid = false;
  for (int i = 0; i < 3; ++i) {
    const int64_t limit = i == 0 ? (int64_t{1} << 31) - 1 : 65535;
    if (grid[i] < 0 || grid[i] > limit || block[i] < 1 || block[i] > 1024)
      fail(ErrorCode::invalid_model, "{}: launch grid [{}, {}, {}] / block [{}, {}, {}] is outside CUDA's limits", n.label(),
           grid[0], grid[1], grid[2], block[0], block[1], block[2]);
    empty_grid |= grid[i] == 0;
  }
  if (block[0] * block[1] * block[2] > 1024)
    fail(ErrorCode::invalid_model, "{}: a block of {} threads (at most 1024)", n.label(), block[0] * block[1] * block[2]);
  if (empty_grid)
    for (auto id : n.outputs)
      if (id != ir::kNoValue && value_bytes(m, id, &n) != 0)
        fail(ErrorCode::invalid_model, "{}: an empty launch grid for output '{}', which is not empty", n.label(),
             m.value(id).name);
  if (n.i("grid_stride", 0) == 1 && (block != std::vector<int64_t>{256, 1, 1} || grid[0] * 256 >= (int64_t{1} << 32)))
    fail(ErrorCode::invalid_model,
         "{}: a grid-stride kernel launched with grid {} and block {} (its code assumes 256 threads and a 32-bit stride)",
         n.label(), grid[0], block[0]);
}

}  // namespace kiln::targets::cuda
