// cuDNN graph-API convolutions with fused epilogues (cudnn_graph.h).
#include "targets/cuda/run/cudnn_graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>

#include "support/error.h"

// cuDNN 9.x marks the handle attributes deprecated in favour of device
// properties, which the cuDNN releases kiln runs against (9.14 on the GPU
// machine) do not all have; the handle form works in every 9.x.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace kiln::targets::cuda {

namespace {

enum Uid : int64_t { kX = 1, kW = 2, kBias = 3, kZ = 4, kY = 5, kConvOut = 101, kBiasOut = 102, kAddOut = 103 };
constexpr int64_t kAlignment = 16;  // bytes; arena offsets are 64-aligned, allocations 256

void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
         const void* data, const char* what) {
  check_cudnn(cudnnBackendSetAttribute(d, name, type, count, data), fmt::format("cudnnBackendSetAttribute ({})", what));
}

void finalize(const BackendDesc& d, const std::string& what) {
  check_cudnn(cudnnBackendFinalize(d.get()), fmt::format("cudnnBackendFinalize ({})", what));
}

/// Strides of NCHW-ordered `dims` stored channels-last (N, spatial..., C)
/// or packed NCHW.
std::vector<int64_t> strides_of(const std::vector<int64_t>& dims, bool channels_last) {
  const size_t r = dims.size();
  std::vector<int64_t> s(r, 1);
  if (!channels_last) {
    for (int i = static_cast<int>(r) - 2; i >= 0; --i) s[i] = s[i + 1] * dims[i + 1];
    return s;
  }
  // Memory order: N, D1..Dk, C.
  s[1] = 1;
  int64_t run = dims[1];
  for (int i = static_cast<int>(r) - 1; i >= 2; --i) {
    s[i] = run;
    run *= dims[i];
  }
  s[0] = run;
  return s;
}

BackendDesc tensor(int64_t uid, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
                   cudnnDataType_t type, bool is_virtual) {
  BackendDesc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  set(t.get(), CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "tensor data type");
  set(t.get(), CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, static_cast<int64_t>(dims.size()), dims.data(),
      "tensor dims");
  set(t.get(), CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, static_cast<int64_t>(strides.size()), strides.data(),
      "tensor strides");
  set(t.get(), CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor id");
  set(t.get(), CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &kAlignment, "tensor alignment");
  bool v = is_virtual;
  set(t.get(), CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v, "tensor virtual");
  finalize(t, fmt::format("tensor {}", uid));
  return t;
}

/// A pointwise operation y = mode(x[, b]) in float32.
void pointwise(std::vector<BackendDesc>& parts, std::vector<cudnnBackendDescriptor_t>& ops, cudnnPointwiseMode_t mode,
               const BackendDesc& x, const BackendDesc* b, const BackendDesc& y) {
  BackendDesc pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  set(pw.get(), CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
  set(pw.get(), CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "pointwise precision");
  finalize(pw, "pointwise descriptor");
  BackendDesc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  cudnnBackendDescriptor_t pd = pw.get(), xd = x.get(), yd = y.get();
  set(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pd, "pointwise op");
  set(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &xd, "pointwise x");
  if (b) {
    cudnnBackendDescriptor_t bd = b->get();
    set(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &bd, "pointwise b");
  }
  set(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &yd, "pointwise y");
  finalize(op, "pointwise operation");
  ops.push_back(op.get());
  parts.push_back(std::move(pw));
  parts.push_back(std::move(op));
}

/// Reads an engine configuration's engine index, notes and knob choices.
GraphEngine read_config(cudnnBackendDescriptor_t cfg, std::vector<int>& numerical) {
  GraphEngine e;
  BackendDesc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t ed = engine.get();
  int64_t n = 0;
  check_cudnn(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &ed),
              "cudnnBackendGetAttribute (engine of a configuration)");
  check_cudnn(cudnnBackendGetAttribute(ed, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &e.engine),
              "cudnnBackendGetAttribute (engine index)");
  cudnnBackendBehaviorNote_t behavior[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  if (cudnnBackendGetAttribute(ed, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                               CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &n, behavior) == CUDNN_STATUS_SUCCESS)
    for (int64_t i = 0; i < n; ++i) {
      e.runtime_compiled |= behavior[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
      // By number: the note is 4 from cuDNN 9.15's headers on; a cuDNN that
      // does not know it never reports it.
      e.cublaslt |= static_cast<int>(behavior[i]) == 4;
    }
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  numerical.clear();
  if (cudnnBackendGetAttribute(ed, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes) == CUDNN_STATUS_SUCCESS)
    for (int64_t i = 0; i < n; ++i) numerical.push_back(static_cast<int>(notes[i]));
  std::vector<BackendDesc> choices;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; ++i) {
    choices.emplace_back(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    raw.push_back(choices.back().get());
  }
  check_cudnn(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                       static_cast<int64_t>(raw.size()), &n, raw.data()),
              "cudnnBackendGetAttribute (knob choices)");
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(raw.size()); ++i) {
    cudnnBackendKnobType_t type;
    int64_t value = 0, c = 0;
    check_cudnn(cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &c, &type),
                "cudnnBackendGetAttribute (knob type)");
    check_cudnn(cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &c, &value),
                "cudnnBackendGetAttribute (knob value)");
    e.knobs.push_back(static_cast<int64_t>(type));
    e.knobs.push_back(value);
  }
  return e;
}

