// Data-movement kernels: Transpose, Gather, Concat, Slice, Split; copies for
// Reshape-like operators (codegen.h: gen_data).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "support/error.h"
#include "targets/cuda/compile/codegen.h"
#include "targets/cuda/run/cuda_ops.h"

namespace kiln::targets::cuda {

namespace {

/// Statements decomposing flat output index `i` of dims `out` into
/// coordinates c0..c{r-1} (of index type I).
std::string coords(const std::vector<int64_t>& out) {
  std::string s = "I r = i;";
  for (int64_t d = static_cast<int64_t>(out.size()) - 1; d >= 0; --d) {
    s += fmt::format(" I c{} = r % {}u;", d, out[d]);
    if (d > 0) s += fmt::format(" r /= {}u;", out[d]);
  }
  return s;
}

/// A grid-stride kernel over `n` output items with body `body` (may use i and I).
std::string loop_kernel(const std::string& comment, const std::string& name, const std::string& params, int64_t n,
                        const std::string& body) {
  return fmt::format(
      "\n// {}\nextern \"C\" __global__ void __launch_bounds__(256) {}({}) {{\n"
      "  typedef {} I;\n"
      "  for (I i = (I)blockIdx.x * 256u + threadIdx.x; i < (I){}ull; i += (I)gridDim.x * 256u) {{\n"
      "    {}\n  }}\n}}\n",
      comment, name, params, index_type(n), n, body);
}

size_t elem_size(const ir::Model& m, const ir::Node& n, ir::ValueId v) {
  size_t s = dtype_size(m.value(v).dtype);
  if (s != 1 && s != 2 && s != 4 && s != 8) refuse(n, fmt::format("dtype {} is not supported", dtype_name(m.value(v).dtype)));
  return s;
}

ir::Node copy_node(const ir::Node& from) {
  ir::Node c;
  c.op_type = "Copy";
  c.domain = std::string(kCudaDomain);
  c.name = from.name;
  c.opset = from.opset;
  c.inputs = {from.inputs.at(0)};
  c.outputs = {from.outputs.at(0)};
  c.attrs["source_op"] = from.op_type;
  return c;
}

/// A transpose with dims of size 1 dropped and runs of input dims that stay
/// adjacent and in order in the output merged into one: the same element
/// mapping on fewer, larger dims (rank 0 becomes [1]).
struct CanonicalPerm {
  std::vector<int64_t> in, perm;  ///< output dim d is input dim perm[d]
};
CanonicalPerm canonical_perm(const std::vector<int64_t>& in, const std::vector<int64_t>& perm) {
  const int64_t r = static_cast<int64_t>(in.size());
  // The input dims of size other than 1, renumbered 0..; p: the perm over them.
  std::vector<int64_t> renum(r, -1), kept;
  for (int64_t d = 0; d < r; ++d)
    if (in[d] != 1) renum[d] = static_cast<int64_t>(kept.size()), kept.push_back(in[d]);
  std::vector<int64_t> p;
  for (int64_t d = 0; d < r; ++d)
    if (in[perm[d]] != 1) p.push_back(renum[perm[d]]);
  // Groups: maximal runs of p where the input dim increases by one.
  std::vector<std::pair<int64_t, int64_t>> groups;  // (first input dim, size), in output order
  for (size_t k = 0; k < p.size(); ++k) {
    if (k > 0 && p[k] == p[k - 1] + 1) {
      groups.back().second *= kept[p[k]];
    } else {
      groups.emplace_back(p[k], kept[p[k]]);
    }
  }
  CanonicalPerm c;
  if (groups.empty()) {
    c.in = {1};
    c.perm = {0};
    return c;
  }
  std::vector<size_t> order(groups.size());  // groups by first input dim = the new input dims
  for (size_t g = 0; g < order.size(); ++g) order[g] = g;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return groups[a].first < groups[b].first; });
  std::vector<int64_t> rank_of(groups.size());
  for (size_t k = 0; k < order.size(); ++k) {
    rank_of[order[k]] = static_cast<int64_t>(k);
    c.in.push_back(groups[order[k]].second);
  }
  for (size_t g = 0; g < groups.size(); ++g) c.perm.push_back(rank_of[g]);
  return c;
}

