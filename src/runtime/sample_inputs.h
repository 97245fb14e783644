// Random sample inputs for a model (internal): `kiln run --random-inputs`,
// `kiln perf`, `kiln verify` and the compile-time precision check.
#pragma once
#include <random>
#include <string>
#include <vector>

#include "kiln/session.h"
#include "kiln/tensor.h"

namespace kiln {

/// Random data for a model input (`kiln run --random-inputs`, `kiln perf`,
/// `kiln verify`, the precision check of 16-bit cuda compiles): floats uniform in [0, 1), integers uniform in [0, 9],
/// bools half true; a symbolic dim becomes 1, with a note in `notes` when it
/// is given. `how` names the caller in the error for a dtype it cannot make
/// (Error(invalid_input) naming the input and its dtype).
Tensor random_input(const TensorInfo& info, std::mt19937_64& rng, std::vector<std::string>* notes, const char* how);

}  // namespace kiln
