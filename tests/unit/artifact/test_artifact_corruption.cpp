// .kiln artifact: damaged, truncated, foreign and maliciously crafted files
// must all give Error(corrupt_artifact) naming the region, never a crash.
// Run this file under -fsanitize=address,undefined too (docs/file-format.md).
#include <flatbuffers/flatbuffers.h>
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <fstream>
#include <random>

#include "artifact/program_generated.h"
#include "artifact_test_util.h"
#include "kiln/errors.h"

namespace kiln {
namespace {

using namespace artifact_test;
using artifact::detail::SectionKind;
using Bytes = std::vector<uint8_t>;

// The error read_bytes gives, or nullopt when the file reads fine. Any
// exception other than kiln::Error fails the test.
std::optional<Error> read_error(const Bytes& b) {
  try {
    artifact::read_bytes(std::make_shared<const Bytes>(b), "test.kiln");
    return std::nullopt;
  } catch (const Error& e) {
    return e;
  }
}

// EXPECTs corrupt_artifact with `part` in the message.
void expect_corrupt(const Bytes& b, const std::string& part, const std::string& context = "") {
  auto e = read_error(b);
  ASSERT_TRUE(e.has_value()) << "accepted: " << context;
  EXPECT_EQ(e->code(), ErrorCode::corrupt_artifact) << context << ": " << e->what();
  EXPECT_NE(std::string(e->what()).find(part), std::string::npos) << context << ": " << e->what();
}

TEST(ArtifactCorruption, EveryFlippedByteIsCaught) {
  const Bytes good = artifact::serialize(sample_program());
  ASSERT_FALSE(read_error(good).has_value());
  ASSERT_LT(good.size(), 16384u) << "sample grew: sample the offsets instead";
  for (uint8_t mask : {0x01, 0x80, 0xff})
    for (size_t i = 0; i < good.size(); ++i) {
      Bytes b = good;
      b[i] ^= mask;
      auto e = read_error(b);
      ASSERT_TRUE(e.has_value()) << "flipping byte " << i << " with mask " << int(mask) << " went unnoticed";
      ASSERT_EQ(e->code(), ErrorCode::corrupt_artifact) << "byte " << i << ": " << e->what();
    }
}

TEST(ArtifactCorruption, EveryFlippedByteIsCaughtThroughTheFile) {
  TempDir dir;
  const Bytes good = artifact::serialize(sample_program());
  const uint64_t compat_end = get64(good, 24) + get64(good, 32);
  const auto path = dir.path / "x.kiln";
  write_bytes(path, good);
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  // Flips one byte of the file in place (rewriting the whole file 6000 times is slow on a busy disk).
  auto poke = [&](size_t at, uint8_t v) {
    f.seekp(static_cast<std::streamoff>(at));
    f.put(static_cast<char>(v));
    f.flush();
    ASSERT_TRUE(f.good());
  };
  for (size_t i = 0; i < good.size(); ++i) {
    poke(i, good[i] ^ 0x10);
    try {
      artifact::read_file(path);
      FAIL() << "flipping byte " << i << " went unnoticed by read_file";
    } catch (const Error& e) {
      ASSERT_EQ(e.code(), ErrorCode::corrupt_artifact) << "byte " << i << ": " << e.what();
    }
    // read_compat must notice damage in the header and compat block, and only there.
    bool in_compat = i < 80 || (i >= get64(good, 24) && i < compat_end);
    try {
      artifact::read_compat(path);
      ASSERT_FALSE(in_compat) << "read_compat missed a flipped byte at " << i;
    } catch (const Error& e) {
      ASSERT_TRUE(in_compat) << "read_compat read past the compat block: byte " << i << ": " << e.what();
      ASSERT_EQ(e.code(), ErrorCode::corrupt_artifact) << e.what();
    }
    poke(i, good[i]);
  }
  f.close();
  EXPECT_NO_THROW(artifact::read_file(path)) << "the file was not restored: the test itself is broken";
}

TEST(ArtifactCorruption, DamageIsReportedByRegion) {
  const Bytes good = artifact::serialize(sample_program());
  auto flip = [&](size_t at) {
    Bytes b = good;
    b[at] ^= 0x01;
    return b;
  };
  expect_corrupt(flip(20), "header");                                  // file size field
  expect_corrupt(flip(get64(good, 24) + 5), "compatibility block");
  expect_corrupt(flip(get64(good, 48) + 3), "section table");
  for (uint32_t k = 1; k <= artifact::detail::kSectionCount; ++k) {
    auto r = section_region(good, SectionKind(k));
    if (!r.size) continue;
    std::string name = artifact::detail::section_name(SectionKind(k));
    expect_corrupt(flip(r.offset + r.size - 1), "section '" + name + "'", name);
  }
  // Padding after the header (bytes 80..127) belongs to no region but is checked.
  expect_corrupt(flip(100), "padding");
}

TEST(ArtifactCorruption, TruncationAtEveryLength) {
  const Bytes good = artifact::serialize(sample_program());
  for (size_t n = 0; n < good.size(); ++n) {
    Bytes b(good.begin(), good.begin() + static_cast<ptrdiff_t>(n));
    auto e = read_error(b);
    ASSERT_TRUE(e.has_value()) << "truncated to " << n << " bytes and accepted";
    ASSERT_EQ(e->code(), ErrorCode::corrupt_artifact) << n << ": " << e->what();
  }
  // Format 5: bytes after the base artifact must form appended program
  // blocks (artifact/entry.h); trailing zeros are padding.
  Bytes longer = good;
  longer.push_back(1);
  expect_corrupt(longer, "appended block");
  longer.back() = 0;
  EXPECT_FALSE(read_error(longer).has_value());
  expect_corrupt(Bytes(good.begin(), good.begin() + 500), "truncated");
}

TEST(ArtifactCorruption, TruncatedFilesThroughReadCompatAndReadFile) {
  TempDir dir;
  const Bytes good = artifact::serialize(sample_program());
  for (size_t n : {size_t{0}, size_t{3}, size_t{8}, size_t{11}, size_t{79}, size_t{80}, size_t{200}, good.size() / 2,
                   good.size() - 1}) {
    write_bytes(dir.path / "t.kiln", Bytes(good.begin(), good.begin() + static_cast<ptrdiff_t>(n)));
    for (int which = 0; which < 2; ++which) {
      try {
        if (which == 0) artifact::read_compat(dir.path / "t.kiln");
        else artifact::read_file(dir.path / "t.kiln");
        FAIL() << "truncated to " << n << " accepted by " << (which ? "read_file" : "read_compat");
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::corrupt_artifact) << n << ": " << e.what();
      }
    }
  }
}

TEST(ArtifactCorruption, WrongMagicSaysNotAnArtifact) {
  Bytes b = artifact::serialize(sample_program());
  b[0] = 0x08;  // what an ONNX protobuf starts with
  expect_corrupt(b, "is not a kiln artifact");
  expect_corrupt(Bytes{'h', 'i'}, "is not a kiln artifact");
  expect_corrupt(Bytes{}, "is not a kiln artifact");
  TempDir dir;
  write_bytes(dir.path / "model.onnx", Bytes{0x08, 0x07, 0x12, 0x07, 'p', 'y', 't', 'o', 'r', 'c', 'h'});
  try {
    artifact::read_compat(dir.path / "model.onnx");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::corrupt_artifact);
    EXPECT_NE(std::string(e.what()).find("model.onnx' is not a kiln artifact"), std::string::npos) << e.what();
  }
}

