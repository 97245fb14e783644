// The table of kiln.cpu operators.
#include <utility>

#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets::cpu {

KernelFactory find_factory(std::string_view op_type) {
  static const std::pair<std::string_view, KernelFactory> table[] = {
      {"Conv", make_conv},       {"MatMul", make_matmul},       {"Pool", make_pool},
      {"Eltwise", make_eltwise}, {"Binary", make_binary},       {"Softmax", make_softmax},
      {"LayerNorm", make_layernorm}, {"Reorder", make_reorder}, {"Concat", make_concat},
      {"Resample", make_resample}, {"LSTM", make_lstm}, {"SkinnyMatMul", make_skinny_matmul},
      {"GroupConv", make_group_conv},
      {"MatMulInteger", make_matmul_integer}, {"ConvInteger", make_conv_integer},
      {"DynamicQuantizeLSTM", make_dynamic_quantize_lstm}, {"DynamicQuantizeLinear", make_dynamic_quantize_linear},
  };
  for (auto& [name, f] : table)
    if (name == op_type) return f;
  return nullptr;
}

}  // namespace kiln::targets::cpu
