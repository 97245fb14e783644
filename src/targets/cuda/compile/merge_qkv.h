// One matmul for the Q, K and V projections of an attention (merge_qkv.cpp).
#pragma once
#include "ir/graph.h"

namespace kiln::targets::cuda {

/// Merges the main-graph MatMuls that read one activation X [.., K] with
/// constant 2-D weights W_i [K, N_i] of one 16-bit dtype (float16 /
/// bfloat16), each optionally followed by its only reader Add(., b_i) of a
/// constant [N_i] bias (all of a group or none), into MatMul(X, [W_1 | W_2 |
/// ...]) [+ Add [b_1 | b_2 | ...]] and a Split of the last axis into the
/// original values. Only MatMuls whose result reaches a MatMul of two
/// activations (Q K^T or P V) through Reshape / Transpose / Squeeze /
/// Unsqueeze / Flatten and scalar Mul / Div nodes are merged: the fused
/// attention (fuse_attention.cpp) then reads Q, K and V as strided views of
/// the merged result and the Split costs nothing. BERT-style encoders' three
/// [768 x 768] projections become one [768 x 2304] matmul (fewer, larger
/// cuBLASLt launches). Run after the precision pass, only when the fused
/// attention is on. KILN_CUDA_MERGE_QKV=0 turns it off (a measurement aid).
/// Returns the number of groups merged.
int merge_qkv_matmuls(ir::Model& m);

}  // namespace kiln::targets::cuda
