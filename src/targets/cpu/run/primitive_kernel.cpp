// The kernel shape every kiln.cpu operator shares: one oneDNN primitive
// created at load, executed per run on this thread's stream and scratchpad.
#include <omp.h>

#include <memory>
#include <mutex>

#include "support/error.h"
#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets::cpu {

namespace {

/// The oneDNN memory objects of one execution (inputs, dst, scratchpad) and
/// its argument array; reused from run to run with new data handles.
struct MemSet {
  std::vector<dnnl_memory_t> mems;
  std::vector<dnnl_exec_arg_t> args;
  MemSet() = default;
  MemSet(const MemSet&) = delete;
  MemSet& operator=(const MemSet&) = delete;
  ~MemSet() {
    for (auto m : mems) dnnl_memory_destroy(m);
  }
};

struct PrimitiveState {
  dnnl::primitive prim;
  md_t scratch;
  size_t scratch_bytes = 0;
  std::vector<ArgBinding> ins;
  std::vector<size_t> in_bytes;
  md_t dst;
  std::vector<int64_t> out_shape;
  bool single = false;  ///< run on the calling thread only
  // Memory-object sets not in use; concurrent runs each take their own.
  std::mutex mu;
  std::vector<std::unique_ptr<MemSet>> pool;

  std::unique_ptr<MemSet> take() {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!pool.empty()) {
        auto s = std::move(pool.back());
        pool.pop_back();
        return s;
      }
    }
    auto s = std::make_unique<MemSet>();
    auto add = [&](const md_t& md, int arg) {
      dnnl_memory_t mem = nullptr;
      if (dnnl_memory_create(&mem, &md.data, engine().get(), DNNL_MEMORY_NONE) != dnnl_success)
        fail(ErrorCode::internal, "cannot create a oneDNN memory object");
      s->mems.push_back(mem);
      s->args.push_back({arg, mem});
    };
    for (auto& b : ins) add(b.md, b.arg);
    add(dst, DNNL_ARG_DST);
    if (scratch_bytes) add(scratch, DNNL_ARG_SCRATCHPAD);
    return s;
  }
  void give(std::unique_ptr<MemSet> s) {
    std::lock_guard<std::mutex> lock(mu);
    pool.push_back(std::move(s));
  }

  /// One execution with the inputs, output and this thread's scratchpad.
  void run(ops::KernelContext& ctx) {
    auto set = take();
    for (size_t i = 0; i < ins.size(); ++i) {
      const Tensor& t = ctx.in(ins[i].input);
      if (t.nbytes() < in_bytes[i])
        fail(ErrorCode::invalid_input, "{}: input {} has {} bytes, {} expected", ctx.node.label(), ins[i].input,
             t.nbytes(), in_bytes[i]);
      dnnl_memory_set_data_handle(set->mems[i], const_cast<void*>(t.raw()));
    }
    Tensor& out = ctx.output(0, DType::f32, out_shape);
    dnnl_memory_set_data_handle(set->mems[ins.size()], out.raw());
    if (scratch_bytes) dnnl_memory_set_data_handle(set->mems[ins.size() + 1], thread_scratch(scratch_bytes));
    dnnl_status_t st = dnnl_primitive_execute(prim.get(), stream().get(), static_cast<int>(set->args.size()),
                                              set->args.data());
    if (st == dnnl_success) st = dnnl_stream_wait(stream().get());
    give(std::move(set));
    if (st != dnnl_success) fail(ErrorCode::internal, "{}: oneDNN execution failed (status {})", ctx.node.label(), st);
  }
};

std::vector<int64_t> static_out_shape(const ir::Node& n, const ir::Model& m) {
  if (n.outputs.empty() || n.outputs[0] == ir::kNoValue)
    fail(ErrorCode::corrupt_artifact, "{}: a kiln.cpu operator must have an output", n.label());
  const ir::Value& v = m.value(n.outputs[0]);
  if (!v.shape || !ir::is_static(*v.shape) || v.dtype != DType::f32)
    fail(ErrorCode::corrupt_artifact, "{}: output '{}' must be a float32 tensor of static shape", n.label(), v.name);
  return ir::to_sizes(*v.shape);
}

}  // namespace

