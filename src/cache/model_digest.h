// Model digests for the cache key, at disk speed, with a memo that skips
// rehashing unchanged files (docs/cache.md, "Model digest").
#pragma once
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

namespace kiln::cache {

/// The stat facts of a file that change whenever its content can have
/// changed: size, inode, device, mtime and ctime (nanoseconds). ctime cannot
/// be set back by a user (touch -d sets only atime/mtime).
struct FileStamp {
  std::string path;  ///< absolute
  uint64_t size = 0, ino = 0, dev = 0;
  int64_t mtime_ns = 0, ctime_ns = 0;
  bool operator==(const FileStamp&) const = default;
};

/// Stats `path`. Throws Error(io) naming it.
FileStamp stamp_file(const std::filesystem::path& path);

/// The external-data "location" of every tensor in the ONNX ModelProto bytes
/// (initializers, tensor attributes, subgraphs, functions), found by walking
/// the protobuf wire format without parsing payloads. Throws
/// Error(invalid_model) naming `what` for damaged bytes or nesting deeper
/// than 100 messages.
std::set<std::string> external_data_locations(const uint8_t* data, size_t size, const std::string& what);

/// A model digest and the files it covers.
struct ModelDigest {
  std::string digest;             ///< XXH3-128 hex
  std::vector<FileStamp> files;   ///< the .onnx first, then each external-data file
  bool from_memo = false;         ///< true: taken from the memo, no file was read
  uint64_t bytes_hashed = 0;      ///< 0 when from_memo
};

/// Digest of everything that defines a model: the .onnx bytes and the bytes
/// of every external-data file it references (same value as
/// onnx_import::model_digest). External references are found by walking the
/// protobuf wire format over the fields that can hold tensors, skipping
/// payloads; files are read sequentially in large blocks.
///
/// `memo_dir`: when not empty, a memo there maps the model's path to its
/// digest and the stamps of its files; it is used only when every stamp
/// still matches (any change of size, inode, mtime or ctime rehashes), and
/// written (when `write_memo`) only for files whose mtime and ctime are more
/// than 2 s old, so a file still being written within one timestamp tick is
/// never memoised. Memo problems never fail the digest.
/// Throws Error(io) / Error(invalid_model).
ModelDigest digest_model(const std::filesystem::path& path, const std::filesystem::path& memo_dir = {},
                         bool write_memo = false);

}  // namespace kiln::cache
