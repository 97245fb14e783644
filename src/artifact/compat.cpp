// The compatibility block: CompatInfo <-> FlatBuffers `Compat` table
// (docs/file-format.md, "Compatibility block").
#include <flatbuffers/flatbuffers.h>
#include <fmt/format.h>

#include "artifact/artifact.h"
#include "artifact/program_generated.h"
#include "support/error.h"

namespace kiln::artifact {

namespace {
std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}
}  // namespace

std::vector<std::pair<std::string, std::string>> CompatInfo::fields() const {
  std::vector<std::string> libs;
  for (auto& [name, version] : library_versions) libs.push_back(name + "=" + version);
  return {
      {"kiln_version", kiln_version},
      {"format_version", std::to_string(format_version)},
      {"target", target},
      {"device_arch", device_arch},
      {"device_name", device_name},
      {"cpu_isa", join(cpu_isa, ",")},
      {"library_versions", join(libs, ",")},
      {"precision", precision},
      {"tuning", tuning},
      {"options_digest", options_digest},
      {"model_digest", model_digest},
      {"input_signature", input_signature},
      {"cache_key", cache_key},
  };
}

namespace detail {

std::vector<uint8_t> encode_compat(const CompatInfo& c) {
  flatbuffers::FlatBufferBuilder b(1024);
  b.ForceDefaults(true);
  auto str = [&](const std::string& s) { return b.CreateString(s); };
  std::vector<flatbuffers::Offset<flatbuffers::String>> isa;
  for (auto& s : c.cpu_isa) isa.push_back(str(s));
  std::vector<flatbuffers::Offset<fb::KeyValue>> libs;
  for (auto& [k, v] : c.library_versions) {
    auto ko = str(k), vo = str(v);
    libs.push_back(fb::CreateKeyValue(b, ko, vo));
  }
  auto kiln_version = str(c.kiln_version), target = str(c.target), arch = str(c.device_arch),
       name = str(c.device_name), precision = str(c.precision), tuning = str(c.tuning),
       options = str(c.options_digest), model = str(c.model_digest), sig = str(c.input_signature),
       key = str(c.cache_key);
  auto isa_v = b.CreateVector(isa);
  auto libs_v = b.CreateVector(libs);
  b.Finish(fb::CreateCompat(b, kiln_version, kFormatVersion, target, arch, name, isa_v, libs_v, precision, tuning,
                            options, model, sig, key));
  return {b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize()};
}

CompatInfo decode_compat(const uint8_t* p, size_t n, uint32_t header_version, const std::string& what) {
  const char* region = "compatibility block";
  flatbuffers::Verifier v(p, n, 64, verifier_max_tables(n));
  if (!v.VerifyBuffer<fb::Compat>(nullptr)) corrupt(what, region, "FlatBuffers verification failed");
  const fb::Compat* c = flatbuffers::GetRoot<fb::Compat>(p);
  auto str = [](const flatbuffers::String* s) { return s ? s->str() : std::string(); };
  CompatInfo out;
  out.kiln_version = str(c->kiln_version());
  out.format_version = c->format_version();
  if (out.format_version != header_version)
    corrupt(what, region,
            fmt::format("format_version {} disagrees with the header's {}", out.format_version, header_version));
  out.target = str(c->target());
  // Every reader (check, load, cache) acts on the target, so a block that
  // names none of kiln's is damaged (or another program's), not a bad option.
  if (out.target != "cpu" && out.target != "ref" && out.target != "cuda") {
    std::string shown;
    for (unsigned char ch : out.target) shown += ch >= 32 && ch < 127 ? std::string(1, char(ch)) : fmt::format("\\x{:02x}", ch);
    corrupt(what, region, fmt::format("target '{}' is not a kiln target (cpu, ref, cuda)", shown));
  }
  out.device_arch = str(c->device_arch());
  out.device_name = str(c->device_name());
  if (auto isa = c->cpu_isa())
    for (auto s : *isa) out.cpu_isa.push_back(str(s));
  if (auto libs = c->library_versions())
    for (auto kv : *libs) out.library_versions.emplace_back(str(kv->key()), str(kv->value()));
  out.precision = str(c->precision());
  out.tuning = str(c->tuning());
  out.options_digest = str(c->options_digest());
  out.model_digest = str(c->model_digest());
  out.input_signature = str(c->input_signature());
  out.cache_key = str(c->cache_key());
  return out;
}

}  // namespace detail
}  // namespace kiln::artifact
