// .kiln artifact: round trip, zero-copy constants, compat block, relocatability.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <cstring>
#include <fstream>
#include <sstream>

#include "artifact_test_util.h"
#include "kiln/errors.h"
#include "support/file.h"

namespace kiln {
namespace {

using namespace artifact_test;
using artifact::detail::SectionKind;

// Address ranges of this process's mappings of `file` (from /proc/self/maps).
std::vector<std::pair<uintptr_t, uintptr_t>> mappings_of(const std::filesystem::path& file) {
  std::string want = std::filesystem::canonical(file).string();
  std::ifstream maps("/proc/self/maps");
  std::vector<std::pair<uintptr_t, uintptr_t>> out;
  for (std::string line; std::getline(maps, line);) {
    if (line.size() < want.size() || line.compare(line.size() - want.size(), want.size(), want) != 0) continue;
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream(line) >> std::hex >> lo >> dash >> hi;
    out.emplace_back(lo, hi);
  }
  return out;
}

std::vector<const Tensor*> all_constants(const ir::Model& m) {
  std::vector<const Tensor*> out;
  for (auto& v : m.values)
    if (v.constant) out.push_back(&*v.constant);
  std::function<void(const ir::Graph&)> walk = [&](const ir::Graph& g) {
    for (auto& n : g.nodes)
      for (auto& [k, a] : n.attrs) {
        if (auto* t = std::get_if<Tensor>(&a)) out.push_back(t);
        if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a)) walk(**sg);
      }
  };
  walk(m.main);
  return out;
}

TEST(Artifact, RoundTripThroughFilePreservesEverything) {
  TempDir dir;
  auto p = sample_program();
  p.kernels = {1, 2, 3};  // opaque to the artifact layer; must come back as is
  p.tuning = {9};
  artifact::write_file(dir.path / "m.kiln", p);
  artifact::CompiledProgram q = artifact::read_file(dir.path / "m.kiln");
  expect_same_program(p, q);
  // Spot checks against literals, independent of the comparison helper.
  EXPECT_EQ(q.model.values[0].shape->at(0).symbol, "N");
  EXPECT_EQ(q.model.values[0].shape->at(2), ir::Dim::sym(""));
  EXPECT_FALSE(q.model.value(10).shape.has_value());
  EXPECT_EQ(q.model.value(2).constant->data<int64_t>()[2], 9007199254740993LL);
  EXPECT_EQ(q.model.value(3).constant->data<uint16_t>()[1], 0xfc00);
  EXPECT_EQ(q.model.value(6).constant->rank(), 0);
  EXPECT_EQ(q.model.value(6).constant->data<double>()[0], 3.141592653589793);
  EXPECT_EQ(q.model.value(5).constant->shape(), (std::vector<int64_t>{0, 5}));
  const ir::Node& all = q.model.main.nodes[2];
  EXPECT_EQ(all.domain, "com.example");
  EXPECT_EQ(all.inputs, (std::vector<ir::ValueId>{10, ir::kNoValue, 2}));
  EXPECT_TRUE(std::signbit(std::get<float>(all.attrs.at("f"))));
  EXPECT_EQ(std::get<std::string>(all.attrs.at("s")).size(), 7u);
  EXPECT_EQ(all.graph("g").nodes[0].tensor("value").data<float>()[0], 42.0f);
  const ir::Graph& then_g = q.model.main.nodes[1].graph("then_branch");
  EXPECT_EQ(then_g.nodes[0].graph("body").name, "loop_body");
  EXPECT_EQ(q.plan.offsets[11], 64);
  EXPECT_EQ(q.compat.library_versions[0], (std::pair<std::string, std::string>{"onednn", "2.6.3"}));
}

TEST(Artifact, RoundTripFromBytes) {
  auto p = sample_program();
  auto bytes = std::make_shared<const std::vector<uint8_t>>(artifact::serialize(p));
  expect_same_program(p, artifact::read_bytes(bytes, "memory"));
}

TEST(Artifact, SerializationIsDeterministic) {
  EXPECT_EQ(artifact::serialize(sample_program()), artifact::serialize(sample_program()));
}

TEST(Artifact, EmptyPlanAndMetadataRoundTrip) {
  auto p = sample_program();
  p.plan = {};
  p.metadata_json.clear();
  auto bytes = std::make_shared<const std::vector<uint8_t>>(artifact::serialize(p));
  auto q = artifact::read_bytes(bytes, "memory");
  EXPECT_TRUE(q.plan.empty());
  EXPECT_EQ(q.metadata_json, "");
  expect_same_program(p, q);
}

