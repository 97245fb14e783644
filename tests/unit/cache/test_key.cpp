// The cache key covers everything that can change the compiled program: each
// field changed alone gives another key, and a lookup with it misses.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <set>

#include "cache/cache.h"
#include "cache/model_digest.h"
#include "cache_test_util.h"
#include "runtime/compile.h"
#include "support/version.h"
#include "targets/pipeline.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;

const std::string kDigest = "0123456789abcdef0123456789abcdef";

TEST(CacheKey, FieldsAreTheDocumentedOnesAndAllInTheCompatBlock) {
  SessionOptions opt;
  auto fields = key_fields(kDigest, opt);
  std::vector<std::string> names;
  for (auto& [k, v] : fields) names.push_back(k);
  EXPECT_EQ(names, (std::vector<std::string>{"model_digest", "target", "device_arch", "device_name", "cpu_isa",
                                             "library_versions", "precision", "tuning", "options_digest",
                                             "kiln_version", "format_version"}));
  // Values as this machine gives them.
  std::map<std::string, std::string> v(fields.begin(), fields.end());
  EXPECT_EQ(v["model_digest"], kDigest);
  EXPECT_EQ(v["target"], "cpu");
  EXPECT_EQ(v["device_arch"], "x86-64");
  EXPECT_FALSE(v["device_name"].empty());
  EXPECT_EQ(v["cpu_isa"], "sse2");
  EXPECT_EQ(v["precision"], "fp32");
  EXPECT_EQ(v["tuning"], "none");
  EXPECT_EQ(v["kiln_version"], kiln::version());
  EXPECT_EQ(v["format_version"], std::to_string(artifact::kFormatVersion));
  EXPECT_EQ(v["options_digest"].size(), 32u);
}

// Each variant changes exactly one input of the key; all keys must differ.
TEST(CacheKey, EveryFieldChangedAloneChangesTheKey) {
  SessionOptions base;
  auto facts = build_facts(base.target);
  using Variant = std::function<void(std::string&, SessionOptions&, artifact::CompatInfo&)>;
  std::vector<std::pair<std::string, Variant>> variants{
      {"same", [](auto&, auto&, auto&) {}},
      {"model_digest", [](std::string& d, auto&, auto&) { d[0] = 'f'; }},
      {"target", [](auto&, SessionOptions& o, auto&) { o.target = Target::ref(); }},
      {"precision fp16", [](auto&, SessionOptions& o, auto&) { o.precision = Precision::fp16; }},
      {"precision bf16", [](auto&, SessionOptions& o, auto&) { o.precision = Precision::bf16; }},
      // The precision check decides which nodes of a 16-bit cuda program stay fp32.
      {"cuda fp16", [](auto&, SessionOptions& o, auto&) { o.target = Target::cuda(), o.precision = Precision::fp16; }},
      {"cuda fp16, check off",
       [](auto&, SessionOptions& o, auto&) {
         o.target = Target::cuda(), o.precision = Precision::fp16, o.precision_check = PrecisionCheck::off;
       }},
      {"cuda fp16, check inputs",
       [](auto&, SessionOptions& o, auto&) {
         o.target = Target::cuda(), o.precision = Precision::fp16;
         o.precision_check_inputs["x"] = Tensor(DType::f32, {2});
       }},
      {"input shape", [](auto&, SessionOptions& o, auto&) { o.input_shapes["x"] = {2, 4}; }},
      {"other input shape", [](auto&, SessionOptions& o, auto&) { o.input_shapes["x"] = {4, 4}; }},
      {"rank-0 shape", [](auto&, SessionOptions& o, auto&) { o.input_shapes["x"] = {}; }},
      {"device_arch", [](auto&, auto&, artifact::CompatInfo& f) { f.device_arch = "sm_90"; }},
      {"device_name", [](auto&, auto&, artifact::CompatInfo& f) { f.device_name += " (other stepping)"; }},
      {"cpu_isa", [](auto&, auto&, artifact::CompatInfo& f) { f.cpu_isa.push_back("avx2"); }},
      {"library cuda", [](auto&, auto&, artifact::CompatInfo& f) { f.library_versions.push_back({"cuda", "12.4"}); }},
      {"library cudnn", [](auto&, auto&, artifact::CompatInfo& f) { f.library_versions.push_back({"cudnn", "9.1"}); }},
      {"library cublas", [](auto&, auto&, artifact::CompatInfo& f) { f.library_versions.push_back({"cublas", "12"}); }},
      {"library onednn", [](auto&, auto&, artifact::CompatInfo& f) { f.library_versions.push_back({"onednn", "3.1"}); }},
      {"driver", [](auto&, auto&, artifact::CompatInfo& f) { f.library_versions.push_back({"driver", "550.54"}); }},
      {"kiln_version", [](auto&, auto&, artifact::CompatInfo& f) { f.kiln_version += "-next"; }},
      {"format_version", [](auto&, auto&, artifact::CompatInfo& f) { f.format_version += 1; }},
  };
  std::map<std::string, std::string> key_of;
  for (auto& [name, change] : variants) {
    std::string digest = kDigest;
    SessionOptions opt = base;
    artifact::CompatInfo f = facts;
    change(digest, opt, f);
    key_of[name] = cache::derive_key(key_fields(digest, opt, f));
  }
  std::set<std::string> distinct;
  for (auto& [name, key] : key_of) distinct.insert(key);
  EXPECT_EQ(distinct.size(), variants.size());
  // Deterministic: the same inputs give the same key.
  EXPECT_EQ(key_of["same"], cache::derive_key(key_fields(kDigest, base, facts)));

  // Tuning is not an option yet: change it in the compat block the key is made of.
  auto c = request_compat(kDigest, base, facts);
  std::string k0 = cache::derive_key(cache::key_fields(c));
  EXPECT_EQ(k0, key_of["same"]);
  c.tuning = "exhaustive";
  EXPECT_NE(cache::derive_key(cache::key_fields(c)), k0);
}

