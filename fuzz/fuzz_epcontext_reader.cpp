// libFuzzer target: the kiln EP's EPContext reader (ort_ep/epcontext_reader.*).
// The input is an ONNX NodeProto, as an EPContext model carries it; its INT
// and STRING attributes go to parse_epcontext (what ORT hands the EP), and an
// embedded ep_cache_context is read as an artifact (artifact::read_bytes)
// and its compatibility block checked (check_compat_fields), the steps the
// EP takes before loading a program. Any input must end in a kiln::Error of
// the expected kinds (invalid_model for the node, corrupt_artifact for the
// bytes, incompatible_artifact / invalid_option for the block) or succeed;
// a crash, a sanitizer report or another error is a bug.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "epcontext_reader.h"
#include "kiln/errors.h"
#include "onnx/onnx_pb.h"

namespace {

bool expected(kiln::ErrorCode c) {
  using kiln::ErrorCode;
  return c == ErrorCode::invalid_model || c == ErrorCode::corrupt_artifact ||
         c == ErrorCode::incompatible_artifact || c == ErrorCode::invalid_option;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  onnx::NodeProto node;
  if (!node.ParseFromArray(data, static_cast<int>(size))) return 0;  // not a node: ORT would have refused the model
  std::map<std::string, int64_t> ints;
  std::map<std::string, std::string> strings;
  for (const auto& a : node.attribute()) {
    if (a.type() == onnx::AttributeProto::INT) ints[a.name()] = a.i();
    if (a.type() == onnx::AttributeProto::STRING) strings[a.name()] = a.s();
  }
  try {
    kiln::ort_ep::EpContextNode ctx = kiln::ort_ep::parse_epcontext(node.name(), ints, strings);
    if (ctx.embed_mode == 1) {
      auto bytes = std::make_shared<const std::vector<uint8_t>>(ctx.cache.begin(), ctx.cache.end());
      kiln::artifact::CompiledProgram cp = kiln::artifact::read_bytes(bytes, "EPContext node '" + ctx.name + "'");
      kiln::ort_ep::check_compat_fields(cp.compat, ints.count("precision_probe") ? "fp16" : "", "fuzz");
    }
  } catch (const kiln::Error& e) {
    if (!expected(e.code())) {
      std::fprintf(stderr, "kiln error (code %d): %s\n", static_cast<int>(e.code()), e.what());
      std::abort();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln error: a non-kiln exception escaped the reader: %s\n", e.what());
    std::abort();
  }
  return 0;
}
