#include <cstdlib>

#include "kiln/options.h"
#include "support/error.h"

namespace kiln {

Target Target::parse(const std::string& text) {
  if (text == "ref") return ref();
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.rfind("cuda:", 0) == 0) {
    try {
      size_t used = 0;
      int d = std::stoi(text.substr(5), &used);
      if (used == text.size() - 5 && d >= 0) return cuda(d);
    } catch (...) {
    }
  }
  fail(ErrorCode::invalid_option, "target: unknown target '{}' (expected ref, cpu, cuda or cuda:N)", text);
}

std::string Target::name() const {
  switch (kind) {
    case Kind::ref: return "ref";
    case Kind::cpu: return "cpu";
    case Kind::cuda: return "cuda";
  }
  return "?";
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::fp16: return "fp16";
    case Precision::bf16: return "bf16";
  }
  return "?";
}

Precision parse_precision(const std::string& text) {
  if (text == "fp32") return Precision::fp32;
  if (text == "fp16") return Precision::fp16;
  if (text == "bf16") return Precision::bf16;
  fail(ErrorCode::invalid_option, "precision: unknown precision '{}' (expected fp32, fp16 or bf16)", text);
}

void SessionOptions::validate() const {
#ifndef KILN_WITH_CUDA
  if (target.kind == Target::Kind::cuda)
    fail(ErrorCode::unsupported,
         "target: this kiln was built without CUDA support (the CUDA toolkit was not found when it was built; "
         "available targets: cpu, ref)");
#endif
  if (precision != Precision::fp32)
    fail(ErrorCode::invalid_option, "precision: target {} supports only fp32, not {}", target.name(),
         precision_name(precision));
  if (cache_dir && cache_dir->empty())
    fail(ErrorCode::invalid_option, "cache_dir: the cache directory path is empty (leave it unset for the default {})",
         default_cache_dir().string());
  if (!(cache_lock_timeout_s >= 0))
    fail(ErrorCode::invalid_option, "cache_lock_timeout_s: must be >= 0 seconds, got {}", cache_lock_timeout_s);
  if (threads < 0) fail(ErrorCode::invalid_option, "threads: must be >= 0 (0 = all cores), got {}", threads);
  for (auto& [name, dims] : input_shapes) {
    if (name.empty()) fail(ErrorCode::invalid_option, "input_shapes: an input name is empty");
    for (auto d : dims)
      if (d < 0) fail(ErrorCode::invalid_option, "input_shapes: input '{}' has a negative dimension {}", name, d);
  }
}

std::filesystem::path default_cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return std::filesystem::path(xdg) / "kiln";
  const char* home = std::getenv("HOME");
  if (home && *home) return std::filesystem::path(home) / ".cache" / "kiln";
  return std::filesystem::path("/tmp") / "kiln-cache";
}

}  // namespace kiln
