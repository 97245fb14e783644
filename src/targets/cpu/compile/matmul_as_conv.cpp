// A kiln.cpu.MatMul with constant weights that oneDNN runs on its sgemm
// ("gemm:jit": its only f32 matmul kernel without AVX-512 in oneDNN 2.x)
// becomes a 1x1 convolution over a width of M in the channels-last layout:
// the source [M, K] row-major is exactly an nwc tensor [1, K, M], the
// destination [M, N] an nwc [1, N, M]. oneDNN's jit 1x1 kernel then reads
// weights packed once at compile time into its blocked layout (OIw8i8o),
// where the sgemm copies panels of plain weights on every call.
//
// Measured on 2 AVX2 cores (EPYC, oneDNN 2.6, 2 threads, minimum of 20-30
// runs): 128x768 by 768x768 + residual add 1.16 -> 0.98 ms, 128x768 by
// 768x3072 + GELU 4.98 -> 4.25 ms, 128x3072 by 768 and 128x768 by 2304 the
// same; one thread 3-8% faster. With a single row (M = 1) the sgemm runs a
// GEMV that streams the weights once and stays faster (GPT-2 decode step,
// batch 1: 7.9 ms as matmuls, 9.5 ms as 1x1 convolutions), hence kMinRows.
// From two rows on the sgemm copies weight panels: a decode step at batch 2
// (optimum with-past export, M = 2) ran GPT-2 in 17.9 -> 10.1 ms, its
// 50257-wide lm_head 11.7 -> 5.4 ms, Qwen2 9.8 -> 6.9, OPT 13.5 -> 10.1; at
// batch 4 GPT-2 20.4 -> 12.9 ms.
#include <map>
#include <optional>
#include <string>

#include "support/log.h"
#include "targets/cpu/compile/lower_ops.h"
#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets::cpu {

namespace {

/// A single row stays a matmul: oneDNN's GEMV reads plain weights as fast as
/// the 1x1 kernel reads packed ones, with less set-up per call.
constexpr int64_t kMinRows = 2;

bool plain_2d(const md_t& md) {
  return md.data.ndims == 2 && md.data.format_kind == dnnl_blocked && md == plain_md(md.dims());
}

/// The nwc descriptor of a 2-D plain [rows, cols] operand read as [1, cols, rows].
md_t nwc_of(int64_t rows, int64_t cols) {
  return md_t({1, cols, rows}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::nwc);
}

/// The conv twin of MatMul n, or nullopt when some operand has no conv form.
std::optional<ir::Node> conv_twin(const ir::Node& n) {
  if (!n.has("md.wei_src") || n.has("out_scale")) return std::nullopt;
  md_t src = md_attr(n, "md.src"), dst = md_attr(n, "md.dst"), wsrc = md_attr(n, "md.wei_src");
  if (!plain_2d(src) || !plain_2d(dst) || wsrc.data.ndims != 2 || wsrc.data.format_kind != dnnl_blocked ||
      wsrc.data.format_desc.blocking.inner_nblks != 0)
    return std::nullopt;
  const int64_t M = src.dims()[0], K = src.dims()[1], N = dst.dims()[1];
  if (dst.dims()[0] != M || wsrc.dims() != dims_t{K, N}) return std::nullopt;
  ir::Node c = n;
  c.op_type = "Conv";
  set_md_attr(c, "md.src", nwc_of(M, K));
  set_md_attr(c, "md.dst", nwc_of(M, N));
  set_md_attr(c, "md.wei", any_md({N, K, 1}));
  // The constant stays [K, N] row-major: element (o, i) of the conv weights is at i * N + o.
  const auto& ws = wsrc.data.format_desc.blocking.strides;
  set_md_attr(c, "md.wei_src", md_t({N, K, 1}, dnnl::memory::data_type::f32, dims_t{ws[1], ws[0], 1}));
  if (n.has("md.bias")) {
    md_t b = md_attr(n, "md.bias");
    if (md_bytes(b) != static_cast<size_t>(N) * 4 || b != plain_md(b.dims())) return std::nullopt;
    set_md_attr(c, "md.bias", plain_md({N}));
  }
  for (auto& p : read_post_ops(n)) {
    if (p.kind != PostOp::binary) continue;
    std::string name = "md.post" + std::to_string(p.input);
    md_t o = md_attr(n, name);
    if (!plain_2d(o)) return std::nullopt;
    auto od = o.dims();
    if (od == dims_t{M, N}) set_md_attr(c, name, nwc_of(M, N));  // a residual
    else if (od == dims_t{1, N}) set_md_attr(c, name, nwc_of(1, N));  // per output channel
    else if (od == dims_t{1, 1}) set_md_attr(c, name, nwc_of(1, 1));  // a scalar
    else return std::nullopt;
  }
  c.attrs["strides"] = std::vector<int64_t>{1};
  c.attrs["dilates"] = std::vector<int64_t>{0};
  c.attrs["pads_begin"] = std::vector<int64_t>{0};
  c.attrs["pads_end"] = std::vector<int64_t>{0};
  return c;
}

}  // namespace

int matmuls_as_conv(ir::Model& m, const ir::Model* layout_reference) {
  // A program of a set (shape buckets) follows the reference program's choice
  // per node name, so both pack each weight the same way and the artifact
  // stores it once.
  std::map<std::string, bool> ref_conv;
  if (layout_reference)
    for_each_graph(const_cast<ir::Graph&>(layout_reference->main), [&](ir::Graph& g) {
      for (auto& n : g.nodes)
        if ((is_cpu(n, "Conv") || is_cpu(n, "MatMul")) && !n.name.empty()) ref_conv[n.name] = is_cpu(n, "Conv");
    });
  int count = 0;
  for_each_graph(m.main, [&](ir::Graph& g) {
    for (auto& n : g.nodes) {
      if (!is_cpu(n, "MatMul")) continue;
      auto ref = ref_conv.find(n.name);
      if (ref != ref_conv.end() && !ref->second) continue;
      if (ref == ref_conv.end() && md_attr(n, "md.src").dims()[0] < kMinRows) continue;
      auto impl = primitive_impl(n);
      if (!impl || impl->find("gemm") == std::string::npos) continue;  // brgemm (AVX-512) packs its own weights
      auto c = conv_twin(n);
      if (!c) continue;
      auto cimpl = primitive_impl(*c);
      if (!cimpl || cimpl->rfind("jit_1x1", 0) != 0 || !primitive_ok(*c)) continue;
      log().debug("{}: runs as a 1x1 convolution ({})", n.label(), *cimpl);
      n = std::move(*c);
      ++count;
    }
  });
  return count;
}

}  // namespace kiln::targets::cpu
