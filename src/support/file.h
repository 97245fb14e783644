// File helpers: whole-file read, atomic publish, read-only memory mapping.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace kiln {

/// Reads a whole file. Throws Error(io) naming the path and the OS reason.
std::vector<uint8_t> read_file(const std::filesystem::path& p);

/// Writes `size` bytes to `dest` atomically: a temporary file in the same
/// directory (".<name>.tmp-<pid>-<random>"), fsync, rename over `dest`, fsync
/// of the directory. A reader sees the old file or the whole new one, never a
/// part; on any error the temporary file is removed and Error(io) is thrown
/// (a full disk included), leaving `dest` untouched.
/// What atomic_write does with a symbolic link at `dest`.
///  - replace: the rename replaces the link itself (kiln's own files, e.g.
///    cache entries: a planted link must not redirect the write elsewhere);
///  - follow: the bytes go to the link's target and the link stays (a path
///    the user named, e.g. `-o` or an output file).
/// Either way a device, FIFO, socket or directory at the destination is
/// refused with Error(io), never replaced; an empty path is Error(io).
enum class Links { replace, follow };
void atomic_write(const std::filesystem::path& dest, const void* data, size_t size, Links links = Links::replace);

/// A read-only mmap of a whole file. The mapping lives as long as the
/// shared_ptr; tensors that view constants hold a copy of it.
class MappedFile {
 public:
  /// Throws Error(io) when the file cannot be opened or mapped.
  static std::shared_ptr<MappedFile> open(const std::filesystem::path& p);
  ~MappedFile();
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

/// True when a file can be created in `dir` (the directory is created first,
/// mode 0700, if missing). Never throws; `why` gets the OS reason on false.
bool ensure_writable_dir(const std::filesystem::path& dir, std::string* why);

}  // namespace kiln
