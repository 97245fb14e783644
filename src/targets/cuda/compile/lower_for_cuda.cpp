// The cuda lowering pass, in order: fused attentions, matmuls (with their
// epilogues), convolutions with cuDNN-fused epilogues, element-wise fusion groups, every other node through its kernel family;
// then NVRTC and the memory plan (lowering.h).
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>

#include "passes/passes.h"
#include "support/error.h"
#include "support/log.h"
#include "targets/cuda/compile/body_reads.h"
#include "targets/cuda/compile/lowering.h"
#include "targets/cuda/compile/merge_qkv.h"
#include "targets/cuda/compile/patch_conv.h"
#include "targets/cuda/compile/pointwise_cudnn.h"
#include "targets/cuda/compile/rms_norm.h"
#include "targets/cuda/compile/stem_pad.h"
#include "targets/cuda/compile/nvrtc.h"
#include "targets/cuda/compile/precision.h"
#include "targets/cuda/run/conditional.h"
#include "targets/cuda/run/cuda_ops.h"
#include "targets/host.h"

namespace kiln::targets::cuda {

Uses uses_of(const ir::Model& m) {
  Uses u;
  u.readers.resize(m.values.size());
  u.is_output.assign(m.values.size(), false);
  u.producer.assign(m.values.size(), -1);
  const auto& nodes = m.main.nodes;
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i) {
    for (auto v : nodes[i].inputs)
      if (v != ir::kNoValue) u.readers[v].push_back(i);
    // An If / Loop / Scan reading a value in a body reads it too: else a
    // fusion could absorb the value into its one other reader's kernel and
    // leave the body reading a value nothing writes.
    for_each_body_read(nodes[i], [&](ir::ValueId v) {
      if (static_cast<size_t>(v) < u.readers.size() && (u.readers[v].empty() || u.readers[v].back() != i))
        u.readers[v].push_back(i);
    });
    for (auto v : nodes[i].outputs)
      if (v != ir::kNoValue) u.producer[v] = i;
  }
  for (auto v : m.main.outputs) u.is_output[v] = true;
  return u;
}

std::vector<int64_t> static_dims(const ir::Model& m, ir::ValueId v) {
  if (v == ir::kNoValue) return {};
  const ir::Value& val = m.value(v);
  if (!val.shape || !ir::is_static(*val.shape)) return {};
  return ir::to_sizes(*val.shape);
}

ir::ValueId new_value(ir::Model& m, const std::string& name, DType dtype, const std::vector<int64_t>& dims,
                      std::optional<Tensor> constant) {
  ir::Value v;
  v.name = name;
  v.dtype = dtype;
  v.shape = ir::static_shape(dims);
  if (constant) v.constant = std::move(*constant);
  return m.add_value(std::move(v));
}

ir::ValueId shape_constant(ir::Model& m, const std::string& name, const std::vector<int64_t>& dims) {
  const auto n = static_cast<int64_t>(dims.size());
  return new_value(m, name, DType::i64, {n},
                   Tensor::from_bytes(DType::i64, {n}, dims.data(), dims.size() * sizeof(int64_t)));
}

int alias_copies(ir::Model& m) {
  std::vector<bool> is_output(m.values.size(), false);  // values whose Copy stays
  for (auto v : m.main.outputs) is_output[v] = true;
  // A value read inside a subgraph (an If / Loop of a host segment) keeps
  // its Copy: the renaming below reaches main-graph inputs only.
  for (auto& n : m.main.nodes) for_each_body_read(n, [&](ir::ValueId& v) { is_output[v] = true; });
  // A value a host node reads keeps its Copy too: the Copy is a reshape
  // (Reshape / Squeeze / Flatten... of the same bytes), and where a cuda
  // kernel carries its own shapes, a host kernel takes the value's shape:
  // renamed to the Copy's input it would see the shape before the reshape
  // (silero's LSTM got X as [1,128,1] instead of [1,1,128] in fp32).
  for (auto& n : m.main.nodes)
    if (n.domain != kCudaDomain)
      for (auto v : n.inputs)
        if (v != ir::kNoValue) is_output[v] = true;
  std::vector<ir::ValueId> alias(m.values.size(), ir::kNoValue);
  auto resolve = [&](ir::ValueId v) { return v != ir::kNoValue && alias[v] != ir::kNoValue ? alias[v] : v; };
  std::vector<ir::Node> kept;
  int removed = 0;
  for (auto& n : m.main.nodes) {
    for (auto& v : n.inputs) v = resolve(v);
    if (n.domain == kCudaDomain && n.op_type == "Copy" && n.inputs.size() == 1 && n.outputs.size() == 1 &&
        !is_output[n.outputs[0]] && m.value(n.inputs[0]).dtype == m.value(n.outputs[0]).dtype) {
      alias[n.outputs[0]] = n.inputs[0];  // already resolved: chains collapse
      ++removed;
      continue;
    }
    kept.push_back(std::move(n));
  }
  m.main.nodes = std::move(kept);
  return removed;
}

