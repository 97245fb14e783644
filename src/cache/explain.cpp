#include "cache/explain.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace kiln::cache {

Explanation explain(const std::filesystem::path& dir, const artifact::CompatInfo& request, size_t limit) {
  Explanation out;
  out.key = derive_key(key_fields(request));
  std::vector<Candidate> all;
  for (auto& e : list_entries(dir)) {
    ++out.entries;
    if (e.file.key == out.key) {
      out.entry_exists = true;
      continue;
    }
    if (!e.compat) {
      ++out.unreadable;
      continue;
    }
    auto diffs = differing_fields(*e.compat, request);
    all.push_back({std::move(e), std::move(diffs), ""});
  }
  // Nearest: fewest differing fields; then the same model before another
  // one (a changed option is the likelier surprise); then most recent use.
  std::stable_sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    auto model_differs = [](const Candidate& c) {
      return std::any_of(c.diffs.begin(), c.diffs.end(), [](const FieldDiff& d) { return d.field == "model_digest"; });
    };
    if (a.diffs.size() != b.diffs.size()) return a.diffs.size() < b.diffs.size();
    if (model_differs(a) != model_differs(b)) return !model_differs(a);
    return a.entry.file.mtime_ns > b.entry.file.mtime_ns;
  });
  if (all.size() > limit) all.resize(limit);
  for (auto& c : all) {
    bool options_differ =
        std::any_of(c.diffs.begin(), c.diffs.end(), [](const FieldDiff& d) { return d.field == "options_digest"; });
    if (!options_differ) continue;
    try {
      auto meta = nlohmann::json::parse(artifact::read_file(c.entry.file.path).metadata_json);
      c.options = meta.value("options", "");
    } catch (const std::exception&) {
      // the field diff alone still answers
    }
  }
  out.nearest = std::move(all);
  return out;
}

}  // namespace kiln::cache
