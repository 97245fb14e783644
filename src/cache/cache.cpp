#include "cache/cache.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <map>

#include "support/error.h"
#include "support/hash.h"

namespace kiln::cache {

namespace fs = std::filesystem;

const std::vector<std::string>& key_field_names() {
  static const std::vector<std::string> names{
      "model_digest", "target",  "device_arch",    "device_name",  "cpu_isa",        "library_versions",
      "precision",    "tuning",  "options_digest", "kiln_version", "format_version",
  };
  return names;
}

Fields key_fields(const artifact::CompatInfo& c) {
  std::map<std::string, std::string> all;
  for (auto& [k, v] : c.fields()) all[k] = v;
  Fields out;
  for (auto& name : key_field_names()) {
    auto it = all.find(name);
    // A key field the compatibility block does not print would make two
    // different programs share a key: a kiln bug, caught by the unit tests.
    if (it == all.end()) fail(ErrorCode::internal, "cache key field '{}' is not a compatibility field", name);
    out.emplace_back(name, it->second);
  }
  return out;
}

std::string derive_key(const Fields& fields) {
  Hasher128 h;
  for (auto& [k, v] : fields) {
    h.field(k);
    h.field(v);
  }
  return h.hex_digest();
}

std::vector<FieldDiff> differing_fields(const artifact::CompatInfo& entry, const artifact::CompatInfo& request) {
  Fields a = key_fields(entry), b = key_fields(request);
  std::vector<FieldDiff> out;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].second != b[i].second) out.push_back({a[i].first, a[i].second, b[i].second});
  return out;
}

fs::path Cache::entry_path(const std::string& key) const { return dir_ / (key + ".kiln"); }

fs::path Cache::lock_path(const std::string& key) const { return dir_ / (key + ".lock"); }

bool Cache::contains(const std::string& key) const {
  std::error_code ec;
  return fs::is_regular_file(entry_path(key), ec);
}

void Cache::publish(const std::string& key, const artifact::CompiledProgram& p) const {
  artifact::write_file(entry_path(key), p);
}

bool Cache::quarantine(const std::string& key) const {
  std::error_code ec;
  fs::rename(entry_path(key), fs::path(entry_path(key).string() + ".bad"), ec);
  return !ec;
}

bool Cache::touch(const std::string& key) const {
  return ::utimensat(AT_FDCWD, entry_path(key).c_str(), nullptr, 0) == 0;
}

}  // namespace kiln::cache