/// Whether attentions are fused: the kernel's mma.sync.m16n8k16 needs sm_80
/// or newer (older targets keep the unfused path); KILN_CUDA_FUSED_ATTENTION=0
/// turns it off (a measurement aid).
static bool fused_attention_enabled(const LowerOptions& opt) {
  const char* fa = std::getenv("KILN_CUDA_FUSED_ATTENTION");
  const bool mma_ok = sm_number(opt.arch).value_or(0) >= 80;
  if (!mma_ok) log().debug("cuda: no fused attention for {} (its kernel needs sm_80 or newer)", opt.arch);
  return !(fa && std::string(fa) == "0") && mma_ok;
}

std::vector<ir::Node> lower_graph_nodes(Lowering& L, const LowerOptions& opt, LowerStats& st,
                                        std::map<int, std::string>& host) {
  ir::Model& m = L.model;
  const auto nodes = m.main.nodes;  // a copy: lowering adds values, the graph is rebuilt below
  const int count = static_cast<int>(nodes.size());
  Uses uses = uses_of(m);
  // Host fallback: a node with a subgraph or a shape that is not static
  // cannot run here, whatever is tried; the others are tried below and a
  // refusal sends them to the host too. Host nodes are `done` before any
  // fusion looks at them, so no kernel absorbs one.
  std::vector<bool> done(count, false);
  for (int i = 0; i < count; ++i)
    if (std::string why = host_only_reason(L, nodes[i]); !why.empty()) host[i] = why, done[i] = true;
  auto to_host = [&](int i, const std::string& why) {
    host[i] = why;
    done[i] = true;
  };

  std::map<int, ir::Node> placed;  // node index -> lowered node emitted there
  // A lowered node that absorbed several ONNX nodes is emitted where the
  // last of them was (everything it reads is computed by then).
  auto place = [&](ir::Node lowered, const std::vector<int>& absorbed) {
    int last = *std::max_element(absorbed.begin(), absorbed.end());
    for (int j : absorbed) done[j] = true;
    st.fused += static_cast<int>(absorbed.size()) - 1;
    placed.emplace(last, std::move(lowered));
  };
  // 0. Attention (16-bit programs): Q K^T, scale, mask, Softmax and P V in one
  // kernel, before the matmuls would claim its two MatMuls. The kernel's
  // mma.sync.m16n8k16 needs sm_80 or newer: older targets keep the unfused path.
  if (fused_attention_enabled(opt))
    for (int i = 0; i < count; ++i) {
      auto a = lower_attention(L, i, nodes, uses, done);
      if (!a) continue;
      place(std::move(a->node), a->absorbed);
      ++st.kernels;
      ++st.attentions;
    }

  // 1. Matmuls and the nodes their epilogues absorb.
  for (int i = 0; i < count; ++i) {
    if (done[i] || !nodes[i].domain.empty() || (nodes[i].op_type != "MatMul" && nodes[i].op_type != "Gemm")) continue;
    GemmLowered g;
    std::string why;
    if (!try_lower(L, why, [&] { g = lower_gemm(L, i, uses, opt, done); })) {
      to_host(i, why);
      continue;
    }
    place(std::move(g.node), g.absorbed);
    ++st.gemms;
  }

  // 1a. Depthwise convolutions on kiln's kernel, with their bias and Relu /
  // Clip, where it is chosen over cuDNN (before 1b would give them to cuDNN).
  for (auto& c : lower_depthwise_convs(L, nodes, uses, opt, done)) {
    place(std::move(c.node), c.absorbed);
    ++st.kernels;
    ++st.dwconvs;
  }

  // 1b. Convolutions whose bias, residual Add and Relu a cuDNN graph-API
  // engine fuses (with a device only: whether cuDNN has one is known there).
  for (int i = 0; i < count; ++i) {
    auto c = lower_conv_fused(L, i, nodes, uses, opt, done);
    if (!c) continue;
    place(std::move(c->node), c->absorbed);
    ++st.convs;
    ++st.conv_epilogues;
  }

  // 2. Element-wise groups: a node joins the group of an input's producer
  // when that input has no other reader, is no graph output and has the
  // node's output shape. The group is emitted where its last node was.
  std::vector<int> root(count, -1);
  std::map<int, std::vector<int>> members;
  for (int i = 0; i < count; ++i) {
    // A Pad adding zeros on one axis starts a group as a gather (the Cast
    // after pad_stem_channels' Pad joins it below), with the Transpose it
    // reads when only it reads that: Transpose -> Pad -> Cast, one kernel.
    if (!done[i] && root[i] < 0 && is_gatherable_pad(L, nodes[i])) {
      root[i] = i;
      members[i] = {i};
      const ir::ValueId v = nodes[i].inputs[0];
      const int p = uses.producer[v];
      if (p >= 0 && !done[p] && root[p] < 0 && !uses.is_output[v] && uses.readers[v].size() == 1 &&
          is_gatherable_transpose(L, nodes[p])) {
        root[p] = i;
        members[i].push_back(p);
      }
      continue;
    }
    if (done[i] || !is_elementwise(L, nodes[i])) continue;
    root[i] = i;
    members[i] = {i};
    auto out = ir::to_sizes(*m.value(nodes[i].outputs[0]).shape);
    for (auto v : nodes[i].inputs) {
      if (v == ir::kNoValue) continue;
      int p = uses.producer[v];
      // A Concat read only here, at the output's shape, joins the group as
      // its gather (gen_elementwise): the concatenation is never stored. So
      // does a Slice cutting one window per row (pad_matmul_n's compaction
      // with the Cast after it: one kernel).
      if (p >= 0 && p != i && root[p] < 0 && !done[p] && !uses.is_output[v] && uses.readers[v].size() == 1 &&
          ir::to_sizes(*m.value(v).shape) == out &&
          (is_gatherable_concat(L, nodes[p]) || is_gatherable_slice(L, nodes[p]))) {
        root[p] = i;
        members[i].push_back(p);
        continue;
      }
      if (p < 0 || root[p] != p || p == i) continue;
      if (uses.is_output[v] || uses.readers[v].size() != 1) continue;
      if (ir::to_sizes(*m.value(v).shape) != out) continue;
      for (int q : members[p]) {
        root[q] = i;
        members[i].push_back(q);
      }
      members.erase(p);
    }
  }

  // 3. The new node list (a node no kernel family takes joins the host).
  std::vector<ir::Node> lowered;
  for (int i = 0; i < count; ++i) {
    const ir::Node& n = nodes[i];
    if (auto it = placed.find(i); it != placed.end()) {
      lowered.push_back(std::move(it->second));
      continue;
    }
    if (host.count(i)) {
      lowered.push_back(n);  // as it is: an ONNX node of a host segment
      continue;
    }
    if (done[i]) continue;
    if (root[i] >= 0) {
      if (root[i] != i) continue;
      auto mem = members[i];
      std::sort(mem.begin(), mem.end());
      std::vector<const ir::Node*> ptrs;
      for (int q : mem) ptrs.push_back(&nodes[q]);
      lowered.push_back(gen_elementwise(L, ptrs));
      st.fused += static_cast<int>(mem.size()) - 1;
      ++st.kernels;
      continue;
    }
    // A Slice cutting one window per row with no element-wise reader to join
    // (pad_matmul_n's compaction in float32 programs): gen_elementwise's
    // gather, with 32-bit row arithmetic and vector stores, rather than
    // gen_data's per-dim coordinates.
    if (is_gatherable_slice(L, n)) {
      lowered.push_back(gen_elementwise(L, {&n}));
      ++st.kernels;
      continue;
    }
    std::vector<ir::Node> out;
    std::string why;
    const bool lowered_here = try_lower(L, why, [&] {
      if (n.domain.empty() && n.op_type == "If") {
        out.push_back(lower_if(L, n, opt, st));
        return;
      }
      if (n.domain.empty() && (n.op_type == "Loop" || n.op_type == "Scan")) {
        out.push_back(lower_loop(L, n, opt, st));
        return;
      }
      if (n.domain.empty() && (n.op_type == "Conv" || n.op_type == "ConvTranspose")) {
        auto g = lower_pointwise_conv(L, n, opt);
        out.push_back(g ? std::move(*g) : lower_conv(L, n, opt));
        ++(g ? st.gemms : st.convs);
        return;
      }
      out = gen_data(L, n);
      if (out.empty()) out = gen_reduce(L, n);
      if (out.empty()) out = gen_pool(L, n);
      if (out.empty()) out = gen_resize(L, n);
      if (out.empty()) out = gen_loss(L, n);
      if (out.empty()) out = gen_quant(L, n);
      if (out.empty()) out = gen_recurrent(L, n);
      if (out.empty())
        refuse(n, n.domain.empty() ? "the cuda target has no kernel for this operator yet"
                                   : fmt::format("domain '{}' is not supported", n.domain));
    });
    if (!lowered_here) {
      host[i] = why;
      lowered.push_back(n);
      continue;
    }
    if (n.domain.empty() && (n.op_type == "Conv" || n.op_type == "ConvTranspose")) {
      lowered.push_back(std::move(out.front()));
      continue;
    }
    if (n.domain.empty() && (n.op_type == "If" || n.op_type == "Loop" || n.op_type == "Scan")) {
      lowered.push_back(std::move(out.front()));
      ++st.conditionals;
      continue;
    }
    for (auto& k : out) {
      (k.op_type == "Copy" ? st.copies : st.kernels)++;
      lowered.push_back(std::move(k));
    }
  }
  m.main.nodes = std::move(lowered);
  return nodes;
}

