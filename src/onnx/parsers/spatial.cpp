// ONNX parsers for Col2Im, CenterCropPad and MaxUnpool (src/ops/spatial.cpp).
// Their inputs and attributes have not changed across versions (MaxUnpool-11
// only clarified the optional output_shape input, 22 widened dtypes), so the
// IR form is the ONNX form.
#include "onnx/parser.h"

namespace kiln::onnx_import {

/// Registers the spatial-family parsers.
void register_spatial_parsers(ParserRegistry& r) {
  r.add({"", "Col2Im", 18, 1000, nullptr});
  r.add({"", "CenterCropPad", 18, 1000, nullptr});
  r.add({"", "MaxUnpool", 9, 1000, nullptr});
}

}  // namespace kiln::onnx_import
