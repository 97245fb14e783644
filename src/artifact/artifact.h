// The .kiln artifact: writer, reader, compatibility block.
// Layout, field by field: docs/file-format.md.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "ir/memory_plan.h"
#include "support/file.h"

namespace kiln::artifact {

/// Current artifact format version (6: kiln.cuda.Gemm's `out_dtype`, a
/// 16-bit matmul writing float32, which an older runtime would ignore and
/// run wrongly, docs/file-format.md "Versioning"; 5: programs appended to a cache entry
/// after its base artifact, each in a checksummed block, docs/file-format.md
/// "Appended programs"; 4: the device partition of a
/// heterogeneous program, Program.segments, ir::Segment; 3: specialized dims and value guards in
/// the bucket table, BucketDim::kind; 2: shape buckets, several programs
/// sharing one constants section). Readers also read versions 1 to 5 (so
/// that `kiln inspect` can show them), but an artifact of another version
/// than this one never runs: check_runnable reports its format_version, so
/// the cache recompiles it and an explicit one is refused naming the version.
constexpr uint32_t kFormatVersion = 6;
/// First format version whose files may hold appended program blocks.
constexpr uint32_t kFirstAppendVersion = 5;
/// Oldest format version read_file / read_compat still accept.
constexpr uint32_t kOldestFormatVersion = 1;

/// The compatibility block: what an artifact was built from and for. Read
/// without reading the rest of the file (kiln check, the cache).
struct CompatInfo {
  std::string kiln_version;
  uint32_t format_version = kFormatVersion;
  std::string target;          ///< "cpu" | "ref" | "cuda"
  std::string device_arch;     ///< "x86-64" | "sm_90" ...
  std::string device_name;     ///< CPU model name / GPU name (informative, not checked)
  std::vector<std::string> cpu_isa;  ///< ISA features the program needs ("avx2", ...)
  std::vector<std::pair<std::string, std::string>> library_versions;  ///< ("onednn","2.6.3")...
  std::string precision;       ///< "fp32" | "fp16" | "bf16"
  std::string tuning;          ///< "none" | "heuristic" | "fast" | "exhaustive"
  std::string options_digest;  ///< XXH3-128 hex of every compile option
  std::string model_digest;    ///< XXH3-128 hex of the model graph and weight bytes
  std::string input_signature; ///< "x:float32[1,3,224,224];y:int64[N]"
  std::string cache_key;       ///< the cache key this artifact was published under ("" if none)

