// The environment switches that change a compiled program (docs/cache.md,
// "Environment switches"): measurement aids read by the lowering passes.
#include <cstdlib>

#include "targets/pipeline.h"

namespace kiln::targets {

const std::vector<std::string>& compile_env_switch_names() {
  // Every KILN_* variable read with getenv under src/targets/*/compile/ and src/passes/
  // that changes the program; a unit test (test_key.cpp) scans those
  // directories so that a new switch cannot be left out. Debug dumps
  // (KILN_DEBUG_DUMP, KILN_CUDA_DUMP_SOURCE) and logging do not change it.
  static const std::vector<std::string> names{
      "KILN_CUDA_ATTN_MIN_BLOCKS", "KILN_CUDA_CONDITIONAL", "KILN_CUDA_CONV_GRAPH",   "KILN_CUDA_DWCONV",
      "KILN_CUDA_FUSED_ATTENTION", "KILN_CUDA_GEMM_PAD_N",  "KILN_CUDA_GEMM_SPLIT_K", "KILN_CUDA_LSTM",
      "KILN_CUDA_MERGE_QKV",       "KILN_CUDA_PATCH_GEMM",  "KILN_CUDA_POINTWISE",    "KILN_CUDA_RMS_NORM",
      "KILN_CUDA_STEM_PAD_C",      "KILN_CUDA_TUNE_GRAPH",  "KILN_CUDA_TUNE_GRIDS",   "KILN_DEBUG_CPU_SKIP",
  };
  return names;
}

std::vector<std::pair<std::string, std::string>> compile_env_switches() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& name : compile_env_switch_names())
    if (const char* v = std::getenv(name.c_str())) out.emplace_back(name, v);
  return out;
}

}  // namespace kiln::targets