/// Why an engine's numerics are not allowed for `s` ("" when they are).
std::string forbidden_numerics(const ConvSpec& s, const std::vector<int>& notes) {
  for (int n : notes) {
    if (n == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION) return "reduced-precision reduction";
    if (s.dtype == DType::f32 && !s.tf32 && n == CUDNN_NUMERICAL_NOTE_TENSOR_CORE) return "TF32 tensor cores";
    if (s.dtype == DType::f32 && !s.tf32 && n == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS) return "down-converted inputs";
  }
  return "";
}

}  // namespace

bool is_graph_conv(const ir::Node& n) {
  const std::string api = n.s("api", "");
  if (api.empty()) return false;
  if (api != "graph")
    fail(ErrorCode::incompatible_artifact,
         "{}: kiln.cuda.Conv api '{}' is not one this kiln knows (\"graph\", or none for the legacy API): an artifact of "
         "another kiln; recompile",
         n.label(), api);
  return true;
}

void set_graph_conv_attrs(ir::Node& n, const ConvEpilogue& ep, const GraphEngine& e) {
  n.attrs["api"] = std::string("graph");
  n.attrs["bias"] = int64_t{ep.bias};
  n.attrs["residual"] = int64_t{ep.residual};
  n.attrs["relu"] = int64_t{ep.relu};
  n.attrs["engine"] = e.engine;
  n.attrs["knobs"] = e.knobs;
  n.attrs["workspace"] = static_cast<int64_t>(e.workspace);
  n.attrs["runtime_compiled"] = int64_t{e.runtime_compiled};
  if (e.cublaslt) n.attrs["cublaslt"] = int64_t{1};  // only where cuDNN said so (a load logs it)
  if (!e.plan_json.empty()) n.attrs["plan_json"] = e.plan_json;
}

ConvEpilogue conv_epilogue_from(const ir::Node& n) {
  ConvEpilogue ep;
  ep.bias = n.i("bias", 0) != 0;
  ep.residual = n.i("residual", 0) != 0;
  ep.relu = n.i("relu", 0) != 0;
  const size_t want = 2 + ep.bias + ep.residual;
  size_t have = 0;
  for (auto v : n.inputs) have += v != ir::kNoValue;
  if (have != want || n.inputs.size() != want || n.outputs.size() != 1)
    fail(ErrorCode::invalid_model, "{}: kiln.cuda.Conv ({}) has {} input slot(s), {} of them set; its epilogue needs {}",
         n.label(), ep.describe(), n.inputs.size(), have, want);
  return ep;
}

