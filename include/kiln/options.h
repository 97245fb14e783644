// kiln public API: session and compile options.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

/// Where a compiled program runs.
///  - ref: plain loops over the reference kernels (src/ops); the correctness oracle.
///  - cpu: x86-64 CPU program with a static memory plan (oneDNN lowering: see docs).
///  - cuda: NVIDIA GPU (not built in this version; selecting it is an error).
struct Target {
  enum class Kind { ref, cpu, cuda };
  Kind kind = Kind::cpu;
  int device = 0;  ///< device index, cuda only

  static Target ref() { return {Kind::ref, 0}; }
  static Target cpu() { return {Kind::cpu, 0}; }
  static Target cuda(int device = 0) { return {Kind::cuda, device}; }
  /// Parses "ref", "cpu", "cuda", "cuda:N". Throws Error(invalid_option) naming the value.
  static Target parse(const std::string& text);
  std::string name() const;  ///< "cpu", "ref", "cuda"
  bool operator==(const Target&) const = default;
};

/// Numeric precision of the compiled program. fp32 is the only one the cpu
/// and ref targets offer; asking for another is an error naming the option.
/// On cuda, fp16 / bf16 store activations and weights in 16 bits inside the
/// program (inputs and outputs keep their declared dtypes), with fp32
/// accumulation in matmuls and convolutions and fp32 internals in
/// normalizations, softmax and reductions (docs/cuda.md, "Precision").
enum class Precision { fp32, fp16, bf16 };
const char* precision_name(Precision p);
/// Parses "fp32" / "fp16" / "bf16"; throws Error(invalid_option).
Precision parse_precision(const std::string& text);
/// The precision as the compatibility block records it: precision_name, with
/// "+tf32" appended for fp32 with allow_tf32 ("fp32+tf32").
std::string precision_text(Precision p, bool allow_tf32);

/// Whether a 16-bit (fp16 / bf16) cuda compile checks its precision
/// (docs/cuda.md, "Precision check").
///  - on (default): at compile time the 16-bit program runs against float32
///    on sample inputs (SessionOptions::precision_check_inputs, else random),
///    on the ref kernels with every 16-bit value rounded where it is made
///    (the same result with or without a GPU), and the nodes whose 16-bit
///    error grows past a bound (a node that amplifies its inputs' rounding:
///    cancellation, a steep Sigmoid / Exp / Pow, an overflow) are kept in
///    float32. The artifact's metadata and `kiln inspect` list them and why.
///  - off: every node follows the precision policy as written.
/// Ignored for fp32 programs. Part of the cache key when off.
enum class PrecisionCheck { on, off };
const char* precision_check_name(PrecisionCheck c);
/// Parses "on" / "off"; throws Error(invalid_option) naming `precision_check`.
PrecisionCheck parse_precision_check(const std::string& text);

/// How the cuda target makes its library choices at compile time (cuBLASLt
/// algorithm per matmul, cuDNN algorithm per convolution). Every choice is
/// stored in the artifact; a load replays it and does not tune again.
///  - heuristic: the libraries' own heuristics, nothing timed. The only mode
///    that needs no GPU: cross-compiling for SessionOptions::arch on a machine
///    without one (or with another architecture) stores the requests, and the
///    libraries' heuristics answer them once at load (docs/cuda.md).
///  - fast: times the cuBLASLt heuristic's best 4 candidates per matmul and
///    every cuDNN algorithm once per convolution (cudnnFind) on the device.
///  - exhaustive: times up to 24 cuBLASLt candidates per matmul and every
///    cuDNN algorithm 10 times (median) on the device.
/// Equal problems (same shapes and options) are tuned once per compile.
enum class Tuning { heuristic, fast, exhaustive };
const char* tuning_name(Tuning t);
/// Parses "heuristic" / "fast" / "exhaustive"; throws Error(invalid_option) naming `tuning`.
Tuning parse_tuning(const std::string& text);

/// What the cuda target does with a node it cannot lower (no kernel for the
/// operator or its dtypes, a subgraph operator If / Loop / Scan, a shape
/// that depends on tensor values):
///  - host: the node runs on the host inside the same program (a host
///    segment on the cpu target's kernels, reference kernels where cpu has
///    none), with device-to-host / host-to-device copies of the values that
///    cross the boundary; a note names the nodes and op types (default).
///  - error: the compile is refused, naming each such node and why.
/// The cpu and ref targets run everything on the host and ignore it.
enum class Fallback { host, error };
const char* fallback_name(Fallback f);
/// Parses "host" / "error"; throws Error(invalid_option) naming `fallback`.
Fallback parse_fallback(const std::string& text);

/// What to do when an artifact does not match this machine, model or options.
enum class MismatchPolicy {
  recompile,  ///< compile again and replace the cache entry (default for the cache)
  error,      ///< throw Error(incompatible_artifact) naming the field (default for an explicit .kiln)
};

