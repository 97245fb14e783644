// A loaded cuda program: device memory, module, matmul plans, CUDA graph (program.h).
#include "targets/cuda/run/program.h"
#include "targets/host.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <thread>
#include <mutex>
#include <optional>
#include <system_error>
#include <utility>

#include "support/error.h"
#include "support/log.h"
#include "targets/cuda/run/blaslt.h"
#include "targets/cuda/run/blaslt_api.h"
#include "targets/cuda/run/cuda_ops.h"
#include "targets/cuda/run/conditional.h"
#include "targets/cuda/run/constant_upload.h"
#include "targets/cuda/run/cudnn_conv.h"
#include "targets/cuda/run/cudnn_graph.h"
#include "targets/cuda/run/node_checks.h"
#include "targets/cuda/run/driver.h"
#include "targets/cuda/run/host_segments.h"

namespace kiln::targets::cuda {

namespace {

constexpr size_t align256(size_t n) { return (n + 255) / 256 * 256; }

class CudaProgram final : public DeviceProgram {
 public:
  CudaProgram(const artifact::CompiledProgram& cp, int device, const HostSegments* host)
      : device_(device), host_(host) {
    Stopwatch sw;
    const ir::Model& m = cp.model;
    await_prewarm();
    const DriverApi& d = driver();
    use_device(device_);
    DeviceFacts facts = device_facts(device_);
    const double context_ms = sw.ms();
    KernelBundle bundle = program_bundle(m, cp.kernels, "cuda program");
    check_bundle_matches(m, bundle);
    // An older architecture's artifact runs through its PTX (targets/host.h:
    // runs_through_ptx): the driver JIT-compiles it here, and the stored
    // library algorithms (chosen for the old GPU) are chosen again.
    rechoose_ = bundle.arch != facts.arch && runs_through_ptx(bundle.arch, facts.arch) && !bundle.ptx.empty();
    if (bundle.arch != facts.arch && !rechoose_)
      fail(ErrorCode::incompatible_artifact,
           "device_arch: the artifact's kernels are for {}, device {} ({}) is {}; recompile for this GPU", bundle.arch,
           device_, facts.name, facts.arch);
    if (rechoose_) {
      log().info("cuda: the artifact is for {}, this GPU is {}: JIT-compiling its compute_{} PTX", bundle.arch,
                 facts.arch, bundle.arch.substr(3));
      check(d.cuModuleLoadData(&module_, bundle.ptx.c_str()), "cuModuleLoadData (the artifact's PTX, JIT-compiled)");
    } else {
      check(d.cuModuleLoadData(&module_, bundle.cubin.data()), "cuModuleLoadData (the artifact's cubin)");
    }
    const double module_ms = sw.ms();
    check(d.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");

    addr_.assign(m.values.size(), 0);
    // Host fallback: which nodes run on the host, and which of their results
    // the device reads (those alone get device memory).
    host_node_.assign(m.main.nodes.size(), false);
    std::vector<bool> sent_to_device(m.values.size(), false);
    for (auto& s : m.segments) {
      if (s.device != "host" && s.device != "cuda")
        fail(ErrorCode::invalid_model, "the cuda program has a segment on device '{}'", s.device);
      for (size_t i = s.first; i < s.first + s.count && s.device == "host"; ++i) host_node_.at(i) = true;
      for (auto id : s.to_device) sent_to_device.at(static_cast<size_t>(id)) = true;
    }
    const bool any_host = std::find(host_node_.begin(), host_node_.end(), true) != host_node_.end();
    if (any_host && !host_)
      fail(ErrorCode::invalid_option, "the cuda program has host segments (host fallback) and nothing to run them");
    // Constants: one buffer, each at a 256-byte aligned offset, uploaded once.
    std::vector<size_t> const_off(m.values.size(), 0);
    size_t const_total = 0;
    // Every constant but the program's own kernels bundle.
    const int64_t bundle_id = kernels_value(m);
    auto on_device = [&](size_t i) { return m.values[i].constant && static_cast<int64_t>(i) != bundle_id; };
    for (size_t i = 0; i < m.values.size(); ++i)
      if (on_device(i)) {
        const_off[i] = const_total;
        const_total += align256(m.values[i].constant->nbytes());
      }
    if (const_total) {
      consts_ = DeviceBuffer(const_total, "constants");
      for (size_t i = 0; i < m.values.size(); ++i)
        if (on_device(i)) addr_[i] = consts_.get() + const_off[i];
    }
    // The upload (8-16 ms for ResNet-50 on the H200) runs on its own thread
    // while the plans are built: they need the constants' addresses, not their
    // contents. It is joined before the CUDA graph is captured.
    ConstantUpload upload(device_, [&] {
      for (size_t i = 0; i < m.values.size(); ++i)
        if (on_device(i) && m.values[i].constant->nbytes()) {
          const Tensor& t = *m.values[i].constant;
          check(d.cuMemcpyHtoD(addr_[i], t.raw(), t.nbytes()), "cuMemcpyHtoD (constants)");
        }
      // From pageable memory cuMemcpyHtoD may return before its last DMA
      // lands, and stream_ (non-blocking) is not ordered after the legacy
      // stream: wait here, off the critical path, so finish() means "on the device".
      check(d.cuStreamSynchronize(nullptr), "cuStreamSynchronize (constants upload)");
    });
    const double constants_ms = sw.ms();
    // Library handles first (cuDNN's creation loads its engine libraries), so
    // that the log says what they cost apart from the plans.
    bool gemms = false, convs = false;
    auto needs = [&](const ir::Node& n) { gemms |= n.op_type == "Gemm", convs |= n.op_type == "Conv"; };
    for (auto& n : m.main.nodes) needs(n);
    for_each_body_node(m, needs);
    if (gemms) blaslt_handle();
    if (convs) cudnn_handle();
    const double handles_ms = sw.ms();
    // Graph inputs and outputs get their own buffers; intermediates live in the arena.
    for (auto id : m.main.inputs) {
      if (m.value(id).constant) continue;
      own_.emplace_back(value_bytes(m, id, nullptr), "an input");
      addr_[id] = own_.back().get();
      inputs_.push_back({id, m.value(id).name, value_bytes(m, id, nullptr)});
    }
    if (cp.plan.arena_bytes) arena_ = DeviceBuffer(cp.plan.arena_bytes, "the arena");
    auto place = [&](const ir::Node& n, ir::ValueId id) {
      size_t bytes = value_bytes(m, id, &n);
      if (!cp.plan.offsets.empty() && cp.plan.offsets[id] >= 0) {
        if (bytes > cp.plan.sizes[id]) fail(ErrorCode::invalid_model, "{}: the memory plan's slot is too small", n.label());
        addr_[id] = arena_.get() + static_cast<size_t>(cp.plan.offsets[id]);
      } else {
        own_.emplace_back(bytes, "an output");
        addr_[id] = own_.back().get();
      }
    };
    for (size_t i = 0; i < m.main.nodes.size(); ++i)
      for (auto id : m.main.nodes[i].outputs) {
        if (id == ir::kNoValue || addr_[id]) continue;
        if (host_node_[i] && !sent_to_device[static_cast<size_t>(id)]) continue;  // stays on the host
        place(m.main.nodes[i], id);
      }
    // The values of conditional bodies (kiln.cuda.If branches): the plan
    // keeps them live for the whole node.
    for_each_body_node(m, [&](const ir::Node& n) {
      for (auto id : n.outputs)
        if (id != ir::kNoValue && !addr_[id]) place(n, id);
    });
    // A Loop body's inputs (iteration, condition, carried values) are
    // written by the loop itself, not by a node: buffers of their own.
    for (auto& n : m.main.nodes)
      if (n.domain == kCudaDomain && n.op_type == "Loop")
        for (auto id : n.graph("body").inputs)
          if (id != ir::kNoValue && !addr_[id]) place(n, id);
    std::vector<bool> host_value(m.values.size(), false);
    for (size_t i = 0; i < m.main.nodes.size(); ++i)
      for (auto id : m.main.nodes[i].outputs)
        if (id != ir::kNoValue && host_node_[i]) host_value[static_cast<size_t>(id)] = true;
    for (auto id : m.main.outputs) {
      const ir::Value& v = m.value(id);
      if (host_value[static_cast<size_t>(id)]) {  // computed on the host; its shape may depend on data
        const bool fixed = v.shape && ir::is_static(*v.shape);
        outputs_.push_back({id, v.name, v.dtype, fixed ? ir::to_sizes(*v.shape) : std::vector<int64_t>{},
                            fixed ? value_bytes(m, id, nullptr) : 0, true, fixed});
        continue;
      }
      outputs_.push_back({id, v.name, v.dtype, ir::to_sizes(*v.shape), value_bytes(m, id, nullptr)});
    }
    // What run_observed reads back after each node (kiln verify).
    node_outputs_.resize(m.main.nodes.size());
    for (size_t i = 0; i < m.main.nodes.size(); ++i)
      for (auto id : m.main.nodes[i].outputs)
        if (id != ir::kNoValue && !host_node_[i]) {  // host nodes are observed from their environment
          const ir::Value& v = m.value(id);
          node_outputs_[i].push_back({id, v.name, v.dtype, ir::to_sizes(*v.shape), value_bytes(m, id, nullptr)});
        }

    double kind_ms[3] = {0, 0, 0}, first_ms[3] = {-1, -1, -1};  // Kernel/Copy, Gemm, Conv
    std::vector<std::pair<double, std::string>> plan_ms[3];       // each node's plan time, for the log
    make_plans(m, kind_ms, first_ms, plan_ms);
    node_steps_.assign(m.main.nodes.size() + 1, 0);
    for (size_t i = 0; i < m.main.nodes.size(); ++i) {
      const ir::Node& n = m.main.nodes[i];
      size_t before = steps_.size();
      Stopwatch node_sw;
      if (host_node_[i]) {  // runs in a host segment (run_host_step)
        node_steps_[i + 1] = steps_.size();
        continue;
      }
      bind(m, n, i);
      node_steps_[i + 1] = steps_.size();
      if (n.op_type != "Gemm" && n.op_type != "Conv") {
        double t = node_sw.ms();
        kind_ms[0] += t;
        if (first_ms[0] < 0) first_ms[0] = t;
      }
      if (steps_.size() == before) continue;
      std::string op = "kiln.cuda::" + n.op_type;
      if (n.op_type == "Kernel") {  // "k12_softmax" -> "kiln.cuda::Kernel softmax"
        std::string fn = n.s("fn", "");
        auto us = fn.find('_');
        op += " " + (us == std::string::npos ? fn : fn.substr(us + 1));
      }
      node_names_.push_back({n.name.empty() ? n.op_type : n.name, op, 0.0});
      step_node_.resize(steps_.size(), static_cast<int>(node_names_.size()) - 1);
    }
    // One workspace for every library call (they run one after another on
    // one stream), sized for the largest need; steps read it when they run.
    size_t workspace = 0;
    int at_load = 0;
    for (auto& g : gemms_) workspace = std::max(workspace, g->workspace()), at_load += g->chosen_at_load();
    for (auto& c : convs_) workspace = std::max(workspace, c->workspace()), at_load += c->chosen_at_load();
    for (auto& c : gconvs_) workspace = std::max(workspace, c->workspace()), at_load += c->chosen_at_load();
    if (workspace) workspace_ = DeviceBuffer(workspace, "the cuBLASLt / cuDNN workspace");
    if (at_load)
      log().info("cuda: {} library algorithm(s) chosen at load by the cuBLASLt / cuDNN heuristics ({})", at_load,
                 rechoose_ ? "the artifact is for an older GPU architecture"
                           : "the artifact was cross-compiled without a GPU");

    const double plans_ms = sw.ms();
    const double upload_ms = upload.finish();
    const double uploaded_ms = sw.ms();
    log().debug("cuda: constants uploaded in {:.1f} ms, alongside the plans; waited {:.1f} ms for it", upload_ms,
                uploaded_ms - plans_ms);
    log().debug("cuda: plans: kernels {:.1f} ms, cuBLASLt {:.1f} ms (first {:.1f}), cuDNN {:.1f} ms (first {:.1f})",
                kind_ms[0], kind_ms[1], std::max(first_ms[1], 0.0), kind_ms[2], std::max(first_ms[2], 0.0));
    // Per-plan finalize times (issue: report them): median and slowest of each library.
    for (int k : {1, 2}) {
      auto& v = plan_ms[k];
      if (v.empty()) continue;
      std::sort(v.begin(), v.end());
      log().debug("cuda: {} {} plan(s): median {:.2f} ms, slowest {:.2f} ms ({}), fastest {:.2f} ms",
                  v.size(), k == 1 ? "cuBLASLt" : "cuDNN", v[v.size() / 2].first, v.back().first, v.back().second,
                  v.front().first);
    }
    if (log().should_log(spdlog::level::debug)) {
      // Whether this load started cuBLASLt (KILN_CUDA_POINTWISE=cudnn: it
      // should not), and which cuDNN engines say they run it themselves.
      int lt_engines = 0;
      for (auto& n : m.main.nodes) lt_engines += n.domain == kCudaDomain && n.op_type == "Conv" && n.i("cublaslt", 0) != 0;
      log().debug("cuda: cuBLASLt: {} matmul plan(s), handle created {}, library in the process {}; {} cuDNN "
                  "engine(s) that run cuBLASLt",
                  gemms_.size(), blaslt_handle_created() ? "yes" : "no", blaslt_library_mapped() ? "yes" : "no",
                  lt_engines);
    }
    make_phases(m);
    const char* g = std::getenv("KILN_CUDA_GRAPH");
    use_graph_ = !(g && std::string(g) == "0");
    if (use_graph_ && !steps_.empty()) {
      // One CUDA graph per device segment (host segments run between them).
      std::vector<std::pair<double, size_t>> step_ms;
      double captured_ms = uploaded_ms;
      for (auto& ph : phases_) {
        if (ph.host >= 0 || ph.first_step == ph.last_step) continue;
        Stopwatch capture_sw;
        ph.exec = capture(ph.first_step, ph.last_step, step_ms);
        captured_ms += capture_sw.ms();
      }
      log().debug("cuda: CUDA graph(s): capture and instantiate {:.1f} ms (first launches load their kernels)",
                  captured_ms - uploaded_ms);
      if (log().should_log(spdlog::level::debug)) {
        std::sort(step_ms.rbegin(), step_ms.rend());
        std::string slow;
        for (size_t i = 0; i < std::min<size_t>(step_ms.size(), 5); ++i) {
          const NodeTime& nt = node_names_.at(static_cast<size_t>(step_node_.at(step_ms[i].second)));
          slow += fmt::format("{}{} ({}) {:.1f} ms", i ? ", " : "", nt.node, nt.op, step_ms[i].first);
        }
        log().debug("cuda: slowest steps to capture: {}", slow);
      }
    }
    log().info("cuda: program loaded on {} ({}) in {:.1f} ms: {} steps, arena {} bytes, constants {} bytes{}{}",
               facts.name, facts.arch, sw.ms(), steps_.size(), cp.plan.arena_bytes, const_total,
               use_graph_ ? ", captured into CUDA graphs" : "",
               hosts_.empty() ? "" : fmt::format(", {} host segment(s)", hosts_.size()));
    log().info("cuda: load phases (ms): CUDA context {:.1f}, module {:.1f}, constants allocated {:.1f}, "
               "cuBLASLt/cuDNN handles {:.1f}, plans {:.1f}, constants upload wait {:.1f}, graph {:.1f}",
               context_ms, module_ms - context_ms, constants_ms - module_ms, handles_ms - constants_ms,
               plans_ms - handles_ms, uploaded_ms - plans_ms, sw.ms() - uploaded_ms);
  }

  ~CudaProgram() override {
    const DriverApi& d = driver();
    for (auto& ph : phases_)
      if (ph.exec) d.cuGraphExecDestroy(ph.exec);
    if (stream_) d.cuStreamDestroy(stream_);
    if (side_) d.cuStreamDestroy(side_);
    if (module_) d.cuModuleUnload(module_);
  }

  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& inputs, RunProfile* profile) const override {
    return run_host_io(inputs, profile, nullptr);
  }

