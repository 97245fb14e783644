// The executor of the precision check (precision_check.h): one run of a
// main graph on the ref kernels, node by node, with the 16-bit values of the
// emulated program rounded in place where their node writes them (If / Loop /
// Scan bodies included, run as written: they are float32 on cuda).
//
// It is the ref target's execution (targets::bind_kernel "ref", the same
// kernels and OpenMP thread count as a ref Program), with their matrix
// products (Conv, MatMul, Gemm) through oneDNN's JIT-compiled sgemm
// (targets::library_sgemm, via ops::SgemmOverride) instead of the portable
// SSE2 one, and without what the check does not need: no Program (no arena
// plan, no input validation), no Cast
// pair and its two buffers per 16-bit value (emulate_16bit's
// `round_in_place`), no zero-filling of each output buffer (kernels write
// every element: ops::KernelContext::output's contract), and each value
// freed after its last reader unless the caller keeps it.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/tensor.h"

namespace kiln {

/// Called after a node has run, once per float32 output value it wrote
/// (already rounded where `round` says). The caller may keep `t` (a shallow
/// copy keeps the buffer alive) but must not write to it.
using CheckObserver = std::function<void(ir::ValueId value, const Tensor& t)>;

/// Runs `m`'s main graph (static shapes) on `inputs` (by name, every
/// main-graph input; dtypes and shapes as the model's: not checked). If /
/// Loop / Scan run on the ref target's control-flow kernels
/// (ops/control_flow.cpp), their bodies node by node on the ref kernels as
/// written (float32 on cuda: never rounded, never observed); the
/// control-flow node's outputs are observed like any other node's.
/// `round`: per value id (may be shorter than m.values, or empty),
/// DType::f16 / DType::bf16 to round that value's float32 elements to that
/// type's nearest value (round_to_half / round_to_bf16) right after its node
/// writes it, DType::undefined to leave it. `threads` > 0 sets the OpenMP
/// threads of the run (restored after). Throws the kernels' errors naming
/// the node, Error(unsupported) for an operator without a reference kernel
/// (in a body too).
void run_for_check(const ir::Model& m, const std::map<std::string, Tensor>& inputs, const std::vector<DType>& round,
                   int threads, const CheckObserver& observe);

/// Rounds the float32 tensor `t` in place to `to` (DType::f16 or
/// DType::bf16) values; OpenMP-parallel over large tensors. Equal to a Cast
/// to `to` and back, element for element (NaN becomes a quiet NaN).
void round_in_place(Tensor& t, DType to);

}  // namespace kiln