/// How a symbolic dimension (an ONNX dim_param, e.g. "batch") is compiled:
/// one program per bucket, each for the bucket's largest size. A request
/// of size s runs on the smallest bucket whose size is >= s, padded up to it
/// where padding is safe (see DimSpec::Pad), else only on a bucket of size s.
///
/// Text forms (DimSpec::parse, `kiln --dim NAME=SPEC`):
///  - "1,2,4,8"        list: one bucket per value; sizes 1 .. 8 are served
///  - "1..512"         range: power-of-two buckets 1, 2, 4, ..., 512 (the
///                     last one is the range's end when it is not a power of two)
///  - "1..512:16,64,128,512"  range with explicit bucket sizes (ascending,
///                     inside the range; the range's end is added if missing)
///  - any of these + "/pad=none", "/pad=sequence" (or "/pad=auto", the
///    default): see Pad
struct DimSpec {
  /// Where padding up to a bucket is allowed.
  ///  - auto_: batch padding when kiln's shape inference shows the rows
  ///    independent (the dim is axis 0 of every tensor having it, every
  ///    operator on it is row-wise and leaves axis 0 alone, every output has
  ///    it at axis 0); otherwise none.
  ///  - none: never pad; a request must match a bucket's size exactly.
  ///  - sequence: the user's assertion that zero-padding the dim is masked
  ///    out: the model must take an integer or bool input named "*mask*"
  ///    having the dim (the runtime extends it with zeros), and that mask
  ///    must gate every operation that mixes positions (attention, pooling,
  ///    convolutions over the sequence, recurrences...). Else
  ///    Error(invalid_option) at compile time.
  enum class Pad { auto_, none, sequence };
  int64_t min = 1;               ///< smallest size served (>= 1)
  int64_t max = 1;               ///< largest size served (== sizes.back())
  std::vector<int64_t> sizes;    ///< bucket sizes, strictly ascending, each in [min, max]
  Pad pad = Pad::auto_;

  /// Parses the text forms above. Throws Error(invalid_option) naming
  /// `option` (e.g. "dims 'seq'") and what is wrong.
  static DimSpec parse(const std::string& text, const std::string& option = "dim");
  /// Canonical text ("1..512:1,2,4,...", "/pad=none" or "/pad=sequence" appended when set); part of the cache key.
  std::string str() const;
  /// Throws Error(invalid_option) naming `option` for an empty or unordered
  /// bucket list, a size < 1, or min/max not matching the sizes.
  void validate(const std::string& option) const;
};

/// What a Session does with a request whose shape is outside every bucket
/// (larger than the last bucket, or not a bucket size where padding is not safe).
enum class OutOfBucket {
  compile,  ///< compile a program for exactly that shape and add it to the cache entry (default)
  error,    ///< throw Error(invalid_input) naming the dim, its size and the buckets
};

/// Options of a kiln::Session. Validated by validate() (called by every
/// Session constructor); every error names the option.
struct SessionOptions {
  Target target = Target::cpu();
  Precision precision = Precision::fp32;
  /// TF32 tensor-core math for fp32 matmuls and convolutions (inputs rounded
  /// to 10 mantissa bits, fp32 accumulation); only with precision fp32 on
  /// cuda (else Error(invalid_option) naming "allow_tf32"). Off: strict fp32
  /// math. Part of the cache key; the compatibility block's precision then
  /// reads "fp32+tf32".
  bool allow_tf32 = false;

  /// 16-bit cuda compiles: the compile-time precision check (PrecisionCheck).
  PrecisionCheck precision_check = PrecisionCheck::on;
  /// The precision check's sample inputs by input name (host tensors of the
  /// model's dtypes); inputs not named, or whose shape is not the program's
  /// (another bucket), are random (floats uniform in [0, 1), integers in
  /// [0, 9]). Given with precision_check off: Error(invalid_option). Their
  /// digest is part of the cache key (they decide which nodes stay float32).
  std::map<std::string, Tensor> precision_check_inputs;

  /// cuda only: how library algorithms are chosen (Tuning). Unset: fast.
  /// Setting it for cpu / ref is Error(invalid_option) naming "tuning".
  std::optional<Tuning> tuning;
  /// cuda only: the GPU architecture to compile for, "sm_XY" (e.g. "sm_90").
  /// Empty: the device's own. Another architecture than the device's (or no
  /// device at all) is a cross-compilation and needs Tuning::heuristic.
  std::string arch;
  /// cuda only: nodes the cuda target cannot lower run on the host (host)
  /// or refuse the compile (error); see Fallback. error is part of the cache
  /// key (host, the default, adds nothing to it).
  Fallback fallback = Fallback::host;

