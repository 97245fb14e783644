// The programs of one Session: a single program, or one per shape bucket
// with the run-time choice, padding and slicing (internal to the runtime).
#pragma once
#include <functional>
#include <map>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "artifact/artifact.h"
#include "kiln/options.h"
#include "kiln/session.h"
#include "runtime/program.h"

namespace kiln {

/// Every program of an artifact, ready to run, plus (compile side) a way to
/// compile the bucket a request needs when the artifact lacks it.
///
/// Not bucketed: run() is the single Program's run(). Bucketed: run() reads
/// each bucketed dim's size from the inputs, chooses the program (the
/// smallest declared bucket that fits; for an out-of-bucket request a
/// program of exactly its size), compiles it through `grow` if the set lacks
/// it, pads the inputs with zeros, runs, and slices the outputs back.
/// Thread-safe: the program list is guarded by a mutex, held while a missing
/// program is compiled (so a bucket is compiled once per Session).
class ProgramSet {
 public:
  /// Compiles the program for `sizes` (BucketSet::dims order) of bucket set
  /// `set` (the set's, so the compile need not plan it again) and returns
  /// it (model + plan; the set's compat and bucket set apply). `reference`
  /// (may be null) is a program the set holds, whose weight layouts the
  /// compile reuses. Sets `compiled` false when it found the program already
  /// compiled by another process (cache) instead. Throws what a compile throws.
  using Grow = std::function<artifact::ProgramVariant(const std::vector<int64_t>& sizes,
                                                      const artifact::BucketSet& set, const ir::Model* reference,
                                                      bool& compiled)>;

  /// Builds a Program for each program of `cp`. `grow` may be empty (an
  /// explicit artifact: a missing bucket is then an error).
  /// `device`: the device index device targets load on (Target::device).
  /// `max_loaded`: most programs kept built at once (SessionOptions::max_loaded_programs; 0: no bound).
  ProgramSet(artifact::CompiledProgram cp, Grow grow, OutOfBucket policy, int device = 0, int max_loaded = 0);
  /// A bucketed set with no program yet (a cache miss: each bucket is
  /// compiled when a run first needs it). `inputs`/`outputs` describe the
  /// model's graph inputs and outputs (bucketed dims symbolic).
  ProgramSet(artifact::CompatInfo compat, artifact::BucketSet set, std::vector<TensorInfo> inputs,
             std::vector<TensorInfo> outputs, Grow grow, OutOfBucket policy, int device = 0, int max_loaded = 0);

  /// Estimated ms of one run of the program for `sizes` (tests: replaces the
  /// measured run times that choose between splitting a batch, padding it and
  /// compiling a bucket, which are noise on a tiny test model).
  using RowCost = std::function<double(const std::vector<int64_t>& sizes)>;
  void set_row_cost(RowCost f) const {
    std::lock_guard<std::mutex> lock(mu_);
    row_cost_ = std::move(f);
  }

  /// See Session::run; `profile` (may be null) times the nodes of the program that ran.
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& inputs, int threads,
                                    RunProfile* profile = nullptr) const;
  /// See Session::run_into: a request run on a program of exactly its sizes
  /// writes into `outputs` (Program::run_into); a padded or split one runs as
  /// run() and copies each output once.
  void run_into(const std::map<std::string, Tensor>& inputs, const std::map<std::string, Tensor>& outputs,
                int threads) const;
  /// See Session::output_shapes.
  std::map<std::string, std::vector<int64_t>> output_shapes(const std::map<std::string, Tensor>& inputs) const;
  /// See Session::run_device (Error(invalid_option) for a bucketed set).
  void run_device(const std::map<std::string, DeviceTensor>& inputs,
                  const std::map<std::string, DeviceTensor>& outputs) const;
  std::vector<TensorInfo> inputs() const { return inputs_; }
  std::vector<TensorInfo> outputs() const { return outputs_; }
  /// See Session::reference_nodes.
  std::vector<ReferenceNode> reference_nodes() const;
  /// See Session::buckets.
  BucketStats stats() const;
  const artifact::BucketSet& bucket_set() const { return set_; }

