// kiln_example_compile MODEL.onnx OUT.kiln [NAME=DxDxD ...]
// Compiles an ONNX model for the cpu target into an explicit artifact with
// kiln::compile (links kiln::compiler), fixing the input shapes given.
#include <kiln/compile.h>
#include <kiln/errors.h>

#include <cstdio>
#include <string>
#include <vector>

namespace {

/// "images=1x3x64x64" -> ("images", {1, 3, 64, 64}); false when malformed.
bool parse_shape(const std::string& text, std::string& name, std::vector<int64_t>& dims) {
  auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  name = text.substr(0, eq);
  dims.clear();
  std::string rest = text.substr(eq + 1);
  size_t pos = 0;
  while (pos < rest.size()) {
    size_t x = rest.find('x', pos);
    std::string part = rest.substr(pos, x == std::string::npos ? std::string::npos : x - pos);
    if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos) return false;
    dims.push_back(std::stoll(part));
    if (x == std::string::npos) break;
    pos = x + 1;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL.onnx OUT.kiln [NAME=DxDxD ...]\n", argv[0]);
    return 2;
  }
  kiln::SessionOptions opt;  // target cpu, fp32
  for (int i = 3; i < argc; ++i) {
    std::string name;
    std::vector<int64_t> dims;
    if (!parse_shape(argv[i], name, dims)) {
      std::fprintf(stderr, "error: '%s' is not NAME=DxDxD\n", argv[i]);
      return 2;
    }
    opt.input_shapes[name] = dims;
  }
  try {
    kiln::CompileResult r = kiln::compile(argv[1], argv[2], opt);
    std::printf("compiled %s -> %s: %d nodes (%d folded), arena %llu bytes, %llu bytes written, %.1f ms\n", argv[1],
                argv[2], r.nodes_compiled, r.nodes_folded, static_cast<unsigned long long>(r.arena_bytes),
                static_cast<unsigned long long>(r.artifact_bytes), r.compile_ms);
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "error (%s): %s\n", kiln::error_code_name(e.code()), e.what());
    return static_cast<int>(e.code());
  }
  return 0;
}