ir::Node transpose(Lowering& L, const ir::Node& n) {
  auto in0 = L.dims(n, n.inputs[0]), out0 = L.dims(n, n.outputs[0]);
  int64_t r0 = static_cast<int64_t>(in0.size());
  std::vector<int64_t> perm0 = n.ints("perm");
  if (perm0.empty())
    for (int64_t d = r0 - 1; d >= 0; --d) perm0.push_back(d);
  if (static_cast<int64_t>(perm0.size()) != r0) refuse(n, "perm does not match the rank");
  {
    std::vector<bool> seen(r0, false);
    for (auto d : perm0) {
      if (d < 0 || d >= r0 || seen[d]) refuse(n, "perm is not a permutation of the dims");
      seen[d] = true;
    }
  }
  const size_t es = elem_size(L.model, n, n.inputs[0]);
  const std::string T = raw_type(es);
  const CanonicalPerm cp = canonical_perm(in0, perm0);
  const std::vector<int64_t>& in = cp.in;
  const std::vector<int64_t>& perm = cp.perm;
  const int64_t r = static_cast<int64_t>(in.size());
  std::vector<int64_t> out(r);
  for (int64_t d = 0; d < r; ++d) out[d] = in[perm[d]];
  const int64_t N = numel(out);
  auto st = strides_of(in);
  std::string name = L.kernel_name("transpose");
  std::string comment = fmt::format("{} perm [{}] of [{}] as perm [{}] of [{}]", n.label(), fmt::join(perm0, ","),
                                    fmt::join(in0, ","), fmt::join(perm, ","), fmt::join(in, ","));
  std::string params = fmt::format("const {0}* __restrict__ x, {0}* __restrict__ y", T);
  // Element by element (the scalar path): output index i -> input index j.
  auto scalar_body = [&](const std::vector<int64_t>& o, const std::vector<int64_t>& s) {
    std::string idx = "I j = 0";
    for (int64_t d = 0; d < static_cast<int64_t>(o.size()); ++d) idx += fmt::format(" + c{} * {}u", d, s[perm[d]]);
    return coords(o) + " " + idx + ";";
  };
  if (perm.back() == r - 1) {
    // The innermost dim is kept: contiguous runs of W elements move as vectors of P
    // elements (16 bytes at most) when both pointers are aligned, else one by one.
    const int64_t W = in.back();
    int64_t P = 1;
    for (int64_t c = 2; c * static_cast<int64_t>(es) <= 16; c *= 2)
      if (W % c == 0) P = c;
    std::string scalar = fmt::format(
        "  for (I i = tid; i < (I){}ull; i += stride) {{\n    {} y[i] = x[j];\n  }}\n", N, scalar_body(out, st));
    std::string code = fmt::format(
        "\n// {} (inner dim kept, {} elements per vector)\nextern \"C\" __global__ void __launch_bounds__(256) {}({}) {{\n"
        "  typedef {} I;\n  const I tid = (I)blockIdx.x * 256u + threadIdx.x, stride = (I)gridDim.x * 256u;\n",
        comment, P, name, params, index_type(N));
    int64_t items = N;
    if (P > 1) {
      std::vector<int64_t> vin = in, vout = out;
      vin.back() /= P;
      vout.back() /= P;
      items = N / P;
      const std::string VT = vector_type(es * static_cast<size_t>(P));
      code += fmt::format(
          "  if ({}) {{\n    const {}* __restrict__ xv = reinterpret_cast<const {}*>(x);\n"
          "    {}* __restrict__ yv = reinterpret_cast<{}*>(y);\n"
          "    for (I i = tid; i < (I){}ull; i += stride) {{\n      {} yv[i] = xv[j];\n    }}\n  }} else {{\n{}  }}\n}}\n",
          aligned_condition({{"x", es * P}, {"y", es * P}}), VT, VT, VT, VT, items, scalar_body(vout, strides_of(vin)),
          scalar);
    } else {
      code += scalar + "}\n";
    }
    L.source += code;
    return L.kernel_node(n, name, {n.inputs[0]}, {n.outputs[0]}, L.grid_for(items, 256), 256);
  }
  // The innermost dim moves: p is where the input's innermost dim lands in the
  // output, q = r - 1 the output's innermost (input dim perm[q]). When both are
  // long enough, 32 x 32 tiles through shared memory, so that the reads (along
  // p) and the writes (along q) are both contiguous; the other dims are batches.
  const int64_t q = r - 1;
  int64_t p = 0;
  while (perm[p] != r - 1) ++p;
  const int64_t TP = (out[p] + 31) / 32, TQ = (out[q] + 31) / 32;
  const int64_t tiles = (N / (out[p] * out[q])) * TP * TQ;
  if (out[p] >= 16 && out[q] >= 16 && tiles < (int64_t{1} << 31) && es <= 8) {
    auto so = strides_of(out);
    std::string batch = "I xb = 0, yb = 0;";
    if (r > 2) {
      batch = "I xb = 0, yb = 0; { I t = bt;";
      for (int64_t d = r - 1; d >= 0; --d) {
        if (d == p || d == q) continue;
        batch += fmt::format(" {{ I c = t % {}u; t /= {}u; xb += c * {}u; yb += c * {}u; }}", out[d], out[d], st[perm[d]],
                             so[d]);
      }
      batch += " }";
    }
    L.source += fmt::format(
        "\n// {} (32x32 tiles of output dims {} and {})\nextern \"C\" __global__ void __launch_bounds__(256) {}({}) {{\n"
        "  typedef {} I;\n"
        "  __shared__ {} sh[32][33];\n"
        "  const unsigned tx = threadIdx.x & 31u, ty = threadIdx.x >> 5;\n"
        "  I bt = blockIdx.x; const unsigned tq = (unsigned)(bt % {}u); bt /= {}u; const unsigned tp = (unsigned)(bt % {}u); bt /= {}u;\n"
        "  {}\n"
        "  for (unsigned k = ty; k < 32u; k += 8u) {{\n"
        "    const unsigned cp = tp * 32u + tx, cq = tq * 32u + k;\n"
        "    if (cp < {}u && cq < {}u) sh[k][tx] = x[xb + (I)cp + (I)cq * {}u];\n"
        "  }}\n"
        "  __syncthreads();\n"
        "  for (unsigned k = ty; k < 32u; k += 8u) {{\n"
        "    const unsigned cq = tq * 32u + tx, cp = tp * 32u + k;\n"
        "    if (cp < {}u && cq < {}u) y[yb + (I)cp * {}u + (I)cq] = sh[tx][k];\n"
        "  }}\n}}\n",
        comment, p, q, name, params, index_type(N), T, TQ, TQ, TP, TP, batch, out[p], out[q], st[perm[q]], out[p], out[q],
        so[p]);
    return L.kernel_node(n, name, {n.inputs[0]}, {n.outputs[0]}, tiles, 256);
  }
  L.source += loop_kernel(comment, name, params, N, scalar_body(out, st) + " y[i] = x[j];");
  return L.kernel_node(n, name, {n.inputs[0]}, {n.outputs[0]}, L.grid_for(N, 256), 256);
}

ir::Node gather(Lowering& L, const ir::Node& n) {
  auto data = L.dims(n, n.inputs[0]), ind = L.dims(n, n.inputs[1]), out = L.dims(n, n.outputs[0]);
  int64_t axis = norm_axis(n, n.i("axis", 0), static_cast<int64_t>(data.size()));
  DType it = L.model.value(n.inputs[1]).dtype;
  if (it != DType::i64 && it != DType::i32) refuse(n, "indices must be int64 or int32");
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= data[d];
  for (size_t d = axis + 1; d < data.size(); ++d) inner *= data[d];
  int64_t ni = numel(ind), D = data[axis], N = numel(out);
  std::string T = raw_type(elem_size(L.model, n, n.inputs[0]));
  std::string name = L.kernel_name("gather");
  // Out-of-range indices are clamped (the reference kernel reports them; a
  // kernel cannot): the result is then unspecified but memory-safe.
  std::string body = fmt::format(
      "I o = i / {0}u, q = (i / {1}u) % {2}u, p = i % {1}u; long long k = (long long)idx[q]; if (k < 0) k += {3}; "
      "if (k < 0) k = 0; if (k >= {3}) k = {3} - 1; y[i] = x[((unsigned long long)o * {3}u + (unsigned long long)k) * {1}u + p];",
      ni * inner, inner, ni, D);
  L.source += loop_kernel(fmt::format("{} axis {}", n.label(), axis), name,
                          fmt::format("const {0}* __restrict__ x, const {1}* __restrict__ idx, {0}* __restrict__ y", T,
                                      it == DType::i64 ? "long long" : "int"),
                          N, body);
  (void)outer;
  return L.kernel_node(n, name, {n.inputs[0], n.inputs[1]}, {n.outputs[0]}, L.grid_for(N, 256), 256);
}