  /// Cache directory. Unset: $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln.
  /// Set to an empty path: invalid (an error naming "cache_dir").
  std::optional<std::filesystem::path> cache_dir;
  /// false: compile in memory every time, never read or write the cache.
  bool use_cache = true;

  /// Fixed input shapes by input name, e.g. {"x", {1,3,224,224}}. Inputs not
  /// named keep the model's dims; symbolic dims stay symbolic (run-time shapes).
  std::map<std::string, std::vector<int64_t>> input_shapes;

  /// Bucketed symbolic dims by dim_param name, e.g. {"batch", DimSpec::parse("1,2,4,8")}.
  /// Empty: one program, symbolic dims stay dynamic. A symbol named here must
  /// not also be fixed through input_shapes. Part of the cache key. On cuda
  /// each bucket is its own program with its own cubin and library choices.
  std::map<std::string, DimSpec> dims;

  /// Requests outside every bucket: compile that exact shape (and cache it) or error.
  OutOfBucket out_of_bucket = OutOfBucket::compile;

  /// Shape specialization ("specialize, then go dynamic"). On (default): a
  /// symbolic input dim (dim_param, -1 or missing) that neither input_shapes
  /// nor dims fixes is specialized to the sizes of the inputs actually given:
  /// the first run() compiles a program for them (as fast as with
  /// input_shapes) and adds it to the cache entry; another size compiles
  /// another program. From a dim's third distinct size on, a dim whose
  /// padding is provably safe (batch rows kept apart, or sequence positions
  /// masked out by a keep-mask input: runtime/sequence_prover.h) is served
  /// by the programs held instead: a batch split into row parts over them or
  /// padded onto one, unless a new power-of-two program is estimated faster by
  /// more than 1.25x (from measured run times); a sequence is rounded up to the
  /// next power of two (a bucket). Off: one program with the dims
  /// left symbolic (nodes with dynamic shapes run on reference kernels).
  /// Off is part of the cache key.
  bool specialize_shapes = true;
  /// Value specialization. On (default): a scalar integer or bool input
  /// (shape [] or [1]) from which an If condition, a Loop count or a shape /
  /// axes / count input is computed (a sample rate, a flag) is specialized
  /// on the value given: If on it folds to the taken branch (the other is
  /// never compiled), shape arithmetic on it folds; another value is another
  /// program (a guard). Off is part of the cache key.
  bool specialize_values = true;
  /// Ahead-of-time compiles (kiln::compile, `kiln compile --value NAME=V`):
  /// the values to compile a program for, per value-guard input (see
  /// specialize_values); several values store several programs in one
  /// artifact. A Session takes the values from its requests and ignores this.
  std::map<std::string, std::vector<int64_t>> values;
  /// Most specialized programs one Session keeps ready (least recently used
  /// dropped first; a dropped one is loaded from the cache entry again when
  /// needed). 0: no bound.
  int max_loaded_programs = 16;
  /// Most programs one cache entry keeps (the oldest added dropped first
  /// when a new specialization is added). 0: no bound. Not part of the key.
  int max_cached_programs = 64;

  /// What to do when the cache entry for this model and options is damaged
  /// or does not match this machine: recompile (moves a damaged entry aside
  /// to "<key>.kiln.bad" and replaces it) or error.
  MismatchPolicy cache_mismatch = MismatchPolicy::recompile;

  /// Use the cache directory even when it is group- or world-writable or
  /// owned by another user (not root). Off by default: an artifact holds a
  /// program this process will execute, and such a directory lets another
  /// user plant one; kiln then compiles in memory and a note says why.
  bool trust_cache_dir = false;

  /// Size cap of the cache directory in bytes, applied after each publish:
  /// least recently used entries are evicted first (never the one just
  /// written). 0 = no cap.
  uint64_t cache_max_bytes = uint64_t{2} << 30;

  /// Longest wait, in seconds, for another process compiling the same key
  /// (cache lock). After it this process compiles too (the result is the same
  /// program; the later publish replaces the earlier one whole).
  double cache_lock_timeout_s = 600;

  /// Called with each note (the text also added to SessionStats::notes) as
  /// soon as it is made, from the constructing thread: e.g. "waiting for
  /// another process compiling this model". May be empty.
  std::function<void(const std::string&)> on_note;

  /// Threads used by one Session::run (0: all cores available). Not part of
  /// the cache key: results do not depend on it beyond float rounding.
  int threads = 0;

  /// Throws Error(invalid_option) naming the first invalid field.
  void validate() const;
  /// The tuning mode compiles use: `tuning`, else fast for cuda; cpu and ref
  /// do not tune (std::nullopt).
  std::optional<Tuning> effective_tuning() const;
};

/// The directory the cache uses when SessionOptions::cache_dir is unset.
std::filesystem::path default_cache_dir();

}  // namespace kiln