TEST(ArtifactCorruption, FutureVersionNamesBothVersions) {
  Bytes b = artifact::serialize(sample_program());
  put32(b, 8, artifact::kFormatVersion + 1);
  restamp(b);
  auto e = read_error(b);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code(), ErrorCode::corrupt_artifact);
  std::string msg = e->what();
  EXPECT_NE(msg.find(fmt::format("format version {}", artifact::kFormatVersion + 1)), std::string::npos) << msg;
  EXPECT_NE(msg.find(fmt::format("format versions 1 to {}", artifact::kFormatVersion)), std::string::npos) << msg;
}

// --- crafted files: checksums are valid, the content is not ------------------

using Builder = flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

Bytes finish(Builder& b) { return Bytes(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize()); }

// A file like the sample but whose program (and constants) sections are replaced.
Bytes with_program(const Bytes& program, const Bytes& constants = {}, bool drop_plan = true) {
  const Bytes good = artifact::serialize(sample_program());
  std::map<uint32_t, Bytes> repl{{1, program}, {5, constants}};
  if (drop_plan) {
    Builder b;
    b.Finish(fb::CreateMemoryPlan(b, 0));
    repl[2] = finish(b);
  }
  return replace_sections(good, repl);
}

// Program with two values (0: input "a" f32 [2], 1: output "b"), one node
// Relu(a)->b, and whatever `extra` adds to it.
struct ProgramParts {
  std::vector<Offset<fb::ValueDef>> values;
  std::vector<Offset<fb::GraphDef>> graphs;
  std::vector<Offset<fb::ValueDef>> tensors;
};