/// The vectorized body of a Concat seen as [outer, row] per input: item i
/// (in units of `P` elements) of the output [outer, sum(rows) / P] comes from
/// the input whose row segment holds i % (sum / P); `rows` are the inputs'
/// rows (len * inner), each a multiple of P.
std::string concat_vector_body(const std::vector<int64_t>& rows, int64_t P) {
  int64_t total = 0;
  for (auto r : rows) total += r;
  std::string body = fmt::format("I o = i / {0}u, r = i % {0}u;", total / P);
  int64_t off = 0;
  for (size_t k = 0; k < rows.size(); ++k) {
    body += fmt::format(" {}if (r < {}u) yv[i] = xv{}[(unsigned long long)o * {} + (r - {})];", k ? "else " : "",
                        (off + rows[k]) / P, k, rows[k] / P, off / P);
    off += rows[k];
  }
  return body;
}

ir::Node concat(Lowering& L, const ir::Node& n) {
  auto out = L.dims(n, n.outputs[0]);
  int64_t axis = norm_axis(n, n.i("axis"), static_cast<int64_t>(out.size()));
  int64_t inner = 1;
  for (size_t d = axis + 1; d < out.size(); ++d) inner *= out[d];
  const size_t es = elem_size(L.model, n, n.outputs[0]);
  std::string T = raw_type(es);
  std::string params, body = fmt::format("I o = i / {0}u, p = (i / {1}u) % {2}u, q = i % {1}u;", out[axis] * inner, inner, out[axis]);
  std::vector<ir::ValueId> ins;
  std::vector<int64_t> rows;  // each input's len * inner: what it adds to a row of the output
  int64_t off = 0;
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    if (n.inputs[k] == ir::kNoValue) continue;
    int64_t len = L.dims(n, n.inputs[k])[axis];
    if (len == 0) continue;
    params += fmt::format("const {}* __restrict__ x{}, ", T, ins.size());
    body += fmt::format(" {}if (p < {}u) y[i] = x{}[((unsigned long long)o * {} + (p - {})) * {} + q];",
                        ins.empty() ? "" : "else ", off + len, ins.size(), len, off, inner);
    ins.push_back(n.inputs[k]);
    rows.push_back(len * inner);
    off += len;
  }
  params += fmt::format("{}* __restrict__ y", T);
  std::string name = L.kernel_name("concat");
  int64_t N = numel(out);
  const std::string comment = fmt::format("{} axis {}", n.label(), axis);
  // Vectors of P elements (16 bytes at most) when every input's row is a
  // multiple of P: channels-last Concats (axis 3, inner 1) of channel counts
  // like DenseNet's 32s copy 16 bytes per access instead of 2. Taken at run
  // time only when every pointer is aligned to the vector's size.
  int64_t P = 1;
  for (int64_t p = 16 / static_cast<int64_t>(es); p > 1 && P == 1; p /= 2) {
    bool all = true;
    for (auto r : rows) all &= r % p == 0;
    if (all) P = p;
  }
  if (P == 1 || ins.empty()) {
    L.source += loop_kernel(comment, name, params, N, body);
    return L.kernel_node(n, name, ins, {n.outputs[0]}, L.grid_for(N, 256), 256);
  }
  const size_t vbytes = es * static_cast<size_t>(P);
  const std::string VT = vector_type(vbytes);
  std::vector<std::pair<std::string, size_t>> ptrs = {{"y", vbytes}};
  std::string views;
  for (size_t k = 0; k < ins.size(); ++k) {
    ptrs.emplace_back(fmt::format("x{}", k), vbytes);
    views += fmt::format("    const {0}* __restrict__ xv{1} = reinterpret_cast<const {0}*>(x{1});\n", VT, k);
  }
  const int64_t items = N / P;
  L.source += fmt::format(
      "\n// {0} ({1} elements per vector)\nextern \"C\" __global__ void __launch_bounds__(256) {2}({3}) {{\n"
      "  typedef {4} I;\n  const I tid = (I)blockIdx.x * 256u + threadIdx.x, stride = (I)gridDim.x * 256u;\n"
      "  if ({5}) {{\n{6}    {7}* __restrict__ yv = reinterpret_cast<{7}*>(y);\n"
      "    for (I i = tid; i < (I){8}ull; i += stride) {{\n      {9}\n    }}\n"
      "  }} else {{\n    for (I i = tid; i < (I){10}ull; i += stride) {{\n      {11}\n    }}\n  }}\n}}\n",
      comment, P, name, params, index_type(N), aligned_condition(ptrs), views, VT, items, concat_vector_body(rows, P), N,
      body);
  return L.kernel_node(n, name, ins, {n.outputs[0]}, L.grid_for(items, 256), 256);
}

