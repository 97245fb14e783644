// What this machine offers each target, and whether an artifact can run here.
#pragma once
#include <string>
#include <vector>

#include "artifact/artifact.h"
#include "kiln/options.h"

namespace kiln::targets {

/// The compatibility facts of this machine for `target`: target name,
/// device_arch ("x86-64"), device_name (CPU model), cpu_isa (features this
/// host has), library_versions. Fields about the model and options are empty.
artifact::CompatInfo host_facts(const Target& target);

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
/// required ISA feature present, same library versions). Empty = runnable.
std::vector<Mismatch> check_runnable(const artifact::CompatInfo& a, const Target& requested);

}  // namespace kiln::targets