  std::map<std::string, Tensor> run_observed(const std::map<std::string, Tensor>& inputs,
                                             const ValueObserver& observe) const override {
    return run_host_io(inputs, nullptr, &observe);
  }

  void run_into(const std::map<std::string, Tensor>& inputs,
                const std::map<std::string, Tensor>& outputs) const override {
    run_host_io(inputs, nullptr, nullptr, &outputs);
  }

  void run_device(const std::map<std::string, DeviceTensor>& inputs,
                  const std::map<std::string, DeviceTensor>& outputs) const override {
    std::lock_guard<std::mutex> lock(mu_);
    const DriverApi& d = driver();
    use_device(device_);
    auto find = [](const std::map<std::string, DeviceTensor>& m, const std::string& name, size_t bytes,
                   const char* what) {
      auto it = m.find(name);
      if (it == m.end()) fail(ErrorCode::invalid_input, "run_device: {} '{}' is missing", what, name);
      if (it->second.bytes != bytes)
        fail(ErrorCode::invalid_input, "run_device: {} '{}' has {} bytes, the program needs {}", what, name,
             it->second.bytes, bytes);
      if (bytes && !it->second.ptr) fail(ErrorCode::invalid_input, "run_device: {} '{}' has a null pointer", what, name);
      return static_cast<CUdeviceptr>(it->second.ptr);
    };
    auto known = [&](const std::map<std::string, DeviceTensor>& m, const auto& list, const char* what) {
      for (auto& [name, t] : m) {
        bool found = false;
        for (auto& e : list) found |= e.name == name;
        if (!found) fail(ErrorCode::invalid_input, "run_device: the model has no {} named '{}'", what, name);
      }
    };
    known(inputs, inputs_, "input");
    known(outputs, outputs_, "output");
    for (auto& o : outputs_)
      if (o.host && !o.fixed)
        fail(ErrorCode::invalid_input,
             "run_device: output '{}' is computed on the host (host fallback) with a shape that depends on the data; "
             "use run()",
             o.name);
    for (auto& in : inputs_) {
      CUdeviceptr src = find(inputs, in.name, in.bytes, "input");
      if (in.bytes) check(d.cuMemcpyDtoDAsync(addr_[in.id], src, in.bytes, stream_), "cuMemcpyDtoDAsync (input)");
    }
    std::vector<Tensor> env = hosts_.empty() ? std::vector<Tensor>{} : host_->environment();
    run_phases(env, nullptr, nullptr);
    for (auto& o : outputs_) {
      CUdeviceptr dst = find(outputs, o.name, o.bytes, "output");
      if (!o.bytes) continue;
      if (o.host)
        check(d.cuMemcpyHtoDAsync(dst, env.at(static_cast<size_t>(o.id)).raw(), o.bytes, stream_),
              "cuMemcpyHtoDAsync (an output computed on the host)");
      else
        check(d.cuMemcpyDtoDAsync(dst, addr_[o.id], o.bytes, stream_), "cuMemcpyDtoDAsync (output)");
    }
    check(d.cuStreamSynchronize(stream_), "running the cuda program (cuStreamSynchronize)");
  }

