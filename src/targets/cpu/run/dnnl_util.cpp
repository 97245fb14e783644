#include "targets/cpu/run/dnnl_util.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "support/error.h"

namespace kiln::targets::cpu {

const dnnl::engine& engine() {
  static const dnnl::engine e = [] {
    // oneDNN registers every JIT kernel with VTune by default, which costs
    // time at each primitive creation; keep it only when asked for.
    if (!std::getenv("DNNL_JIT_PROFILE")) dnnl_set_jit_profiling_flags(DNNL_JIT_PROFILE_NONE);
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return e;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl::version();
  return fmt::format("{}.{}.{}", v->major, v->minor, v->patch);
}

std::string onednn_isa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_mic: return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "isa" + std::to_string(static_cast<int>(dnnl::get_effective_cpu_isa()));
  }
}

int64_t channel_block() {
  static const int64_t b = [] {
    auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    // Every AVX-512 flavour has the avx512_core bits set.
    return (isa & static_cast<unsigned>(dnnl::cpu_isa::avx512_core)) == static_cast<unsigned>(dnnl::cpu_isa::avx512_core)
               ? 16
               : 8;
  }();
  return b;
}

md_t plain_md(const dims_t& dims) {
  dims_t strides(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) strides[i - 1] = strides[i] * std::max<dnnl::memory::dim>(dims[i], 1);
  return md_t(dims, dnnl::memory::data_type::f32, strides);
}

md_t blocked_md(const dims_t& dims, int64_t block) {
  const bool b16 = block == 16;
  switch (dims.size()) {
    case 3: return md_t(dims, dnnl::memory::data_type::f32, b16 ? tag::nCw16c : tag::nCw8c);
    case 4: return md_t(dims, dnnl::memory::data_type::f32, b16 ? tag::nChw16c : tag::nChw8c);
    case 5: return md_t(dims, dnnl::memory::data_type::f32, b16 ? tag::nCdhw16c : tag::nCdhw8c);
    default: fail(ErrorCode::internal, "blocked_md: rank {} has no channel-blocked layout", dims.size());
  }
}

bool is_blocked(const md_t& md) {
  const auto& d = md.data;
  return d.format_kind == dnnl_blocked && d.format_desc.blocking.inner_nblks == 1 &&
         d.format_desc.blocking.inner_idxs[0] == 1;
}

std::vector<int64_t> md_to_ints(const md_t& md) {
  std::vector<int64_t> out((sizeof(dnnl_memory_desc_t) + 7) / 8, 0);
  std::memcpy(out.data(), &md.data, sizeof(dnnl_memory_desc_t));
  return out;
}

md_t md_attr(const ir::Node& n, const std::string& name) {
  if (!n.has(name))
    fail(ErrorCode::corrupt_artifact, "{}: attribute '{}' (a oneDNN memory descriptor) is missing", n.label(), name);
  std::vector<int64_t> v = n.ints(name);
  if (v.size() != (sizeof(dnnl_memory_desc_t) + 7) / 8)
    fail(ErrorCode::corrupt_artifact, "{}: attribute '{}' has {} words, a oneDNN {} memory descriptor has {}", n.label(),
         name, v.size(), onednn_version(), (sizeof(dnnl_memory_desc_t) + 7) / 8);
  dnnl_memory_desc_t c;
  std::memcpy(&c, v.data(), sizeof(c));
  bool ok = c.ndims >= 0 && c.ndims <= DNNL_MAX_NDIMS &&
            (c.data_type == dnnl_f32 || c.data_type == dnnl_s32 || c.data_type == dnnl_data_type_undef) &&
            (c.format_kind == dnnl_blocked || c.format_kind == dnnl_format_kind_any ||
             c.format_kind == dnnl_format_kind_undef || c.format_kind == dnnl_format_kind_wino);
  for (int i = 0; ok && i < c.ndims; ++i) ok = c.dims[i] >= 0 && c.padded_dims[i] >= c.dims[i];
  if (ok && c.format_kind == dnnl_blocked) {
    const auto& b = c.format_desc.blocking;
    ok = b.inner_nblks >= 0 && b.inner_nblks <= DNNL_MAX_NDIMS;
    for (int i = 0; ok && i < b.inner_nblks; ++i) ok = b.inner_idxs[i] >= 0 && b.inner_idxs[i] < c.ndims && b.inner_blks[i] > 0;
  }
  if (!ok) fail(ErrorCode::corrupt_artifact, "{}: attribute '{}' is not a valid memory descriptor", n.label(), name);
  return md_t(c);
}

void set_md_attr(ir::Node& n, const std::string& name, const md_t& md) { n.attrs[name] = md_to_ints(md); }

