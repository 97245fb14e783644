#include "targets/host.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>

#include "support/error.h"
#include "support/version.h"
#include "targets/cpu/run/dnnl_util.h"
#ifdef KILN_WITH_CUDA
#include "targets/cuda/run/driver.h"
#endif

namespace kiln::targets {

namespace {
std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      return p == std::string::npos ? line : line.substr(p + 2);
    }
  return "unknown x86-64 CPU";
}

std::vector<std::string> host_isa() {
  std::vector<std::string> out{"sse2"};
  __builtin_cpu_init();
  if (__builtin_cpu_supports("sse4.2")) out.push_back("sse4.2");
  if (__builtin_cpu_supports("avx")) out.push_back("avx");
  if (__builtin_cpu_supports("avx2")) out.push_back("avx2");
  if (__builtin_cpu_supports("fma")) out.push_back("fma");
  if (__builtin_cpu_supports("avx512f")) out.push_back("avx512f");
  return out;
}
}  // namespace

std::string Mismatch::str() const {
  return fmt::format("{}: the artifact has '{}', here it must be '{}'", field, artifact, here);
}

std::vector<std::string> required_isa(const Target& t) {
  // The cuda target's host code is baseline x86-64 too; its device needs are device_arch.
  (void)t;
  return {"sse2"};
}

artifact::CompatInfo host_facts(const Target& target) {
  artifact::CompatInfo c;
  c.kiln_version = kiln::version();
  c.target = target.name();
  if (target.kind == Target::Kind::cuda) {
    // The GPU's architecture and name, and the exact driver / runtime /
    // cuBLASLt / cuDNN versions: cubins and stored matmul algorithms are
    // only valid where all of them are the same.
    c.cpu_isa = host_isa();
#ifdef KILN_WITH_CUDA
    // No usable device: facts that match no artifact, so that `kiln check`
    // and loads refuse a cuda artifact naming device_arch (compiling still
    // fails with the driver's reason, in the pipeline).
    try {
      auto f = cuda::device_facts(target.device);
      c.device_arch = f.arch;
      c.device_name = f.name;
      c.library_versions = f.libraries;
    } catch (const Error& e) {
      c.device_arch = fmt::format("none ({})", e.what());
      c.device_name = "none";
    }
#else
    c.device_arch = "none (this kiln was built without CUDA support)";
    c.device_name = "none";
#endif
    return c;
  }
  c.device_arch = "x86-64";
  c.device_name = cpu_model_name();
  c.cpu_isa = host_isa();
  // The cpu target's packed weights are laid out for this oneDNN and the ISA
  // its kernels use here: an artifact is only valid where both are the same.
  if (target.kind == Target::Kind::cpu)
    c.library_versions = {{"onednn", cpu::onednn_version()}, {"onednn_isa", cpu::onednn_isa()}};
  return c;
}

namespace {
std::string fmt_libs(const std::vector<std::pair<std::string, std::string>>& v) {
  std::string s;
  for (auto& [k, x] : v) s += (s.empty() ? "" : ",") + k + "=" + x;
  return s.empty() ? std::string("none") : s;
}

bool is_number(const std::string& s) {
  return !s.empty() && s.size() < 12 && s.find_first_not_of("0123456789") == std::string::npos;
}

/// The library fields in which `a` (the artifact) cannot run with `h` (here).
/// `rechosen`: the artifact's library algorithm decisions are not used here
/// (runs_through_ptx), so only the driver / runtime minimums apply.
void compare_libraries(const artifact::CompatInfo& a, const artifact::CompatInfo& h, std::vector<Mismatch>& out,
                       bool rechosen) {
  std::map<std::string, std::string> here(h.library_versions.begin(), h.library_versions.end());
  std::map<std::string, std::string> art(a.library_versions.begin(), a.library_versions.end());
  bool differs = false;
  for (auto& [k, v] : art) {
    auto it = here.find(k);
    if (it == here.end()) {
      differs = true;
      continue;
    }
    const bool minimum = k == "cuda_driver" || k == "cuda_runtime";
    if (v.rfind("any", 0) == 0 || (rechosen && !minimum)) continue;
    if (minimum && is_number(v) && is_number(it->second)) {
      if (std::stoll(it->second) < std::stoll(v))
        out.push_back({"library_versions." + k, v + " or newer",
                       it->second + fmt::format(" (too old: this artifact needs CUDA {}.{} or newer)",
                                                std::stoll(v) / 1000, std::stoll(v) % 1000 / 10)});
      continue;
    }
    if (v != it->second) differs = true;
  }
  for (auto& [k, v] : here)
    if (!art.count(k) && !rechosen) differs = true;
  if (differs) out.push_back({"library_versions", fmt_libs(a.library_versions), fmt_libs(h.library_versions)});
}
}  // namespace

