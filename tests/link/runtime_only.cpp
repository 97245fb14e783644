// A program that links only kiln_runtime: loads an artifact and runs it on
// zero-filled inputs. Its link line proves the run side needs no compiler code.
#include <cstdio>

#include "kiln/session.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s ARTIFACT.kiln\n", argv[0]);
    return 2;
  }
  try {
    kiln::SessionOptions opt;
    auto s = kiln::Session::load(argv[1], opt);
    std::map<std::string, kiln::Tensor> in;
    for (auto& i : s.inputs()) {
      std::vector<int64_t> shape;
      for (auto d : i.dims) shape.push_back(d < 0 ? 1 : d);
      in[i.name] = kiln::Tensor(i.dtype, shape);
    }
    auto out = s.run(in);
    for (auto& [name, t] : out) std::printf("%s %s\n", name.c_str(), t.describe().c_str());
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return static_cast<int>(e.code());
  }
  return 0;
}
