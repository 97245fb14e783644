#include <fmt/ranges.h>

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

const char* precision_check_name(PrecisionCheck c) { return c == PrecisionCheck::off ? "off" : "on"; }

PrecisionCheck parse_precision_check(const std::string& text) {
  if (text == "on") return PrecisionCheck::on;
  if (text == "off") return PrecisionCheck::off;
  fail(ErrorCode::invalid_option, "precision_check: unknown value '{}' (expected on or off)", text);
}

const char* tuning_name(Tuning t) {
  switch (t) {
    case Tuning::heuristic: return "heuristic";
    case Tuning::fast: return "fast";
    case Tuning::exhaustive: return "exhaustive";
  }
  return "?";
}

Tuning parse_tuning(const std::string& text) {
  if (text == "heuristic") return Tuning::heuristic;
  if (text == "fast") return Tuning::fast;
  if (text == "exhaustive") return Tuning::exhaustive;
  fail(ErrorCode::invalid_option, "tuning: unknown tuning mode '{}' (expected heuristic, fast or exhaustive)", text);
}

const char* fallback_name(Fallback f) { return f == Fallback::host ? "host" : "error"; }

Fallback parse_fallback(const std::string& text) {
  if (text == "host") return Fallback::host;
  if (text == "error") return Fallback::error;
  fail(ErrorCode::invalid_option, "fallback: unknown value '{}' (expected host or error)", text);
}

std::optional<Tuning> SessionOptions::effective_tuning() const {
  if (target.kind != Target::Kind::cuda) return std::nullopt;
  return tuning.value_or(Tuning::fast);
}

std::string precision_text(Precision p, bool allow_tf32) {
  std::string s = precision_name(p);
  if (allow_tf32 && p == Precision::fp32) s += "+tf32";
  return s;
}

namespace {

// Strict decimal integer (no sign, no spaces, no trailing text).
int64_t parse_size(const std::string& text, const std::string& option, const std::string& whole) {
  if (text.empty() || text.size() > 12 || text.find_first_not_of("0123456789") != std::string::npos)
    fail(ErrorCode::invalid_option, "{}: '{}' in '{}' is not a size (a positive integer)", option, text, whole);
  return std::stoll(text);
}

std::vector<int64_t> parse_list(const std::string& text, const std::string& option, const std::string& whole) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    out.push_back(parse_size(text.substr(start, comma - start), option, whole));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

DimSpec DimSpec::parse(const std::string& text, const std::string& option) {
  DimSpec d;
  std::string body = text;
  if (auto semi = body.find("/pad="); semi != std::string::npos) {
    std::string mode = body.substr(semi + 5);
    if (mode == "none") d.pad = Pad::none;
    else if (mode == "sequence") d.pad = Pad::sequence;
    else if (mode != "auto")
      fail(ErrorCode::invalid_option, "{}: unknown pad mode '{}' in '{}' (expected auto, none or sequence)", option,
           mode, text);
    body = body.substr(0, semi);
  }
  if (body.empty())
    fail(ErrorCode::invalid_option, "{}: empty; expected a list (1,2,4,8), a range (1..512) or a range with buckets "
         "(1..512:16,64,512)", option);
  if (auto dots = body.find(".."); dots != std::string::npos) {
    auto colon = body.find(':', dots);
    d.min = parse_size(body.substr(0, dots), option, text);
    d.max = parse_size(body.substr(dots + 2, colon == std::string::npos ? std::string::npos : colon - dots - 2), option, text);
    if (d.min < 1 || d.max < d.min)
      fail(ErrorCode::invalid_option, "{}: range '{}' must satisfy 1 <= start <= end", option, text);
    if (colon != std::string::npos) {
      d.sizes = parse_list(body.substr(colon + 1), option, text);
      if (!d.sizes.empty() && d.sizes.back() < d.max) d.sizes.push_back(d.max);
    } else {
      // Powers of two from the first one >= min; the range's end closes the list.
      for (int64_t p = 1; p < d.max; p *= 2)
        if (p >= d.min) d.sizes.push_back(p);
      d.sizes.push_back(d.max);
    }
  } else {
    d.sizes = parse_list(body, option, text);
    d.min = 1;
    d.max = d.sizes.empty() ? 0 : d.sizes.back();
  }
  d.validate(option);
  return d;
}

std::string DimSpec::str() const {
  std::string s = fmt::format("{}..{}:{}", min, max, fmt::join(sizes, ","));
  if (pad == Pad::none) s += "/pad=none";
  if (pad == Pad::sequence) s += "/pad=sequence";
  return s;
}

void DimSpec::validate(const std::string& option) const {
  if (sizes.empty()) fail(ErrorCode::invalid_option, "{}: no bucket sizes", option);
  if (sizes.size() > 64) fail(ErrorCode::invalid_option, "{}: {} buckets, at most 64", option, sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 1) fail(ErrorCode::invalid_option, "{}: bucket size {} is below 1", option, sizes[i]);
    if (i && sizes[i] <= sizes[i - 1])
      fail(ErrorCode::invalid_option, "{}: bucket sizes must be strictly ascending ({} after {})", option, sizes[i],
           sizes[i - 1]);
  }
  if (min < 1 || min > sizes.front())
    fail(ErrorCode::invalid_option, "{}: the smallest size served, {}, must be between 1 and the first bucket {}",
         option, min, sizes.front());
  if (max != sizes.back())
    fail(ErrorCode::invalid_option, "{}: bucket {} lies outside the range {}..{}", option, sizes.back(), min, max);
}

