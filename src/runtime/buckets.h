// Shape buckets at run time: which program a request runs on, padding the
// inputs up to it and slicing the outputs back (docs/file-format.md,
// "Section 'buckets'"; DESIGN.md "Shapes"). Run side: no compiler code.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "artifact/artifact.h"
#include "kiln/tensor.h"

namespace kiln::buckets {

/// The size of each bucketed dim (BucketSet::dims order) in a request, read
/// from the inputs' axes that carry it. Inputs not present are skipped (run()
/// reports them later). Throws Error(invalid_input) naming the inputs when two
/// of them give one dim different sizes, or a dim is 0.
std::vector<int64_t> request_sizes(const artifact::BucketSet& set, const std::map<std::string, Tensor>& inputs);

/// The program sizes a request should run on.
struct Choice {
  std::vector<int64_t> sizes;  ///< per dim: smallest bucket >= the request where padding is allowed, else the request's size
  bool inside = true;          ///< false: some dim is outside every bucket (its size is then the request's own)
  std::string why;             ///< when !inside: which dim and why, e.g. "dim 'seq' is 600, above the last bucket 512"
};
Choice choose(const artifact::BucketSet& set, const std::vector<int64_t>& request);

/// True when a program compiled for `program` sizes can run a request of
/// `request` sizes: per dim equal, or smaller, padding allowed for the dim,
/// at least its min, and the program size a declared bucket size.
bool serves(const artifact::BucketSet& set, const std::vector<int64_t>& program, const std::vector<int64_t>& request);

/// Copies of the inputs zero-padded along their bucketed axes from `request`
/// to `program` sizes (inputs that need no padding are passed through).
/// Throws Error(invalid_input) for a string tensor that would need padding.
std::map<std::string, Tensor> pad_inputs(const artifact::BucketSet& set, const std::map<std::string, Tensor>& inputs,
                                         const std::vector<int64_t>& program);

/// Slices each output whose bucketed axes are larger than `request` back to it.
void slice_outputs(const artifact::BucketSet& set, std::map<std::string, Tensor>& outputs,
                   const std::vector<int64_t>& request);

/// "batch=4,seq=128" (BucketSet::dims order); "" when not bucketed.
std::string sizes_str(const artifact::BucketSet& set, const std::vector<int64_t>& sizes);

}  // namespace kiln::buckets