// About 7 us of single-threaded work for a convolution / matmul: below that a
// parallel region costs more than it saves. With libgomp's spinning workers
// the hand-off costs ~1-2 us, so a 1-10 MFLOP convolution (most of a
// MobileNet's depthwise / 1x1 layers: 20-100 us on one core) gains from the
// second core: on 2 cores MobileNetV2 / MNASNet / MobileNetV3 ran 25-45%
// faster than with the former 10 MFLOP limit (minimum latency, interleaved
// with the former build; bench/results/cpu_mobile_20261202.md). The
// memory-bound operators keep 1 MiB: lowering it to 128 KiB gained little
// and made ShuffleNet's many small copies much slower on a busy machine,
// where every parallel region may wait for a descheduled worker.
constexpr double kSingleFlops = 1e6;
constexpr size_t kSingleBytes = 1 << 20;

bool node_single_threaded(const ir::Node& n) {
  bool eltwise_like = n.op_type == "Eltwise" || n.op_type == "Softmax" || n.op_type == "LayerNorm";
  md_t dst = md_attr(n, eltwise_like ? "md.src" : "md.dst");
  double elems = 1;
  for (auto d : dst.dims()) elems *= static_cast<double>(d);
  if (n.op_type == "Conv") {
    auto wd = md_attr(n, "md.wei").dims();
    size_t first = wd.size() == static_cast<size_t>(dst.data.ndims) ? 1 : 2;  // [O,I,k..] or [G,O/G,I/G,k..]
    double per = 1;
    for (size_t i = first; i < wd.size(); ++i) per *= static_cast<double>(wd[i]);
    return 2 * elems * per < kSingleFlops;
  }
  if (n.op_type == "MatMul") return 2 * elems * static_cast<double>(md_attr(n, "md.src").dims().back()) < kSingleFlops;
  return md_bytes(dst) < kSingleBytes;
}

BoundKernel primitive_kernel(const ir::Node& n, const ir::Model& m, dnnl::primitive prim, const md_t& scratch,
                             std::vector<ArgBinding> ins, const md_t& dst, bool single) {
  auto st = std::make_shared<PrimitiveState>();
  st->single = single;
  st->prim = std::move(prim);
  st->scratch = scratch;
  st->scratch_bytes = md_bytes(scratch);
  st->ins = std::move(ins);
  st->dst = dst;
  st->out_shape = static_out_shape(n, m);
  size_t out_bytes = sizeof(float);
  for (auto d : st->out_shape) out_bytes *= static_cast<size_t>(d);
  if (out_bytes < md_bytes(dst))
    fail(ErrorCode::corrupt_artifact, "{}: output '{}' holds {} bytes, its layout needs {}", n.label(),
         m.value(n.outputs[0]).name, out_bytes, md_bytes(dst));
  // Post-op operands: argument index = post-op position in the chain.
  auto post = read_post_ops(n);
  for (size_t i = 0; i < post.size(); ++i)
    if (post[i].kind == PostOp::binary)
      st->ins.push_back({static_cast<size_t>(post[i].input),
                         DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i)) | DNNL_ARG_SRC_1,
                         md_attr(n, "md.post" + std::to_string(post[i].input))});
  for (auto& b : st->ins) {
    if (b.input >= n.inputs.size() || n.inputs[b.input] == ir::kNoValue)
      fail(ErrorCode::corrupt_artifact, "{}: input {} is missing", n.label(), b.input);
    const ir::Value& v = m.value(n.inputs[b.input]);
    if (v.dtype != DType::f32 || !v.shape || !ir::is_static(*v.shape))
      fail(ErrorCode::corrupt_artifact, "{}: input '{}' must be a float32 tensor of static shape", n.label(), v.name);
    size_t bytes = sizeof(float);
    for (auto d : ir::to_sizes(*v.shape)) bytes *= static_cast<size_t>(d);
    if (bytes < md_bytes(b.md))
      fail(ErrorCode::corrupt_artifact, "{}: input '{}' holds {} bytes, its layout needs {}", n.label(), v.name, bytes,
           md_bytes(b.md));
  }
  for (auto& b : st->ins) st->in_bytes.push_back(md_bytes(b.md));
  return [st](ops::KernelContext& ctx) {
    if (!st->single) return st->run(ctx);
    // oneDNN's OpenMP runtime runs inline when it sees one thread; the
    // scratchpad, sized for the build-time thread count, is large enough.
    with_threads(true, [&] { st->run(ctx); });
  };
}

}  // namespace kiln::targets::cpu
