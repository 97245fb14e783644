// Forward convolutions through cuDNN's graph (backend) API, run side: the
// operation graph of a convolution and its fused epilogue (bias, residual
// add, Relu), the engine chosen at compile time rebuilt from its stored
// global index and knob choices (a precompiled engine) or from its
// serialized execution plan (a runtime-compiled one), and run.
//
// API: cuDNN 9 backend descriptors (cudnn_graph.h; "Graph API" and
// "Backend Descriptor Types" in the cuDNN developer guide). A load builds the
// plan from the stored decision and asks no heuristic, except for an
// artifact cross-compiled or made for an older architecture (engine -1).
// Every use of the process-wide cuDNN handle holds cudnn_mutex().
//
// Trust: a serialized plan is run as cuDNN deserializes it, like the
// artifact's cubins are; the artifact's section checksums guard against
// damage, not against a crafted file.
#pragma once
#include <cuda.h>
#include <cudnn.h>

#include <cstdint>
#include <string>
#include <vector>

#include "targets/cuda/run/cudnn_conv.h"

namespace kiln::targets::cuda {

/// What a graph convolution computes after conv(x, w), in float32 with one
/// rounding to y's dtype at the end:
///   y = relu?( conv(x, w) + bias? + z? )
/// bias: [K] of y's dtype, broadcast over N and the spatial dims (an ONNX
/// Conv's B); z ("residual"): y's dims, dtype and layout.
struct ConvEpilogue {
  bool bias = false;
  bool residual = false;
  bool relu = false;
  bool empty() const { return !bias && !residual && !relu; }
  /// "conv + bias + residual + relu", for logs and errors.
  std::string describe() const;
};

/// One stored way to run a graph convolution.
struct GraphEngine {
  int64_t engine = -1;         ///< CUDNN_ATTR_ENGINE_GLOBAL_INDEX; -1: cuDNN's heuristic chooses at load
  std::vector<int64_t> knobs;  ///< (cudnnBackendKnobType_t, value) pairs, flattened
  size_t workspace = 0;        ///< bytes the execution plan needs
  bool runtime_compiled = false;  ///< CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION (its kernel is built by NVRTC inside cuDNN)
  /// CUDNN_BEHAVIOR_NOTE_CUBLASLT_DEPENDENCY (cuDNN 9.15's note; never set
  /// by older cuDNN): the engine runs cuBLASLt inside cuDNN, so a program
  /// using it pays cuBLASLt's one-time start after all.
  bool cublaslt = false;
  /// A runtime-compiled engine's execution plan, serialized by cuDNN
  /// (CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION; cuDNN serializes only
  /// those), so that a load does not compile it again. Empty otherwise.
  std::string plan_json;
  float ms = 0;  ///< measured time at compile (0: heuristic order)
  /// "engine 12 (knobs 3=1 17=0)" / "+ runtime-compiled", for logs.
  std::string describe() const;
};

/// Whether kiln.cuda.Conv node `n` runs through the graph API (attribute
/// api = "graph"; absent: the legacy API, cudnn_conv.h).
bool is_graph_conv(const ir::Node& n);
/// Writes `ep` and `e` as attributes of `n`: api "graph", bias / residual /
/// relu (0/1), engine, knobs, workspace, runtime_compiled, plan_json (a
/// runtime-compiled engine's serialized plan, when there is one).
void set_graph_conv_attrs(ir::Node& n, const ConvEpilogue& ep, const GraphEngine& e);
/// The epilogue and engine of a graph kiln.cuda.Conv. Throws
/// Error(invalid_model) naming the node when the attributes are
/// inconsistent (odd knob list, inputs that do not match the epilogue).
ConvEpilogue conv_epilogue_from(const ir::Node& n);
GraphEngine graph_engine_from(const ir::Node& n);

/// A cuDNN backend descriptor (cudnnBackendDescriptor_t), destroyed with the object.
class BackendDesc {
 public:
  BackendDesc() = default;
  /// Throws Error(internal / unsupported) naming `type` when cuDNN cannot create it.
  explicit BackendDesc(cudnnBackendDescriptorType_t type);
  ~BackendDesc();
  BackendDesc(BackendDesc&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  BackendDesc& operator=(BackendDesc&& o) noexcept;
  BackendDesc(const BackendDesc&) = delete;
  BackendDesc& operator=(const BackendDesc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

/// The finalized operation graph of a forward convolution `s` (not
/// transposed; NCHW or NHWC, float32 / float16 / bfloat16) and its epilogue.
/// Virtual intermediates are float32. Tensor unique ids: x 1, w 2, bias 3,
/// z 4, y 5. Throws Error "<what>: cuDNN: ..." when cuDNN rejects the graph:
/// unsupported for cuDNN's NOT_SUPPORTED statuses, internal for others (a
/// transposed spec is Error(internal): a caller bug).
class ConvOpGraph {
 public:
  ConvOpGraph(const ConvSpec& s, const ConvEpilogue& ep);
  cudnnBackendDescriptor_t get() const { return graph_.get(); }
  const ConvSpec& spec() const { return spec_; }
  const ConvEpilogue& epilogue() const { return ep_; }

  /// cuDNN's heuristic ranking (CUDNN_HEUR_MODE_A, and with `fallback` also
  /// CUDNN_HEUR_MODE_FALLBACK's configurations after it), best first,
  /// without the engines whose numerics the spec forbids: TF32 tensor cores
  /// or down-converted inputs for strict float32, reduced-precision
  /// reductions for every dtype (kiln promises float32 accumulation).
  /// Nothing is finalized into a plan; `why` (may be null) receives what
  /// was dropped and why, for error messages.
  std::vector<GraphEngine> heuristic(bool fallback, std::string* why) const;

 private:
  ConvSpec spec_;
  ConvEpilogue ep_;
  std::vector<BackendDesc> parts_;  ///< tensors, descriptors and operations the graph refers to
  BackendDesc graph_;
};

/// A graph convolution ready to run with a stored engine.
class GraphConvPlan {
 public:
  /// Builds the plan of `e` for `s` / `ep`: from e.plan_json when it is
  /// set, else from e.engine and e.knobs; e.engine == -1: the heuristic's
  /// first usable configuration here, precompiled engines first, within
  /// `workspace_cap` bytes (chosen_at_load()). Throws
  /// Error(invalid_model) naming `where` for a transposed spec or one of a
  /// dtype cuDNN convolutions do not take; Error(incompatible_artifact)
  /// naming `where` when cuDNN here cannot build the operation graph or the
  /// stored engine, has no engine at all (there is
  /// no unfused fallback at load), or the plan needs more workspace than
  /// recorded (e.workspace).
  GraphConvPlan(const ConvSpec& s, const ConvEpilogue& ep, const GraphEngine& e, size_t workspace_cap,
                const std::string& where);
  /// Enqueues y = epilogue(conv(x, w)) on `stream` (bias / z: 0 when the
  /// epilogue has none). Device pointers must be 16-byte aligned.
  /// `workspace` holds at least workspace() bytes. cuDNN's errors are
  /// Error naming `where`.
  void run(CUstream stream, CUdeviceptr x, CUdeviceptr w, CUdeviceptr bias, CUdeviceptr z, CUdeviceptr y,
           CUdeviceptr workspace) const;
  size_t workspace() const { return workspace_; }
  bool chosen_at_load() const { return chosen_at_load_; }
  /// The engine this plan runs (its index and knobs; workspace).
  const GraphEngine& engine() const { return engine_; }
  /// cuDNN's serialization of this plan (runtime-compiled engines only;
  /// throws Error(unsupported) for others).
  std::string serialize() const;

 private:
  void build_from_engine();
  void choose_here(size_t workspace_cap);
  ConvOpGraph graph_;
  GraphEngine engine_;
  std::string where_;
  std::vector<BackendDesc> built_from_;  ///< engine, knob choices and configuration plan_ was finalized from
  BackendDesc plan_;
  size_t workspace_ = 0;
  bool chosen_at_load_ = false;
};

}  // namespace kiln::targets::cuda
