// kiln public API: sessions (compile-or-load, then run).
#pragma once
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/errors.h"
#include "kiln/options.h"
#include "kiln/tensor.h"

namespace kiln {

/// Declared type of a model input or output. dims: -1 for a symbolic dim,
/// whose name is in `symbols` at the same index (empty for static dims).
struct TensorInfo {
  std::string name;
  DType dtype = DType::undefined;
  std::vector<int64_t> dims;
  std::vector<std::string> symbols;
};

/// How the program of a Session was obtained, and what it cost (milliseconds,
/// wall clock, measured inside the constructor).
struct SessionStats {
  enum class Cache { hit, miss, none };
  Cache cache = Cache::none;   ///< none: --no-cache, explicit .kiln, or cache unusable
  double compile_ms = 0;       ///< 0 when nothing was compiled
  double load_ms = 0;          ///< reading + validating the artifact and making it ready
  std::string artifact_path;   ///< cache entry or explicit artifact; empty for in-memory
  std::vector<std::string> notes;  ///< e.g. why the cache was not written or why an entry was rebuilt
};

/// The shape buckets of a Session (SessionOptions::dims) and the programs it
/// holds now. Empty `dims`: not bucketed (one program).
struct BucketStats {
  std::vector<std::string> dims;               ///< bucketed dim names (value guards: the input's name)
  /// Per dim, how its programs are chosen and why: "declared buckets (pad batch)",
  /// "specialized: one program per size; from the third size, a batch runs on the programs held (split into row
  /// parts or padded) or on a new power-of-two bucket, ...", "specialized: ...; from the third size, power-of-two
  /// buckets (sequence padding proven safe: ...)",
  /// "specialized: one program per size (padding not proven safe)", "value guard: one program per value".
  std::vector<std::string> modes;
  std::vector<std::vector<int64_t>> programs;  ///< sizes (per dim) of each program held, in the order added
  int compiled_by_run = 0;                     ///< programs run() compiled (buckets first used by this Session)
  double compile_ms = 0;                       ///< wall-clock milliseconds those compiles took
  /// run() calls whose batch ran as several row parts on programs held
  /// (specialized batch dims: cheaper than compiling another bucket).
  int split_runs = 0;
};

/// A main-graph node of a compiled program that runs on kiln's reference
/// kernels (plain loops) instead of the target's own, and why.
struct ReferenceNode {
  std::string node;    ///< the node's name, or "op_type #index"
  std::string op;      ///< ONNX op_type
  std::string reason;  ///< e.g. "dynamic shape: 'x' is [batch,3,H,W]", "no cpu kernel for TopK"
  bool fixable = false;  ///< the user can change it (dynamic shapes: give shapes or keep specialization on)
};

class ProgramSet;  // opaque; defined in src/runtime

/// Wall time of one main-graph node during a profiled run (milliseconds).
/// `op` is "domain::op_type" for target-private operators (e.g.
/// "kiln.cpu::Conv", a oneDNN primitive) and the bare op_type for the default
/// ONNX domain (run by the reference kernels).
struct NodeTime {
  std::string node;  ///< the node's name, or "op_type #index" when it has none
  std::string op;
  double ms = 0;
};

/// Per-node wall times of one run(), in execution order. Subgraph nodes
/// (If/Loop/Scan bodies) count in their parent node's time.
struct RunProfile {
  std::vector<NodeTime> nodes;
  double total_ms = 0;  ///< the whole run, validation and output copies included
};

/// A tensor in the memory of a cuda session's GPU (Session::run_device):
/// `ptr` is a CUdeviceptr on the session's device, owned by the caller and
/// valid for the call; `bytes` its size, which must be what the compiled
/// shape and dtype take.
struct DeviceTensor {
  uint64_t ptr = 0;
  size_t bytes = 0;
};

/// A compiled model ready to run.
///
/// Thread safety: run() may be called from several threads at once on one
/// Session. The program and its constants are immutable after construction;
/// each run() call takes its own scratch arena from an internal pool (guarded
/// by a mutex only while taking and returning it), so concurrent runs never
/// share intermediate buffers.
class Session {
 public:
  /// Compiles `onnx_path` for opt.target, or loads the matching compiled
  /// program from the cache (opt.cache_dir) when one exists. A cache entry that
  /// is corrupt or does not match is rebuilt (policy recompile) and the reason
  /// is added to stats().notes. An unwritable cache directory is not an error:
  /// the program is compiled in memory and a note says so.
  /// Defined in the compiler library (kiln_compiler); a program that links only
  /// kiln_runtime uses Session::load.
  /// Throws Error: invalid_option, invalid_model, unsupported, io.
  Session(const std::filesystem::path& onnx_path, const SessionOptions& opt);