TEST(Artifact, ConstantsAreAlignedViewsIntoTheMapping) {
  TempDir dir;
  auto p = sample_program();
  artifact::write_file(dir.path / "m.kiln", p);
  std::vector<uint8_t> file = read_file(dir.path / "m.kiln");
  auto consts = section_region(file, SectionKind::constants);
  EXPECT_EQ(consts.offset % 64, 0u);

  auto q = artifact::read_file(dir.path / "m.kiln");
  auto maps = mappings_of(dir.path / "m.kiln");
  ASSERT_FALSE(maps.empty()) << "the artifact is not mapped";
  auto tensors = all_constants(q.model);
  ASSERT_EQ(tensors.size(), 10u);  // 8 constant values + 2 tensor attributes
  for (const Tensor* t : tensors) {
    auto addr = reinterpret_cast<uintptr_t>(t->raw());
    EXPECT_EQ(addr % 64, 0u) << t->describe();
    bool inside = std::any_of(maps.begin(), maps.end(), [&](auto& r) { return addr >= r.first && addr < r.second; });
    EXPECT_TRUE(inside) << t->describe() << " does not point into the mapped file";
  }
  // The tensors keep the mapping alive after everything else is gone.
  Tensor w = *q.model.value(1).constant;
  q = {};
  EXPECT_FALSE(mappings_of(dir.path / "m.kiln").empty());
  EXPECT_EQ(w.data<float>()[4], 3.25f);
  w = Tensor();
  EXPECT_TRUE(mappings_of(dir.path / "m.kiln").empty());
}

TEST(Artifact, ReadCompatReadsOnlyHeaderAndCompat) {
  TempDir dir;
  auto p = sample_program();
  std::vector<uint8_t> bytes = artifact::serialize(p);
  // Damage every section; the compat block alone must still read.
  for (uint32_t k = 1; k <= artifact::detail::kSectionCount; ++k) {
    auto r = section_region(bytes, SectionKind(k));
    if (r.size) bytes[r.offset + r.size / 2] ^= 0x5a;
  }
  write_bytes(dir.path / "damaged.kiln", bytes);
  artifact::CompatInfo c = artifact::read_compat(dir.path / "damaged.kiln");
  EXPECT_EQ(c.fields(), p.compat.fields());
  EXPECT_EQ(c.target, "cpu");
  EXPECT_EQ(c.cpu_isa, (std::vector<std::string>{"avx2", "fma"}));
  try {
    artifact::read_file(dir.path / "damaged.kiln");
    FAIL() << "damaged sections were not detected";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::corrupt_artifact);
    EXPECT_NE(std::string(e.what()).find("section 'program'"), std::string::npos) << e.what();
  }
}

// A compatibility block naming no kiln target (edited, checksums rewritten)
// is a corrupt artifact, named as such by every reader, with unprintable
// bytes escaped.
TEST(Artifact, CompatTargetThatIsNoKilnTargetIsCorrupt) {
  TempDir dir;
  auto p = sample_program();
  for (std::string bad : {std::string("CUDA"), std::string("cpu\0", 4), std::string("ref_")}) {
    artifact::CompatInfo c = p.compat;
    c.target = bad;
    write_bytes(dir.path / "t.kiln", replace_sections(artifact::serialize(p), {{0, artifact::detail::encode_compat(c)}}));
    for (int reader = 0; reader < 2; ++reader) {
      try {
        if (reader == 0) artifact::read_compat(dir.path / "t.kiln");
        else artifact::read_file(dir.path / "t.kiln");
        ADD_FAILURE() << "target '" << bad << "' was accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::corrupt_artifact) << e.what();
        EXPECT_NE(std::string(e.what()).find("compatibility block"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("is not a kiln target"), std::string::npos) << e.what();
        if (bad.size() == 4 && bad[3] == '\0') EXPECT_NE(std::string(e.what()).find("cpu\\x00"), std::string::npos) << e.what();
      }
    }
  }
}

TEST(Artifact, CompatFieldsInFixedOrder) {
  auto p = sample_program();
  auto f = p.compat.fields();
  std::vector<std::string> names;
  for (auto& [n, v] : f) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"kiln_version", "format_version", "target", "device_arch", "device_name",
                                             "cpu_isa", "library_versions", "precision", "tuning", "options_digest",
                                             "model_digest", "input_signature", "cache_key"}));
  EXPECT_EQ(f[1].second, std::to_string(artifact::kFormatVersion));
  EXPECT_EQ(f[5].second, "avx2,fma");
  EXPECT_EQ(f[6].second, "onednn=2.6.3,openmp=4.5");
  EXPECT_EQ(f[11].second, "x:float32[N,3,?];cond:bool[]");
}

TEST(Artifact, FileHoldsNoAbsolutePath) {
  TempDir dir;
  auto sub = dir.path / "nested-dir-for-path-check";
  std::filesystem::create_directories(sub);
  artifact::write_file(sub / "m.kiln", sample_program());
  std::vector<uint8_t> b = read_file(sub / "m.kiln");
  std::string bytes(b.begin(), b.end());
  for (std::string needle : {dir.path.string(), sub.filename().string(), dir.path.filename().string(),
                             std::filesystem::temp_directory_path().string() + "/"})
    EXPECT_EQ(bytes.find(needle), std::string::npos) << "found '" << needle << "' in the artifact";
  // Relocatable: a copy elsewhere reads the same.
  std::filesystem::copy_file(sub / "m.kiln", dir.path / "moved.kiln");
  expect_same_program(artifact::read_file(sub / "m.kiln"), artifact::read_file(dir.path / "moved.kiln"));
}