std::vector<PostOp> read_post_ops(const ir::Node& n) {
  auto kinds = n.ints("post_kinds"), algs = n.ints("post_algs"), inputs = n.ints("post_inputs");
  auto alpha = n.floats("post_alpha"), beta = n.floats("post_beta"), scale = n.floats("post_scale");
  size_t k = kinds.size();
  if (algs.size() != k || inputs.size() != k || alpha.size() != k || beta.size() != k || scale.size() != k)
    fail(ErrorCode::corrupt_artifact, "{}: its post-op lists have different lengths", n.label());
  std::vector<PostOp> out(k);
  for (size_t i = 0; i < k; ++i) {
    if (kinds[i] != PostOp::eltwise && kinds[i] != PostOp::binary)
      fail(ErrorCode::corrupt_artifact, "{}: post-op {} has unknown kind {}", n.label(), i, kinds[i]);
    if (kinds[i] == PostOp::binary && (inputs[i] < 0 || inputs[i] >= static_cast<int64_t>(n.inputs.size())))
      fail(ErrorCode::corrupt_artifact, "{}: binary post-op {} reads input {}, the node has {}", n.label(), i, inputs[i],
           n.inputs.size());
    out[i] = {static_cast<PostOp::Kind>(kinds[i]), algs[i], alpha[i], beta[i], scale[i], inputs[i]};
  }
  return out;
}

void write_post_ops(ir::Node& n, const std::vector<PostOp>& ops) {
  std::vector<int64_t> kinds, algs, inputs;
  std::vector<float> alpha, beta, scale;
  for (auto& p : ops) {
    kinds.push_back(p.kind);
    algs.push_back(p.alg);
    inputs.push_back(p.input);
    alpha.push_back(p.alpha);
    beta.push_back(p.beta);
    scale.push_back(p.scale);
  }
  n.attrs["post_kinds"] = kinds;
  n.attrs["post_algs"] = algs;
  n.attrs["post_inputs"] = inputs;
  n.attrs["post_alpha"] = alpha;
  n.attrs["post_beta"] = beta;
  n.attrs["post_scale"] = scale;
}

dnnl::primitive_attr make_attr(const ir::Node& n) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  auto ops = read_post_ops(n);
  if (ops.empty()) return attr;
  dnnl::post_ops po;
  for (auto& p : ops) {
    if (p.kind == PostOp::eltwise)
      po.append_eltwise(p.scale, static_cast<dnnl::algorithm>(p.alg), p.alpha, p.beta);
    else
      po.append_binary(static_cast<dnnl::algorithm>(p.alg), md_attr(n, "md.post" + std::to_string(p.input)));
  }
  attr.set_post_ops(po);
  return attr;
}

void* thread_buffer(int slot, size_t bytes) {
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  constexpr int kSlots = 5;
  if (slot < 0 || slot >= kSlots) fail(ErrorCode::internal, "thread buffer slot {} is not in [0, {})", slot, kSlots);
  thread_local std::unique_ptr<void, Free> buf[kSlots];
  thread_local size_t cap[kSlots] = {};
  if (bytes > cap[slot]) {
    size_t n = (bytes + 4095) / 4096 * 4096;
    buf[slot].reset(std::aligned_alloc(64, n));
    if (!buf[slot]) fail(ErrorCode::internal, "cannot allocate a {} byte buffer for a oneDNN primitive", n);
    cap[slot] = n;
  }
  return buf[slot].get();
}

void* thread_scratch(size_t bytes) { return thread_buffer(0, bytes); }

dnnl::memory wrap(const md_t& md, const void* data) {
  return dnnl::memory(md, engine(), const_cast<void*>(data));
}

void dnnl_fail(const ir::Node& n, const char* what, const dnnl::error& e) {
  fail(ErrorCode::unsupported, "{}: oneDNN {} cannot create the {}: {}", n.label(), onednn_version(), what, e.what());
}

void expect_same_md(const ir::Node& n, const char* arg, const md_t& expected, const md_t& stored) {
  if (expected != stored)
    fail(ErrorCode::incompatible_artifact,
         "{}: the {} stored in the artifact are laid out for another oneDNN build or ISA than this machine's "
         "(oneDNN {}, ISA {}); recompile the model here",
         n.label(), arg, onednn_version(), onednn_isa());
}

void expect_same_impl(const ir::Node& n, const std::string& impl) {
  std::string want = n.s("impl", "");
  if (!want.empty() && want != impl)
    fail(ErrorCode::incompatible_artifact,
         "{}: its weights were packed for the oneDNN kernel '{}', but oneDNN {} on this machine (ISA {}) picks '{}'; "
         "recompile the model here",
         n.label(), want, onednn_version(), onednn_isa(), impl);
}

dims_t md_dims(const md_t& md) { return md.dims(); }

size_t md_bytes(const md_t& md) { return md.get_size(); }

}  // namespace kiln::targets::cpu
