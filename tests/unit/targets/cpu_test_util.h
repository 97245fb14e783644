// Helpers for the cpu target's kernel-family tests (test_cpu_lstm.cpp,
// test_cpu_norm.cpp, test_cpu_skinny.cpp, ...): a model through the cpu
// pipeline, how many nodes of a kiln.cpu op it makes, a model's outputs
// through a Session on a given target, seeded inputs, the artifact round
// trip and a corrupt program's refusal.
#pragma once
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../onnx/model_builder.h"
#include "artifact/artifact.h"
#include "kiln/errors.h"
#include "kiln/session.h"
#include "runtime/program.h"
#include "targets/host.h"
#include "onnx/importer.h"
#include "passes/passes.h"
#include "targets/pipeline.h"

namespace kiln::testing {

/// b through the cpu pipeline, with this host's compat block (ready for
/// Program or artifact::serialize).
inline artifact::CompiledProgram compile_cpu(const ModelBuilder& b) {
  auto bytes = b.bytes();
  artifact::CompiledProgram cp;
  cp.model = onnx_import::import_bytes(bytes.data(), bytes.size(), ".", "test");
  passes::bind_input_shapes(cp.model, {});
  SessionOptions opt;
  opt.target = Target::cpu();
  targets::run_pipeline(cp, opt);
  cp.compat = targets::host_facts(opt.target);
  return cp;
}

/// Number of kiln.cpu `op` nodes in the main graph after the cpu pipeline.
inline int cpu_nodes(const ModelBuilder& b, const std::string& op) {
  const artifact::CompiledProgram cp = compile_cpu(b);
  int c = 0;
  for (auto& n : cp.model.main.nodes) c += n.op_type == op && n.domain == "kiln.cpu";
  return c;
}

/// A float32 tensor of `shape` with deterministic values in [-1, 1) (a
/// linear congruential sequence from `seed`).
inline Tensor seeded(const std::vector<int64_t>& shape, uint32_t seed) {
  Tensor t(DType::f32, shape);
  uint32_t s = seed * 2654435761u + 7;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    t.data<float>()[i] = static_cast<float>(s >> 8) / 8388608.0f - 1.0f;
  }
  return t;
}

/// seeded's values as a vector (an initializer's).
inline std::vector<float> seeded_values(const std::vector<int64_t>& shape, uint32_t seed) {
  Tensor t = seeded(shape, seed);
  return {t.data<float>(), t.data<float>() + t.numel()};
}

/// cp's output `out` on `in`, then the same through the artifact format
/// (serialize, read back): equal bit for bit.
inline void expect_artifact_round_trip(const artifact::CompiledProgram& cp, const std::map<std::string, Tensor>& in,
                                       const std::string& out) {
  const Tensor y = Program(cp).run(in, 0).at(out);
  auto bytes = std::make_shared<const std::vector<uint8_t>>(artifact::serialize(cp));
  const Tensor back = Program(artifact::read_bytes(bytes, "test")).run(in, 0).at(out);
  ASSERT_EQ(back.numel(), y.numel());
  for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(back.data<float>()[i], y.data<float>()[i]) << i;
}

/// cp (made corrupt by the caller) refused with Error(corrupt_artifact) whose
/// message names node `node`.
inline void expect_refused_as_corrupt(artifact::CompiledProgram cp, const std::map<std::string, Tensor>& in,
                                      const std::string& node) {
  try {
    Program(std::move(cp)).run(in, 0);
    ADD_FAILURE() << "a corrupt " << node << " ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::corrupt_artifact) << e.what();
    EXPECT_NE(std::string(e.what()).find(node), std::string::npos) << e.what();
  }
}

/// The model's outputs on target t (no cache).
inline std::map<std::string, Tensor> run_on(const ModelBuilder& b, Target t, const std::map<std::string, Tensor>& in) {
  TempDir dir;
  b.save(dir / "model.onnx");
  SessionOptions opt;
  opt.target = t;
  opt.use_cache = false;
  return Session(dir / "model.onnx", opt).run(in);
}

}  // namespace kiln::testing
