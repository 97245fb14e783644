#include "runtime/sample_inputs.h"

#include <fmt/format.h>

#include "support/error.h"

namespace kiln {

Tensor random_input(const TensorInfo& info, std::mt19937_64& rng, std::vector<std::string>* notes, const char* how) {
  std::vector<int64_t> shape;
  for (size_t i = 0; i < info.dims.size(); ++i) {
    if (info.dims[i] >= 0) {
      shape.push_back(info.dims[i]);
      continue;
    }
    shape.push_back(1);
    if (notes)
      notes->push_back(fmt::format("input '{}': dim {} ('{}') is symbolic; the random input uses 1 (fix it with --shape)",
                                   info.name, i, info.symbols[i]));
  }
  Tensor t(info.dtype, shape);
  std::uniform_real_distribution<float> uf(0.f, 1.f);
  std::uniform_int_distribution<int> ui(0, 9);
  for (int64_t i = 0; i < t.numel(); ++i) switch (info.dtype) {
      case DType::f32: t.data<float>()[i] = uf(rng); break;
      case DType::f64: t.data<double>()[i] = uf(rng); break;
      case DType::i64: t.data<int64_t>()[i] = ui(rng); break;
      case DType::i32: t.data<int32_t>()[i] = ui(rng); break;
      case DType::boolean: t.data<bool>()[i] = ui(rng) < 5; break;
      case DType::u8: t.data<uint8_t>()[i] = static_cast<uint8_t>(ui(rng)); break;
      case DType::i8: t.data<int8_t>()[i] = static_cast<int8_t>(ui(rng)); break;
      default:
        fail(ErrorCode::invalid_input, "{} cannot make a random {} input '{}'; give it with --input {}=FILE.npy", how,
             dtype_name(info.dtype), info.name, info.name);
    }
  return t;
}

}  // namespace kiln