  /// Loads an explicit artifact and never compiles. Throws Error(corrupt_artifact)
  /// for a damaged file, Error(incompatible_artifact) naming the field when it
  /// was built for another target / machine / library version, Error(io).
  static Session load(const std::filesystem::path& artifact_path, const SessionOptions& opt);

  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;
  ~Session();

  /// Runs the model. `inputs` maps every graph input name to a tensor of the
  /// declared dtype and a shape that matches the static dims (symbolic dims may
  /// take any size; the same symbol must have the same size in every input).
  /// Returns every graph output by name. Throws Error(invalid_input) naming the
  /// input and the expected vs. given dtype/shape, or for missing/extra names.
  ///
  /// Bucketed sessions (SessionOptions::dims): the request runs on the
  /// smallest bucket that fits, its inputs zero-padded (batch rows, or
  /// sequence positions of a model with an attention mask) and its outputs
  /// sliced back; a bucket first used is compiled here (and added to the
  /// cache entry). A shape outside every bucket is compiled exactly
  /// (OutOfBucket::compile) or throws Error(invalid_input) naming the dim
  /// (OutOfBucket::error, and always for Session::load, which cannot compile).
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& inputs) const;

  /// run(), timing every main-graph node into `*profile` (replaced). Timing
  /// costs two clock reads per node; results are the same as run().
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& inputs, RunProfile* profile) const;

  /// run() writing the outputs into host memory the caller owns: `outputs`
  /// maps every graph output name to a tensor (typically Tensor::view of the
  /// caller's buffer) of exactly the output's dtype and of exactly the shape
  /// run(inputs) would return (output_shapes() tells it before the run where
  /// it can be known). The buffers must not overlap the inputs or each other.
  /// The results are the values run() returns. Where the outputs go:
  ///  - cpu / ref: the node computing an output writes it into the caller's
  ///    buffer; an output the program does not compute (a graph input or a
  ///    constant passed through) is copied once;
  ///  - cuda: the device-to-host copy of each output lands in the caller's
  ///    buffer (an output computed by a host segment is copied once);
  ///  - bucketed sessions: a request that runs on a program of exactly its
  ///    sizes (the steady state: the bucket is held) writes as above; one that
  ///    is padded into a larger bucket or split into row parts runs as run()
  ///    and copies each sliced output once.
  /// Throws Error(invalid_input) naming the output for a missing or unknown
  /// output name or a dtype or shape other than the program's (checked before
  /// the run where the shape is known, else when the output is computed:
  /// then the caller's buffer is unchanged), and what run() throws.
  void run_into(const std::map<std::string, Tensor>& inputs, const std::map<std::string, Tensor>& outputs) const;

  /// The shape of each graph output that run(inputs) returns, where it is
  /// known before running: static outputs; dims whose symbol an input
  /// carries (its size in `inputs`); for a bucketed session, the program of
  /// the request's sizes when it is held (its shapes with the bucketed axes
  /// at the request's sizes). An output absent from the map is known only
  /// after the run (a data-dependent shape, a bucket not compiled yet).
  /// `inputs` is read for shapes only, except value-guarded scalar inputs
  /// (SessionOptions::dims kind value), whose values choose the program.
  /// Compiles nothing and runs nothing. Throws Error(invalid_input) as
  /// run() does for inputs whose sizes contradict each other.
  std::map<std::string, std::vector<int64_t>> output_shapes(const std::map<std::string, Tensor>& inputs) const;

  /// cuda sessions only: runs on inputs already in the GPU's memory and
  /// writes the outputs to GPU memory the caller owns; nothing crosses the
  /// PCIe bus (device-to-device copies into and out of the program's own
  /// buffers, then the CUDA graph). Every graph input and output must be
  /// named, with its exact byte size. Returns when the outputs are written.
  /// Throws Error(invalid_option) for a host target or a bucketed session,
  /// Error(invalid_input) naming a missing, unknown or wrongly sized tensor.
  void run_device(const std::map<std::string, DeviceTensor>& inputs,
                  const std::map<std::string, DeviceTensor>& outputs) const;

  std::vector<TensorInfo> inputs() const;
  std::vector<TensorInfo> outputs() const;
  const SessionStats& stats() const { return stats_; }
  /// The bucketed dims and the programs held now (changes as run() compiles buckets).
  BucketStats buckets() const;
  /// The main-graph nodes of the program the latest run() used (before any
  /// run: the first program held; empty when none is compiled yet) that run
  /// on reference kernels, with the reason (never a silent slow path).
  std::vector<ReferenceNode> reference_nodes() const;

 private:
  Session() = default;
  std::shared_ptr<const ProgramSet> program_;
  SessionStats stats_;
  friend struct SessionAccess;
};

}  // namespace kiln