/// Slice whose starts (and steps) are run-time inputs: the output shape is
/// static, so ends are not needed; the kernel normalises each start like
/// the constant case. Axes must be constant.
ir::Node slice_runtime(Lowering& L, const ir::Node& n) {
  auto in = L.dims(n, n.inputs[0]), out = L.dims(n, n.outputs[0]);
  int64_t r = static_cast<int64_t>(in.size());
  auto axes = const_ints(L.model, n, 3);
  auto ns = numel(L.dims(n, n.inputs[1]));
  for (size_t i : {size_t{1}, size_t{4}})
    if (i < n.inputs.size() && n.inputs[i] != ir::kNoValue && L.model.value(n.inputs[i]).dtype != DType::i64)
      refuse(n, "run-time starts / steps must be int64");
  bool has_steps = n.inputs.size() > 4 && n.inputs[4] != ir::kNoValue;
  bool const_steps = has_steps && L.model.value(n.inputs[4]).constant.has_value();
  auto csteps = const_steps ? const_ints(L.model, n, 4) : std::nullopt;
  auto ist = strides_of(in);
  std::vector<std::string> start(r, "0LL"), step(r, "1LL");
  std::string pre;
  for (int64_t j = 0; j < ns; ++j) {
    int64_t a = axes ? norm_axis(n, (*axes)[j], r) : j;
    std::string st = !has_steps ? "1LL" : const_steps ? fmt::format("{}LL", (*csteps)[j]) : fmt::format("sp[{}]", j);
    pre += fmt::format(" long long st{0} = {1}, s{0} = ss[{2}]; if (s{0} < 0) s{0} += {3}LL;"
                       " if (st{0} > 0) {{ if (s{0} < 0) s{0} = 0; if (s{0} > {3}LL) s{0} = {3}LL; }}"
                       " else {{ if (s{0} < 0) s{0} = 0; if (s{0} > {3}LL - 1) s{0} = {3}LL - 1; }}",
                       a, st, j, in[a]);
    start[a] = fmt::format("s{}", a);
    step[a] = fmt::format("st{}", a);
  }
  std::string idx = "long long j = 0";
  for (int64_t d = 0; d < r; ++d) idx += fmt::format(" + ({} + (long long)c{} * {}) * {}LL", start[d], d, step[d], ist[d]);
  std::string T = raw_type(elem_size(L.model, n, n.inputs[0]));
  std::string name = L.kernel_name("slice");
  int64_t N = numel(out);
  std::vector<ir::ValueId> ins = {n.inputs[0], n.inputs[1]};
  std::string params = fmt::format("const {0}* __restrict__ x, const long long* __restrict__ ss, ", T);
  if (has_steps && !const_steps) {
    ins.push_back(n.inputs[4]);
    params += "const long long* __restrict__ sp, ";
  }
  params += fmt::format("{}* __restrict__ y", T);
  L.source += loop_kernel(n.label() + " (run-time starts)", name, params, N, coords(out) + pre + " " + idx + "; y[i] = x[j];");
  return L.kernel_node(n, name, ins, {n.outputs[0]}, L.grid_for(N, 256), 256);
}

ir::Node slice(Lowering& L, const ir::Node& n) {
  auto in = L.dims(n, n.inputs[0]), out = L.dims(n, n.outputs[0]);
  int64_t r = static_cast<int64_t>(in.size());
  auto is_runtime = [&](size_t i) {
    return i < n.inputs.size() && n.inputs[i] != ir::kNoValue && !L.model.value(n.inputs[i]).constant;
  };
  if (is_runtime(1) || is_runtime(2) || is_runtime(4)) return slice_runtime(L, n);
  auto starts = const_ints(L.model, n, 1), ends = const_ints(L.model, n, 2);
  auto axes = const_ints(L.model, n, 3), steps = const_ints(L.model, n, 4);
  if (!starts || !ends) refuse(n, "starts and ends must be given");
  std::vector<int64_t> start(r, 0), step(r, 1);
  for (size_t k = 0; k < starts->size(); ++k) {
    int64_t a = axes ? norm_axis(n, (*axes)[k], r) : static_cast<int64_t>(k);
    int64_t st = steps ? (*steps)[k] : 1, s = (*starts)[k], D = in[a];
    if (st == 0) refuse(n, "a step is 0");
    if (s < 0) s += D;
    s = st > 0 ? std::clamp<int64_t>(s, 0, D) : std::clamp<int64_t>(s, 0, D - 1);
    start[a] = s;
    step[a] = st;
  }
  auto ist = strides_of(in);
  std::string idx = "long long j = 0";
  for (int64_t d = 0; d < r; ++d) idx += fmt::format(" + ({}LL + (long long)c{} * {}LL) * {}LL", start[d], d, step[d], ist[d]);
  std::string T = raw_type(elem_size(L.model, n, n.inputs[0]));
  std::string name = L.kernel_name("slice");
  int64_t N = numel(out);
  L.source += loop_kernel(n.label(), name, fmt::format("const {0}* __restrict__ x, {0}* __restrict__ y", T), N,
                          coords(out) + " " + idx + "; y[i] = x[j];");
  return L.kernel_node(n, name, {n.inputs[0]}, {n.outputs[0]}, L.grid_for(N, 256), 256);
}

ir::Node split(Lowering& L, const ir::Node& n) {
  auto in = L.dims(n, n.inputs[0]);
  int64_t axis = norm_axis(n, n.i("axis", 0), static_cast<int64_t>(in.size()));
  int64_t inner = 1;
  for (size_t d = axis + 1; d < in.size(); ++d) inner *= in[d];
  std::string T = raw_type(elem_size(L.model, n, n.inputs[0]));
  std::string params = fmt::format("const {}* __restrict__ x", T);
  std::string body = fmt::format("I o = i / {0}u, p = (i / {1}u) % {2}u, q = i % {1}u;", in[axis] * inner, inner, in[axis]);
  std::vector<ir::ValueId> outs;
  int64_t off = 0;
  bool first = true;
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    if (n.outputs[k] == ir::kNoValue) refuse(n, "an omitted Split output");
    int64_t len = L.dims(n, n.outputs[k])[axis];
    params += fmt::format(", {}* __restrict__ y{}", T, k);
    if (len > 0) {
      body += fmt::format(" {}if (p < {}u) y{}[((unsigned long long)o * {} + (p - {})) * {} + q] = x[i];", first ? "" : "else ",
                          off + len, k, len, off, inner);
      first = false;
    }
    outs.push_back(n.outputs[k]);
    off += len;
  }
  std::string name = L.kernel_name("split");
  int64_t N = numel(in);
  L.source += loop_kernel(n.label(), name, params, N, body);
  return L.kernel_node(n, name, {n.inputs[0]}, outs, L.grid_for(N, 256), 256);
}

