// Why a cache lookup missed: the nearest entries and the key fields in which
// each differs (`kiln cache explain`, docs/cache.md).
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "cache/cache.h"
#include "cache/maintenance.h"

namespace kiln::cache {

/// One existing entry compared with the request.
struct Candidate {
  EntryInfo entry;
  std::vector<FieldDiff> diffs;  ///< key fields that differ, in key order
  /// The entry's compile options text (metadata "options", e.g.
  /// "target=cpu;precision=fp32;tuning=none;shape:x=2x4"), read only when
  /// options_digest differs; "" when unknown.
  std::string options;
};

/// The answer for one request.
struct Explanation {
  std::string key;                  ///< the request's key
  bool entry_exists = false;        ///< "<key>.kiln" is there (a hit unless damaged or not runnable)
  std::vector<Candidate> nearest;   ///< other entries, fewest differing fields first, then most recently used
  int entries = 0;                  ///< entries in the directory
  int unreadable = 0;               ///< entries whose compatibility block could not be read
};

/// Compares every entry's compatibility block with `request` (the block a
/// compile for this model and these options would write) and keeps the
/// `limit` nearest ones that are not the request's own entry. Reads only
/// headers and compatibility blocks, plus the metadata of the kept entries
/// whose options differ. Never throws for a bad entry.
Explanation explain(const std::filesystem::path& dir, const artifact::CompatInfo& request, size_t limit);

}  // namespace kiln::cache
