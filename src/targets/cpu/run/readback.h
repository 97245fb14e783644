// Reading a cpu program's channel-blocked values back as plain tensors
// (run side; kiln verify compares them with the ref target's values).
#pragma once
#include <optional>

#include "ir/graph.h"
#include "kiln/tensor.h"

namespace kiln::targets::cpu {

/// The plain (row-major float32) contents of the first output of kiln.cpu
/// node `n`, whose raw buffer (the flat [bytes/4] float32 value the layout
/// pass gives a channel-blocked activation, cpu_kernels.h) is `raw`, when
/// the node writes that output in a channel-blocked layout (nChw16c, ...;
/// dnnl_util.h is_blocked). Returns a tensor of the layout's logical dims
/// (e.g. [N,C,H,W]). std::nullopt when `n` is not a kiln.cpu node, has no
/// output layout attribute or writes a plain one, or `raw` is smaller than
/// the layout spans. Throws Error(internal) when oneDNN cannot convert it.
std::optional<Tensor> blocked_output_to_plain(const ir::Node& n, const Tensor& raw);

}  // namespace kiln::targets::cpu
