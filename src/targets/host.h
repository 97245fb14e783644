// What this machine offers each target, and whether an artifact can run here.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "artifact/artifact.h"
#include "kiln/options.h"

namespace kiln::targets {

/// The compatibility facts of this machine for `target`: target name,
/// device_arch ("x86-64"), device_name (CPU model), cpu_isa (features this
/// host has), library_versions. Fields about the model and options are empty.
artifact::CompatInfo host_facts(const Target& target);

/// The facts a cuda compile for GPU architecture `arch` records: this
/// machine's host_facts when device target.device is of that architecture;
/// otherwise (no device, or another architecture) those of a cross-compiled
/// artifact: device_arch `arch`, device_name "any", library_versions from
/// cuda::cross_compile_libraries(). Error(unsupported) in a kiln built
/// without CUDA.
artifact::CompatInfo compile_facts_for_arch(const Target& target, const std::string& arch);

/// CPU ISA features the code of `target` needs (what an artifact records and
/// a host must have). The ref and cpu targets are built for baseline x86-64.
std::vector<std::string> required_isa(const Target& target);

/// One field in which an artifact differs from what is needed here.
struct Mismatch {
  std::string field;     ///< e.g. "target", "cpu_isa", "kiln_version"
  std::string artifact;  ///< the artifact's value
  std::string here;      ///< this machine's / the request's value
  std::string str() const;  ///< "target: artifact has 'ref', this session needs 'cpu'"
};

/// Checks that an artifact can run here for `requested` (its target must be
/// the requested one, same kiln and format version, same device arch, every
/// required ISA feature present, library versions as compare_facts says).
/// Empty = runnable.
std::vector<Mismatch> check_runnable(const artifact::CompatInfo& a, const Target& requested);

/// check_runnable against given facts `here` (host_facts of the requested
/// target). Library versions: cuda_driver and cuda_runtime here must be at
/// least the artifact's (a newer driver runs older cubins; an older one is
/// refused, the field named "library_versions.cuda_driver"); a value "any
/// ..." in the artifact (cross-compiled: decided at load) matches anything;
/// every other library exactly, and a library missing on either side differs.
/// device_arch: a cuda artifact for an older architecture than the GPU here
/// runs (runs_through_ptx), its cuBLASLt / cuDNN versions then not compared;
/// a newer one, or any other difference, is refused naming device_arch.
std::vector<Mismatch> compare_facts(const artifact::CompatInfo& a, const artifact::CompatInfo& here);

/// What a user should know about running runnable artifact `a` here (empty
/// when nothing): e.g. that its kernels are JIT-compiled from PTX
/// (runs_through_ptx), which makes the load slower and the program possibly
/// slower than one compiled for this GPU. `kiln check` prints these.
std::vector<std::string> compat_notes(const artifact::CompatInfo& a, const artifact::CompatInfo& here);

/// "sm_90" -> 90 (major * 10 + minor); nullopt for anything else.
inline std::optional<int> sm_number(const std::string& arch) {
  if (arch.size() < 4 || arch.size() > 8 || arch.rfind("sm_", 0) != 0) return std::nullopt;
  int v = 0;
  for (size_t i = 3; i < arch.size(); ++i) {
    if (arch[i] < '0' || arch[i] > '9') return std::nullopt;
    v = v * 10 + (arch[i] - '0');
  }
  return v;
}

/// A cuda artifact for an older architecture than the GPU here (sm_80 on
/// sm_90: device_arch numbers, major * 10 + minor) runs through the
/// compute_XY PTX stored next to every cubin: the driver JIT-compiles it at
/// load, and the cuBLASLt / cuDNN algorithms stored for the old architecture
/// are chosen again by the libraries' heuristics, so those two library
/// versions need not match (the driver / runtime minimums still apply).
/// Inline: the cuda runtime applies the same rule when it loads.
inline bool runs_through_ptx(const std::string& artifact_arch, const std::string& here_arch) {
  auto a = sm_number(artifact_arch), h = sm_number(here_arch);
  return a && h && *a < *h;
}

}  // namespace kiln::targets
