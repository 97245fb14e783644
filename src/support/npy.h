// NumPy .npy files (format versions 1.0-3.0, little-endian, C order), as
// specified in numpy/lib/format.py ("NPY format").
#pragma once
#include <filesystem>

#include "kiln/tensor.h"

namespace kiln {

/// Reads a .npy file. Supports float16/32/64, bfloat16 is not a NumPy type
/// (use float32), int8-64, uint8-64, bool. Throws Error(invalid_input) naming
/// the file for Fortran order, big-endian data, an unknown dtype, a header that
/// does not parse, or a data size that does not match the shape; Error(io)
/// when the file cannot be read.
Tensor read_npy(const std::filesystem::path& p);

/// Parses .npy bytes (the same checks as read_npy; `what` names the source).
Tensor parse_npy(const uint8_t* data, size_t size, const std::string& what);

/// Writes a tensor as .npy (version 1.0) atomically. bfloat16 is widened to
/// float32, since NumPy has no bfloat16. Throws Error(io).
void write_npy(const std::filesystem::path& p, const Tensor& t);

}  // namespace kiln