ir::Node gather_elements(Lowering& L, const ir::Node& n) {
  auto data = L.dims(n, n.inputs[0]), ind = L.dims(n, n.inputs[1]);
  int64_t r = static_cast<int64_t>(data.size());
  int64_t axis = norm_axis(n, n.i("axis", 0), r);
  DType it = L.model.value(n.inputs[1]).dtype;
  if (it != DType::i64 && it != DType::i32) refuse(n, "indices must be int64 or int32");
  auto ds = strides_of(data);
  std::string T = raw_type(elem_size(L.model, n, n.inputs[0]));
  std::string idx = fmt::format("long long k = (long long)idx[i]; if (k < 0) k += {0}; if (k < 0) k = 0; if (k >= {0}) k = {0} - 1; "
                                "unsigned long long j = 0",
                                data[axis]);
  for (int64_t d = 0; d < r; ++d) idx += d == axis ? fmt::format(" + (unsigned long long)k * {}ull", ds[d]) : fmt::format(" + (unsigned long long)c{} * {}ull", d, ds[d]);
  std::string name = L.kernel_name("gatherelements");
  int64_t N = numel(ind);
  L.source += loop_kernel(n.label(), name,
                          fmt::format("const {0}* __restrict__ x, const {1}* __restrict__ idx, {0}* __restrict__ y", T,
                                      it == DType::i64 ? "long long" : "int"),
                          N, coords(ind) + " " + idx + "; y[i] = x[j];");
  return L.kernel_node(n, name, {n.inputs[0], n.inputs[1]}, {n.outputs[0]}, L.grid_for(N, 256), 256);
}

ir::Node trilu(Lowering& L, const ir::Node& n) {
  auto x = L.dims(n, n.inputs[0]);
  if (x.size() < 2) refuse(n, "input rank below 2");
  // k: a constant baked in, or a run-time scalar read by the kernel.
  bool runtime_k = n.inputs.size() > 1 && n.inputs[1] != ir::kNoValue && !L.model.value(n.inputs[1]).constant;
  auto k = runtime_k ? std::nullopt : const_ints(L.model, n, 1);
  std::string kk = runtime_k ? "kp[0]" : fmt::format("{}LL", k && !k->empty() ? (*k)[0] : 0);
  bool upper = n.i("upper", 1) != 0;
  int64_t M = x[x.size() - 2], N2 = x.back(), N = numel(x);
  std::string T = raw_type(elem_size(L.model, n, n.inputs[0]));
  std::string name = L.kernel_name("trilu");
  std::string params = fmt::format("const {0}* __restrict__ x, {1}{0}* __restrict__ y", T,
                                   runtime_k ? "const long long* __restrict__ kp, " : "");
  L.source += loop_kernel(n.label(), name, params, N,
                          fmt::format("long long c = (long long)(i % {0}u), rr = (long long)((i / {0}u) % {1}u); "
                                      "y[i] = (c - rr {2} {3}) ? x[i] : ({4})0;",
                                      N2, M, upper ? ">=" : "<=", kk, T));
  std::vector<ir::ValueId> ins = {n.inputs[0]};
  if (runtime_k) {
    if (L.model.value(n.inputs[1]).dtype != DType::i64) refuse(n, "k must be int64");
    ins.push_back(n.inputs[1]);
  }
  return L.kernel_node(n, name, ins, {n.outputs[0]}, L.grid_for(N, 256), 256);
}

ir::Node tile(Lowering& L, const ir::Node& n) {
  auto x = L.dims(n, n.inputs[0]), y = L.dims(n, n.outputs[0]);
  auto st = strides_of(x);
  std::string T = raw_type(elem_size(L.model, n, n.inputs[0]));
  std::string idx = "unsigned long long j = 0";
  for (size_t d = 0; d < x.size(); ++d) idx += fmt::format(" + (unsigned long long)(c{} % {}u) * {}ull", d, x[d], st[d]);
  std::string name = L.kernel_name("tile");
  int64_t N = numel(y);
  L.source += loop_kernel(n.label(), name, fmt::format("const {0}* __restrict__ x, {0}* __restrict__ y", T), N,
                          (y.empty() ? std::string("") : coords(y)) + " " + idx + "; y[i] = x[j];");
  return L.kernel_node(n, name, {n.inputs[0]}, {n.outputs[0]}, L.grid_for(N, 256), 256);
}