std::vector<Mismatch> compare_facts(const artifact::CompatInfo& a, const artifact::CompatInfo& h) {
  std::vector<Mismatch> out;
  if (a.format_version != artifact::kFormatVersion)
    out.push_back({"format_version", std::to_string(a.format_version), std::to_string(artifact::kFormatVersion)});
  if (a.kiln_version != h.kiln_version) out.push_back({"kiln_version", a.kiln_version, h.kiln_version});
  if (a.target != h.target) out.push_back({"target", a.target, h.target});
  const bool ptx = a.target == "cuda" && runs_through_ptx(a.device_arch, h.device_arch);
  if (a.device_arch != h.device_arch && !ptx) out.push_back({"device_arch", a.device_arch, h.device_arch});
  std::vector<std::string> missing;
  for (auto& f : a.cpu_isa)
    if (std::find(h.cpu_isa.begin(), h.cpu_isa.end(), f) == h.cpu_isa.end()) missing.push_back(f);
  if (!missing.empty())
    out.push_back({"cpu_isa", fmt::format("{}", fmt::join(a.cpu_isa, ",")),
                   fmt::format("{} (missing: {})", fmt::join(h.cpu_isa, ","), fmt::join(missing, ","))});
  // Without a device there are no library versions to compare: device_arch
  // already says why the artifact cannot run.
  if (h.device_arch.rfind("none", 0) != 0 || a.device_arch.rfind("none", 0) == 0) compare_libraries(a, h, out, ptx);
  return out;
}

std::vector<std::string> compat_notes(const artifact::CompatInfo& a, const artifact::CompatInfo& h) {
  std::vector<std::string> notes;
  if (a.target == "cuda" && runs_through_ptx(a.device_arch, h.device_arch))
    notes.push_back(fmt::format(
        "device_arch: the artifact's cubins are for {}, this GPU is {}: its kernels will be JIT-compiled from the "
        "stored compute_{} PTX at load (a slower load; the program may run slower than one compiled for {}), and its "
        "matmul / convolution algorithms chosen again by the cuBLASLt / cuDNN heuristics; recompile for {} for full "
        "speed",
        a.device_arch, h.device_arch, a.device_arch.substr(3), h.device_arch, h.device_arch));
  return notes;
}

std::vector<Mismatch> check_runnable(const artifact::CompatInfo& a, const Target& requested) {
  return compare_facts(a, host_facts(requested));
}

artifact::CompatInfo compile_facts_for_arch(const Target& target, const std::string& arch) {
#ifdef KILN_WITH_CUDA
  artifact::CompatInfo c = host_facts(target);
  if (c.device_arch == arch) return c;
  c.device_arch = arch;
  c.device_name = "any (cross-compiled)";
  c.library_versions = cuda::cross_compile_libraries();
  return c;
#else
  (void)target;
  fail(ErrorCode::unsupported, "arch: this kiln was built without CUDA support; it cannot compile for {}", arch);
#endif
}

}  // namespace kiln::targets