GraphEngine graph_engine_from(const ir::Node& n) {
  GraphEngine e;
  e.engine = n.i("engine", -1);
  e.knobs = n.ints("knobs", {});
  const int64_t ws = n.i("workspace", 0);
  e.runtime_compiled = n.i("runtime_compiled", 0) != 0;
  e.cublaslt = n.i("cublaslt", 0) != 0;
  e.plan_json = n.s("plan_json", "");
  if (e.knobs.size() % 2 || ws < 0 || e.engine < -1)
    fail(ErrorCode::invalid_model, "{}: inconsistent cuDNN engine attributes (engine {}, {} knob values, workspace {})",
         n.label(), e.engine, e.knobs.size(), ws);
  e.workspace = static_cast<size_t>(ws);
  return e;
}

std::string ConvEpilogue::describe() const {
  std::string s = "conv";
  if (bias) s += " + bias";
  if (residual) s += " + residual";
  if (relu) s += " + relu";
  return s;
}

std::string GraphEngine::describe() const {
  if (engine < 0) return plan_json.empty() ? "cuDNN's heuristic at load" : "a serialized execution plan";
  std::string k;
  for (size_t i = 0; i + 1 < knobs.size(); i += 2) k += fmt::format("{}{}={}", k.empty() ? "" : " ", knobs[i], knobs[i + 1]);
  return fmt::format("engine {} (knobs {}){}{}", engine, k.empty() ? "none" : k,
                     runtime_compiled ? ", runtime-compiled" : "", cublaslt ? ", runs cuBLASLt" : "");
}

BackendDesc::BackendDesc(cudnnBackendDescriptorType_t type) {
  check_cudnn(cudnnBackendCreateDescriptor(type, &d_), fmt::format("cudnnBackendCreateDescriptor (type {})", int(type)));
}

BackendDesc::~BackendDesc() {
  if (d_) cudnnBackendDestroyDescriptor(d_);
}

BackendDesc& BackendDesc::operator=(BackendDesc&& o) noexcept {
  if (this != &o) {
    if (d_) cudnnBackendDestroyDescriptor(d_);
    d_ = o.d_;
    o.d_ = nullptr;
  }
  return *this;
}

ConvOpGraph::ConvOpGraph(const ConvSpec& s, const ConvEpilogue& ep) : spec_(s), ep_(ep) {
  if (s.transposed) fail(ErrorCode::internal, "a transposed convolution has no graph-API form in kiln");
  const cudnnDataType_t type = cudnn_type(s.dtype);
  const size_t k = s.x.size() - 2;
  parts_.reserve(32);  // at most 16 parts: references into parts_ stay valid
  parts_.push_back(tensor(kX, s.x, strides_of(s.x, s.nhwc), type, false));
  const BackendDesc& x = parts_.back();
  parts_.push_back(tensor(kW, s.w, strides_of(s.w, s.nhwc), type, false));
  const BackendDesc& w = parts_.back();
  // The convolution writes y itself when nothing follows it, else a float32 virtual tensor.
  const std::vector<int64_t> y_strides = strides_of(s.y, s.nhwc);
  auto stage = [&](int64_t uid, bool last) -> const BackendDesc& {
    parts_.push_back(last ? tensor(kY, s.y, y_strides, type, false) : tensor(uid, s.y, y_strides, CUDNN_DATA_FLOAT, true));
    return parts_.back();
  };
  const bool after_conv = !ep.empty();
  const BackendDesc& conv_out = stage(kConvOut, !after_conv);

  BackendDesc conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  cudnnDataType_t comp = CUDNN_DATA_FLOAT;  // float32 accumulation for every dtype
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  int64_t dims = static_cast<int64_t>(k);
  set(conv.get(), CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, "convolution compute type");
  set(conv.get(), CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode, "convolution mode");
  set(conv.get(), CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims, "convolution dims");
  set(conv.get(), CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, dims, s.dilations.data(), "dilations");
  set(conv.get(), CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, dims, s.strides.data(), "strides");
  set(conv.get(), CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, dims, s.pads.data(), "pads");
  set(conv.get(), CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, dims, s.pads.data(), "pads");
  finalize(conv, "convolution descriptor");

  BackendDesc op(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  float alpha = 1.f, beta = 0.f;
  cudnnBackendDescriptor_t cd = conv.get(), xd = x.get(), wd = w.get(), yd = conv_out.get();
  set(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha, "alpha");
  set(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta, "beta");
  set(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd, "conv");
  set(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &xd, "x");
  set(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &wd, "w");
  set(op.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &yd, "y");
  finalize(op, "convolution operation");
  std::vector<cudnnBackendDescriptor_t> ops = {op.get()};
  parts_.push_back(std::move(conv));
  parts_.push_back(std::move(op));

  const BackendDesc* cur = &conv_out;
  if (ep.bias) {
    std::vector<int64_t> bd(s.y.size(), 1);
    bd[1] = s.y[1];
    parts_.push_back(tensor(kBias, bd, strides_of(bd, s.nhwc), type, false));
    const BackendDesc& b = parts_.back();
    const BackendDesc& out = stage(kBiasOut, !ep.residual && !ep.relu);
    pointwise(parts_, ops, CUDNN_POINTWISE_ADD, *cur, &b, out);
    cur = &out;
  }
  if (ep.residual) {
    parts_.push_back(tensor(kZ, s.y, y_strides, type, false));
    const BackendDesc& z = parts_.back();
    const BackendDesc& out = stage(kAddOut, !ep.relu);
    pointwise(parts_, ops, CUDNN_POINTWISE_ADD, *cur, &z, out);
    cur = &out;
  }
  if (ep.relu) {
    const BackendDesc& out = stage(kY, true);
    pointwise(parts_, ops, CUDNN_POINTWISE_RELU_FWD, *cur, nullptr, out);
  }

  graph_ = BackendDesc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  cudnnHandle_t h = cudnn_handle();
  std::lock_guard<std::mutex> lock(cudnn_mutex());  // the graph takes the process-wide handle
  set(graph_.get(), CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops.size()),
      ops.data(), "operation graph ops");
  set(graph_.get(), CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "operation graph handle");
  finalize(graph_, fmt::format("operation graph of {}", ep.describe()));
}