 private:
  struct Entry {
    std::vector<int64_t> sizes;
    /// Built on first use (see built()); the first program of a set is built
    /// at once, so a load still checks that this machine can bind kernels.
    mutable std::shared_ptr<const Program> program;
    mutable std::shared_ptr<artifact::CompiledProgram> pending;  ///< until built (or after being unloaded)
    mutable uint64_t last_use = 0;  ///< ProgramSet::uses_ at its latest pick (least recently used unloads first)
    mutable double run_ms = 0;      ///< wall ms of one run of this program (smoothed; 0: never run here)
    mutable int runs = 0;           ///< runs timed into run_ms
    const ir::Model& model() const { return program ? program->compiled().model : pending->model; }
  };
  /// Adds a program. With `share`, each of its constants is first replaced by
  /// an equal one the set already holds (programs compiled in this process;
  /// programs read from one file already share the file's single copy, so
  /// they skip the hashing). The first program is built at once, the others
  /// when a run first needs them: a load makes only one program ready.
  void add(std::vector<int64_t> sizes, ir::Model model, ir::MemoryPlan plan, bool share) const;
  /// Hashes one model's constants into constants_ (no sharing).
  void index_constants(const ir::Model& model) const;
  /// e.program, building it first when it is still pending (mu_ held or
  /// construction time).
  const std::shared_ptr<const Program>& built(const Entry& e) const;
  /// One program run of a request: `rows` rows of the split dim (all of
  /// the request when not split) on the program of `sizes`.
  struct Part {
    std::shared_ptr<const Program> program;
    std::vector<int64_t> sizes;
    int64_t rows = 0;
  };
  /// The programs a request (`inputs`, whose bucketed sizes are `request`)
  /// runs on, compiling what is missing: one part, or (split_dim >= 0)
  /// consecutive row ranges of the batch dim split_dim.
  std::vector<Part> pick(const std::map<std::string, Tensor>& inputs, const std::vector<int64_t>& request,
                         int& split_dim) const;
  /// The batch dim a request not held exactly may be split along, or -1: a
  /// specialized dim with batch padding proven safe that has shown at least
  /// two sizes, in a set that can compile (mu_ held).
  int split_dim(const std::vector<int64_t>& request) const;
  /// The cheapest plan over the programs held (same sizes as `sizes` on the
  /// other dims) for request[k] rows, by measured run times (plan_rows);
  /// compiles the power-of-two program when none held comes within
  /// kCompileMargin of its estimated time (mu_ held).
  std::vector<Part> split_rows(size_t k, const std::vector<int64_t>& request, std::vector<int64_t> sizes) const;
  /// Estimated ms of one run at `size` rows of dim k among `same` (the
  /// programs differing from it only in dim k): its own measured time, else
  /// a line a + b x size fitted to the measured ones (mu_ held).
  double estimate_ms(const std::vector<const Entry*>& same, size_t k, int64_t size) const;
  /// Compiles the program of `sizes` through grow_ and adds it (mu_ held).
  const Entry& grow_program(const std::vector<int64_t>& sizes, const std::string& request) const;
  /// Adds `ms` (one run's wall time) to the program of `sizes` (mu_ held).
  void record_run(const std::vector<int64_t>& sizes, double ms) const;
  /// Specialized dims whose padding is safe: from a dim's third distinct
  /// size on, `sizes` (the request's) is rounded up to a program held or the
  /// next power of two; dim `skip` is left as requested. A sequence dim only
  /// when the request's keep-mask `inputs` allow padding (mu_ held).
  void round_specialized(const std::map<std::string, Tensor>& inputs, const std::vector<int64_t>& request,
                         std::vector<int64_t>& sizes, int skip = -1) const;
  /// run() and run_into() of a bucketed set: with `into`, a request whose
  /// program has exactly its sizes is written there (returns no outputs).
  std::map<std::string, Tensor> run_bucketed(const std::map<std::string, Tensor>& inputs, int threads,
                                             RunProfile* profile, const std::map<std::string, Tensor>* into) const;
  /// Unbuilds the least recently used programs beyond max_loaded_ (mu_ held).
  void unload_least_recent() const;

  artifact::CompatInfo compat_;
  std::vector<uint8_t> kernels_, tuning_;
  std::string metadata_json_;
  artifact::BucketSet set_;
  Grow grow_;
  OutOfBucket policy_;
  int device_ = 0;
  int max_loaded_ = 0;
  std::vector<TensorInfo> inputs_, outputs_;
  mutable uint64_t uses_ = 0;
  mutable std::mutex mu_;
  mutable std::vector<Entry> programs_;
  mutable std::multimap<uint64_t, Tensor> constants_;  ///< XXH3-64 of the bytes -> a constant held
  mutable bool indexed_ = false;  ///< constants_ holds the constants of every program in programs_
  mutable std::shared_ptr<const Program> last_;  ///< the program the latest run used (its last part)
  /// Every program the latest run used: their arenas stay, the others' are released.
  mutable std::vector<std::shared_ptr<const Program>> in_use_;
  mutable int split_runs_ = 0;
  mutable RowCost row_cost_;
  mutable int compiles_ = 0;
  mutable double compile_ms_ = 0;
};

}  // namespace kiln
