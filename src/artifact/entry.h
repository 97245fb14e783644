// Cache entries that grow: programs appended to a .kiln file after its base
// artifact, without rewriting the base or its constants (format version 5;
// docs/file-format.md, "Appended programs").
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "artifact/artifact.h"

namespace kiln::artifact {

/// A cache entry as read_entry found it: its programs, and what an append
/// needs to add one more without rewriting anything.
struct EntryRead {
  CompiledProgram program;  ///< the base's programs, then the appended ones (in `more`, in file order)
  uint64_t base_bytes = 0;  ///< size of the base artifact (the header's file_size)
  uint64_t file_bytes = 0;  ///< size of the file when it was read
  uint64_t valid_end = 0;   ///< end of the last valid appended block (base_bytes when there is none)
  size_t appended = 0;      ///< number of valid appended blocks (programs)
  /// "" when every byte after valid_end is zero (or there is none); otherwise
  /// why the bytes from valid_end on were ignored (a torn or damaged append).
  std::string ignored;

  // For append_program (the mapping read; constants of `program` view it).
  std::shared_ptr<const MappedFile> mapping;
  uint64_t consts_offset = 0;              ///< file offset of the base's constants section
  std::vector<detail::Region> const_regions;  ///< constants regions, relative to consts_offset
  uint64_t base_tag = 0;                   ///< the base header's checksum (ties blocks to this base)
  ino_t inode = 0;                         ///< the file read (an append checks it is still the one at the path)
  dev_t device = 0;
};

/// Reads a cache entry like read_file, but tolerates a torn tail: bytes after
/// the last valid appended block that do not form a valid block (a crash or a
/// full disk during an append, a flipped byte in it) are ignored and reported
/// in `ignored`; every program before them is returned. Damage anywhere else
/// (the base, a block whose own checksums pass but whose content does not
/// decode) throws Error(corrupt_artifact) as read_file does; Error(io) when
/// the file cannot be read.
EntryRead read_entry(const std::filesystem::path& path);

/// Appends one program (the program of `sizes` in the entry's bucket set) to
/// the entry read as `entry`, as one checksummed block at
/// align_up(entry.valid_end), overwriting an ignored torn tail (the file
/// never shrinks, so a process that maps it never faults). Constants `model`
/// shares with the entry (tensors viewing entry.mapping, as a compile with
/// the entry's first program as reference makes them) are referred to, not
/// copied; the others are stored in the block. The block is written with one
/// pwrite and fdatasync'd. The caller holds the entry's lock (cache::KeyLock).
/// Returns the bytes written. Throws Error(io) when the file cannot be
/// written or is no longer the one read (replaced or changed size): the
/// caller then rewrites the entry whole; Error(internal) for a program the
/// format cannot hold.
uint64_t append_program(const std::filesystem::path& path, const EntryRead& entry, const std::vector<int64_t>& sizes,
                        const ir::Model& model, const ir::MemoryPlan& plan);

namespace detail {

constexpr char kBlockMagic[8] = {'K', 'I', 'L', 'N', 'A', 'D', 'D', '\0'};
constexpr size_t kBlockHeaderSize = 128;  ///< bytes of an appended block's fixed header

/// One appended block whose header and body checksums hold (file offsets).
struct Block {
  uint64_t offset = 0;
  uint64_t size = 0;
  std::vector<int64_t> sizes;
  Region consts, program, plan;
};

/// The appended blocks of a format-5 file in memory (header `h` parsed).
struct BlockScan {
  std::vector<Block> blocks;
  uint64_t valid_end = 0;  ///< end of the last valid block, or h.file_size
  std::string torn;        ///< "" or why the bytes from valid_end on are not a valid block (nor all zero)
};

/// Walks the blocks after the base: each at align_up(previous end), zero
/// bytes between. Stops at the first that is truncated, fails its header or
/// body checksum, or is preceded by non-zero padding (`torn` says which).
/// Throws Error(corrupt_artifact) for a block whose header checksum holds but
/// whose fields do not (version, base tag, layout): no torn write makes one.
BlockScan scan_blocks(const uint8_t* file, uint64_t file_size, const Header& h, uint64_t base_tag,
                      const std::string& what);

/// The bytes of one block that will start at file offset `at`, for a base
/// whose constants section starts at `consts_offset`. Throws Error(internal)
/// like encode_program.
std::vector<uint8_t> encode_block(uint64_t at, uint64_t consts_offset, uint64_t base_tag,
                                  const std::vector<int64_t>& sizes, const ir::Model& model, const ir::MemoryPlan& plan,
                                  const ConstPool::Existing& existing);

/// read_file / read_bytes / read_entry on a whole file in memory. With
/// `entry` null a torn tail is Error(corrupt_artifact); otherwise it is
/// ignored and `entry` (all but `program`) describes what was read.
CompiledProgram read_view(const uint8_t* file, uint64_t size, const std::shared_ptr<const void>& keepalive,
                          const std::string& what, EntryRead* entry);

}  // namespace detail

}  // namespace kiln::artifact