std::vector<GraphEngine> ConvOpGraph::heuristic(bool fallback, std::string* why) const {
  std::lock_guard<std::mutex> lock(cudnn_mutex());
  std::vector<GraphEngine> out;
  std::string dropped;
  std::vector<cudnnBackendHeurMode_t> modes = {CUDNN_HEUR_MODE_A};
  if (fallback) modes.push_back(CUDNN_HEUR_MODE_FALLBACK);
  for (cudnnBackendHeurMode_t mode : modes) {
    BackendDesc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    cudnnBackendDescriptor_t g = graph_.get();
    set(heur.get(), CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g, "heuristic graph");
    set(heur.get(), CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristic mode");
    if (cudnnBackendFinalize(heur.get()) != CUDNN_STATUS_SUCCESS) {
      dropped += fmt::format("{}heuristic mode {} unavailable", dropped.empty() ? "" : "; ", int(mode));
      continue;
    }
    int64_t count = 0;
    check_cudnn(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                         &count, nullptr),
                "cudnnBackendGetAttribute (heuristic result count)");
    std::vector<BackendDesc> cfgs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; ++i) {
      cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      raw.push_back(cfgs.back().get());
    }
    int64_t got = 0;
    if (count)
      check_cudnn(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                           count, &got, raw.data()),
                  "cudnnBackendGetAttribute (heuristic results)");
    for (int64_t i = 0; i < got; ++i) {
      std::vector<int> notes;
      GraphEngine e;
      try {
        e = read_config(raw[i], notes);
      } catch (const Error& err) {
        dropped += fmt::format("{}a configuration: {}", dropped.empty() ? "" : "; ", err.what());
        continue;
      }
      if (std::string bad = forbidden_numerics(spec_, notes); !bad.empty()) {
        dropped += fmt::format("{}engine {}: {}", dropped.empty() ? "" : "; ", e.engine, bad);
        continue;
      }
      bool seen = std::any_of(out.begin(), out.end(),
                              [&](const GraphEngine& o) { return o.engine == e.engine && o.knobs == e.knobs; });
      if (!seen) out.push_back(std::move(e));
    }
  }
  if (why) *why = dropped.empty() ? fmt::format("{} configuration(s)", out.size()) : dropped;
  return out;
}

