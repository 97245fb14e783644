// ONNX MatMulInteger -> kiln.cpu.MatMulInteger (run/matmul_integer.cpp) and
// ConvInteger -> kiln.cpu.ConvInteger (run/conv_integer.cpp).
//
// MatMulInteger is lowered when B is a constant 2-D uint8/int8 matrix with a constant zero
// point (per tensor or per column), A is uint8/int8 of static shape with a
// zero point per tensor (or per row when A is 2-D), and oneDNN multiplies int8
// exactly here (int8_exact_isa, an optimised implementation) or, without VNNI,
// the weights are small enough for exact float32 products
// (int8_products_exact_in_f32: the kernels then run oneDNN's float32 matmul /
// convolution on the 8-bit values converted). oneDNN takes
// int8 weights only: uint8 B and its zero point are stored shifted by -128
// (B - 128 as int8; (B - 128) - (bz - 128) = B - bz, so the products are
// unchanged). ConvInteger is lowered for constant uint8/int8 weights with a
// constant zero point per tensor or per output channel, x uint8/int8 of
// static shape (rank 3 to 5) with a per-tensor zero point, on the same
// conditions; its weights are shifted likewise and, when a shifted weight zero
// point is not 0, each group gets one more output channel of ones (the
// kernel's correction term). com.microsoft::DynamicQuantizeLSTM with constant
// W, R and zero points becomes kiln.cpu.DynamicQuantizeLSTM (the same node in
// the cpu domain: its kernel runs the reference computation with the integer
// products on oneDNN). DynamicQuantizeLinear of a float32 tensor becomes
// kiln.cpu.DynamicQuantizeLinear (vectorised, on the node's threads). Anything
// else stays on the reference kernel.
#include "targets/cpu/compile/lower_ops.h"
#include "targets/cpu/run/cpu_kernels.h"
#include "targets/cpu/run/int8_matmul.h"

