// A kiln.cpu.MatMul of 2 to kMaxSkinnyRows rows by constant weights, on
// oneDNN's sgemm path (no AVX-512), becomes kiln.cpu.SkinnyMatMul: kiln's own
// kernel that reads weights packed in panels of 16 columns once per call
// (run/skinny_matmul.cpp says why). A single row stays a matmul: oneDNN's
// GEMV already streams plain weights at the memory's rate.
//
// Measured on the 2-core AVX2 EPYC (oneDNN 2.6, 2 threads), a decode step at
// batch 2 (M = 2; optimum with-past exports), interleaved with ORT 1.32
// (bench/results/cpu_decoders_skinny_20261203.md): GPT-2 9.99 -> 8.57 ms
// (1x1 convolutions -> SkinnyMatMul; ORT 8.87), Qwen2 7.07 -> 5.75 (5.84), the
// nine zoo decoders' geometric mean against ORT 1.07 -> 0.94. GPT-2's 154 MB
// lm_head streams at ~39 GB/s (1x1 convolution ~28, oneDNN's GEMV at M = 1
// ~36). At M = 1 neither form won reliably (interleaved runs), so one row
// stays oneDNN's GEMV.
#include <map>
#include <string>

#include "support/log.h"
#include "targets/cpu/compile/lower_ops.h"
#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets::cpu {

namespace {

bool plain_2d(const md_t& md) {
  return md.data.ndims == 2 && md.data.format_kind == dnnl_blocked && md == plain_md(md.dims());
}

/// The SkinnyMatMul form of MatMul n, its weights packed into a new constant
/// of m, or nullopt when n has no such form.
std::optional<ir::Node> skinny_twin(ir::Model& m, const ir::Node& n) {
  if (!n.has("md.wei_src") || n.has("out_scale") || n.inputs.size() < 2) return std::nullopt;
  const md_t src = md_attr(n, "md.src"), dst = md_attr(n, "md.dst"), wsrc = md_attr(n, "md.wei_src");
  if (!plain_2d(src) || !plain_2d(dst) || wsrc.data.ndims != 2 || wsrc.data.format_kind != dnnl_blocked ||
      wsrc.data.format_desc.blocking.inner_nblks != 0)
    return std::nullopt;
  const int64_t M = src.dims()[0], K = src.dims()[1], N = dst.dims()[1];
  if (M < 2 || M > kMaxSkinnyRows || dst.dims()[0] != M || wsrc.dims() != dims_t{K, N}) return std::nullopt;
  if (n.has("md.bias")) {
    md_t b = md_attr(n, "md.bias");
    if (md_bytes(b) != static_cast<size_t>(N) * 4 || b != plain_md(b.dims())) return std::nullopt;
  }
  const Tensor* w = constant_of(m, n.inputs[1]);
  if (!w || w->dtype() != DType::f32 || w->nbytes() < md_bytes(wsrc)) return std::nullopt;
  ir::Node s = n;
  s.op_type = "SkinnyMatMul";
  s.attrs["M"] = M;
  s.attrs["K"] = K;
  s.attrs["N"] = N;
  for (const char* a : {"md.wei", "md.wei_src", "impl"}) s.attrs.erase(a);
  if (!read_post_ops(s).empty()) {
    try {
      auto pd = skinny_post_pd(s);
      if (std::string(pd.impl_info_str()).rfind("ref", 0) == 0) return std::nullopt;  // see primitive_ok
    } catch (const Error&) {
      return std::nullopt;
    }
  }
  // Plain [K, N] first (the constant may be stored transposed: Gemm transB), then the panels.
  const Tensor plain = reorder_constant(*w, wsrc, plain_md({K, N}));
  Tensor packed = pack_skinny_weights(plain.data<float>(), K, N, N, 1);
  const std::string name = m.value(n.inputs[1]).name + "/skinny";
  ir::ValueId id = add_value(m, name, DType::f32, packed.shape());
  m.value(id).constant = std::move(packed);
  s.inputs[1] = id;
  return s;
}

}  // namespace

int matmuls_as_skinny(ir::Model& m, const ir::Model* layout_reference) {
  // A program of a set (shape buckets) follows the reference program's choice
  // per node name (as matmul_as_conv does): a node runs as SkinnyMatMul only
  // where the reference's does.
  std::map<std::string, bool> ref_skinny;
  if (layout_reference)
    for_each_graph(const_cast<ir::Graph&>(layout_reference->main), [&](ir::Graph& g) {
      for (auto& n : g.nodes)
        if (n.domain == "kiln.cpu" && !n.name.empty()) ref_skinny[n.name] = is_cpu(n, "SkinnyMatMul");
    });
  int count = 0;
  for_each_graph(m.main, [&](ir::Graph& g) {
    for (auto& n : g.nodes) {
      if (!is_cpu(n, "MatMul")) continue;
      if (layout_reference) {
        auto ref = ref_skinny.find(n.name);
        if (ref == ref_skinny.end() || !ref->second) continue;
      }
      auto impl = primitive_impl(n);
      if (!impl || impl->find("gemm") == std::string::npos) continue;  // brgemm (AVX-512) packs its own weights
      auto s = skinny_twin(m, n);
      if (!s) continue;
      log().debug("{}: runs as a SkinnyMatMul ({} rows)", n.label(), s->i("M"));
      n = std::move(*s);
      ++count;
    }
  });
  return count;
}

}  // namespace kiln::targets::cpu