namespace {
/// Builds the operation graph, turning cuDNN's refusal into an artifact
/// error that names the node.
ConvOpGraph graph_for(const ConvSpec& s, const ConvEpilogue& ep, const std::string& where) {
  if (s.transposed)  // the compile never writes one: the node itself is wrong
    fail(ErrorCode::invalid_model, "{}: a transposed convolution with api 'graph' (that API runs forward convolutions only)",
         where);
  try {
    return ConvOpGraph(s, ep);
  } catch (const Error& err) {
    if (err.code() == ErrorCode::invalid_model)  // the node's own attributes are wrong, not cuDNN here
      fail(ErrorCode::invalid_model, "{}: {}", where, err.what());
    fail(ErrorCode::incompatible_artifact, "{}: cuDNN {} here cannot build the operation graph of this {}: {}; recompile",
         where, cudnnGetVersion(), ep.describe(), err.what());
  }
}
}  // namespace

GraphConvPlan::GraphConvPlan(const ConvSpec& s, const ConvEpilogue& ep, const GraphEngine& e, size_t workspace_cap,
                             const std::string& where)
    : graph_(graph_for(s, ep, where)), engine_(e), where_(where) {
  if (!e.plan_json.empty()) {
    cudnnHandle_t h = cudnn_handle();
    std::lock_guard<std::mutex> lock(cudnn_mutex());
    plan_ = BackendDesc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    set(plan_.get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "plan handle");
    set(plan_.get(), CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
        static_cast<int64_t>(e.plan_json.size()), e.plan_json.data(), "serialized plan");
    if (cudnnStatus_t st = cudnnBackendFinalize(plan_.get()); st != CUDNN_STATUS_SUCCESS)
      fail(ErrorCode::incompatible_artifact,
           "{}: cuDNN {} here cannot load the artifact's serialized execution plan ({}; {}); recompile", where,
           cudnnGetVersion(), e.describe(), cudnnGetErrorString(st));
    int64_t n = 0, ws = 0;
    check_cudnn(cudnnBackendGetAttribute(plan_.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws),
                "cudnnBackendGetAttribute (plan workspace)");
    workspace_ = static_cast<size_t>(ws);
  } else if (e.engine < 0) {
    choose_here(workspace_cap);
    return;
  } else {
    try {
      build_from_engine();
    } catch (const Error& err) {
      fail(ErrorCode::incompatible_artifact, "{}: cuDNN {} here cannot build the stored {} for this {}: {}; recompile",
           where, cudnnGetVersion(), e.describe(), ep.describe(), err.what());
    }
  }
  if (workspace_ > e.workspace)
    fail(ErrorCode::incompatible_artifact,
         "{}: the stored cuDNN {} needs {} bytes of workspace here, the artifact recorded {}; recompile", where,
         e.describe(), workspace_, e.workspace);
}

void GraphConvPlan::choose_here(size_t workspace_cap) {
  // Precompiled engines first, like the compile side: a runtime-compiled one
  // costs 100 ms - 1.5 s of NVRTC inside cuDNN at every load.
  std::string why;
  std::vector<GraphEngine> ranked = graph_.heuristic(true, &why);
  std::stable_partition(ranked.begin(), ranked.end(), [](const GraphEngine& c) { return !c.runtime_compiled; });
  for (const GraphEngine& cand : ranked) {
    engine_ = cand;
    try {
      build_from_engine();
    } catch (const Error& err) {
      why += fmt::format("; {}: {}", cand.describe(), err.what());
      continue;
    }
    if (workspace_ <= workspace_cap) break;
    why += fmt::format("; {}: needs {} bytes of workspace", cand.describe(), workspace_);
    plan_ = BackendDesc();
    built_from_.clear();
  }
  // No fallback to an unfused form here: its epilogue kernel was not
  // generated at compile time (docs/cuda.md, "Where an artifact may run").
  if (!plan_.get())
    fail(ErrorCode::incompatible_artifact, "{}: cuDNN {} here has no engine for this {} within {} bytes of workspace ({})",
         where_, cudnnGetVersion(), graph_.epilogue().describe(), workspace_cap, why);
  chosen_at_load_ = true;
  engine_.workspace = workspace_;
}

