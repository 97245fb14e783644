// Writes the test MLP model (tests/unit/onnx/model_builder.h) to argv[1].
#include "../unit/onnx/model_builder.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  kiln::testing::mlp_model().save(argv[1]);
  return 0;
}