TEST(CacheKey, RunTimeOptionsAreNotInTheKey) {
  SessionOptions a, b;
  b.threads = 3;
  b.cache_dir = "/somewhere/else";
  b.cache_max_bytes = 1;
  b.cache_mismatch = MismatchPolicy::error;
  b.trust_cache_dir = true;
  EXPECT_EQ(cache::derive_key(key_fields(kDigest, a)), cache::derive_key(key_fields(kDigest, b)));
}

/// Sets an environment variable for the scope, restoring the previous state.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(std::string n, const char* value) : name(std::move(n)) {
    if (const char* o = std::getenv(name.c_str())) old = o;
    if (value) ::setenv(name.c_str(), value, 1);
    else ::unsetenv(name.c_str());
  }
  ~ScopedEnv() {
    if (old) ::setenv(name.c_str(), old->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
};

TEST(CacheKey, CompileEnvironmentSwitchesAreInTheKey) {
  // A program compiled with a measurement switch (here: Q / K / V left
  // unmerged) is another program: its key differs, and `kiln cache explain`
  // shows the switch among the option items.
  ScopedEnv clear_merge("KILN_CUDA_MERGE_QKV", nullptr), clear_split("KILN_CUDA_GEMM_SPLIT_K", nullptr);
  SessionOptions opt;
  const std::string base = cache::derive_key(key_fields(kDigest, opt));
  {
    ScopedEnv merge("KILN_CUDA_MERGE_QKV", "0");
    EXPECT_NE(cache::derive_key(key_fields(kDigest, opt)), base);
    EXPECT_NE(options_text(opt).find(";env:KILN_CUDA_MERGE_QKV=0"), std::string::npos) << options_text(opt);
    ScopedEnv split("KILN_CUDA_GEMM_SPLIT_K", "0");
    const std::string both = cache::derive_key(key_fields(kDigest, opt));
    ScopedEnv split1("KILN_CUDA_GEMM_SPLIT_K", "1");
    EXPECT_NE(cache::derive_key(key_fields(kDigest, opt)), both);  // the value counts, not only the name
  }
  EXPECT_EQ(cache::derive_key(key_fields(kDigest, opt)), base);
  // Logging and debug dumps do not change a program.
  ScopedEnv log("KILN_LOG", "debug"), dump("KILN_DEBUG_DUMP", "/dev/null");
  EXPECT_EQ(cache::derive_key(key_fields(kDigest, opt)), base);
}

TEST(CacheKey, EveryEnvironmentSwitchTheLoweringReadsIsListed) {
  // Scans the passes and the targets' compile directories for getenv("KILN_...")
  // so that a new measurement switch cannot be left out of the key.
  const fs::path root = KILN_SOURCE_DIR;  // tests/CMakeLists.txt
  ASSERT_TRUE(fs::is_directory(root / "src" / "passes")) << root;
  const std::set<std::string> listed(targets::compile_env_switch_names().begin(),
                                     targets::compile_env_switch_names().end());
  const std::set<std::string> no_program_change{"KILN_DEBUG_DUMP", "KILN_CUDA_DUMP_SOURCE"};
  std::vector<fs::path> dirs{root / "src" / "passes", root / "src" / "targets" / "compile"};
  for (auto& t : fs::directory_iterator(root / "src" / "targets"))
    if (fs::is_directory(t.path() / "compile")) dirs.push_back(t.path() / "compile");
  int found = 0;
  for (auto& d : dirs)
    for (auto& f : fs::directory_iterator(d)) {
      std::ifstream in(f.path());
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      for (size_t at = text.find("getenv(\"KILN_"); at != std::string::npos; at = text.find("getenv(\"KILN_", at + 1)) {
        const size_t b = at + 8, e = text.find('"', b);
        const std::string name = text.substr(b, e - b);
        if (no_program_change.count(name)) continue;
        ++found;
        EXPECT_TRUE(listed.count(name)) << name << " (" << f.path().filename().string()
                                        << ") changes compiled programs but is not in compile_env_switch_names()";
      }
    }
  EXPECT_GE(found, 10);  // the scan found the switches at all
}

TEST(CacheKey, DifferingFieldsNamesEachFieldWithBothValues) {
  SessionOptions opt;
  auto facts = build_facts(opt.target);
  auto req = request_compat(kDigest, opt, facts);
  auto entry = req;
  entry.device_name = "Some Other CPU";
  entry.library_versions = {{"onednn", "3.1"}};
  auto diffs = cache::differing_fields(entry, req);
  ASSERT_EQ(diffs.size(), 2u);
  EXPECT_EQ(diffs[0].field, "device_name");
  EXPECT_EQ(diffs[0].entry, "Some Other CPU");
  EXPECT_EQ(diffs[0].request, facts.device_name);
  EXPECT_EQ(diffs[1].field, "library_versions");
  EXPECT_EQ(diffs[1].entry, "onednn=3.1");
  std::string here;  // this machine's, as CompatInfo::fields() joins them
  for (auto& [k, v] : facts.library_versions) here += (here.empty() ? "" : ",") + k + "=" + v;
  EXPECT_EQ(diffs[1].request, here);
  // Fields outside the key (input signature, cache key) never count.
  entry = req;
  entry.input_signature = "x:float32[2,4]";
  entry.cache_key = "abc";
  EXPECT_TRUE(cache::differing_fields(entry, req).empty());
}

// TF32 and the 16-bit precisions are cuda options: each gives its own key and
// precision field, and fp32 keys stay what they were before the option existed.
TEST(CacheKey, Tf32AndHalfPrecisionsChangeTheKeyAndThePrecisionField) {
  SessionOptions base;
  EXPECT_EQ(options_text(base), "target=cpu;precision=fp32;tuning=none");
  base.target = Target::cuda();
  auto facts = build_facts(Target::cpu());  // this machine's facts; only the options vary
  std::map<std::string, std::string> key_of, precision_of;
  for (auto [p, tf32] : std::vector<std::pair<Precision, bool>>{
           {Precision::fp32, false}, {Precision::fp32, true}, {Precision::fp16, false}, {Precision::bf16, false}}) {
    SessionOptions o = base;
    o.precision = p;
    o.allow_tf32 = tf32;
    auto c = request_compat(kDigest, o, facts);
    std::string name = precision_text(p, tf32);
    key_of[name] = cache::derive_key(cache::key_fields(c));
    precision_of[name] = c.precision;
    EXPECT_EQ(options_text(o).find("tf32") != std::string::npos, tf32) << options_text(o);
  }
  std::set<std::string> distinct;
  for (auto& [name, key] : key_of) distinct.insert(key);
  EXPECT_EQ(distinct.size(), 4u);
  EXPECT_EQ(precision_of["fp32"], "fp32");
  EXPECT_EQ(precision_of["fp32+tf32"], "fp32+tf32");
  EXPECT_EQ(precision_of["fp16"], "fp16");
  // An entry made with TF32 against a strict request: the first differing
  // field named is precision (then the options digest).
  SessionOptions strict = base, fast = base;
  fast.allow_tf32 = true;
  auto diffs = cache::differing_fields(request_compat(kDigest, fast, facts), request_compat(kDigest, strict, facts));
  ASSERT_EQ(diffs.size(), 2u);
  EXPECT_EQ(diffs[0].field, "precision");
  EXPECT_EQ(diffs[0].entry, "fp32+tf32");
  EXPECT_EQ(diffs[0].request, "fp32");
  EXPECT_EQ(diffs[1].field, "options_digest");
}

// Through the cache: publish with this machine's facts, then each fact
// changed alone misses; the original facts still hit.
struct KeyMisses : ::testing::Test {
  TempDir dir;
  fs::path model = dir / "mlp.onnx";
  SessionOptions opt;
  void SetUp() override {
    mlp_model().save(model);
    // These tests are about the entry a Session makes when it is constructed;
    // the MLP's batch is symbolic, and shape specialization (the default)
    // would compile on the first run instead (tests/cli/test_specialization.py).
    opt.specialize_shapes = false;
    opt.cache_dir = dir / "cache";
  }
  SessionStats::Cache lookup(const fs::path& m, const SessionOptions& o, const artifact::CompatInfo& facts) {
    SessionStats st;
    auto p = obtain_program(m, o, facts, st);
    EXPECT_TRUE(p != nullptr);
    return st.cache;
  }
};

TEST_F(KeyMisses, EachMachineFactChangedAloneMisses) {
  auto facts = build_facts(opt.target);
  EXPECT_EQ(lookup(model, opt, facts), SessionStats::Cache::miss);
  EXPECT_EQ(lookup(model, opt, facts), SessionStats::Cache::hit);
  std::vector<std::pair<std::string, std::function<void(artifact::CompatInfo&)>>> changes{
      {"device_arch", [](auto& f) { f.device_arch = "x86-64-v9"; }},
      {"device_name", [](auto& f) { f.device_name = "Another CPU"; }},
      {"cpu_isa", [](auto& f) { f.cpu_isa = {"sse2", "avx512f"}; }},
      {"library_versions", [](auto& f) { f.library_versions = {{"onednn", "3.1.1"}}; }},
      {"kiln_version", [](auto& f) { f.kiln_version = "0.0.1-old"; }},
  };
  for (auto& [name, change] : changes) {
    auto f = facts;
    change(f);
    EXPECT_EQ(lookup(model, opt, f), SessionStats::Cache::miss) << name;
  }
  EXPECT_EQ(lookup(model, opt, facts), SessionStats::Cache::hit);
}

TEST_F(KeyMisses, ModelWeightsExternalDataTargetAndShapesEachMiss) {
  auto facts = build_facts(opt.target);
  EXPECT_EQ(lookup(model, opt, facts), SessionStats::Cache::miss);
  mlp_model(3.0f).save(dir / "mlp3.onnx");
  EXPECT_EQ(lookup(dir / "mlp3.onnx", opt, facts), SessionStats::Cache::miss);
  SessionOptions ref = opt;
  ref.target = Target::ref();
  EXPECT_EQ(lookup(model, ref, build_facts(ref.target)), SessionStats::Cache::miss);
  SessionOptions shaped = opt;
  shaped.input_shapes["x"] = {2, 4};
  EXPECT_EQ(lookup(model, shaped, facts), SessionStats::Cache::miss);
  EXPECT_EQ(lookup(model, shaped, facts), SessionStats::Cache::hit);

  // External data: the .onnx is unchanged, one weight byte in weights.bin is not.
  fs::path ext = external_data_model(dir.path());
  EXPECT_EQ(lookup(ext, opt, facts), SessionStats::Cache::miss);
  EXPECT_EQ(lookup(ext, opt, facts), SessionStats::Cache::hit);
  {
    std::fstream f(dir / "weights.bin", std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(12);
    f.put('\x7f');
  }
  EXPECT_EQ(lookup(ext, opt, facts), SessionStats::Cache::miss);
}

}  // namespace
}  // namespace kiln::testing