  /// Every field as (name, value) text, in a fixed order, for check/explain/inspect.
  std::vector<std::pair<std::string, std::string>> fields() const;
};

/// How a bucketed dim may be padded up to a bucket's size at run time
/// (resolved at compile time from DimSpec::Pad; stored as a u8).
enum class PadMode : uint8_t {
  none = 0,      ///< no padding: a request runs only on a program of its exact size
  batch = 1,     ///< leading axis of every input/output having it; rows are independent
  sequence = 2,  ///< a later axis; the model's "*mask*" inputs are extended with zeros
};
/// "none", "batch", "sequence".
const char* pad_mode_name(PadMode m);

/// What a BucketDim's per-program size is (stored as a u8, format v3).
enum class DimKind : uint8_t {
  declared = 0,     ///< a symbolic dim with user-declared buckets (SessionOptions::dims)
  specialized = 1,  ///< a symbolic dim nobody fixed: one program per size seen (no declared
                    ///< sizes; min 0; max 0, or the largest size padding may reach where the
                    ///< prover bounded it); with a provably safe pad, sizes from the third
                    ///< distinct one on are rounded up to powers of two (runtime, ProgramSet)
  value = 2,        ///< the value of a scalar integer/bool input that shapes or control flow
                    ///< depend on (symbol = the input's name): one program per value, a guard
};
/// "declared", "specialized", "value".
const char* dim_kind_name(DimKind k);

/// One bucketed symbolic dim: the bucket sizes it was declared with.
struct BucketDim {
  std::string symbol;           ///< the dim_param name ("batch"); for DimKind::value the input's name
  int64_t min = 1;              ///< smallest size served by padding into the first bucket
  int64_t max = 1;              ///< largest bucket size (== sizes.back())
  std::vector<int64_t> sizes;   ///< declared bucket sizes, strictly ascending, >= 1 (empty unless declared)
  PadMode pad = PadMode::none;
  DimKind kind = DimKind::declared;
};

/// Which symbol each axis of a graph input or output carries in the model
/// as imported ("" for an axis that is not bucketed). The runtime pads and
/// slices along these axes.
struct IoSymbols {
  std::string name;
  std::vector<std::string> axes;
};

/// The bucket set of an artifact (format v2, section 'buckets'). Empty dims:
/// the artifact is not bucketed (a single program, as in format v1).
struct BucketSet {
  std::vector<BucketDim> dims;
  std::vector<IoSymbols> inputs;   ///< every main-graph input, in order
  std::vector<IoSymbols> outputs;  ///< every main-graph output, in order
  bool empty() const { return dims.empty(); }
};

/// A program of a bucketed artifact besides the first (CompiledProgram holds
/// the first one itself). `sizes` has one entry per BucketSet::dims entry: the
/// size that dim was fixed to for this program. A size that is not a declared
/// bucket size marks a program compiled for an out-of-bucket request (never padded into).
struct ProgramVariant {
  std::vector<int64_t> sizes;
  ir::Model model;
  ir::MemoryPlan plan;
};

/// Everything a compiled program holds. `model` carries the values (constants
/// included, data in Value::constant), the main graph and subgraphs.
struct CompiledProgram {
  CompatInfo compat;
  ir::Model model;
  ir::MemoryPlan plan;          ///< empty for the ref target
  std::string metadata_json;    ///< human metadata (JSON object text, or "" for none)
  /// Contents of the kernels and tuning sections. Opaque to the artifact
  /// layer (a target defines them); empty for the cpu and ref targets.
  std::vector<uint8_t> kernels;
  std::vector<uint8_t> tuning;
  /// Shape buckets: the declared set, the sizes `model` was compiled for (one
  /// per buckets.dims entry; empty when not bucketed) and the other programs.
  /// Every program's constants are stored once in the file: the writer keeps
  /// one copy of each distinct constant byte string.
  BucketSet buckets;
  std::vector<int64_t> sizes;
  std::vector<ProgramVariant> more;
};

/// Serialises to the .kiln byte layout. Constants are 64-byte aligned in the
/// file. Throws Error(internal) for a program that cannot be serialised.
std::vector<uint8_t> serialize(const CompiledProgram& p);

/// serialize() + atomic_write(): the file appears whole or not at all. Throws Error(io).
/// `links`: Links::follow for a path the user named (`kiln compile -o`),
/// Links::replace for kiln's own files (cache entries).
void write_file(const std::filesystem::path& path, const CompiledProgram& p, Links links = Links::replace);

/// Reads the header and compatibility block only (no section is read or
/// checksummed but the compat block's own). Throws Error(corrupt_artifact)
/// naming the region (header, compatibility block) for a bad magic, version,
/// size or checksum; Error(io) when the file cannot be read.
CompatInfo read_compat(const std::filesystem::path& path);

/// Reads and validates a whole artifact through mmap: header, compat block,
/// every section checksum, FlatBuffers verification of each table, and every
/// appended program block (format 5; `more` lists them after the base's
/// programs). Constant tensors view the mapping (no copy); they keep it
/// alive. Strict: any byte after the base that is not a whole valid block or
/// trailing zeros (a torn append) is Error(corrupt_artifact), like any other
/// damage; the cache reads entries with artifact::read_entry (entry.h),
/// which ignores a torn tail instead. Throws Error(corrupt_artifact) naming
/// the section or block that is damaged; Error(io).
CompiledProgram read_file(const std::filesystem::path& path);

/// read_file() on bytes in memory (used by tests and fuzzing); `what` names the source.
CompiledProgram read_bytes(std::shared_ptr<const std::vector<uint8_t>> bytes, const std::string& what);

/// Building blocks of the format shared by the reader and writer files
/// (docs/file-format.md gives the byte layout). Not for use outside artifact/.
namespace detail {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'A', 'R', 'T', '\0'};
constexpr size_t kHeaderSize = 80;        ///< bytes of the fixed header (versions 1 and 2)
constexpr size_t kSectionEntrySize = 32;  ///< bytes of one section table entry
constexpr uint64_t kAlign = 64;           ///< every region and every constant starts at a multiple of this
constexpr uint64_t kMaxCompatSize = 1u << 20;  ///< a larger compatibility block is refused as corrupt
constexpr size_t kMaxRank = 64;           ///< largest rank a value or constant may have
constexpr int kMaxGraphDepth = 64;        ///< deepest subgraph nesting the reader accepts

/// Section kinds, in the order they appear in the section table (u32 on disk).
enum class SectionKind : uint32_t {
  program = 1,
  memory_plan = 2,
  kernels = 3,
  tuning = 4,
  constants = 5,
  metadata = 6,
  buckets = 7,  ///< format version 2 on
};
constexpr uint32_t kSectionCount = 7;     ///< sections of format version 2
constexpr uint32_t kSectionCountV1 = 6;   ///< sections of format version 1
constexpr size_t kMaxPrograms = 4096;     ///< most programs one artifact may hold

/// Number of sections a file of `format_version` has.
constexpr uint32_t section_count(uint32_t format_version) {
  return format_version == 1 ? kSectionCountV1 : kSectionCount;
}

/// "program", "memory_plan", ... as used in error messages ("section 'program'").
const char* section_name(SectionKind k);

/// A byte range of the file.
struct Region {
  uint64_t offset = 0;
  uint64_t size = 0;
};

/// The decoded fixed header (magic and header checksum are implicit).
struct Header {
  uint32_t format_version = kFormatVersion;
  uint32_t header_size = kHeaderSize;
  uint64_t file_size = 0;
  Region compat;
  uint64_t compat_checksum = 0;
  uint64_t table_offset = 0;
  uint32_t table_count = kSectionCount;
  uint64_t table_checksum = 0;
};

/// One section table entry.
struct SectionEntry {
  SectionKind kind = SectionKind::program;
  Region region;
  uint64_t checksum = 0;
};

/// Little-endian field access for the fixed binary frames (header, section
/// table, appended block headers).
void put32(uint8_t* p, uint32_t v);
void put64(uint8_t* p, uint64_t v);
uint32_t get32(const uint8_t* p);
uint64_t get64(const uint8_t* p);

/// Throws Error(corrupt_artifact): "artifact '<what>' is corrupt: <region>: <detail>".
[[noreturn]] void corrupt(const std::string& what, const std::string& region, const std::string& detail);

/// Rounds up to a multiple of kAlign.
constexpr uint64_t align_up(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

/// The kHeaderSize bytes of `h`, header checksum included.
std::vector<uint8_t> encode_header(const Header& h);

/// Decodes and validates the header from the first `avail` bytes of a file
/// whose real size is `file_size`: magic, version, header size, checksum, then
/// every region in bounds and aligned. Throws Error(corrupt_artifact).
Header parse_header(const uint8_t* p, size_t avail, uint64_t file_size, const std::string& what);

/// The section table bytes (kSectionEntrySize per entry, in kind order).
std::vector<uint8_t> encode_section_table(const std::vector<SectionEntry>& entries);

/// Decodes the section table of a whole file in memory (header already
/// parsed): its checksum, one entry per kind in order, each section in bounds
/// and aligned. Throws Error(corrupt_artifact) naming "section table".
std::vector<SectionEntry> parse_section_table(const uint8_t* file, uint64_t file_size, const Header& h,
                                              const std::string& what);

/// Checks that header, compat block, table and sections do not overlap and
/// that every byte between them (alignment padding) is zero, so that no byte
/// of the file escapes a checksum or this check. Throws Error(corrupt_artifact).
void check_padding(const uint8_t* file, uint64_t file_size, const Header& h,
                   const std::vector<SectionEntry>& sections, const std::string& what);

/// FlatBuffers verifier table budget for a buffer of n bytes: enough for any
/// honest buffer, small enough that shared sub-tables cannot blow up the work.
uint32_t verifier_max_tables(size_t n);

/// True for the DType numbers the format accepts (0..13 and 16).
bool known_dtype(int32_t d);

/// True when the elements of the FlatBuffers vector at `vector` (its length
/// prefix) are aligned for `elem_size`. The FlatBuffers 2.0.8 verifier checks
/// only the 4-byte length prefix, so 8-byte elements need this check.
bool vector_data_aligned(const void* vector, size_t elem_size);

/// The Compat FlatBuffer of `c` (format_version is always kFormatVersion).
std::vector<uint8_t> encode_compat(const CompatInfo& c);
/// Verifies and decodes a Compat FlatBuffer. Throws Error(corrupt_artifact)
/// naming "compatibility block".
CompatInfo decode_compat(const uint8_t* p, size_t n, uint32_t header_version, const std::string& what);

/// Where the writer puts one constant: `offset` relative to the constants section.
struct ConstPlacement {
  const Tensor* tensor = nullptr;
  uint64_t offset = 0;
};

/// The constants section being laid out: each distinct byte string is placed
/// once (64-byte aligned), however many values or programs refer to it, so
/// the programs of a bucketed artifact share one copy of the weights.
class ConstPool {
 public:
  /// Offset of a constant already stored in the file (an appended block's
  /// program reusing the base's weights), or nothing: the pool places it.
  using Existing = std::function<std::optional<uint64_t>(const Tensor&)>;
  ConstPool() = default;
  /// A pool whose placements start at `origin` (offsets returned by place()
  /// are origin + the offset in placements()) and which first asks `existing`.
  ConstPool(uint64_t origin, Existing existing) : existing_(std::move(existing)), origin_(origin) {}
  /// Offset of `t`'s bytes in the section; `t` must outlive the pool.
  uint64_t place(const Tensor& t);
  const std::vector<ConstPlacement>& placements() const { return placed_; }
  uint64_t size() const { return size_; }

 private:
  std::vector<ConstPlacement> placed_;
  std::multimap<uint64_t, size_t> by_hash_;  ///< XXH3-64 of the bytes -> index in placed_
  uint64_t size_ = 0;
  Existing existing_;
  uint64_t origin_ = 0;
};

/// A Program FlatBuffer plus the layout of the constants section it refers to.
struct EncodedProgram {
  std::vector<uint8_t> bytes;
  std::vector<ConstPlacement> constants;
  uint64_t constants_size = 0;
};

/// Encodes a model with its own constants section. Throws Error(internal)
/// for a model that breaks the format's rules (value id out of range, rank
/// above kMaxRank, undefined constant).
EncodedProgram encode_program(const ir::Model& m);
/// Encodes a model whose constants go to `pool` (shared with other programs);
/// the result's `constants` is empty. Throws like encode_program(m).
std::vector<uint8_t> encode_program(const ir::Model& m, ConstPool& pool);

/// Where one program's FlatBuffers lie inside the program and memory_plan sections.
struct ProgramSlot {
  std::vector<int64_t> sizes;
  Region program;
  Region plan;
};
/// The `buckets` section: the bucket set and one slot per program.
/// Throws Error(internal) for an inconsistent set (see decode_buckets).
std::vector<uint8_t> encode_buckets(const BucketSet& set, const std::vector<ProgramSlot>& slots);
/// Why `sizes` cannot be a program's sizes in `set` (count, or a size out of
/// its dim's range: declared >= 1, specialized >= 0, a value any), or "".
std::string sizes_problem(const BucketSet& set, const std::vector<int64_t>& sizes);
/// Verifies and decodes the `buckets` section. Checks: dims named, unique and
/// validly ordered; pad modes known; 1..kMaxPrograms slots, each with one size
/// >= 1 per dim, no two with the same sizes; slots tile the program and
/// memory_plan sections in order (each starts at the previous end rounded up
/// to 64, the last ends at the section's end). Throws Error(corrupt_artifact)
/// naming "section 'buckets'".
void decode_buckets(const uint8_t* p, size_t n, uint64_t program_bytes, uint64_t plan_bytes, BucketSet& set,
                    std::vector<ProgramSlot>& slots, const std::string& what);

/// Verifies and decodes a Program FlatBuffer. Constants become Tensor::view
/// into `consts` (the constants section, `nconsts` bytes) holding `keepalive`.
/// `allowed` (may be null: all of [0, nconsts)): the ranges of `consts` a
/// constant may lie in (an appended program's constants regions). Throws
/// Error(corrupt_artifact) naming "section 'program'" for any bad index,
/// range, dtype or rank.
ir::Model decode_program(const uint8_t* p, size_t n, const uint8_t* consts, size_t nconsts,
                         const std::shared_ptr<const void>& keepalive, const std::string& what,
                         const std::vector<Region>* allowed = nullptr);

/// MemoryPlan FlatBuffer; `nvalues` is the model's value count the plan is
/// indexed by. Throws Error(internal) for an inconsistent plan.
std::vector<uint8_t> encode_memory_plan(const ir::MemoryPlan& plan, size_t nvalues);
/// Verifies and decodes; Error(corrupt_artifact) naming "section 'memory_plan'".
ir::MemoryPlan decode_memory_plan(const uint8_t* p, size_t n, size_t nvalues, const std::string& what);

/// The device of the non-host segments of m.segments ("cuda"), or "cuda"
/// when there are none (what ir::check_segments checks them against).
std::string segment_device(const ir::Model& m);

/// Empty when `text` is "" or a JSON object; otherwise why it is not.
std::string metadata_problem(const std::string& text);

}  // namespace detail

}  // namespace kiln::artifact