void GraphConvPlan::build_from_engine() {
  cudnnHandle_t h = cudnn_handle();
  std::lock_guard<std::mutex> lock(cudnn_mutex());
  BackendDesc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t g = graph_.get();
  set(engine.get(), CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g, "engine graph");
  set(engine.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &engine_.engine, "engine index");
  finalize(engine, fmt::format("engine {}", engine_.engine));
  std::vector<BackendDesc> knobs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (size_t i = 0; i + 1 < engine_.knobs.size(); i += 2) {
    knobs.emplace_back(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    auto type = static_cast<cudnnBackendKnobType_t>(engine_.knobs[i]);
    set(knobs.back().get(), CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &type, "knob type");
    set(knobs.back().get(), CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &engine_.knobs[i + 1], "knob value");
    finalize(knobs.back(), fmt::format("knob {}", engine_.knobs[i]));
    raw.push_back(knobs.back().get());
  }
  BackendDesc cfg(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  cudnnBackendDescriptor_t ed = engine.get();
  set(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ed, "configuration engine");
  if (!raw.empty())
    set(cfg.get(), CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(raw.size()),
        raw.data(), "configuration knobs");
  finalize(cfg, "engine configuration");
  BackendDesc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  cudnnBackendDescriptor_t cd = cfg.get();
  set(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "plan handle");
  set(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd, "plan configuration");
  finalize(plan, fmt::format("execution plan of {} for {}", engine_.describe(), where_));
  int64_t n = 0, ws = 0;
  check_cudnn(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws),
              "cudnnBackendGetAttribute (plan workspace)");
  workspace_ = static_cast<size_t>(ws);
  plan_ = std::move(plan);
  // Everything the plan was finalized from stays alive with it (cuDNN copies
  // what it needs, but does not document it).
  built_from_.clear();
  built_from_.push_back(std::move(engine));
  for (auto& k : knobs) built_from_.push_back(std::move(k));
  built_from_.push_back(std::move(cfg));
}

std::string GraphConvPlan::serialize() const {
  std::lock_guard<std::mutex> lock(cudnn_mutex());
  int64_t n = 0;
  check_cudnn(cudnnBackendGetAttribute(plan_.get(), CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, 0,
                                       &n, nullptr),
              "cudnnBackendGetAttribute (serialized plan size)");
  std::string json(static_cast<size_t>(n), '\0');
  check_cudnn(cudnnBackendGetAttribute(plan_.get(), CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, n,
                                       &n, json.data()),
              "cudnnBackendGetAttribute (serialized plan)");
  json.resize(static_cast<size_t>(n));
  while (!json.empty() && json.back() == '\0') json.pop_back();
  if (json.empty()) fail(ErrorCode::unsupported, "cuDNN gave no serialization of {}", engine_.describe());
  return json;
}

void GraphConvPlan::run(CUstream stream, CUdeviceptr x, CUdeviceptr w, CUdeviceptr bias, CUdeviceptr z, CUdeviceptr y,
                        CUdeviceptr workspace) const {
  std::vector<int64_t> uids = {kX, kW, kY};
  std::vector<void*> ptrs = {reinterpret_cast<void*>(x), reinterpret_cast<void*>(w), reinterpret_cast<void*>(y)};
  if (graph_.epilogue().bias) uids.push_back(kBias), ptrs.push_back(reinterpret_cast<void*>(bias));
  if (graph_.epilogue().residual) uids.push_back(kZ), ptrs.push_back(reinterpret_cast<void*>(z));
  BackendDesc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  void* ws = workspace_ ? reinterpret_cast<void*>(workspace) : nullptr;
  set(pack.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()), uids.data(),
      "variant pack ids");
  set(pack.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(ptrs.size()),
      ptrs.data(), "variant pack pointers");
  set(pack.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws, "variant pack workspace");
  finalize(pack, "variant pack");
  CudnnOnStream on(stream);
  check_cudnn(cudnnBackendExecute(on.handle(), plan_.get(), pack.get()), fmt::format("{}: cudnnBackendExecute", where_));
}

}  // namespace kiln::targets::cuda
