// Session: the run side (load an artifact, run it). Links no compiler code.
#include <fmt/format.h>

#include "runtime/session_internal.h"
#include "support/error.h"
#include "support/log.h"
#include "targets/host.h"
#include "targets/kernels.h"

namespace kiln {

std::shared_ptr<const ProgramSet> load_program(const std::filesystem::path& path, const SessionOptions& opt) {
  Stopwatch sw;
  artifact::CompatInfo compat = artifact::read_compat(path);
  // Before the compatibility check (it asks the driver and cuBLASLt for their
  // versions): the device setup overlaps it and the artifact's read.
  targets::DevicePrewarmSettler settle;  // nothing it started still running when this returns or throws
  settle.active = targets::prewarm_device(compat.target, opt.target.device);
  const double compat_ms = sw.ms();
  auto mismatches = targets::check_runnable(compat, opt.target);
  if (!mismatches.empty()) {
    std::string why;
    for (auto& m : mismatches) why += (why.empty() ? "" : "; ") + m.str();
    fail(ErrorCode::incompatible_artifact, "artifact '{}' cannot run here: {}", path.string(), why);
  }
  artifact::CompiledProgram cp = artifact::read_file(path);
  const double read_ms = sw.ms();
  auto programs = std::make_shared<const ProgramSet>(std::move(cp), nullptr, opt.out_of_bucket, opt.target.device,
                                                 opt.max_loaded_programs);
  if (log().should_log(spdlog::level::debug))
    log().debug("load '{}': compat block {:.2f} ms, read + verify {:.2f} ms, kernels bound {:.2f} ms (ready {:.0f} ms "
                "after the process started)",
                path.string(), compat_ms, read_ms - compat_ms, sw.ms() - read_ms, ms_since_process_start());
  return programs;
}

Session Session::load(const std::filesystem::path& artifact_path, const SessionOptions& opt) {
  opt.validate();
  Stopwatch sw;
  auto program = load_program(artifact_path, opt);
  SessionStats st;
  st.cache = SessionStats::Cache::none;
  st.load_ms = sw.ms();
  st.artifact_path = artifact_path.string();
  return SessionAccess::make(std::move(program), std::move(st));
}

Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;
Session::~Session() = default;

std::map<std::string, Tensor> Session::run(const std::map<std::string, Tensor>& inputs) const {
  if (!program_) fail(ErrorCode::internal, "run() on a moved-from Session");
  return program_->run(inputs, 0);
}

std::map<std::string, Tensor> Session::run(const std::map<std::string, Tensor>& inputs, RunProfile* profile) const {
  if (!program_) fail(ErrorCode::internal, "run() on a moved-from Session");
  return program_->run(inputs, 0, profile);
}

void Session::run_into(const std::map<std::string, Tensor>& inputs,
                       const std::map<std::string, Tensor>& outputs) const {
  if (!program_) fail(ErrorCode::internal, "run_into() on a moved-from Session");
  program_->run_into(inputs, outputs, 0);
}

std::map<std::string, std::vector<int64_t>> Session::output_shapes(const std::map<std::string, Tensor>& inputs) const {
  if (!program_) fail(ErrorCode::internal, "output_shapes() on a moved-from Session");
  return program_->output_shapes(inputs);
}

void Session::run_device(const std::map<std::string, DeviceTensor>& inputs,
                         const std::map<std::string, DeviceTensor>& outputs) const {
  if (!program_) fail(ErrorCode::internal, "run_device() on a moved-from Session");
  program_->run_device(inputs, outputs);
}

std::vector<TensorInfo> Session::inputs() const { return program_->inputs(); }
BucketStats Session::buckets() const { return program_->stats(); }

std::vector<ReferenceNode> Session::reference_nodes() const { return program_->reference_nodes(); }
std::vector<TensorInfo> Session::outputs() const { return program_->outputs(); }

}  // namespace kiln
