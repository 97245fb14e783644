// The kernels section of a cuda artifact (cuda_ops.h).
#include <cstring>

#include <fmt/format.h>

#include "support/error.h"
#include "support/hash.h"
#include "targets/cuda/run/cuda_ops.h"

namespace kiln::targets::cuda {

namespace {
constexpr char kMagic[8] = {'K', 'L', 'N', 'C', 'U', 'D', 'A', '1'};

void put(std::vector<uint8_t>& out, const void* p, size_t n) {
  uint64_t len = n;
  size_t at = out.size();
  out.resize(at + 8 + n);
  std::memcpy(out.data() + at, &len, 8);
  if (n) std::memcpy(out.data() + at + 8, p, n);
}
}  // namespace

std::vector<uint8_t> encode_bundle(const KernelBundle& b) {
  std::vector<uint8_t> out(kMagic, kMagic + 8);
  put(out, b.arch.data(), b.arch.size());
  put(out, b.cubin.data(), b.cubin.size());
  put(out, b.ptx.data(), b.ptx.size());
  put(out, b.source.data(), b.source.size());
  return out;
}

KernelBundle decode_bundle(const std::vector<uint8_t>& bytes, const std::string& what) {
  auto bad = [&](const std::string& why) {
    fail(ErrorCode::corrupt_artifact, "artifact '{}' is corrupt: section 'kernels': {}", what, why);
  };
  if (bytes.size() < 8 || std::memcmp(bytes.data(), kMagic, 8) != 0) bad("it does not start with \"KLNCUDA1\"");
  size_t pos = 8;
  auto field = [&](const char* name) {
    if (bytes.size() - pos < 8) bad(std::string("truncated before the length of ") + name);
    uint64_t len;
    std::memcpy(&len, bytes.data() + pos, 8);
    pos += 8;
    if (len > bytes.size() - pos) bad(std::string("the length of ") + name + " runs past the section");
    std::string s(reinterpret_cast<const char*>(bytes.data() + pos), len);
    pos += len;
    return s;
  };
  KernelBundle b;
  b.arch = field("arch");
  std::string cubin = field("cubin");
  b.cubin.assign(cubin.begin(), cubin.end());
  b.ptx = field("ptx");
  b.source = field("source");
  if (pos != bytes.size()) bad("bytes after the last field");
  if (b.arch.rfind("sm_", 0) != 0) bad("arch '" + b.arch + "' is not sm_XX");
  if (b.cubin.empty()) bad("no cubin");
  return b;
}

std::string cubin_digest(const KernelBundle& b) { return fmt::format("{:016x}", hash64(b.cubin.data(), b.cubin.size())); }

void check_bundle_matches(const ir::Model& model, const KernelBundle& b) {
  const std::string d = cubin_digest(b);
  for (auto& n : model.main.nodes)
    if (n.domain == kCudaDomain && n.op_type == "Kernel" && n.s("cubin", d) != d)
      fail(ErrorCode::invalid_model, "{}: its kernel was compiled into another cubin than its program carries",
           n.label());
}

int64_t kernels_value(const ir::Model& model) {
  for (size_t i = model.values.size(); i-- > 0;) {
    const ir::Value& v = model.values[i];
    if (v.name == kKernelsValue && v.constant && v.constant->dtype() == DType::u8) return static_cast<int64_t>(i);
  }
  return -1;
}

KernelBundle program_bundle(const ir::Model& model, const std::vector<uint8_t>& section, const std::string& what) {
  const int64_t k = kernels_value(model);
  if (k < 0) return decode_bundle(section, what);
  const Tensor& t = *model.values[static_cast<size_t>(k)].constant;
  const auto* p = static_cast<const uint8_t*>(t.raw());
  return decode_bundle(std::vector<uint8_t>(p, p + t.nbytes()), what);
}

}  // namespace kiln::targets::cuda