/// CumSum: one thread per (outer, inner) line along the axis.
ir::Node cumsum(Lowering& L, const ir::Node& n) {
  auto x = L.dims(n, n.inputs[0]);
  DType dt = L.model.value(n.inputs[0]).dtype;
  auto T = c_type(dt);
  if (!T || dt == DType::boolean) refuse(n, "dtype not supported");
  int64_t r = static_cast<int64_t>(x.size());
  if (r == 0) refuse(n, "a scalar input");
  if (!L.model.value(n.inputs[1]).constant) {
    // Run-time axis: the kernel reads it and works out the line layout; one
    // thread per element start (threads past outer * inner stop at once).
    DType at = L.model.value(n.inputs[1]).dtype;
    if (at != DType::i64 && at != DType::i32) refuse(n, "axis must be int64 or int32");
    bool excl = n.i("exclusive", 0) != 0, rev = n.i("reverse", 0) != 0;
    std::string dims;
    for (auto d : x) dims += fmt::format("{}{}LL", dims.empty() ? "" : ", ", d);
    int64_t N = numel(x);
    std::string name = L.kernel_name("cumsum");
    L.source += loop_kernel(
        n.label() + " (run-time axis)", name,
        fmt::format("const {0}* __restrict__ x, const {1}* __restrict__ axis, {0}* __restrict__ y", *T,
                    at == DType::i64 ? "long long" : "int"),
        N,
        fmt::format("const long long D[{0}] = {{{1}}}; long long a = (long long)axis[0]; if (a < 0) a += {0}; "
                    "if (a < 0 || a >= {0}) return; long long inner = 1; for (long long d = a + 1; d < {0}; ++d) inner *= D[d]; "
                    "const long long len = D[a]; if ((long long)i >= {2}LL / (len > 0 ? len : 1)) continue; "
                    "const unsigned long long S = inner; unsigned long long b = (i / inner) * len * inner + i % inner; "
                    "{3} acc = 0; {4} {5}",
                    r, dims, N, *T,
                    rev ? "for (long long j = len - 1; j >= 0; --j)" : "for (long long j = 0; j < len; ++j)",
                    excl ? "{ y[b + j * S] = acc; acc += x[b + j * S]; }" : "{ acc += x[b + j * S]; y[b + j * S] = acc; }"));
    return L.kernel_node(n, name, {n.inputs[0], n.inputs[1]}, {n.outputs[0]}, L.grid_for(N, 256), 256);
  }
  auto ax = const_ints(L.model, n, 1);
  if (!ax || ax->size() != 1) refuse(n, "axis must be a constant scalar");
  int64_t axis = norm_axis(n, (*ax)[0], r), outer = 1, len = x[axis], inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x[d];
  for (int64_t d = axis + 1; d < r; ++d) inner *= x[d];
  bool excl = n.i("exclusive", 0) != 0, rev = n.i("reverse", 0) != 0;
  int64_t N = outer * inner;
  std::string name = L.kernel_name("cumsum");
  std::string loop = rev ? fmt::format("for (long long j = {} - 1; j >= 0; --j)", len) : fmt::format("for (long long j = 0; j < {}; ++j)", len);
  std::string step = excl ? "{ y[b + j * S] = acc; acc += x[b + j * S]; }" : "{ acc += x[b + j * S]; y[b + j * S] = acc; }";
  L.source += loop_kernel(n.label(), name, fmt::format("const {0}* __restrict__ x, const void* axis, {0}* __restrict__ y", *T), N,
                          fmt::format("const unsigned long long S = {}ull; unsigned long long b = (unsigned long long)(i / {}u) * {}ull + i % {}u; "
                                      "{} acc = 0; {} {}",
                                      inner, inner, len * inner, inner, *T, loop, step));
  return L.kernel_node(n, name, {n.inputs[0], n.inputs[1]}, {n.outputs[0]}, L.grid_for(N, 256), 256);
}

/// Pad: constant (the value may be a run-time scalar input), reflect, edge, wrap.
ir::Node pad(Lowering& L, const ir::Node& n) {
  auto x = L.dims(n, n.inputs[0]), y = L.dims(n, n.outputs[0]);
  int64_t r = static_cast<int64_t>(x.size());
  if (n.inputs.size() < 2 || n.inputs[1] == ir::kNoValue) refuse(n, "pads must be given");
  // pads: constant (baked in) or a run-time int64 input the kernel reads.
  bool runtime_pads = !L.model.value(n.inputs[1]).constant;
  auto pads = runtime_pads ? std::nullopt : const_ints(L.model, n, 1);
  auto axes = const_ints(L.model, n, 3);
  std::vector<std::string> begin(r, "0LL");
  size_t na = axes ? axes->size() : static_cast<size_t>(r);
  if (runtime_pads && (L.model.value(n.inputs[1]).dtype != DType::i64 || numel(L.dims(n, n.inputs[1])) != static_cast<int64_t>(2 * na)))
    refuse(n, "pads must be int64 with 2 entries per padded axis");
  if (pads && pads->size() != 2 * na) refuse(n, "pads has the wrong length");
  for (size_t j = 0; j < na; ++j)
    begin[axes ? norm_axis(n, (*axes)[j], r) : static_cast<int64_t>(j)] =
        runtime_pads ? fmt::format("pp[{}]", j) : fmt::format("{}LL", (*pads)[j]);
  std::string mode = n.s("mode", "constant");
  DType dt = L.model.value(n.inputs[0]).dtype;
  auto T = storage_type(dt);  // float16 / bfloat16 move as their bits (0 bits are +0)
  if (!T) refuse(n, "dtype not supported");
  bool has_value = mode == "constant" && n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue;
  auto xs = strides_of(x);
  std::string body = coords(y) + " long long j = 0; bool outside = false; long long c;";
  for (int64_t d = 0; d < r; ++d) {
    int64_t D = x[d];
    body += fmt::format(" c = (long long)c{} - {};", d, begin[d]);
    if (mode == "constant") body += fmt::format(" if (c < 0 || c >= {}) outside = true;", D);
    else if (mode == "edge") body += fmt::format(" if (c < 0) c = 0; if (c >= {0}) c = {0} - 1;", D);
    else if (mode == "wrap") body += fmt::format(" c = ((c % {0}) + {0}) % {0};", D);
    else if (mode == "reflect")
      body += D > 1 ? fmt::format(" {{ long long p = 2 * ({0} - 1); c = ((c % p) + p) % p; if (c >= {0}) c = p - c; }}", D)
                    : std::string(" c = 0;");
    else refuse(n, "mode '" + mode + "'");
    body += fmt::format(" j += c * {}LL;", xs[d]);
  }
  body += fmt::format(" y[i] = outside ? {} : x[outside ? 0 : j];", has_value ? "v[0]" : fmt::format("({})0", *T));
  std::string name = L.kernel_name("pad");
  std::vector<ir::ValueId> ins = {n.inputs[0]};
  std::string params = fmt::format("const {0}* __restrict__ x, ", *T);
  if (runtime_pads) {
    ins.push_back(n.inputs[1]);
    params += "const long long* __restrict__ pp, ";
  }
  if (has_value) {
    ins.push_back(n.inputs[2]);
    params += fmt::format("const {}* __restrict__ v, ", *T);
  }
  params += fmt::format("{}* __restrict__ y", *T);
  int64_t N = numel(y);
  L.source += loop_kernel(n.label() + " mode " + mode, name, params, N, body);
  return L.kernel_node(n, name, ins, {n.outputs[0]}, L.grid_for(N, 256), 256);
}

