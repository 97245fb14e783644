// Load-time checks of kiln.cuda nodes read from an artifact (run side):
// what a library or kernel call would trust about its operands' sizes and
// launch shape is checked against the model first, so that a damaged or
// foreign artifact is an error naming the node, never an out-of-bounds
// access on the device.
#pragma once
#include <cstddef>

#include "ir/graph.h"
#include "targets/cuda/run/cudnn_graph.h"

namespace kiln::targets::cuda {

/// Bytes of value `id` of `m` (static shape x dtype size). Throws
/// Error(invalid_model) naming the value (and node `n`, when given) when its
/// shape is not static.
size_t value_bytes(const ir::Model& m, ir::ValueId id, const ir::Node* n);

/// Refuses a kiln.cuda.Conv `n` whose values do not have the sizes its spec
/// says (x, w, y; the bias one value per output channel; z the size of y):
/// cuDNN would read or write past them. Throws Error(invalid_model) naming
/// the node, the operand and both byte counts.
void check_conv_operands(const ir::Model& m, const ir::Node& n, const ConvSpec& spec, const ConvEpilogue& ep);

/// Refuses the launch configuration of kiln.cuda.Kernel `n` (attributes grid
/// and block) when no generated kernel has it: dims outside CUDA's limits
/// (grid x 1..2^31-1, y and z 0..65535, 1..1024 threads a block in all), an
/// empty grid for outputs that are not empty, or for a grid-stride kernel
/// (grid_stride = 1) a block other than its 256 threads or a grid whose
/// stride overflows its 32-bit index. Throws Error(invalid_model) naming the node.
void check_launch(const ir::Model& m, const ir::Node& n);

}  // namespace kiln::targets::cuda