LowerStats lower_for_cuda(artifact::CompiledProgram& cp, const LowerOptions& opt) {
  Stopwatch sw;
  ir::Model& m = cp.model;
  LowerStats st;
  Lowering L{m};
  L.sm_count = opt.sm_count;
  int conv_bias = split_conv_bias(m);
  // fp16 / bf16: float32 values become 16-bit before anything is lowered
  // (the model's inputs and outputs keep their dtypes; precision.h).
  std::vector<DType> before(m.values.size());  // which 16-bit values the precision pass makes
  for (size_t i = 0; i < before.size(); ++i) before[i] = m.values[i].dtype;
  if (opt.dtype != DType::f32)
    st.precision =
        convert_precision(m, opt.dtype, opt.precision_check ? opt.precision_check(m, opt.dtype) : std::set<std::string>{});
  // After the precision pass (which keeps BatchNormalization's statistics
  // float32, so s and t are not rounded to 16 bits) and before to_nhwc (whose
  // region the Mul and Add join).
  batch_norm_to_affine(m);
  // KILN_CUDA_POINTWISE=cudnn: no cuBLASLt for 1x1 convolutions and matmuls
  // by constant weights (pointwise_cudnn.cpp says why); patch convolutions
  // stay cuDNN's too.
  const bool on_cudnn = pointwise_on_cudnn(opt);
  if (!on_cudnn) patch_convs_to_gemm(m);  // before to_nhwc: the patches come back NHWC-ordered
  const bool nhwc_on = opt.nhwc.value_or(opt.dtype != DType::f32 || opt.tf32);
  const int nhwc = nhwc_on ? to_nhwc(m, /*pointwise_as_matmul=*/!on_cudnn) : 0;
  if (nhwc) merge_layout_transposes(m);  // ConvNeXt: the region's exits meet the model's own transposes
  // After the merge (which would fold the reordered entry Transpose back into
  // another): image stems (C = 3) read zero-padded channels, for cuDNN's fast
  // 16-bit NHWC kernels.
  if (nhwc && opt.dtype != DType::f32) {
    const int multiple = stem_pad_multiple();
    if (int s = pad_stem_channels(m, multiple))
      log().info("cuda: {} convolution(s) with fewer than {} input channels read them zero-padded to {}", s, multiple, multiple);
  }
  if (on_cudnn) gemms_to_convs(m, nhwc_on);
  fuse_rms_norms(m);  // after the precision pass: the fused node takes the program's dtypes
  if (fused_attention_enabled(opt))
    if (int q = merge_qkv_matmuls(m)) log().debug("cuda: {} attention projection group(s) merged into one matmul each", q);
  if (int e = expand_matmul_batches(m)) log().debug("cuda: {} MatMul(s) with partly broadcast batch dims read an Expand", e);
  if (int p = pad_matmul_n(m)) log().info("cuda: {} matmul(s) with rows not 16-byte aligned computed with a padded n", p);
  std::map<int, std::string> host;  // node index -> why it runs on the host
  const std::vector<ir::Node> nodes = lower_graph_nodes(L, opt, st, host);
  if (!opt.fallback && !host.empty()) refuse_host_nodes(nodes, host);
  // The host computes in float32: host nodes become float32 islands.
  if (opt.dtype != DType::f32 && !host.empty()) fp32_host_nodes(m, opt.dtype, before, st.precision);
  st.copies -= alias_copies(m);
  passes::eliminate_dead_code(m);
  ir::verify(m);
  // The partition: every node left in an ONNX domain runs on the host.
  m.segments = ir::partition_segments(m, "cuda", [](const ir::Node& n) { return n.domain != kCudaDomain; });
  report_host_nodes(m, host, nodes, st);

  // 4. Device code and memory plan.
  // Conditional nodes' kernels call the device builtin cudaGraphSetConditional,
  // which NVRTC has no header for: kiln declares it (conditional.h).
  std::string source = std::string(kernel_prelude()) + (st.conditionals ? std::string(kSetConditionalDecl) : "") + L.source;
  // Debugging aid: KILN_CUDA_DUMP_SOURCE=FILE writes the program's CUDA C++.
  if (const char* dump = std::getenv("KILN_CUDA_DUMP_SOURCE"); dump && *dump) {
    std::ofstream f(dump, std::ios::binary);
    f << source;
    if (f.flush())
      log().info("cuda: kernel source written to '{}' ({} bytes)", dump, source.size());
    else
      log().warn("cuda: KILN_CUDA_DUMP_SOURCE: cannot write '{}'", dump);
  }
  KernelBundle bundle = nvrtc_compile(source, opt.arch);
  tune_kernel_grids(m, bundle, opt, L.sm_count, L.tuning);
  st.cubin_bytes = bundle.cubin.size();
  st.ptx_bytes = bundle.ptx.size();
  cp.kernels = encode_bundle(bundle);
  const std::string digest = cubin_digest(bundle);
  for (auto& n : m.main.nodes) {
    if (n.op_type == "Kernel" && n.domain == kCudaDomain) n.attrs["cubin"] = digest;
    if ((n.op_type == "If" || n.op_type == "Loop") && n.domain == kCudaDomain) {
      n.attrs["cubin"] = digest;  // its cond_fn / control_fn
      for (auto& [k, a] : n.attrs)
        if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a))
          for (auto& b : (*sg)->nodes)
            if (b.op_type == "Kernel" && b.domain == kCudaDomain) b.attrs["cubin"] = digest;
    }
  }
  // The program carries its own kernels (shape buckets: one cubin each).
  ir::Value kv;
  kv.name = std::string(kKernelsValue);
  kv.dtype = DType::u8;
  kv.shape = ir::Shape{ir::Dim{static_cast<int64_t>(cp.kernels.size()), ""}};
  kv.constant = Tensor::from_bytes(DType::u8, {static_cast<int64_t>(cp.kernels.size())}, cp.kernels.data(),
                                   cp.kernels.size());
  m.add_value(std::move(kv));
  cp.plan = passes::plan_memory(m, /*lowered_bodies=*/true);
  st.tuning = L.tuning;
  if (opt.device >= 0)
    log().info("cuda tuning ({}): {} matmul / convolution problems decided, {} reused, {} candidate runs timed, {:.0f} ms",
               tuning_name(opt.tuning), st.tuning.tuned, st.tuning.reused, st.tuning.timed, st.tuning.ms);
  else
    log().info("cuda: cross-compiling for {} without a device: {} matmul(s) and {} convolution(s) will be given "
               "algorithms by the cuBLASLt / cuDNN heuristics at load",
               opt.arch, st.gemms, st.convs);
  log().info("cuda lowering for {}: {} kernels, {} cuBLASLt matmuls, {} cuDNN convolutions ({} biases split off, {} "
             "with fused epilogues), {} depthwise convolutions on kiln's kernel, {} copies, {} fused attentions, {} "
             "conditional nodes, {} nodes fused, {} nodes NHWC; cubin {} bytes, PTX {} bytes ({:.0f} ms)",
             opt.arch, st.kernels, st.gemms, st.convs, conv_bias, st.conv_epilogues, st.dwconvs, st.copies, st.attentions,
             st.conditionals, st.fused, nhwc,
             st.cubin_bytes, st.ptx_bytes, sw.ms());
  return st;
}

}  // namespace kiln::targets::cuda