/// DepthToSpace (DCR / CRD) and SpaceToDepth on [N, C, H, W].
ir::Node depth_space(Lowering& L, const ir::Node& n) {
  auto x = L.dims(n, n.inputs[0]), y = L.dims(n, n.outputs[0]);
  if (x.size() != 4) refuse(n, "input rank must be 4");
  int64_t b = n.i("blocksize");
  std::string T = raw_type(elem_size(L.model, n, n.inputs[0]));
  std::string src;
  if (n.op_type == "DepthToSpace") {
    int64_t Cy = y[1];
    bool crd = n.s("mode", "DCR") == "CRD";
    // y[n, c, h*b+i, w*b+j] = x[n, ch, h, w]
    src = fmt::format("I h = c2 / {0}u, ii = c2 % {0}u, w = c3 / {0}u, jj = c3 % {0}u; "
                      "unsigned long long ch = {1}; "
                      "unsigned long long j = ((c0 * {2}ull + ch) * {3}ull + h) * {4}ull + w;",
                      b, crd ? fmt::format("(unsigned long long)c1 * {} + ii * {} + jj", b * b, b)
                             : fmt::format("((unsigned long long)ii * {} + jj) * {} + c1", b, Cy),
                      x[1], x[2], x[3]);
  } else {
    int64_t Cx = x[1];
    // y[n, (i*b+j)*C + c, h, w] = x[n, c, h*b+i, w*b+j]
    src = fmt::format("I c = c1 % {0}u, blk = c1 / {0}u, ii = blk / {1}u, jj = blk % {1}u; "
                      "unsigned long long j = ((c0 * {0}ull + c) * {2}ull + (c2 * {1}u + ii)) * {3}ull + (c3 * {1}u + jj);",
                      Cx, b, x[2], x[3]);
  }
  std::string name = L.kernel_name(n.op_type);
  int64_t N = numel(y);
  L.source += loop_kernel(n.label(), name, fmt::format("const {0}* __restrict__ x, {0}* __restrict__ y", T), N,
                          coords(y) + " " + src + " y[i] = x[j];");
  return L.kernel_node(n, name, {n.inputs[0]}, {n.outputs[0]}, L.grid_for(N, 256), 256);
}

/// GatherND: one thread per output element.
ir::Node gather_nd(Lowering& L, const ir::Node& n) {
  auto data = L.dims(n, n.inputs[0]), ind = L.dims(n, n.inputs[1]), y = L.dims(n, n.outputs[0]);
  if (L.model.value(n.inputs[1]).dtype != DType::i64) refuse(n, "indices must be int64");
  int64_t b = n.i("batch_dims", 0), k = ind.empty() ? 0 : ind.back();
  int64_t q = static_cast<int64_t>(ind.size());
  if (k < 1 || b + k > static_cast<int64_t>(data.size())) refuse(n, "indices' last dim is out of range");
  int64_t slice = 1;
  for (size_t d = b + k; d < data.size(); ++d) slice *= data[d];
  int64_t tuples = numel(ind) / k;  // index tuples, batch dims included
  int64_t per_batch = 1;
  for (int64_t d = b; d < q - 1; ++d) per_batch *= ind[d];
  auto ds = strides_of(data);
  std::string body = fmt::format("unsigned long long t = i / {0}u, e = i % {0}u, bt = t / {1}ull; long long off = 0;", slice, per_batch);
  // batch coordinates of t (the first b dims of indices) index the first b dims of data
  if (b > 0) {
    body += " { unsigned long long bb = bt;";
    for (int64_t d = b - 1; d >= 0; --d) body += fmt::format(" off += (long long)(bb % {0}ull) * {1}LL; bb /= {0}ull;", data[d], ds[d]);
    body += " }";
  }
  for (int64_t j = 0; j < k; ++j)
    body += fmt::format(" {{ long long v = idx[t * {0} + {1}]; if (v < 0) v += {2}; if (v < 0) v = 0; if (v >= {2}) v = {2} - 1; off += v * {3}LL; }}",
                        k, j, data[b + j], ds[b + j]);
  body += " y[i] = x[off + (long long)e];";
  std::string T = raw_type(elem_size(L.model, n, n.inputs[0]));
  std::string name = L.kernel_name("gathernd");
  int64_t N = numel(y);
  (void)tuples;
  L.source += loop_kernel(n.label(), name, fmt::format("const {0}* __restrict__ x, const long long* __restrict__ idx, {0}* __restrict__ y", T),
                          N, body);
  return L.kernel_node(n, name, {n.inputs[0], n.inputs[1]}, {n.outputs[0]}, L.grid_for(N, 256), 256);
}

/// ScatterElements / ScatterND with reduction none or add: output 0 starts
/// as a copy of the data (init_from), then one thread per update writes
/// (none: duplicates race, as the spec leaves them undefined) or adds atomically.
ir::Node scatter(Lowering& L, const ir::Node& n) {
  auto data = L.dims(n, n.inputs[0]), ind = L.dims(n, n.inputs[1]), upd = L.dims(n, n.inputs[2]);
  if (L.model.value(n.inputs[1]).dtype != DType::i64) refuse(n, "indices must be int64");
  std::string red = n.s("reduction", "none");
  DType dt = L.model.value(n.inputs[0]).dtype;
  if (red != "none" && !(red == "add" && (dt == DType::f32 || dt == DType::i32)))
    refuse(n, "reduction '" + red + "' on " + std::string(dtype_name(dt)));
  std::string T = red == "add" ? *c_type(dt) : raw_type(elem_size(L.model, n, n.inputs[0]));
  auto ds = strides_of(data);
  std::string body, write = red == "add" ? "atomicAdd(&y[off], u[i]);" : "y[off] = u[i];";
  int64_t N;
  if (n.op_type == "ScatterElements") {
    int64_t axis = norm_axis(n, n.i("axis", 0), static_cast<int64_t>(data.size()));
    N = numel(ind);
    body = coords(ind) + fmt::format(" long long v = idx[i]; if (v < 0) v += {0}; if (v < 0) v = 0; if (v >= {0}) v = {0} - 1; long long off = 0", data[axis]);
    for (size_t d = 0; d < data.size(); ++d)
      body += static_cast<int64_t>(d) == axis ? fmt::format(" + v * {}LL", ds[d]) : fmt::format(" + (long long)c{} * {}LL", d, ds[d]);
    body += "; " + write;
  } else {
    int64_t k = ind.back();
    int64_t slice = 1;
    for (size_t d = k; d < data.size(); ++d) slice *= data[d];
    N = numel(upd);
    body = fmt::format("unsigned long long t = i / {0}u, e = i % {0}u; long long off = (long long)e;", slice);
    for (int64_t j = 0; j < k; ++j)
      body += fmt::format(" {{ long long v = idx[t * {0} + {1}]; if (v < 0) v += {2}; if (v < 0) v = 0; if (v >= {2}) v = {2} - 1; off += v * {3}LL; }}",
                          k, j, data[j], ds[j]);
    body += " " + write;
  }
  std::string name = L.kernel_name(n.op_type);
  L.source += loop_kernel(n.label() + " reduction " + red, name,
                          fmt::format("const {0}* __restrict__ x, const long long* __restrict__ idx, const {0}* __restrict__ u, {0}* y", T), N,
                          body);
  ir::Node k = L.kernel_node(n, name, {n.inputs[0], n.inputs[1], n.inputs[2]}, {n.outputs[0]}, L.grid_for(N, 256), 256);
  k.attrs["init_from"] = int64_t{0};
  return k;
}

