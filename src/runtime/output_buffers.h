// Session::run_into's caller-owned output buffers: which output shapes are
// known before a run, the checks of the caller's tensors, and the one copy
// into them where a program could not write in place (internal to the runtime).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "kiln/session.h"
#include "kiln/tensor.h"

namespace kiln {

/// The shape of each output of `outputs` known from the program's declared
/// types and the given inputs: static dims, and symbolic dims whose symbol
/// an input of `inputs_info` carries (its size in `input_shapes`, by input
/// name). Outputs with a dim known neither way are left out.
std::map<std::string, std::vector<int64_t>> known_output_shapes(
    const std::vector<TensorInfo>& outputs, const std::vector<TensorInfo>& inputs_info,
    const std::map<std::string, std::vector<int64_t>>& input_shapes);

/// The shape of each tensor of `tensors`, by name.
std::map<std::string, std::vector<int64_t>> shapes_of(const std::map<std::string, Tensor>& tensors);

/// Checks the caller's `buffers` against the graph outputs `outputs`: every
/// output named once, no unknown name, the output's dtype, and the shape of
/// `known` where it has one. Throws Error(invalid_input) naming the output.
void check_output_buffers(const std::map<std::string, Tensor>& buffers, const std::vector<TensorInfo>& outputs,
                          const std::map<std::string, std::vector<int64_t>>& known);

/// Copies each computed output of `values` into the caller's tensor of the
/// same name in `buffers` unless it is already there (same data pointer).
/// Every dtype and shape is checked first, so on an error no buffer is
/// written: Error(invalid_input) naming the output, the shape it has and the
/// shape the buffer has.
void deliver_outputs(const std::map<std::string, Tensor>& values, const std::map<std::string, Tensor>& buffers);

}  // namespace kiln
