// Compile side of shape buckets: the bucket set of a model for the given
// options (which axes carry each bucketed dim, where padding is safe).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "artifact/artifact.h"
#include "ir/graph.h"
#include "kiln/options.h"

namespace kiln {

/// The bucket set for `dims` (SessionOptions::dims) on an imported model
/// whose inputs are not yet bound: dims in name order, each input's and
/// output's bucketed axes, and each dim's pad mode (DimSpec::Pad::auto_
/// resolves to batch, sequence or none; see DimSpec). Padding also needs every
/// output's shape declared without anonymous dynamic dims (so the runtime
/// knows which axes to slice); otherwise the dim gets none.
/// With `specialize_shapes`, every symbolic input dim that `dims` does not name
/// (input_shapes already bound) becomes a DimKind::specialized dim (one
/// program per size seen; pad batch where the rows are provably
/// independent, else sequence where a keep-mask input carries the dim and
/// sequence_padding_safe shows padding cannot change real positions); with `specialize_values`, every scalar integer/bool input that reaches a shape,
/// axis, count or branch input (value_guard_inputs) a DimKind::value guard.
/// Throws Error(invalid_option) naming "dims '<name>'" when no input has the dim.
artifact::BucketSet plan_buckets(const ir::Model& m, const std::map<std::string, DimSpec>& dims,
                                 bool specialize_shapes = false, bool specialize_values = false);

/// Names of the main-graph inputs holding one integer or bool value (shape
/// [] or [1]) from which a chain of nodes reaches an If condition, a Loop
/// count, or a shape / axes / count input (Reshape, Expand, Slice, Range,
/// TopK's K, ...): specializing on their value lets those fold.
std::vector<std::string> value_guard_inputs(const ir::Model& m);

/// Every combination of bucket sizes (one size per dim, in dims order), the
/// smallest first. Throws Error(invalid_option) naming "dims" when there are
/// more than artifact::detail::kMaxPrograms, or naming a dim that has no
/// declared buckets (specialized).
std::vector<std::vector<int64_t>> all_buckets(const artifact::BucketSet& set);

/// "batch=1..32:1,2,4,...(pad batch); seq=..." for notes and metadata.
std::string describe(const artifact::BucketSet& set);

}  // namespace kiln