/// Dropout (inference) with its mask output: y = x, mask = true.
ir::Node dropout_mask(Lowering& L, const ir::Node& n) {
  if (n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue) {
    const ir::Value& t = L.model.value(n.inputs[2]);
    if (!t.constant || t.constant->numel() != 1 || t.constant->data<bool>()[0]) refuse(n, "training mode");
  }
  auto x = L.dims(n, n.inputs[0]);
  std::string T = raw_type(elem_size(L.model, n, n.inputs[0]));
  std::string name = L.kernel_name("dropout");
  int64_t N = numel(x);
  L.source += loop_kernel(n.label(), name, fmt::format("const {0}* __restrict__ x, {0}* __restrict__ y, bool* __restrict__ mask", T),
                          N, "y[i] = x[i]; mask[i] = true;");
  return L.kernel_node(n, name, {n.inputs[0]}, {n.outputs[0], n.outputs[1]}, L.grid_for(N, 256), 256);
}

/// EyeLike: ones on the k-th diagonal of a 2-D output, zeros elsewhere.
ir::Node eye_like(Lowering& L, const ir::Node& n) {
  auto y = L.dims(n, n.outputs[0]);
  if (y.size() != 2) refuse(n, "output rank must be 2");
  auto T = c_type(L.model.value(n.outputs[0]).dtype);
  if (!T) refuse(n, "dtype not supported");
  std::string name = L.kernel_name("eyelike");
  int64_t N = numel(y);
  L.source += loop_kernel(n.label(), name, fmt::format("const void* x, {}* __restrict__ y", *T), N,
                          fmt::format("y[i] = ((long long)(i % {0}u) - (long long)(i / {0}u) == {1}LL) ? 1 : 0;", y[1], n.i("k", 0)));
  return L.kernel_node(n, name, {n.inputs[0]}, {n.outputs[0]}, L.grid_for(N, 256), 256);
}

/// OneHot(indices, depth, values [off, on]): the depth is the output's dim
/// on `axis` (static), values are read on the device.
ir::Node one_hot(Lowering& L, const ir::Node& n) {
  auto y = L.dims(n, n.outputs[0]);
  int64_t r = static_cast<int64_t>(y.size());
  int64_t axis = norm_axis(n, n.i("axis", -1), r);
  int64_t depth = y[axis], inner = 1;
  for (int64_t d = axis + 1; d < r; ++d) inner *= y[d];
  DType it = L.model.value(n.inputs[0]).dtype;
  auto IT = c_type(it), VT = c_type(L.model.value(n.inputs[2]).dtype);
  if (!IT || !VT || it == DType::boolean) refuse(n, "dtypes not supported");
  std::string name = L.kernel_name("onehot");
  int64_t N = numel(y);
  L.source += loop_kernel(
      n.label(), name, fmt::format("const {0}* __restrict__ ind, const void* depth, const {1}* __restrict__ v, {1}* __restrict__ y", *IT, *VT), N,
      fmt::format("unsigned long long o = i / {0}ull, d = (i / {1}ull) % {2}ull, q = i % {1}ull; "
                  "long long k = (long long)ind[o * {1}ull + q]; if (k < 0) k += {2}; y[i] = (k == (long long)d) ? v[1] : v[0];",
                  depth * inner, inner, depth));
  return L.kernel_node(n, name, {n.inputs[0], n.inputs[1], n.inputs[2]}, {n.outputs[0]}, L.grid_for(N, 256), 256);
}

}  // namespace

std::vector<ir::Node> gen_data(Lowering& L, const ir::Node& n) {
  const std::string& op = n.op_type;
  if (!n.domain.empty()) return {};
  if (op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze" || op == "Identity") {
    L.dims(n, n.inputs[0]);
    L.dims(n, n.outputs[0]);
    return {copy_node(n)};
  }
  if (op == "Transpose") return {transpose(L, n)};
  if (op == "Gather") return {gather(L, n)};
  if (op == "Concat") return {concat(L, n)};
  if (op == "Slice") return {slice(L, n)};
  if (op == "Split") return {split(L, n)};
  if (op == "GatherElements") return {gather_elements(L, n)};
  if (op == "Trilu") return {trilu(L, n)};
  if (op == "Tile") return {tile(L, n)};
  if (op == "CumSum") return {cumsum(L, n)};
  if (op == "Pad") return {pad(L, n)};
  if (op == "GatherND") return {gather_nd(L, n)};
  if (op == "Dropout" && n.outputs.size() > 1 && n.outputs[1] != ir::kNoValue) return {dropout_mask(L, n)};
  if (op == "EyeLike") return {eye_like(L, n)};
  if (op == "OneHot") return {one_hot(L, n)};
  if (op == "ScatterElements" || op == "ScatterND") return {scatter(L, n)};
  if (op == "DepthToSpace" || op == "SpaceToDepth") return {depth_space(L, n)};
  return {};
}

}  // namespace kiln::targets::cuda
