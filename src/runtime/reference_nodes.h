// Which main-graph nodes of a compiled program run on kiln's reference
// kernels (src/ops) instead of a target's own, and why (issue "no silent slow
// path"). Run side: reads the program's IR only.
#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/session.h"

namespace kiln {

/// The main-graph nodes of `m` (a program compiled for `target`: "cpu",
/// "cuda" or "ref") that run on reference kernels, each with its reason:
///  - "dynamic shape: '<value>' is [..]" (fixable: give shapes, or keep
///    shape specialization on) when a dim is an input's symbol;
///  - "data-dependent shape: ..." when the size comes from tensor values
///    (NonZero, TopK with a tensor K, Loop scan outputs, ...);
///  - a cuda program's host-segment Cast between a 16-bit type and float32:
///    "converts between the program's 16-bit values and float32, ..." (the
///    boundary of a 16-bit program's float32 host nodes);
///  - "empty tensor" (a 0-sized dim; oneDNN plans cannot take one);
///  - "small element-wise (N elements): the reference kernel beats a oneDNN call";
///  - "no <target> kernel for <op>" (the target has none for that operator
///    or those dtypes).
/// Nodes that cost nothing at run time (Identity, Reshape-like views, Shape,
/// Constant) are not listed. Empty for the ref target (everything is
/// reference there, by choice).
std::vector<ReferenceNode> reference_nodes(const ir::Model& m, const std::string& target);

/// "3 nodes on reference kernels with dynamic shapes (Softmax 'sm', ...)": a
/// note for the user when some node runs there for a reason they can fix
/// (dynamic shapes); "" when none does.
std::string reference_nodes_note(const std::vector<ReferenceNode>& nodes);

/// The note of a cuda program with host fallback (m.segments): "2 node(s) of
/// the cuda program run on the host (host fallback): Einsum 'e', TopK 't'
/// in 1 host segment, 3 values copied across the boundaries (12.0 KiB);
/// --fallback error refuses instead"; "" when every node runs on the device.
std::string host_fallback_note(const ir::Model& m);

}  // namespace kiln