TEST(Artifact, WriterRefusesWhatItCannotStore) {
  auto expect_internal = [](const artifact::CompiledProgram& p, const std::string& part) {
    try {
      artifact::serialize(p);
      FAIL() << "serialize accepted a bad program (" << part << ")";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::internal) << e.what();
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  auto p = sample_program();
  p.model.main.nodes[0].inputs[0] = 99;
  expect_internal(p, "99");
  p = sample_program();
  p.metadata_json = "{not json";
  expect_internal(p, "metadata");
  p = sample_program();
  p.metadata_json = "[1, 2]";
  expect_internal(p, "not an object");
  p = sample_program();
  p.plan.offsets[10] = 250;  // 250 + 64 > 256-byte arena
  expect_internal(p, "arena");
  p = sample_program();
  p.plan.offsets.pop_back();
  expect_internal(p, "offsets");
  p = sample_program();
  p.model.main.nodes[1].attrs["then_branch"] = std::shared_ptr<ir::Graph>();
  expect_internal(p, "null graph attribute 'then_branch'");
  p = sample_program();
  p.model.values[10].dtype = static_cast<DType>(15);
  expect_internal(p, "unknown dtype 15");
  p = sample_program();
  p.model.main.nodes.erase(p.model.main.nodes.begin());  // y is now used but never produced
  expect_internal(p, "malformed");
}

TEST(Artifact, SharedSubgraphIsWrittenOncePerReference) {
  auto p = sample_program();
  auto body = std::make_shared<ir::Graph>();
  body->name = "shared";
  ir::Node neg;
  neg.op_type = "Neg";
  neg.name = "neg_in_shared";
  neg.inputs = {10};
  body->nodes.push_back(neg);
  auto& all = p.model.main.nodes[2];
  all.attrs["g"] = body;  // the same shared_ptr under two attributes
  all.attrs["g2"] = body;
  auto bytes = std::make_shared<const std::vector<uint8_t>>(artifact::serialize(p));
  auto q = artifact::read_bytes(bytes, "memory");
  expect_same_program(p, q);
  const auto& qa = q.model.main.nodes[2];
  EXPECT_NE(&qa.graph("g"), &qa.graph("g2"));  // two copies in the file, two graphs after reading
  EXPECT_EQ(qa.graph("g2").nodes.at(0).name, "neg_in_shared");
}

TEST(Artifact, WriteFileIsAtomicAndReplaces) {
  TempDir dir;
  auto p = sample_program();
  artifact::write_file(dir.path / "m.kiln", p);
  p.compat.cache_key = "second";
  artifact::write_file(dir.path / "m.kiln", p);
  EXPECT_EQ(artifact::read_compat(dir.path / "m.kiln").cache_key, "second");
  size_t files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path)) files += e.is_regular_file();
  EXPECT_EQ(files, 1u) << "a temporary file was left behind";
}

TEST(Artifact, MissingFileIsAnIoError) {
  TempDir dir;
  for (auto fn : {+[](const std::filesystem::path& p) { artifact::read_file(p); },
                  +[](const std::filesystem::path& p) { artifact::read_compat(p); }}) {
    try {
      fn(dir.path / "absent.kiln");
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::io) << e.what();
    }
  }
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

using namespace artifact_test;

// Every dtype kiln defines must survive a round trip, float8 and 4-bit types included.
TEST(Artifact, EveryDefinedDtypeRoundTrips) {
  for (DType dt : {DType::f8e4m3fn, DType::f8e4m3fnuz, DType::f8e5m2, DType::f8e5m2fnuz, DType::u4, DType::i4,
                   DType::bf16, DType::f16, DType::u64}) {
    auto p = sample_program();
    Tensor t(dt, {3});
    for (size_t i = 0; i < t.nbytes(); ++i) static_cast<uint8_t*>(t.raw())[i] = static_cast<uint8_t>(i + 1);
    ir::Value v;
    v.name = "extra_constant";
    v.dtype = dt;
    v.shape = ir::static_shape({3});
    v.constant = t;
    p.model.add_value(v);
    p.plan.offsets.push_back(-1);
    p.plan.sizes.push_back(0);
    auto bytes = std::make_shared<const std::vector<uint8_t>>(artifact::serialize(p));
    auto q = artifact::read_bytes(bytes, "memory");
    const ir::Value& back = q.model.values.back();
    EXPECT_EQ(back.dtype, dt) << dtype_name(dt);
    ASSERT_TRUE(back.constant.has_value());
    EXPECT_EQ(0, std::memcmp(back.constant->raw(), t.raw(), t.nbytes())) << dtype_name(dt);
  }
}

}  // namespace
}  // namespace kiln