Offset<fb::ValueDef> simple_value(Builder& b, const char* name, int32_t dtype = 1) {
  std::vector<Offset<fb::Dim>> dims{fb::CreateDim(b, 2)};
  return fb::CreateValueDefDirect(b, name, dtype, true, &dims);
}

Offset<fb::GraphDef> simple_graph(Builder& b, std::vector<int32_t> in, std::vector<int32_t> out,
                                  std::vector<Offset<fb::NodeDef>> nodes, const char* name = "g") {
  return fb::CreateGraphDefDirect(b, name, &in, &out, &nodes);
}

Offset<fb::NodeDef> simple_node(Builder& b, const char* op, std::vector<int32_t> in, std::vector<int32_t> out,
                                std::vector<Offset<fb::Attr>> attrs = {}) {
  return fb::CreateNodeDefDirect(b, op, "", "n", 17, &in, &out, &attrs);
}

Bytes program(Builder& b, ProgramParts& p) {
  b.Finish(fb::CreateProgramDirect(b, &p.values, &p.graphs, 17, "test", &p.tensors));
  return finish(b);
}

TEST(ArtifactCorruption, CraftedProgramWithValidChecksumsIsStillRefused) {
  auto main_with = [](Builder& b, ProgramParts& p, std::vector<Offset<fb::Attr>> attrs, std::vector<int32_t> in = {0},
                      std::vector<int32_t> out = {1}) {
    p.values = {simple_value(b, "a"), simple_value(b, "b")};
    p.graphs.insert(p.graphs.begin(), simple_graph(b, {0}, {1}, {simple_node(b, "Relu", in, out, attrs)}));
  };
  {  // baseline: the crafted program itself is fine
    Builder b;
    ProgramParts p;
    main_with(b, p, {});
    ASSERT_FALSE(read_error(with_program(program(b, p)))) << read_error(with_program(program(b, p)))->what();
  }
  {
    Builder b;
    ProgramParts p;
    main_with(b, p, {}, {5});
    expect_corrupt(with_program(program(b, p)), "refers to value 5");
  }
  {
    Builder b;
    ProgramParts p;
    main_with(b, p, {}, {-2});
    expect_corrupt(with_program(program(b, p)), "refers to value -2");
  }
  for (int32_t g : {0, 1, 7, -1}) {  // graph attribute: the main graph itself, out of range, absent
    Builder b;
    ProgramParts p;
    auto a = fb::CreateAttrDirect(b, "body", fb::AttrKind::Graph, 0, 0, nullptr, nullptr, nullptr, nullptr, -1, g);
    main_with(b, p, {a});
    expect_corrupt(with_program(program(b, p)), "refers to graph " + std::to_string(g));
  }
  {  // a subgraph used by two attributes: the file must hold a tree
    Builder b;
    ProgramParts p;
    p.graphs.push_back(simple_graph(b, {}, {}, {}, "sub"));
    auto a1 = fb::CreateAttrDirect(b, "x", fb::AttrKind::Graph, 0, 0, nullptr, nullptr, nullptr, nullptr, -1, 1);
    auto a2 = fb::CreateAttrDirect(b, "y", fb::AttrKind::Graph, 0, 0, nullptr, nullptr, nullptr, nullptr, -1, 1);
    main_with(b, p, {a1, a2});
    expect_corrupt(with_program(program(b, p)), "already referenced");
  }
  {  // a subgraph that contains itself
    Builder b;
    ProgramParts p;
    auto self = fb::CreateAttrDirect(b, "x", fb::AttrKind::Graph, 0, 0, nullptr, nullptr, nullptr, nullptr, -1, 1);
    p.graphs.push_back(simple_graph(b, {}, {}, {simple_node(b, "Loop", {}, {}, {self})}, "sub"));
    auto a = fb::CreateAttrDirect(b, "x", fb::AttrKind::Graph, 0, 0, nullptr, nullptr, nullptr, nullptr, -1, 1);
    main_with(b, p, {a});
    expect_corrupt(with_program(program(b, p)), "refers to graph 1");
  }
  {  // an orphan graph
    Builder b;
    ProgramParts p;
    p.graphs.push_back(simple_graph(b, {}, {}, {}, "orphan"));
    main_with(b, p, {});
    expect_corrupt(with_program(program(b, p)), "not referenced");
  }
  {  // unknown attribute kind
    Builder b;
    ProgramParts p;
    auto a = fb::CreateAttrDirect(b, "x", static_cast<fb::AttrKind>(12));
    main_with(b, p, {a});
    expect_corrupt(with_program(program(b, p)), "unknown kind 12");
  }
  {  // tensor attribute index out of range
    Builder b;
    ProgramParts p;
    auto a = fb::CreateAttrDirect(b, "t", fb::AttrKind::Tensor, 0, 0, nullptr, nullptr, nullptr, nullptr, 3);
    main_with(b, p, {a});
    expect_corrupt(with_program(program(b, p)), "tensor payload 3");
  }
  {  // no graphs at all
    Builder b;
    ProgramParts p;
    p.values = {simple_value(b, "a")};
    expect_corrupt(with_program(program(b, p)), "no main graph");
  }
  {  // a node reading a value nobody produces (ir::verify's rules)
    Builder b;
    ProgramParts p;
    p.values = {simple_value(b, "a"), simple_value(b, "b"), simple_value(b, "c")};
    p.graphs = {simple_graph(b, {0}, {1}, {simple_node(b, "Add", {0, 2}, {1})})};
    expect_corrupt(with_program(program(b, p)), "malformed");
  }
  {  // not a FlatBuffer
    expect_corrupt(with_program(Bytes(64, 0xee)), "FlatBuffers verification failed");
    expect_corrupt(with_program(Bytes{}), "section 'program'");
  }
}