namespace kiln::targets::cpu {

namespace {

bool is_int8(DType t) { return t == DType::u8 || t == DType::i8; }

int64_t numel_of(const std::vector<int64_t>& d) {
  int64_t e = 1;
  for (auto v : d) e *= v;
  return e;
}

/// Element i of a u8 / s8 constant as int32.
int32_t int8_value(const Tensor& t, int64_t i) {
  return t.dtype() == DType::u8 ? static_cast<int32_t>(t.data<uint8_t>()[i]) : t.data<int8_t>()[i];
}

/// B (u8 or s8, [K, N]) as int8: uint8 shifted by -128.
Tensor int8_weights(const Tensor& b) {
  Tensor out(DType::i8, b.shape());
  int8_t* dst = out.data<int8_t>();
  for (int64_t i = 0; i < b.numel(); ++i) dst[i] = static_cast<int8_t>(int8_value(b, i) - (b.dtype() == DType::u8 ? 128 : 0));
  return out;
}

/// The zero point of B' (B shifted like int8_weights) as int32: 1 or N values.
Tensor int8_weight_zero(const Tensor* bz, DType b_type) {
  const int64_t count = bz ? bz->numel() : 1;
  Tensor out(DType::i32, {count});
  const int32_t shift = b_type == DType::u8 ? 128 : 0;
  for (int64_t i = 0; i < count; ++i) out.data<int32_t>()[i] = (bz ? int8_value(*bz, i) : 0) - shift;
  return out;
}

bool all_zero_i32(const Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (t.data<int32_t>()[i] != 0) return false;
  return true;
}

ir::ValueId constant_value(ir::Model& m, const std::string& name, Tensor t) {
  ir::ValueId id = add_value(m, name, t.dtype(), t.shape());
  m.value(id).constant = std::move(t);
  return id;
}

/// The operands of a MatMulInteger / ConvInteger node (a or x, its weights b
/// or w, their zero points, the output), when they have the form the cpu
/// kernels take: an int8-exact ISA, 8-bit data of static shape, constant 8-bit
/// weights and weight zero point, an int32 output of static shape.
struct IntegerProduct {
  ir::ValueId a, b, az, bz, y;
  const Tensor* bt = nullptr;   ///< the weights (valid until m.values grows)
  const Tensor* bzt = nullptr;  ///< their zero point, or null
  std::vector<int64_t> ad, yd;
};

std::optional<IntegerProduct> integer_product(const ir::Model& m, const ir::Node& n) {
  if (n.inputs.size() < 2 || n.inputs.size() > 4 || n.outputs.size() != 1) return std::nullopt;
  auto in = [&](size_t i) { return i < n.inputs.size() ? n.inputs[i] : ir::kNoValue; };
  IntegerProduct p;
  p.a = in(0);
  p.b = in(1);
  p.az = in(2);
  p.bz = in(3);
  p.y = n.outputs[0];
  p.bt = constant_of(m, p.b);
  p.bzt = p.bz == ir::kNoValue ? nullptr : constant_of(m, p.bz);
  auto ad = static_dims(m, p.a), yd = static_dims(m, p.y);
  if (!p.bt || (p.bz != ir::kNoValue && !p.bzt) || !ad || !yd || ad->empty() || !is_int8(m.value(p.a).dtype) ||
      !is_int8(p.bt->dtype()) || (p.bzt && !is_int8(p.bzt->dtype())) || m.value(p.y).dtype != DType::i32)
    return std::nullopt;
  p.ad = *ad;
  p.yd = *yd;
  return p;
}

}  // namespace

std::optional<std::vector<ir::Node>> lower_matmul_integer(ir::Model& m, const ir::Node& n) {
  const auto p = integer_product(m, n);
  if (!p || p->bt->rank() != 2) return std::nullopt;
  const ir::ValueId a = p->a, b = p->b, az = p->az, y = p->y;
  const Tensor* bt = p->bt;
  const Tensor* bzt = p->bzt;
  const std::vector<int64_t>& ad = p->ad;
  const int64_t K = bt->dim(0), N = bt->dim(1), M = numel_of(ad) / std::max<int64_t>(1, ad.back());
  if (ad.back() != K || numel_of(p->yd) != M * N) return std::nullopt;
  if (az != ir::kNoValue) {
    auto zd = static_dims(m, az);
    if (!zd || !is_int8(m.value(az).dtype)) return std::nullopt;
    const bool per_tensor = numel_of(*zd) == 1;
    const bool per_row = ad.size() == 2 && (*zd == std::vector<int64_t>{M} || *zd == std::vector<int64_t>{M, 1});
    if (!per_tensor && !per_row) return std::nullopt;
  }
  if (bzt) {
    const bool per_column = bzt->shape() == std::vector<int64_t>{N} || bzt->shape() == std::vector<int64_t>{1, N};
    if (bzt->numel() != 1 && !per_column) return std::nullopt;
  }
  // Copy the constants out before add_value (it may reallocate m.values).
  Tensor w = int8_weights(*bt), wz = int8_weight_zero(bzt, bt->dtype());
  const bool f32 = !int8_exact_isa();  // products on oneDNN's float32 matmul (Int8Matmul)
  if (f32 && !int8_products_exact_in_f32(w.data<int8_t>(), N, K, 1, N)) return std::nullopt;
  const std::string b_name = m.value(b).name;
  bt = bzt = nullptr;
  ir::Node c = cpu_node(n, "MatMulInteger");
  c.inputs = {a, constant_value(m, b_name + "/s8", std::move(w)), az};
  if (!all_zero_i32(wz)) c.inputs.push_back(constant_value(m, b_name + "/s8_zero_point", std::move(wz)));
  c.outputs = {y};
  c.attrs["M"] = M;
  c.attrs["K"] = K;
  c.attrs["N"] = N;
  try {
    auto pd = matmul_integer_pd(c, m);
    if (!f32 && std::string(pd.impl_info_str()).rfind("ref", 0) == 0) return std::nullopt;
  } catch (const Error&) {
    return std::nullopt;
  }
  return std::vector<ir::Node>{std::move(c)};
}

namespace {

/// w (u8/s8 [O, C/G, k...]) as int8, with after each group's O/G channels
/// one channel of ones when `ones` (the correction channel).
Tensor conv_weights(const Tensor& w, int64_t group, bool ones) {
  Tensor s8 = int8_weights(w);
  if (!ones) return s8;
  const int64_t O = w.dim(0), og = O / group, per = w.numel() / O;
  std::vector<int64_t> shape = w.shape();
  shape[0] = O + group;
  Tensor out(DType::i8, shape);
  int8_t* dst = out.data<int8_t>();
  for (int64_t g = 0; g < group; ++g) {
    std::copy_n(s8.data<int8_t>() + g * og * per, og * per, dst);
    dst += og * per;
    std::fill_n(dst, per, int8_t{1});
    dst += per;
  }
  return out;
}

}  // namespace

std::optional<std::vector<ir::Node>> lower_conv_integer(ir::Model& m, const ir::Node& n) {
  const auto p = integer_product(m, n);
  if (!p) return std::nullopt;
  const ir::ValueId x = p->a, w = p->b, xz = p->az, y = p->y;
  const Tensor* wt = p->bt;
  const Tensor* wzt = p->bzt;
  const std::vector<int64_t>& xd = p->ad;
  const std::vector<int64_t>& yd = p->yd;
  const size_t r = xd.size();
  const std::vector<int64_t> wd = wt->shape();
  if (r < 3 || r > 5 || wd.size() != r || yd.size() != r) return std::nullopt;
  const size_t sp = r - 2;
  const int64_t group = n.i("group", 1), O = wd[0];
  if (group < 1 || O % group || xd[1] != wd[1] * group || yd[1] != O || yd[0] != xd[0]) return std::nullopt;
  const std::vector<int64_t> kernel(wd.begin() + 2, wd.end());
  if (n.has("kernel_shape") && n.ints("kernel_shape") != kernel) return std::nullopt;
  const std::vector<int64_t> strides = n.ints("strides", std::vector<int64_t>(sp, 1));
  const std::vector<int64_t> dil = n.ints("dilations", std::vector<int64_t>(sp, 1));
  const std::vector<int64_t> pads = n.ints("pads", std::vector<int64_t>(2 * sp, 0));
  if (strides.size() != sp || dil.size() != sp || pads.size() != 2 * sp) return std::nullopt;
  std::vector<int64_t> pb(sp), pe(sp), dilates(sp);
  for (size_t i = 0; i < sp; ++i) {
    pb[i] = pads[i];
    pe[i] = pads[i + sp];
    dilates[i] = dil[i] - 1;
    if (strides[i] < 1 || dil[i] < 1 || pb[i] < 0 || pe[i] < 0 ||
        !conv_pads(n.s("auto_pad", "NOTSET"), xd[i + 2], yd[i + 2], kernel[i], strides[i], dil[i], pb[i], pe[i]))
      return std::nullopt;
  }
  if (xz != ir::kNoValue) {
    auto zd = static_dims(m, xz);
    if (!zd || !is_int8(m.value(xz).dtype) || numel_of(*zd) != 1) return std::nullopt;
  }
  if (wzt && wzt->numel() != 1 && wzt->shape() != std::vector<int64_t>{O}) return std::nullopt;
  // Per-channel shifted zero points; copies made before add_value reallocates m.values.
  Tensor z = int8_weight_zero(wzt, wt->dtype());
  Tensor zc(DType::i32, {O});
  for (int64_t i = 0; i < O; ++i) zc.data<int32_t>()[i] = z.data<int32_t>()[z.numel() == 1 ? 0 : i];
  const bool corrected = !all_zero_i32(zc);
  Tensor ws = conv_weights(*wt, group, corrected);
  const bool f32 = !int8_exact_isa();  // products on oneDNN's float32 convolution (conv_integer.cpp)
  if (f32 && !int8_products_exact_in_f32(ws.data<int8_t>(), ws.dim(0), ws.numel() / ws.dim(0), ws.numel() / ws.dim(0), 1))
    return std::nullopt;
  const std::string w_name = m.value(w).name;
  wt = wzt = nullptr;
  ir::Node c = cpu_node(n, "ConvInteger");
  c.inputs = {x, constant_value(m, w_name + "/s8", std::move(ws)), xz};
  if (corrected) c.inputs.push_back(constant_value(m, w_name + "/s8_zero_point", std::move(zc)));
  c.outputs = {y};
  c.attrs["group"] = group;
  c.attrs["strides"] = strides;
  c.attrs["dilates"] = dilates;
  c.attrs["pads_begin"] = pb;
  c.attrs["pads_end"] = pe;
  try {
    auto pd = conv_integer_pd(c, m, f32);
    if (std::string(pd.impl_info_str()).rfind("ref", 0) == 0) return std::nullopt;
  } catch (const Error&) {
    return std::nullopt;
  }
  return std::vector<ir::Node>{std::move(c)};
}

std::optional<std::vector<ir::Node>> lower_dynamic_quantize_lstm(ir::Model& m, const ir::Node& n) {
  if (n.domain != "com.microsoft" || n.op_type != "DynamicQuantizeLSTM" || n.inputs.size() != 12) return std::nullopt;
  const bool f32 = !int8_exact_isa();  // products on oneDNN's float32 matmul (Int8Matmul)
  // W (1) / R (2) with their zero points (9 / 11): constant, 3-D, 8-bit, zero points typed like the weight.
  for (auto [wi, zi] : {std::pair<size_t, size_t>{1, 9}, {2, 11}}) {
    const Tensor* w = constant_of(m, n.inputs[wi]);
    const Tensor* z = constant_of(m, n.inputs[zi]);
    if (!w || !z || w->rank() != 3 || !is_int8(w->dtype()) || z->dtype() != w->dtype() || z->numel() == 0 ||
        z->numel() % w->dim(0) != 0 || w->numel() == 0)
      return std::nullopt;
    if (f32) {  // each direction's [K, N] as the kernel stores it (int8_weights), column sums bounded
      const Tensor s8 = int8_weights(*w);
      const int64_t per = w->dim(1) * w->dim(2);
      for (int64_t d = 0; d < w->dim(0); ++d)
        if (!int8_products_exact_in_f32(s8.data<int8_t>() + d * per, w->dim(2), w->dim(1), 1, w->dim(2)))
          return std::nullopt;
    }
    try {
      if (!f32 && std::string(int8_matmul_pd(1, w->dim(1), w->dim(2), DType::u8).impl_info_str()).rfind("ref", 0) == 0)
        return std::nullopt;
    } catch (const dnnl::error&) {
      return std::nullopt;
    }
  }
  ir::Node c = cpu_node(n, "DynamicQuantizeLSTM");
  for (auto& [k, v] : n.attrs) c.attrs[k] = v;
  c.inputs = n.inputs;
  c.outputs = n.outputs;
  return std::vector<ir::Node>{std::move(c)};
}

std::optional<std::vector<ir::Node>> lower_dynamic_quantize_linear(ir::Model& m, const ir::Node& n) {
  if (!is_onnx(n, "DynamicQuantizeLinear") || n.inputs.size() != 1 || n.inputs[0] == ir::kNoValue ||
      m.value(n.inputs[0]).dtype != DType::f32 || n.outputs.empty() || n.outputs.size() > 3 ||
      n.outputs[0] == ir::kNoValue)
    return std::nullopt;
  ir::Node c = cpu_node(n, "DynamicQuantizeLinear");
  c.inputs = n.inputs;
  c.outputs = n.outputs;
  return std::vector<ir::Node>{std::move(c)};
}

}  // namespace kiln::targets::cpu
