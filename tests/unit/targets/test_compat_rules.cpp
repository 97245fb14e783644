// Which artifacts may run where (targets::compare_facts): the per-field
// rules, with facts made up so that each rule is exercised alone.
#include <gtest/gtest.h>

#include "kiln/errors.h"
#include "kiln/options.h"
#include "runtime/compile.h"
#include "targets/host.h"

namespace kiln::testing {
namespace {

artifact::CompatInfo cuda_facts(const std::string& arch, const std::string& driver, const std::string& cublaslt) {
  artifact::CompatInfo c;
  c.kiln_version = "1";
  c.format_version = artifact::kFormatVersion;
  c.target = "cuda";
  c.device_arch = arch;
  c.cpu_isa = {"sse2"};
  c.library_versions = {{"cuda_driver", driver}, {"cuda_runtime", "13000"}, {"cublaslt", cublaslt}, {"cudnn", "91900"}};
  return c;
}

std::vector<std::string> fields(const std::vector<targets::Mismatch>& m) {
  std::vector<std::string> out;
  for (auto& x : m) out.push_back(x.field);
  return out;
}

TEST(CompatRules, SameFactsRun) {
  auto a = cuda_facts("sm_90", "13000", "130000");
  EXPECT_TRUE(targets::compare_facts(a, a).empty());
}

TEST(CompatRules, NewerDriverRunsOlderArtifactOlderDriverIsRefusedWithReason) {
  auto art = cuda_facts("sm_90", "13000", "130000");
  EXPECT_TRUE(targets::compare_facts(art, cuda_facts("sm_90", "13020", "130000")).empty());
  auto m = targets::compare_facts(art, cuda_facts("sm_90", "12080", "130000"));
  ASSERT_EQ(fields(m), std::vector<std::string>{"library_versions.cuda_driver"});
  EXPECT_NE(m[0].str().find("too old: this artifact needs CUDA 13.0 or newer"), std::string::npos) << m[0].str();
}

TEST(CompatRules, OtherArchitectureIsRefusedNamingDeviceArch) {
  auto m = targets::compare_facts(cuda_facts("sm_90", "13000", "130000"), cuda_facts("sm_80", "13000", "130000"));
  ASSERT_EQ(fields(m), std::vector<std::string>{"device_arch"});
  EXPECT_EQ(m[0].artifact, "sm_90");
  EXPECT_EQ(m[0].here, "sm_80");
}

TEST(CompatRules, OlderArchitectureRunsThroughPtxWithLibraryChoicesMadeAgain) {
  // sm_80 artifact, sm_90 GPU with other cuBLASLt / cuDNN versions: runnable
  // (PTX JIT, algorithms chosen again), with a note saying so.
  auto art = cuda_facts("sm_80", "13000", "130000");
  auto here = cuda_facts("sm_90", "13000", "130100");
  here.library_versions.back().second = "91400";
  EXPECT_TRUE(targets::compare_facts(art, here).empty());
  auto notes = targets::compat_notes(art, here);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("compute_80 PTX"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("JIT"), std::string::npos) << notes[0];
  // The driver minimum still applies.
  EXPECT_EQ(fields(targets::compare_facts(art, cuda_facts("sm_90", "12080", "130000"))),
            std::vector<std::string>{"library_versions.cuda_driver"});
  // Same architecture: nothing to note; a newer one than the GPU's is refused.
  EXPECT_TRUE(targets::compat_notes(here, here).empty());
  auto newer = here;
  newer.device_arch = "sm_100";
  EXPECT_EQ(fields(targets::compare_facts(newer, here)), std::vector<std::string>{"device_arch"});
  // Only sm_XY numbers compare; anything else must match exactly.
  EXPECT_FALSE(targets::runs_through_ptx("sm_80", "none (no GPU)"));
  EXPECT_FALSE(targets::runs_through_ptx("x86-64", "sm_90"));
  EXPECT_TRUE(targets::runs_through_ptx("sm_86", "sm_120"));
  EXPECT_FALSE(targets::runs_through_ptx("sm_90", "sm_90"));
}

TEST(CompatRules, StoredLibraryDecisionsNeedTheSameLibraryCrossCompiledOnesDoNot) {
  auto here = cuda_facts("sm_90", "13000", "130100");
  EXPECT_EQ(fields(targets::compare_facts(cuda_facts("sm_90", "13000", "130000"), here)),
            std::vector<std::string>{"library_versions"});
  EXPECT_TRUE(targets::compare_facts(cuda_facts("sm_90", "13000", "any (chosen at load)"), here).empty());
}

TEST(CompatRules, ALibraryMissingOnOneSideDiffers) {
  auto a = cuda_facts("sm_90", "13000", "130000");
  auto h = a;
  h.library_versions.pop_back();
  EXPECT_EQ(fields(targets::compare_facts(a, h)), std::vector<std::string>{"library_versions"});
}

TEST(TuningOptions, OnlyCudaTunesAndArchIsChecked) {
  SessionOptions o;
  o.tuning = Tuning::exhaustive;
  try {
    o.validate();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_EQ(std::string(e.what()).rfind("tuning:", 0), 0u) << e.what();
  }
  SessionOptions a;
  a.arch = "sm_90";
  EXPECT_THROW(a.validate(), Error);
  EXPECT_THROW(parse_tuning("slow"), Error);
  EXPECT_EQ(parse_tuning("exhaustive"), Tuning::exhaustive);
  EXPECT_FALSE(SessionOptions{}.effective_tuning().has_value());
}

TEST(TuningOptions, TuningAndArchEnterTheOptionsTextOnlyForCuda) {
  SessionOptions cpu;
  EXPECT_EQ(options_text(cpu), "target=cpu;precision=fp32;tuning=none");
  SessionOptions c;
  c.target = Target::cuda();
  EXPECT_EQ(options_text(c), "target=cuda;precision=fp32;tuning=fast");
  c.tuning = Tuning::heuristic;
  c.arch = "sm_90";
  EXPECT_EQ(options_text(c), "target=cuda;precision=fp32;tuning=heuristic;arch=sm_90");
#ifdef KILN_WITH_CUDA
  for (const char* bad : {"90", "sm_", "sm_9a", "sm_090", "compute_90"}) {
    c.arch = bad;
    EXPECT_THROW(c.validate(), Error) << bad;
  }
  c.arch = "sm_100";
  EXPECT_NO_THROW(c.validate());
#endif
}

}  // namespace
}  // namespace kiln::testing