TEST(ArtifactCorruption, CraftedValuesAreRefused) {
  auto one_value = [](auto make) {
    Builder b;
    ProgramParts p;
    p.values = {make(b)};
    p.graphs = {simple_graph(b, {0}, {0}, {})};
    return program(b, p);
  };
  expect_corrupt(with_program(one_value([](Builder& b) { return simple_value(b, "a", 99); })), "unknown dtype 99");
  expect_corrupt(with_program(one_value([](Builder& b) { return simple_value(b, "a", 15); })), "unknown dtype 15");
  expect_corrupt(with_program(one_value([](Builder& b) {
                   std::vector<Offset<fb::Dim>> dims{fb::CreateDim(b, 2)};
                   return fb::CreateValueDefDirect(b, "a", 1, false, &dims);
                 })),
                 "unknown rank but 1 dims");
  expect_corrupt(with_program(one_value([](Builder& b) {
                   std::vector<Offset<fb::Dim>> dims{fb::CreateDim(b, -5)};
                   return fb::CreateValueDefDirect(b, "a", 1, true, &dims);
                 })),
                 "has size -5");
  expect_corrupt(with_program(one_value([](Builder& b) {
                   std::vector<Offset<fb::Dim>> dims(65, fb::CreateDim(b, 1));
                   return fb::CreateValueDefDirect(b, "a", 1, true, &dims);
                 })),
                 "rank 65");

  // Constants: a 128-byte constants section holding one 8-byte float pair at 64.
  Bytes consts(128, 0);
  auto constant = [&](int64_t off, uint64_t size, int32_t dt, std::vector<int64_t> shape) {
    return with_program(one_value([&](Builder& b) {
                          return fb::CreateValueDefDirect(b, "c", 1, false, nullptr, off, size, dt, &shape);
                        }),
                        consts);
  };
  ASSERT_FALSE(read_error(constant(64, 8, 1, {2})));
  expect_corrupt(constant(128, 8, 1, {2}), "outside the 128-byte constants section");
  expect_corrupt(constant(64, 1ull << 63, 1, {2}), "outside");
  expect_corrupt(constant(-64, 8, 1, {2}), "outside");
  expect_corrupt(constant(4, 8, 1, {2}), "not 64-byte aligned");
  expect_corrupt(constant(64, 8, 1, {3}), "needs 12");
  expect_corrupt(constant(64, 8, 8, {2}), "no fixed element size");  // string
  expect_corrupt(constant(64, 8, 0, {2}), "no fixed element size");
  expect_corrupt(constant(64, 8, 1, {-2, -1}), "invalid shape");
  expect_corrupt(constant(64, 0, 1, {1ll << 40, 1ll << 40, 0}), "invalid shape");
  expect_corrupt(constant(64, 8, 1, {1ll << 62, 4}), "invalid shape");
}

