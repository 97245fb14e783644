// Helpers for the .kiln artifact tests: a sample program that exercises every
// IR feature the format stores, deep comparison, and byte-level surgery on a
// serialised file (re-stamping checksums, replacing a section).
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "artifact/artifact.h"

namespace kiln::artifact_test {

/// A program with a main graph, an If whose then-branch nests a Loop body,
/// a node carrying every AttrValue kind (tensor and graph included), constants
/// of float32/int64/float16/bool/uint8 (empty)/float64 (rank 0)/bfloat16/int32,
/// symbolic, anonymous and static dims, a value of unknown rank, kNoValue
/// inputs/outputs, a memory plan, every compat field and JSON metadata.
artifact::CompiledProgram sample_program();

/// EXPECTs that two programs are equal field by field; floats and tensor
/// bytes compare bit for bit (so -0.0 and NaN payloads count).
void expect_same_program(const artifact::CompiledProgram& a, const artifact::CompiledProgram& b);

/// Little-endian field access at a byte offset (docs/file-format.md layout).
uint32_t get32(const std::vector<uint8_t>& b, size_t at);
uint64_t get64(const std::vector<uint8_t>& b, size_t at);
void put32(std::vector<uint8_t>& b, size_t at, uint32_t v);
void put64(std::vector<uint8_t>& b, size_t at, uint64_t v);

/// Region of section `kind` according to the file's section table.
artifact::detail::Region section_region(const std::vector<uint8_t>& file, artifact::detail::SectionKind kind);

/// Recomputes every checksum (sections, compat, section table, header) so
/// that a deliberate edit gets past the checksums and reaches the decoders.
/// Fields that point outside the file are left as they are.
void restamp(std::vector<uint8_t>& file);

/// Rebuilds a file with some sections (and/or the compat block, key 0)
/// replaced by new bytes, laid out and checksummed like the writer does.
std::vector<uint8_t> replace_sections(const std::vector<uint8_t>& file,
                                      const std::map<uint32_t, std::vector<uint8_t>>& replacements);

/// A fresh directory under the system temp dir, removed with its contents.
struct TempDir {
  TempDir();
  ~TempDir();
  std::filesystem::path path;
};

/// Writes bytes to a file (plain write; no fsync: tests write thousands).
void write_bytes(const std::filesystem::path& p, const std::vector<uint8_t>& bytes);

}  // namespace kiln::artifact_test
