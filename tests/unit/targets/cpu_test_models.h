// Small models shared by the cpu target's tests (test_cpu_target.cpp, the
// whole pipeline; test_cpu_passes.cpp, one pass at a time).
#pragma once
#include "../onnx/model_builder.h"

namespace kiln::testing {

/// Transpose(MatMul(Transpose(a), b)): the views attention blocks put around
/// their matmuls (a [2, 3, 4] read as [2, 4, 3]; the result written
/// transposed back to [2, 5, 4]).
inline ModelBuilder transposed_matmul() {
  ModelBuilder b;
  b.input("a", 1, {2, 3, 4});
  b.input("b", 1, {2, 3, 5});
  ModelBuilder::attr_ints(b.node("Transpose", {"a"}, {"at"}), "perm", {0, 2, 1});
  b.node("MatMul", {"at", "b"}, {"m"});
  ModelBuilder::attr_ints(b.node("Transpose", {"m"}, {"y"}), "perm", {0, 2, 1});
  b.output("y");
  return b;
}

}  // namespace kiln::testing
