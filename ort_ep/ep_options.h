// The kiln EP's options: read from the session's config entries
// ("ep.kilnexecutionprovider.<key>", how ORT passes provider options to a
// plugin EP) and ORT's own EPContext entries, validated when the session is
// created; every bad one is an error naming it.
#pragma once
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "kiln/options.h"

namespace kiln::ort_ep {

/// Name of the EP (and of its factory), as sessions and users see it.
inline constexpr const char* kEpName = "KilnExecutionProvider";
/// Prefix of the EP's options among the session config entries.
inline constexpr const char* kOptionPrefix = "ep.kilnexecutionprovider.";

/// The EP's options, validated.
struct EpOptions {
  SessionOptions kiln;            ///< target, precision, tuning, fallback, cache_dir, shapes, dims
  bool precision_given = false;   ///< `precision` was set (else a loaded artifact's is taken)
  bool claim_reference = false;   ///< `reference_nodes=claim`: also take nodes kiln runs on reference kernels
  std::optional<std::filesystem::path> load_model_path;  ///< a .kiln to load (never recompiled)
  std::optional<std::filesystem::path> save_model_path;  ///< where to write the compiled artifact
  // ORT's EPContext session entries.
  bool context_enable = false;          ///< ep.context_enable=1: write an EPContext model
  bool context_embed = true;            ///< ep.context_embed_mode=1 (default) embeds the .kiln; 0 names a file beside
  std::filesystem::path context_file;   ///< ep.context_file_path (the EPContext model to write), may be empty
};

/// The device ORT selected for the EP: cpu, or cuda with the CUDA ordinal
/// found by PCI bus id (-1 when it could not be told: `why`).
struct DeviceChoice {
  Target target = Target::cpu();
  std::string bus_id;  ///< PCI bus id of the GPU ("" for the CPU or when unknown)
  std::string why;     ///< why the ordinal is unknown
};

/// Parses and validates `entries` (every session config entry) for the
/// device. Throws Error(invalid_option) naming the option: an unknown
/// "ep.kilnexecutionprovider.*" key, an empty path, a bad value, a
/// `device_id` that contradicts the selected GPU (naming both).
EpOptions parse_options(const std::map<std::string, std::string>& entries, const DeviceChoice& device);

/// The options as text (sorted key=value;...) for the cache key of a
/// partition and the EPContext node: everything that changes the program.
std::string options_digest_text(const EpOptions& o);

}  // namespace kiln::ort_ep
