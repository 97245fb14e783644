// kiln_example_run ARTIFACT.kiln
// Loads an explicit artifact with kiln::Session::load and runs it once on
// deterministic inputs (links only kiln::runtime: no compiler in this program).
// Input element i holds ((i % 17) - 8) / 8 for floats, i % 7 for integers and
// i % 2 for bools; symbolic dims are 1. Prints, per output, one line:
//   output NAME DTYPE[SHAPE] sum=S first=V0,V1,...
// (examples/cpp/check_example.py recomputes the same with ONNX Runtime).
#include <kiln/errors.h>
#include <kiln/session.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>

namespace {

/// A tensor of `info`'s dtype and shape (symbolic dims 1) holding the pattern above.
kiln::Tensor make_input(const kiln::TensorInfo& info) {
  std::vector<int64_t> shape;
  for (auto d : info.dims) shape.push_back(d < 0 ? 1 : d);
  kiln::Tensor t(info.dtype, shape);
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    const double f = static_cast<double>(i % 17 - 8) / 8.0;
    switch (info.dtype) {
      case kiln::DType::f32: t.data<float>()[i] = static_cast<float>(f); break;
      case kiln::DType::f64: t.data<double>()[i] = f; break;
      case kiln::DType::i64: t.data<int64_t>()[i] = i % 7; break;
      case kiln::DType::i32: t.data<int32_t>()[i] = static_cast<int32_t>(i % 7); break;
      case kiln::DType::boolean: t.data<bool>()[i] = (i % 2) != 0; break;
      default: break;  // other dtypes stay zero
    }
  }
  return t;
}

/// Element i of `t` as a double (0 for dtypes this example does not print).
double value(const kiln::Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case kiln::DType::f32: return t.data<float>()[i];
    case kiln::DType::f64: return t.data<double>()[i];
    case kiln::DType::i64: return static_cast<double>(t.data<int64_t>()[i]);
    case kiln::DType::i32: return t.data<int32_t>()[i];
    case kiln::DType::boolean: return t.data<bool>()[i] ? 1 : 0;
    default: return 0;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s ARTIFACT.kiln\n", argv[0]);
    return 2;
  }
  try {
    kiln::SessionOptions opt;  // target cpu
    kiln::Session s = kiln::Session::load(argv[1], opt);
    std::map<std::string, kiln::Tensor> inputs;
    for (auto& info : s.inputs()) inputs[info.name] = make_input(info);
    auto outputs = s.run(inputs);
    for (auto& info : s.outputs()) {
      const kiln::Tensor& t = outputs.at(info.name);
      double sum = 0;
      for (int64_t i = 0; i < t.numel(); ++i) sum += value(t, i);
      std::string first;
      for (int64_t i = 0; i < t.numel() && i < 4; ++i) first += (i ? "," : "") + std::to_string(value(t, i));
      std::printf("output %s %s sum=%.9g first=%s\n", info.name.c_str(), t.describe().c_str(), sum, first.c_str());
    }
    std::printf("load %.2f ms\n", s.stats().load_ms);
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "error (%s): %s\n", kiln::error_code_name(e.code()), e.what());
    return static_cast<int>(e.code());
  }
  return 0;
}
