#include "cache/cache.h"

#include "support/error.h"
#include "support/file.h"
#include "support/hash.h"

namespace kiln::cache {

namespace fs = std::filesystem;

std::string derive_key(const std::vector<std::pair<std::string, std::string>>& fields) {
  Hasher128 h;
  for (auto& [k, v] : fields) {
    h.field(k);
    h.field(v);
  }
  return h.hex_digest();
}

fs::path Cache::entry_path(const std::string& key) const { return dir_ / (key + ".kiln"); }

bool Cache::contains(const std::string& key) const {
  std::error_code ec;
  return fs::is_regular_file(entry_path(key), ec);
}

bool Cache::writable(std::string* why) const { return ensure_writable_dir(dir_, why); }

void Cache::publish(const std::string& key, const artifact::CompiledProgram& p) const {
  artifact::write_file(entry_path(key), p);
}

bool Cache::quarantine(const std::string& key) const {
  std::error_code ec;
  fs::rename(entry_path(key), fs::path(entry_path(key).string() + ".bad"), ec);
  return !ec;
}

}  // namespace kiln::cache
