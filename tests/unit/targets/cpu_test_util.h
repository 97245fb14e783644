// Helpers for the cpu target's kernel-family tests (test_cpu_lstm.cpp,
// test_cpu_norm.cpp): how many nodes of a kiln.cpu op the cpu pipeline makes
// of a model, and a model's outputs through a Session on a given target.
#pragma once
#include <map>
#include <string>

#include "../onnx/model_builder.h"
#include "artifact/artifact.h"
#include "kiln/session.h"
#include "onnx/importer.h"
#include "passes/passes.h"
#include "targets/pipeline.h"

namespace kiln::testing {

/// Number of kiln.cpu `op` nodes in the main graph after the cpu pipeline.
inline int cpu_nodes(const ModelBuilder& b, const std::string& op) {
  auto bytes = b.bytes();
  artifact::CompiledProgram cp;
  cp.model = onnx_import::import_bytes(bytes.data(), bytes.size(), ".", "test");
  passes::bind_input_shapes(cp.model, {});
  SessionOptions opt;
  opt.target = Target::cpu();
  targets::run_pipeline(cp, opt);
  int c = 0;
  for (auto& n : cp.model.main.nodes) c += n.op_type == op && n.domain == "kiln.cpu";
  return c;
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