void SessionOptions::validate() const {
#ifndef KILN_WITH_CUDA
  if (target.kind == Target::Kind::cuda)
    fail(ErrorCode::unsupported,
         "target: this kiln was built without CUDA support (the CUDA toolkit was not found when it was built; "
         "available targets: cpu, ref)");
#endif
  // fp16 / bf16 and TF32 are cuda features (the cpu and ref targets compute
  // float32 exactly as written).
  if (precision != Precision::fp32 && target.kind != Target::Kind::cuda)
    fail(ErrorCode::invalid_option, "precision: target {} supports only fp32, not {} (fp16 and bf16 need target cuda)",
         target.name(), precision_name(precision));
  if (allow_tf32 && target.kind != Target::Kind::cuda)
    fail(ErrorCode::invalid_option, "allow_tf32: TF32 math is a cuda option; target {} computes float32 exactly",
         target.name());
  if (allow_tf32 && precision != Precision::fp32)
    fail(ErrorCode::invalid_option,
         "allow_tf32: TF32 applies to fp32 matmuls and convolutions only; precision {} already runs them on 16-bit "
         "inputs with fp32 accumulation",
         precision_name(precision));
  if (!precision_check_inputs.empty() && precision_check == PrecisionCheck::off)
    fail(ErrorCode::invalid_option, "precision_check_inputs: sample inputs given while precision_check is off");
  for (auto& [name, t] : precision_check_inputs)
    if (name.empty() || !t.defined())
      fail(ErrorCode::invalid_option, "precision_check_inputs: {}", name.empty() ? "an input name is empty"
                                                                                 : "input '" + name + "' has no data");
  if (tuning && target.kind != Target::Kind::cuda)
    fail(ErrorCode::invalid_option, "tuning: only the cuda target tunes library algorithms (target is {})",
         target.name());
  if (!arch.empty()) {
    if (target.kind != Target::Kind::cuda)
      fail(ErrorCode::invalid_option, "arch: only the cuda target compiles for a GPU architecture (target is {})",
           target.name());
    bool digits = arch.size() >= 5 && arch.size() <= 7 && arch.rfind("sm_", 0) == 0 &&
                  arch.find_first_not_of("0123456789", 3) == std::string::npos && arch[3] != '0';
    if (!digits && arch.size() > 3 && (arch.back() == 'a' || arch.back() == 'f') && arch.rfind("sm_", 0) == 0)
      fail(ErrorCode::invalid_option,
           "arch: '{}' is an architecture-specific target, which kiln does not compile for (its cubin would run on "
           "that one architecture only, with no PTX for newer GPUs); use '{}'",
           arch, arch.substr(0, arch.size() - 1));
    if (!digits)
      fail(ErrorCode::invalid_option, "arch: '{}' is not a GPU architecture (expected sm_XY, e.g. sm_90 for H100/H200)",
           arch);
  }
  if (cache_dir && cache_dir->empty())
    fail(ErrorCode::invalid_option, "cache_dir: the cache directory path is empty (leave it unset for the default {})",
         default_cache_dir().string());
  if (max_loaded_programs < 0)
    fail(ErrorCode::invalid_option, "max_loaded_programs: must be >= 0 (0: no bound), got {}", max_loaded_programs);
  if (max_cached_programs < 0)
    fail(ErrorCode::invalid_option, "max_cached_programs: must be >= 0 (0: no bound), got {}", max_cached_programs);
  if (!(cache_lock_timeout_s >= 0))
    fail(ErrorCode::invalid_option, "cache_lock_timeout_s: must be >= 0 seconds, got {}", cache_lock_timeout_s);
  if (threads < 0) fail(ErrorCode::invalid_option, "threads: must be >= 0 (0 = all cores), got {}", threads);
  for (auto& [name, dims] : input_shapes) {
    if (name.empty()) fail(ErrorCode::invalid_option, "input_shapes: an input name is empty");
    for (auto d : dims)
      if (d < 0) fail(ErrorCode::invalid_option, "input_shapes: input '{}' has a negative dimension {}", name, d);
  }
  for (auto& [name, spec] : dims) {
    if (name.empty()) fail(ErrorCode::invalid_option, "dims: a dim name is empty");
    spec.validate(fmt::format("dims '{}'", name));
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