TEST(ArtifactCorruption, CraftedPlanMetadataAndCompatAreRefused) {
  const Bytes good = artifact::serialize(sample_program());
  auto plan = [](uint64_t arena, std::vector<int64_t> offsets, std::vector<uint64_t> sizes) {
    Builder b;
    b.Finish(fb::CreateMemoryPlanDirect(b, arena, &offsets, &sizes, 0));
    return finish(b);
  };
  std::vector<int64_t> offs(19, -1);
  std::vector<uint64_t> sizes(19, 0);
  ASSERT_FALSE(read_error(replace_sections(good, {{2, plan(0, offs, sizes)}})));
  offs[3] = 8;
  sizes[3] = 64;
  expect_corrupt(replace_sections(good, {{2, plan(64, offs, sizes)}}), "outside the 64-byte arena");
  expect_corrupt(replace_sections(good, {{2, plan(1000, offs, std::vector<uint64_t>(18, 0))}}), "19 offsets but 18");
  expect_corrupt(replace_sections(good, {{2, plan(0, {-1}, {0})}}), "covers 1 values, the program has 19");
  offs[3] = -7;
  expect_corrupt(replace_sections(good, {{2, plan(1000, offs, sizes)}}), "arena offset -7");

  auto text = [](std::string s) { return Bytes(s.begin(), s.end()); };
  expect_corrupt(replace_sections(good, {{6, text("{\"a\": ")}}), "section 'metadata'");
  expect_corrupt(replace_sections(good, {{6, text("42")}}), "not an object");
  expect_corrupt(replace_sections(good, {{6, text(std::string(100000, '['))}}), "not valid JSON");

  Builder b;
  b.Finish(fb::CreateCompatDirect(b, "0.1", 7));
  expect_corrupt(replace_sections(good, {{0, finish(b)}}), "format_version 7 disagrees");
  expect_corrupt(replace_sections(good, {{0, Bytes(40, 0x41)}}), "compatibility block");
}

// Every byte of every FlatBuffers region flipped, then re-checksummed so the
// decoders see it: each must decode or be refused as corrupt, never crash.
TEST(ArtifactCorruption, RestampedFlipsReachTheDecodersSafely) {
  const Bytes good = artifact::serialize(sample_program());
  std::vector<std::pair<uint64_t, uint64_t>> regions{{get64(good, 24), get64(good, 32)}, {0, 72}};
  for (auto k : {SectionKind::program, SectionKind::memory_plan}) {
    auto r = section_region(good, k);
    regions.push_back({r.offset, r.size});
  }
  regions.push_back({get64(good, 48), 6 * 32});
  size_t refused = 0, accepted = 0;
  for (auto [off, size] : regions)
    for (uint64_t i = off; i < off + size; ++i)
      for (uint8_t mask : {0x01, 0x04, 0x80, 0xff}) {
        Bytes b = good;
        b[i] ^= mask;
        restamp(b);
        auto e = read_error(b);
        if (e) {
          ASSERT_EQ(e->code(), ErrorCode::corrupt_artifact) << "byte " << i << ": " << e->what();
        }
        (e ? refused : accepted)++;
      }
  // Most single-bit edits of structure must be noticed; names and payload bytes may decode.
  EXPECT_GT(refused, accepted / 4) << refused << " refused, " << accepted << " accepted";
}

TEST(ArtifactCorruption, RandomRestampedMutationsNeverCrash) {
  const Bytes good = artifact::serialize(sample_program());
  auto prog = section_region(good, SectionKind::program);
  std::mt19937_64 rng(12345);
  for (int iter = 0; iter < 3000; ++iter) {
    Bytes b = good;
    int edits = 1 + static_cast<int>(rng() % 6);
    for (int e = 0; e < edits; ++e) {
      size_t at = prog.offset + rng() % prog.size;
      // Offsets and lengths are where damage hurts: write plausible-looking small or huge numbers.
      switch (rng() % 3) {
        case 0: b[at] = static_cast<uint8_t>(rng()); break;
        case 1: if (at + 4 <= prog.offset + prog.size) put32(b, at, static_cast<uint32_t>(rng() % 512)); break;
        default: if (at + 4 <= prog.offset + prog.size) put32(b, at, 0xffffff00u | static_cast<uint32_t>(rng() % 256));
      }
    }
    restamp(b);
    auto e = read_error(b);
    if (e) {
      ASSERT_EQ(e->code(), ErrorCode::corrupt_artifact) << "iteration " << iter << ": " << e->what();
    }
  }
}

}  // namespace
}  // namespace kiln
