// TensorProto conversion (internal to the importer).
#pragma once
#include <filesystem>
#include <string>

#include "kiln/tensor.h"
#include "onnx/onnx_pb.h"

namespace kiln::onnx_import {

/// ONNX elem_type -> DType. Throws Error(unsupported) for string/complex/float4,
/// Error(invalid_model) for an unknown code; `where` names the tensor or value.
DType dtype_from_onnx(int elem_type, const std::string& where);

/// Converts a TensorProto (typed fields, raw_data or external data resolved
/// against base_dir). Throws Error(invalid_model) when the data does not fit
/// the shape, Error(io) when an external file cannot be read. 4-bit integer
/// data (packed two per byte in ONNX) comes back unpacked, one per byte.
Tensor tensor_from_proto(const onnx::TensorProto& tp, const std::filesystem::path& base_dir, const std::string& where);

}  // namespace kiln::onnx_import
