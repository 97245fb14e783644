// Conditional nodes of captured CUDA graphs (conditional.h).
#include "targets/cuda/run/conditional.h"

#include <fmt/format.h>

#include <cstring>

#include "support/error.h"
#include "targets/cuda/run/driver.h"
#include "targets/cuda/run/node_checks.h"

namespace kiln::targets::cuda {

std::string set_conditional_kernel(const std::string& name, const std::string& cond_ctype) {
  return fmt::format(
      "extern \"C\" __global__ void {}(unsigned long long handle, const {}* cond) {{\n"
      "  cudaGraphSetConditional(handle, *cond != 0 ? 1u : 0u);\n"
      "}}\n",
      name, cond_ctype);
}

std::string loop_control_kernel(const std::string& name, int64_t limit) {
  return fmt::format(
      "extern \"C\" __global__ void {}(unsigned long long handle, long long* iter, bool* cond_in,\n"
      "    const long long* max_trip, const bool* cond, bool* more, int first) {{\n"
      "  const long long i = first ? 0ll : *iter + 1;\n"
      "  *iter = i;\n"
      "  const bool c = cond ? *cond : true;\n"
      "  *cond_in = c;\n"
      "  const bool go = c && (!max_trip || i < *max_trip) && ({}ll < 0ll || i < {}ll);\n"
      "  if (handle) cudaGraphSetConditional(handle, go ? 1u : 0u);\n"
      "  else *more = go;\n"
      "}}\n",
      name, limit, limit);
}

namespace {

/// The graph `stream` is capturing and the nodes its next work depends on.
struct CaptureState {
  CUgraph graph = nullptr;
  const CUgraphNode* deps = nullptr;
  size_t count = 0;
};

CaptureState capture_state(CUstream stream, const char* what) {
  CaptureState s;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  check(driver().cuStreamGetCaptureInfo(stream, &status, nullptr, &s.graph, &s.deps, nullptr, &s.count),
        fmt::format("cuStreamGetCaptureInfo ({})", what).c_str());
  if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
    fail(ErrorCode::internal, "{}: the stream is not capturing a CUDA graph (status {})", what, int(status));
  return s;
}

}  // namespace

CUgraphConditionalHandle create_conditional_handle(CUstream stream, unsigned default_value, bool assign_default) {
  const DriverApi& d = driver();
  CaptureState s = capture_state(stream, "conditional handle");
  CUcontext ctx = nullptr;
  check(d.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  CUgraphConditionalHandle h = 0;
  check(d.cuGraphConditionalHandleCreate(&h, s.graph, ctx, default_value, assign_default ? CU_GRAPH_COND_ASSIGN_DEFAULT : 0),
        "cuGraphConditionalHandleCreate");
  return h;
}

std::vector<CUgraph> add_conditional_node(CUstream stream, CUgraphConditionalHandle h,
                                          CUgraphConditionalNodeType type, unsigned bodies) {
  const DriverApi& d = driver();
  if (bodies < 1 || bodies > (type == CU_GRAPH_COND_TYPE_IF ? 2u : 1u))
    fail(ErrorCode::internal, "a conditional node of type {} cannot have {} bodies", int(type), bodies);
  CaptureState s = capture_state(stream, "conditional node");
  CUcontext ctx = nullptr;
  check(d.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  CUgraphNodeParams p;
  std::memset(&p, 0, sizeof p);  // the reserved words must be zero
  p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  p.conditional.handle = h;
  p.conditional.type = type;
  p.conditional.size = bodies;
  p.conditional.ctx = ctx;
  CUgraphNode node = nullptr;
  check(d.cuGraphAddNode(&node, s.graph, s.deps, nullptr, s.count, &p),
        type == CU_GRAPH_COND_TYPE_IF ? "cuGraphAddNode (conditional IF)" : "cuGraphAddNode (conditional WHILE)");
  // Everything captured next depends on the conditional node alone (it
  // depends on everything before it).
  check(d.cuStreamUpdateCaptureDependencies(stream, &node, nullptr, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES),
        "cuStreamUpdateCaptureDependencies");
  return std::vector<CUgraph>(p.conditional.phGraph_out, p.conditional.phGraph_out + bodies);
}

void capture_into(CUstream side, CUgraph body, const std::function<void(CUstream)>& record, const std::string& what) {
  const DriverApi& d = driver();
  check(d.cuStreamBeginCaptureToGraph(side, body, nullptr, nullptr, 0, CU_STREAM_CAPTURE_MODE_RELAXED),
        fmt::format("cuStreamBeginCaptureToGraph ({})", what).c_str());
  try {
    record(side);
  } catch (...) {
    CUgraph g = nullptr;
    d.cuStreamEndCapture(side, &g);  // ends the capture; the body stays the node's
    throw;
  }
  CUgraph g = nullptr;
  CUresult r = d.cuStreamEndCapture(side, &g);
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    d.cuGetErrorName(r, &name);
    fail(ErrorCode::unsupported,
         "{}: its work cannot be a conditional body (cuStreamEndCapture: {}; a body holds only kernel, memset, "
         "memcpy, child-graph, empty and conditional nodes)",
         what, name ? name : std::to_string(int(r)));
  }
}

Step if_step(CUfunction set_cond, CUdeviceptr cond, std::vector<Step> then_steps, std::vector<Step> else_steps,
             CUstream side, std::string label) {
  return [=](CUstream s) {
    const DriverApi& d = driver();
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    check(d.cuStreamGetCaptureInfo(s, &status, nullptr, nullptr, nullptr, nullptr, nullptr),
          (label + ": cuStreamGetCaptureInfo").c_str());
    if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE) {
      bool c = false;
      check(d.cuMemcpyDtoHAsync(&c, cond, 1, s), (label + ": reading the condition").c_str());
      check(d.cuStreamSynchronize(s), (label + ": reading the condition").c_str());
      for (auto& step : c ? then_steps : else_steps) step(s);
      return;
    }
    CUgraphConditionalHandle h = create_conditional_handle(s, 0, true);
    CUdeviceptr cond_arg = cond;
    void* args[] = {&h, &cond_arg};
    check(d.cuLaunchKernel(set_cond, 1, 1, 1, 1, 1, 1, 0, s, args, nullptr),
          (label + ": cuLaunchKernel (the condition)").c_str());
    std::vector<CUgraph> bodies = add_conditional_node(s, h, CU_GRAPH_COND_TYPE_IF, 2);
    for (int b = 0; b < 2; ++b)
      capture_into(side, bodies[b], [&](CUstream t) {
        for (auto& step : b == 0 ? then_steps : else_steps) step(t);
      }, label + (b == 0 ? " then_branch" : " else_branch"));
  };
}

std::vector<Carried> loop_carried(const ir::Model& m, const ir::Node& n, LoopControl& ctl,
                                  const std::function<CUdeviceptr(ir::ValueId)>& at,
                                  const std::function<CUdeviceptr(size_t)>& alloc) {
  const ir::Graph& g = n.graph("body");
  const auto k = static_cast<size_t>(n.i("carried"));
  if (g.inputs.size() != 2 + k || g.outputs.size() < 1 + k || n.inputs.size() < 2 + k || n.outputs.size() < k)
    fail(ErrorCode::invalid_model, "{}: its body does not match its {} carried values", n.label(), k);
  ctl.iter = at(g.inputs[0]);
  ctl.cond_in = at(g.inputs[1]);
  ctl.max_trip = at(n.inputs[0]);
  ctl.cond0 = at(n.inputs[1]);
  ctl.cond_out = ctl.cond0 ? at(g.outputs[0]) : 0;  // without a condition input the body's is ignored
  std::vector<Carried> carried(k);
  for (size_t i = 0; i < k; ++i) {
    Carried& c = carried[i];
    c = {at(n.inputs[2 + i]), at(g.inputs[2 + i]), at(g.outputs[1 + i]), at(n.outputs[i]), 0,
         value_bytes(m, g.inputs[2 + i], &n)};
    for (size_t j = 0; j < k; ++j)  // another carried value's state: staged before the states change
      if (j != i && g.outputs[1 + i] == g.inputs[2 + j]) {
        c.temp = alloc(c.bytes);
        break;
      }
  }
  return carried;
}

Step while_step(LoopControl ctl, std::vector<Carried> carried, std::vector<Step> body_steps, CUstream side,
                std::string label) {
  return [=](CUstream s) {
    const DriverApi& d = driver();
    auto copy = [&](CUstream t, CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
      if (dst && src && dst != src && bytes)
        check(d.cuMemcpyDtoDAsync(dst, src, bytes, t), (label + ": cuMemcpyDtoDAsync (a loop-carried value)").c_str());
    };
    // The control kernel: the first decision reads the Loop's own condition
    // input, the later ones the body's condition output.
    auto control = [&](CUstream t, CUgraphConditionalHandle h, bool first) {
      CUdeviceptr iter = ctl.iter, cond_in = ctl.cond_in, max_trip = ctl.max_trip, more = ctl.more;
      CUdeviceptr cond = first ? ctl.cond0 : ctl.cond_out;
      int f = first ? 1 : 0;
      void* args[] = {&h, &iter, &cond_in, &max_trip, &cond, &more, &f};
      check(d.cuLaunchKernel(ctl.fn, 1, 1, 1, 1, 1, 1, 0, t, args, nullptr),
            (label + ": cuLaunchKernel (the loop control)").c_str());
    };
    // One iteration: the body, its outputs become the states (through the
    // staging first where one is another's state), the next decision.
    auto iteration = [&](CUstream t, CUgraphConditionalHandle h) {
      for (auto& step : body_steps) step(t);
      for (auto& c : carried) copy(t, c.temp, c.next, c.bytes);
      for (auto& c : carried) copy(t, c.state, c.temp ? c.temp : c.next, c.bytes);
      control(t, h, false);
    };
    for (auto& c : carried) copy(s, c.state, c.initial, c.bytes);
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    check(d.cuStreamGetCaptureInfo(s, &status, nullptr, nullptr, nullptr, nullptr, nullptr),
          (label + ": cuStreamGetCaptureInfo").c_str());
    if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE) {
      auto more = [&] {
        bool go = false;
        check(d.cuMemcpyDtoHAsync(&go, ctl.more, 1, s), (label + ": reading the loop condition").c_str());
        check(d.cuStreamSynchronize(s), (label + ": reading the loop condition").c_str());
        return go;
      };
      control(s, 0, true);
      while (more()) iteration(s, 0);
    } else {
      CUgraphConditionalHandle h = create_conditional_handle(s, 0, true);
      control(s, h, true);
      std::vector<CUgraph> bodies = add_conditional_node(s, h, CU_GRAPH_COND_TYPE_WHILE, 1);
      capture_into(side, bodies[0], [&](CUstream t) { iteration(t, h); }, label + " body");
    }
    for (auto& c : carried) copy(s, c.final, c.state, c.bytes);
  };
}

}  // namespace kiln::targets::cuda