 private:
  /// One device segment (its steps, captured into `exec`) or one host
  /// segment (`host`: index into hosts_) of the program, in run order.
  struct Phase {
    int host = -1;
    size_t first_node = 0, count = 0;
    size_t first_step = 0, last_step = 0;
    CUgraphExec exec = nullptr;
  };

  /// phases_ and hosts_ from m.segments (one device phase when there are none).
  void make_phases(const ir::Model& m) {
    std::vector<ir::Segment> segs = m.segments;
    if (segs.empty()) segs.push_back(ir::Segment{"cuda", 0, m.main.nodes.size(), {}, {}});
    for (auto& s : segs) {
      Phase ph;
      ph.first_node = s.first;
      ph.count = s.count;
      ph.first_step = node_steps_.at(s.first);
      ph.last_step = node_steps_.at(s.first + s.count);
      if (s.device == "host") {
        ph.host = static_cast<int>(hosts_.size());
        hosts_.push_back(make_host_step(m, s, hosts_.size() + 1, addr_));
      }
      phases_.push_back(ph);
    }
  }

  /// Captures steps [first, last) into an instantiated CUDA graph; adds each
  /// step's capture time to `step_ms` (a step's first launch loads its
  /// kernels: lazy module loading, most of a capture).
  CUgraphExec capture(size_t first, size_t last, std::vector<std::pair<double, size_t>>& step_ms) {
    const DriverApi& d = driver();
    CUgraph graph;
    check(d.cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
    try {
      for (size_t i = first; i < last; ++i) {
        Stopwatch step_sw;
        steps_[i](stream_);
        step_ms.emplace_back(step_sw.ms(), i);
      }
    } catch (...) {
      d.cuStreamEndCapture(stream_, &graph);
      throw;
    }
    check(d.cuStreamEndCapture(stream_, &graph), "cuStreamEndCapture");
    CUgraphExec exec = nullptr;
    CUresult r = d.cuGraphInstantiateWithFlags(&exec, graph, 0);
    d.cuGraphDestroy(graph);
    check(r, "cuGraphInstantiate");
    return exec;
  }

  /// run(), run_observed() and run_into(): inputs from and outputs to host
  /// memory; with `into`, each output goes into the caller's tensor of its
  /// name (the device-to-host copy lands there; nothing is returned).
  std::map<std::string, Tensor> run_host_io(const std::map<std::string, Tensor>& inputs, RunProfile* profile,
                                            const ValueObserver* observe,
                                            const std::map<std::string, Tensor>* into = nullptr) const {
    std::lock_guard<std::mutex> lock(mu_);
    const DriverApi& d = driver();
    use_device(device_);
    std::vector<Tensor> env = hosts_.empty() ? std::vector<Tensor>{} : host_->environment();
    for (auto& in : inputs_) {
      const Tensor& t = inputs.at(in.name);
      if (t.nbytes() != in.bytes) fail(ErrorCode::invalid_input, "input '{}' has {} bytes, the program needs {}", in.name, t.nbytes(), in.bytes);
      if (in.bytes) check(d.cuMemcpyHtoDAsync(addr_[in.id], t.raw(), in.bytes, stream_), "cuMemcpyHtoDAsync (input)");
      if (!env.empty()) env.at(static_cast<size_t>(in.id)) = t;  // host segments read it here: no copy back
    }
    run_phases(env, profile, observe);
    std::map<std::string, Tensor> out;
    for (auto& o : outputs_) {
      if (into) {
        const Tensor* hv = o.host ? &env.at(static_cast<size_t>(o.id)) : nullptr;  // computed by a host segment
        Tensor dst = into_buffer(*into, o.name, hv ? hv->dtype() : o.dtype, hv ? hv->shape() : o.shape);
        if (hv) {
          if (dst.nbytes()) std::memcpy(dst.raw(), hv->raw(), dst.nbytes());
        } else if (o.bytes) {
          check(d.cuMemcpyDtoHAsync(dst.raw(), addr_[o.id], o.bytes, stream_), "cuMemcpyDtoHAsync (output)");
        }
        continue;
      }
      if (o.host) {
        out[o.name] = detach_from_staging(hosts_, env.at(static_cast<size_t>(o.id)));
        continue;
      }
      Tensor t(o.dtype, o.shape);
      if (o.bytes) check(d.cuMemcpyDtoHAsync(t.raw(), addr_[o.id], o.bytes, stream_), "cuMemcpyDtoHAsync (output)");
      out[o.name] = t;
    }
    check(d.cuStreamSynchronize(stream_), "running the cuda program (cuStreamSynchronize)");
    return out;
  }

  /// The caller's tensor for output `name` (run_into), checked against
  /// what the program computed (`dt`, `shape`). Throws Error(invalid_input)
  /// naming the output.
  static Tensor into_buffer(const std::map<std::string, Tensor>& into, const std::string& name, DType dt,
                            const std::vector<int64_t>& shape) {
    auto it = into.find(name);
    if (it == into.end()) fail(ErrorCode::invalid_input, "run_into: output '{}' is missing", name);
    if (it->second.dtype() != dt || it->second.shape() != shape)
      fail(ErrorCode::invalid_input, "run_into: output '{}' is {}, the program produced {}[{}]", name,
           it->second.describe(), dtype_name(dt), fmt::join(shape, ","));
    return it->second;
  }

  /// Runs every phase in order on stream_ (host segments through host_,
  /// with `env` as their values): the CUDA graphs, or with `profile` the
  /// steps timed one by one, or with `observe` node by node with each
  /// output read back (run_observed).
  void run_phases(std::vector<Tensor>& env, RunProfile* profile, const ValueObserver* observe) const {
    for (auto& ph : phases_) {
      if (ph.host >= 0) {
        run_host_step(hosts_.at(static_cast<size_t>(ph.host)), *host_, env, stream_, profile, observe);
      } else if (observe) {
        run_nodes_observed(ph.first_node, ph.first_node + ph.count, *observe);
      } else if (profile) {
        run_profiled(ph.first_step, ph.last_step, *profile);
      } else if (ph.exec) {
        check(driver().cuGraphLaunch(ph.exec, stream_), "cuGraphLaunch");
      } else {
        for (size_t i = ph.first_step; i < ph.last_step; ++i) steps_[i](stream_);
      }
    }
  }

  /// Device nodes [first, last) one by one, outside any CUDA graph, each
  /// node's outputs copied back before the next node runs (so an arena slot
  /// a later node reuses is read while it still holds this node's value).
  void run_nodes_observed(size_t first, size_t last, const ValueObserver& observe) const {
    const DriverApi& d = driver();
    for (size_t i = first; i < last; ++i) {
      for (size_t k = node_steps_[i]; k < node_steps_[i + 1]; ++k) steps_[k](stream_);
      std::vector<Tensor> got;
      for (auto& o : node_outputs_[i]) {
        got.emplace_back(o.dtype, o.shape);
        if (o.bytes) check(d.cuMemcpyDtoHAsync(got.back().raw(), addr_[o.id], o.bytes, stream_), "cuMemcpyDtoHAsync (observed value)");
      }
      check(d.cuStreamSynchronize(stream_), "running the cuda program node by node (cuStreamSynchronize)");
      for (size_t k = 0; k < got.size(); ++k) observe(i, node_outputs_[i][k].id, got[k]);
    }
  }

  /// Launches steps [first, last) one by one with an event after each, and
  /// adds each node's device time (its steps' sum) to `profile` in node order.
  void run_profiled(size_t first, size_t last, RunProfile& profile) const {
    if (first == last) return;
    const DriverApi& d = driver();
    std::vector<CUevent> ev(last - first + 1, nullptr);
    struct Free {
      const DriverApi& d;
      std::vector<CUevent>& ev;
      ~Free() {
        for (auto e : ev)
          if (e) d.cuEventDestroy(e);
      }
    } free_events{d, ev};
    for (auto& e : ev) check(d.cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate");
    check(d.cuEventRecord(ev[0], stream_), "cuEventRecord");
    for (size_t i = first; i < last; ++i) {
      steps_[i](stream_);
      check(d.cuEventRecord(ev[i - first + 1], stream_), "cuEventRecord");
    }
    check(d.cuEventSynchronize(ev.back()), "cuEventSynchronize");
    int last_node = -1;
    for (size_t i = first; i < last; ++i) {
      float ms = 0;
      check(d.cuEventElapsedTime(&ms, ev[i - first], ev[i - first + 1]), "cuEventElapsedTime");
      if (step_node_[i] != last_node) profile.nodes.push_back(node_names_[static_cast<size_t>(step_node_[i])]);
      last_node = step_node_[i];
      profile.nodes.back().ms += ms;
    }
  }

  struct Input {
    ir::ValueId id;
    std::string name;
    size_t bytes;
  };
  struct Output {
    ir::ValueId id;
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    size_t bytes;
    bool host = false;   ///< computed by a host segment: taken from its environment
    bool fixed = true;   ///< its shape is static (else shape / bytes are empty until a run)
  };

  /// Builds every Gemm's cuBLASLt plan and every Conv's cuDNN plan into
  /// gemm_at_ / conv_at_ / gconv_at_ (by node index): the two libraries'
  /// plans on two threads at once, since their first uses (library
  /// initialisation, cuDNN loading its engines) dominate a load and do not
  /// depend on each other; the convolution thread then warms its kernels
  /// (warm_convs). Adds each plan's time to the log figures.
  void make_plans(const ir::Model& m, double* kind_ms, double* first_ms,
                  std::vector<std::pair<double, std::string>>* plan_ms) {
    const auto& nodes = m.main.nodes;
    gemm_at_.clear();
    conv_at_.clear();
    gemm_at_.resize(nodes.size());
    conv_at_.resize(nodes.size());
    gconv_at_.clear();
    gconv_at_.resize(nodes.size());
    auto build = [&](int kind) {
      use_device(device_);
      for (size_t i = 0; i < nodes.size(); ++i) {
        const ir::Node& n = nodes[i];
        if (n.domain != kCudaDomain || n.op_type != (kind == 1 ? "Gemm" : "Conv")) continue;
        Stopwatch node_sw;
        if (kind == 1) gemm_at_[i] = make_gemm(n);
        else if (is_graph_conv(n)) gconv_at_[i] = make_graph_conv(m, n);
        else conv_at_[i] = make_conv(m, n);
        double t = node_sw.ms();
        kind_ms[kind] += t;
        if (first_ms[kind] < 0) first_ms[kind] = t;
        plan_ms[kind].emplace_back(t, n.label());
      }
    };
    std::exception_ptr conv_error;
    bool any_conv = false;
    for (auto& n : nodes) any_conv |= n.domain == kCudaDomain && n.op_type == "Conv";
    std::thread convs([&] {
      if (!any_conv) return;
      try {
        build(2);
        warm_convs(nodes);
      } catch (...) {
        conv_error = std::current_exception();
      }
    });
    try {
      build(1);
    } catch (...) {
      convs.join();
      throw;
    }
    convs.join();
    if (conv_error) std::rethrow_exception(conv_error);
  }

  /// Runs every convolution plan once on a private stream, into the
  /// program's own buffers (whose contents do not matter yet), so that
  /// cuDNN's kernels are loaded (CUDA's lazy module loading) on this thread,
  /// while the other one pays cuBLASLt's first use, instead of during the
  /// CUDA graph capture. Measurement aid: KILN_CUDA_WARM_CONVS=0 skips it.
  void warm_convs(const std::vector<ir::Node>& nodes) {
    static const bool on = [] {
      const char* e = std::getenv("KILN_CUDA_WARM_CONVS");
      return !(e && std::string(e) == "0");
    }();
    if (!on) return;
    size_t ws = 0;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (conv_at_[i]) ws = std::max(ws, conv_at_[i]->workspace());
      if (gconv_at_[i]) ws = std::max(ws, gconv_at_[i]->workspace());
    }
    const DriverApi& d = driver();
    DeviceBuffer workspace(ws, "a convolution warm-up workspace");
    CUstream s = nullptr;
    check(d.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    struct Destroy {
      CUstream s;
      ~Destroy() { driver().cuStreamDestroy(s); }
    } destroy{s};
    for (size_t i = 0; i < nodes.size(); ++i) {
      const ir::Node& n = nodes[i];
      if (!conv_at_[i] && !gconv_at_[i]) continue;
      CUdeviceptr x = addr_[n.inputs.at(0)], w = addr_[n.inputs.at(1)], y = addr_[n.outputs.at(0)];
      if (gconv_at_[i]) {
        const ConvEpilogue ep = conv_epilogue_from(n);
        gconv_at_[i]->run(s, x, w, ep.bias ? addr_[n.inputs.at(2)] : 0, ep.residual ? addr_[n.inputs.back()] : 0, y,
                          workspace.get());
      } else {
        conv_at_[i]->run(s, x, w, y, workspace.get(), workspace.bytes());
      }
    }
    check(d.cuStreamSynchronize(s), "cuStreamSynchronize (convolution warm-up)");
  }

  std::unique_ptr<GemmPlan> make_gemm(const ir::Node& n) const {
    GemmSpec spec = gemm_spec_from(n);
    std::optional<std::array<uint64_t, 8>> algo;
    if (n.has("algo") && !rechoose_) {
      auto words = n.ints("algo");
      if (words.size() != 8) fail(ErrorCode::invalid_model, "{}: 'algo' must hold 8 words", n.label());
      algo.emplace();
      for (int i = 0; i < 8; ++i) (*algo)[i] = static_cast<uint64_t>(words[i]);
    } else if (n.i("algo_at_load", 0) != 1 && !n.has("algo")) {
      fail(ErrorCode::invalid_model, "{}: neither a stored cuBLASLt algorithm ('algo') nor 'algo_at_load'", n.label());
    }
    CUdeviceptr bias = spec.has_bias ? addr_[n.inputs.at(2)] : 0;
    return std::make_unique<GemmPlan>(spec, algo, static_cast<size_t>(n.i("workspace", 0)), bias, n.label());
  }

  std::unique_ptr<ConvPlan> make_conv(const ir::Model& m, const ir::Node& n) const {
    ConvSpec spec = conv_spec_from(n);
    check_conv_operands(m, n, spec, ConvEpilogue{});
    const int algo = rechoose_ ? kConvAlgoAtLoad : static_cast<int>(n.i("algo"));
    return std::make_unique<ConvPlan>(spec, algo, static_cast<size_t>(n.i("workspace", 0)), n.label());
  }

  std::unique_ptr<GraphConvPlan> make_graph_conv(const ir::Model& m, const ir::Node& n) const {
    ConvSpec spec = conv_spec_from(n);
    ConvEpilogue ep = conv_epilogue_from(n);
    check_conv_operands(m, n, spec, ep);
    GraphEngine e = graph_engine_from(n);
    size_t cap = e.workspace;
    if (rechoose_) {  // an older architecture's artifact: cuDNN's heuristic chooses here
      e = GraphEngine{};
      cap = std::max(cap, size_t{64} << 20);
    }
    return std::make_unique<GraphConvPlan>(spec, ep, e, cap, n.label());
  }

  /// Appends the step(s) of node `index` (its plan, for a Gemm or Conv,
  /// already made by make_plans).
  void bind(const ir::Model& m, const ir::Node& n, size_t index) {
    if (n.domain != kCudaDomain)
      fail(ErrorCode::invalid_model, "{} (domain '{}') is not a kiln.cuda node: the cuda runtime runs only lowered programs",
           n.label(), n.domain);
    const DriverApi& d = driver();
    if (n.op_type == "Kernel") {
      std::string fn = n.s("fn", "");
      CUfunction f;
      check(d.cuModuleGetFunction(&f, module_, fn.c_str()), fmt::format("{}: cuModuleGetFunction('{}')", n.label(), fn).c_str());
      auto grid = n.ints("grid"), block = n.ints("block");
      check_launch(m, n);
      unsigned smem = static_cast<unsigned>(n.i("smem", 0));
      if (smem > 48 * 1024)
        check(d.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(smem)),
              "cuFuncSetAttribute");
      std::vector<CUdeviceptr> args;
      for (auto id : n.inputs)
        if (id != ir::kNoValue) args.push_back(addr_[id]);
      for (auto id : n.outputs)
        if (id != ir::kNoValue) args.push_back(addr_[id]);
      std::string label = n.label();
      // init_from = i: output 0 starts as a copy of input i (scatters write into it).
      if (int64_t from = n.i("init_from", -1); from >= 0) {
        size_t bytes = value_bytes(m, n.outputs.at(0), &n);
        CUdeviceptr src = addr_[n.inputs.at(static_cast<size_t>(from))], dst = addr_[n.outputs.at(0)];
        if (bytes && src != dst)
          steps_.push_back([src, dst, bytes, &d](CUstream s) { check(d.cuMemcpyDtoDAsync(dst, src, bytes, s), "cuMemcpyDtoDAsync"); });
      }
      if (grid[0] * grid[1] * grid[2] == 0) return;  // nothing to compute (an empty tensor)
      steps_.push_back([f, args, grid, block, smem, label, &d](CUstream s) {
        std::vector<CUdeviceptr> a = args;
        std::vector<void*> params(a.size());
        for (size_t i = 0; i < a.size(); ++i) params[i] = &a[i];
        check(d.cuLaunchKernel(f, unsigned(grid[0]), unsigned(grid[1]), unsigned(grid[2]), unsigned(block[0]),
                               unsigned(block[1]), unsigned(block[2]), smem, s, params.data(), nullptr),
              (label + ": cuLaunchKernel").c_str());
      });
    } else if (n.op_type == "Copy") {
      size_t bytes = value_bytes(m, n.outputs.at(0), &n);
      CUdeviceptr src = addr_[n.inputs.at(0)], dst = addr_[n.outputs.at(0)];
      if (!bytes || src == dst) return;
      steps_.push_back([src, dst, bytes, &d](CUstream s) { check(d.cuMemcpyDtoDAsync(dst, src, bytes, s), "cuMemcpyDtoDAsync"); });
    } else if (n.op_type == "Gemm") {
      GemmSpec spec = gemm_spec_from(n);
      CUdeviceptr c = spec.has_c ? addr_[n.inputs.at(spec.has_bias ? 3 : 2)] : 0;
      gemms_.push_back(index < gemm_at_.size() && gemm_at_[index] ? std::move(gemm_at_[index]) : make_gemm(n));
      const GemmPlan* plan = gemms_.back().get();
      CUdeviceptr a = addr_[n.inputs.at(0)], b = addr_[n.inputs.at(1)], dd = addr_[n.outputs.at(0)];
      steps_.push_back([this, plan, a, b, c, dd](CUstream s) {
        plan->run(s, a, b, c, dd, workspace_.get(), workspace_.bytes());
      });
    } else if (n.op_type == "Conv" && is_graph_conv(n)) {
      gconvs_.push_back(index < gconv_at_.size() && gconv_at_[index] ? std::move(gconv_at_[index]) : make_graph_conv(m, n));
      const GraphConvPlan* plan = gconvs_.back().get();
      const ConvEpilogue ep = conv_epilogue_from(n);
      CUdeviceptr x = addr_[n.inputs.at(0)], w = addr_[n.inputs.at(1)], y = addr_[n.outputs.at(0)];
      CUdeviceptr bias = ep.bias ? addr_[n.inputs.at(2)] : 0, z = ep.residual ? addr_[n.inputs.back()] : 0;
      steps_.push_back([this, plan, x, w, bias, z, y](CUstream s) { plan->run(s, x, w, bias, z, y, workspace_.get()); });
    } else if (n.op_type == "Conv") {
      convs_.push_back(index < conv_at_.size() && conv_at_[index] ? std::move(conv_at_[index]) : make_conv(m, n));
      const ConvPlan* plan = convs_.back().get();
      CUdeviceptr x = addr_[n.inputs.at(0)], w = addr_[n.inputs.at(1)], y = addr_[n.outputs.at(0)];
      steps_.push_back([this, plan, x, w, y](CUstream s) { plan->run(s, x, w, y, workspace_.get(), workspace_.bytes()); });
    } else if (n.op_type == "If") {
      bind_if(m, n);
    } else if (n.op_type == "Loop") {
      bind_loop(m, n);
    } else {
      fail(ErrorCode::unsupported, "{}: kiln.cuda.{} is not an operator of this kiln's cuda runtime", n.label(), n.op_type);
    }
  }

  /// The step of a kiln.cuda.If node (conditional.h: if_step), its branches'
  /// nodes bound like main nodes into steps of their own.
  void bind_if(const ir::Model& m, const ir::Node& n) {
    const DriverApi& d = driver();
    std::vector<Step> bodies[2];
    const char* names[2] = {"then_branch", "else_branch"};
    for (int b = 0; b < 2; ++b) bodies[b] = bind_body(m, n, n.graph(names[b]), names[b]);
    std::string fn = n.s("cond_fn", "");
    CUfunction f;
    check(d.cuModuleGetFunction(&f, module_, fn.c_str()), fmt::format("{}: cuModuleGetFunction('{}')", n.label(), fn).c_str());
    if (!side_) check(d.cuStreamCreate(&side_, CU_STREAM_NON_BLOCKING), "cuStreamCreate (conditional bodies)");
    steps_.push_back(if_step(f, addr_[n.inputs.at(0)], std::move(bodies[0]), std::move(bodies[1]), side_, n.label()));
  }

  /// The steps of conditional body `g` of node `n` (`which`), bound like
  /// main nodes; nested conditional nodes are refused.
  std::vector<Step> bind_body(const ir::Model& m, const ir::Node& n, const ir::Graph& g, const char* which) {
    std::vector<Step> saved = std::move(steps_);
    steps_.clear();
    for (auto& inner : g.nodes) {
      if (inner.domain == kCudaDomain && (inner.op_type == "If" || inner.op_type == "Loop"))
        fail(ErrorCode::invalid_model, "{}: its {} holds {} (nested conditional nodes are not supported)", n.label(),
             which, inner.label());
      bind(m, inner, SIZE_MAX);
    }
    std::vector<Step> body = std::move(steps_);
    steps_ = std::move(saved);
    return body;
  }

  /// The step of a kiln.cuda.Loop node (conditional.h: while_step): body
  /// inputs (iteration, condition, carried values...), outputs (condition,
  /// carried values..., scan outputs...), its control kernel.
  void bind_loop(const ir::Model& m, const ir::Node& n) {
    const DriverApi& d = driver();
    LoopControl ctl;
    auto alloc = [&](size_t bytes) { return own_.emplace_back(bytes, "a loop's device memory").get(); };
    auto carried = loop_carried(m, n, ctl, [&](ir::ValueId v) { return v == ir::kNoValue ? 0 : addr_[v]; }, alloc);
    std::vector<Step> body = bind_body(m, n, n.graph("body"), "body");
    std::string fn = n.s("control_fn", "");
    check(d.cuModuleGetFunction(&ctl.fn, module_, fn.c_str()),
          fmt::format("{}: cuModuleGetFunction('{}')", n.label(), fn).c_str());
    ctl.more = alloc(1);
    if (!side_) check(d.cuStreamCreate(&side_, CU_STREAM_NON_BLOCKING), "cuStreamCreate (conditional bodies)");
    steps_.push_back(while_step(ctl, std::move(carried), std::move(body), side_, n.label()));
  }

  /// Calls f on every node of a conditional body (kiln.cuda.If branches,
  /// kiln.cuda.Loop bodies).
  template <class F>
  static void for_each_body_node(const ir::Model& m, F&& f) {
    for (auto& n : m.main.nodes) {
      if (n.domain != kCudaDomain || (n.op_type != "If" && n.op_type != "Loop")) continue;
      for (auto& [k, a] : n.attrs)
        if (auto* g = std::get_if<std::shared_ptr<ir::Graph>>(&a))
          for (auto& inner : (*g)->nodes) f(inner);
    }
  }

  int device_;
  CUmodule module_ = nullptr;
  CUstream stream_ = nullptr;
  CUstream side_ = nullptr;  ///< captures conditional bodies (kiln.cuda.If, kiln.cuda.Loop)
  DeviceBuffer consts_, arena_, workspace_;
  std::vector<DeviceBuffer> own_;
  std::vector<CUdeviceptr> addr_;
  std::vector<Input> inputs_;
  std::vector<Output> outputs_;
  std::vector<std::unique_ptr<GemmPlan>> gemms_;
  std::vector<std::unique_ptr<ConvPlan>> convs_;
  std::vector<std::unique_ptr<GemmPlan>> gemm_at_;  ///< make_plans' results by node index, taken by bind
  std::vector<std::unique_ptr<ConvPlan>> conv_at_;
  std::vector<std::unique_ptr<GraphConvPlan>> gconvs_;
  std::vector<std::unique_ptr<GraphConvPlan>> gconv_at_;
  std::vector<Step> steps_;
  std::vector<int> step_node_;          ///< node (index into node_names_) of each step
  std::vector<size_t> node_steps_;      ///< main node i runs steps [node_steps_[i], node_steps_[i+1])
  std::vector<std::vector<Output>> node_outputs_;  ///< each main node's outputs (run_observed)
  std::vector<NodeTime> node_names_;    ///< name and op of each node that has steps (ms 0)
  bool rechoose_ = false;  ///< running an older architecture's PTX: library algorithms chosen here
  const HostSegments* host_ = nullptr;  ///< runs the host segments (owned by the runtime)
  std::vector<bool> host_node_;         ///< per main node: in a host segment
  std::vector<HostStep> hosts_;         ///< the host segments, in order
  std::vector<Phase> phases_;           ///< device and host segments in run order
  bool use_graph_ = true;
  mutable std::mutex mu_;
};

}  // namespace

std::unique_ptr<DeviceProgram> load_program(const artifact::CompiledProgram& cp, int device,
                                            const HostSegments* host) {
  return std::make_unique<CudaProgram>(cp, device, host);
}

}  // namespace kiln::targets::cuda
