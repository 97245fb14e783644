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

/// For a dim padded as a sequence (set.dims[k]): true when every keep-mask
/// input having it (integer or bool, a name containing "mask") attends to
/// the first position of each of its rows along the dim's axis (right
/// padding, as tokenizers write it). Then every row of a masked Softmax has
/// a real entry that is not masked out, also under a causal mask, and the
/// padded entries come out exactly 0 (sequence_prover.h); a row whose real
/// entries were all masked would share its weight with the padded ones, so
/// such a request (left padding, an empty row) runs unpadded. True when no
/// input is a keep-mask.
bool masks_attend(const artifact::BucketSet& set, const std::map<std::string, Tensor>& inputs, size_t k);

/// Copies of the inputs zero-padded along their bucketed axes from `request`
/// to `program` sizes (inputs that need no padding are passed through).
/// Throws Error(invalid_input) for a string tensor that would need padding.
std::map<std::string, Tensor> pad_inputs(const artifact::BucketSet& set, const std::map<std::string, Tensor>& inputs,
                                         const std::vector<int64_t>& program);

/// Slices each output whose bucketed axes are larger than `request` back to it.
void slice_outputs(const artifact::BucketSet& set, std::map<std::string, Tensor>& outputs,
                   const std::vector<int64_t>& request);

/// One part of a request split along a batch-padded dim: `rows` consecutive
/// rows of the request run on the program compiled for `program` rows
/// (program >= rows; the difference is zero padding).
struct RowPart {
  int64_t rows = 0;
  int64_t program = 0;
};

/// The cheapest way to run a batch of `n` rows (n >= 1) on programs of the
/// sizes given, each with its estimated cost per call (any unit, the same
/// for all; > 0): parts of consecutive rows, each on one program, where only
/// the last part may be padded (so a part never runs mostly padding twice).
/// Dynamic programming over row counts 0..n, O(n x programs); of equal costs
/// the plan with fewer parts wins. Splitting is sound only for a dim whose
/// rows are proven independent (PadMode::batch). `cost` (may be null) gets
/// the plan's total. Empty when `programs` is empty or n < 1.
std::vector<RowPart> plan_rows(int64_t n, const std::vector<std::pair<int64_t, double>>& programs,
                               double* cost = nullptr);

/// Views (no copy) of rows [offset, offset + count) of each input carrying
/// set.dims[dim] at axis 0; inputs without it are passed as given. The
/// inputs must outlive the views. Throws Error(invalid_input) for a string
/// tensor carrying the dim (it cannot be split).
std::map<std::string, Tensor> slice_rows(const artifact::BucketSet& set, size_t dim,
                                         const std::map<std::string, Tensor>& inputs, int64_t offset, int64_t count);

/// Each output carrying set.dims[dim] at axis 0 concatenated along axis 0
/// over `parts` (in order; each part already sliced to its own rows); an
/// output without the dim is taken from the first part. Throws
/// Error(internal) when the parts disagree on an output's other dims.
std::map<std::string, Tensor> concat_rows(const artifact::BucketSet& set, size_t dim,
                                          std::vector<std::map<std::string, Tensor>>& parts);

/// "batch=4,seq=128" (BucketSet::dims order); "" when not bucketed.
std::string sizes_str(const artifact::BucketSet& set, const std::vector<int64_t>& sizes);

}  // namespace kiln::buckets
