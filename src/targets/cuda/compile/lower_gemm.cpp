// MatMul / Gemm -> kiln.cuda.Gemm (cuBLASLt), bias / Relu epilogues, and the
// algorithm choice stored in the artifact (lowering.h: lower_gemm).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <cstring>
#include <map>

#include "support/error.h"
#include "support/half.h"
#include "targets/cuda/compile/lowering.h"
#include "targets/cuda/compile/tuning.h"
#include "targets/cuda/run/blaslt.h"
#include "targets/cuda/run/cuda_ops.h"
#include "targets/cuda/run/driver.h"

namespace kiln::targets::cuda {

namespace {

constexpr size_t kMaxWorkspace = size_t{32} << 20;

bool of_type(const ir::Model& m, ir::ValueId v, DType t) { return v != ir::kNoValue && m.value(v).dtype == t; }

/// A vector of n elements of dtype t (dims [n] or [1, .., 1, n]); a
/// constant one when `need_constant`.
bool bias_vector(const Lowering& L, ir::ValueId v, int64_t n, DType t, bool need_constant = true) {
  const ir::Value& val = L.model.value(v);
  if ((need_constant && !val.constant) || val.dtype != t || !val.shape || !ir::is_static(*val.shape)) return false;
  auto d = ir::to_sizes(*val.shape);
  return !d.empty() && d.back() == n && numel(d) == n;
}

}  // namespace

void set_gemm_decision(Lowering& L, ir::Node& g, const GemmSpec& s, const LowerOptions& opt, const std::string& where) {
  if (opt.device < 0) {
    g.attrs["algo_at_load"] = int64_t{1};
    g.attrs["workspace"] = static_cast<int64_t>(kMaxWorkspace);
    return;
  }
  GemmAlgo chosen = tune_gemm(s, opt.tuning, opt.device, where, L.tuning);
  g.attrs["algo"] = std::vector<int64_t>(chosen.words.begin(), chosen.words.end());
  g.attrs["workspace"] = static_cast<int64_t>(chosen.workspace);
}

namespace {
/// Constant `t` ([..have.., R, C]) broadcast over its batch dims to
/// [..batch.., R, C] (`have` left-padded with 1s to batch's rank).
Tensor broadcast_batches(const Tensor& t, const std::vector<int64_t>& have, const std::vector<int64_t>& shape) {
  Tensor out(t.dtype(), shape);
  const size_t r = shape.size() - 2;
  const size_t block = static_cast<size_t>(shape[r] * shape[r + 1]) * dtype_size(t.dtype());
  const auto* src = static_cast<const uint8_t*>(t.raw());
  auto* dst = static_cast<uint8_t*>(out.raw());
  const int64_t batches = numel(std::vector<int64_t>(shape.begin(), shape.begin() + static_cast<long>(r)));
  for (int64_t o = 0; o < batches; ++o) {
    int64_t rest = o, from = 0, stride = 1;
    for (size_t k = r; k-- > 0;) {  // the output batch index, digit by digit from the last dim
      const int64_t idx = rest % shape[k];
      rest /= shape[k];
      from += (have[k] == 1 ? 0 : idx) * stride;
      stride *= have[k];
    }
    std::memcpy(dst + static_cast<size_t>(o) * block, src + static_cast<size_t>(from) * block, block);
  }
  return out;
}
/// Measurement aid (as KILN_CUDA_CONV_GRAPH): `NAME=0` turns the rewrite off.
/// (Storing a misaligned constant B transposed, [n, k] with trans_b, was
/// tried for GPT-2's LM head (n 50257) and measured slower on the H200:
/// 3.11 ms against 2.55 ms for m 4096, k 768, fp16; so B keeps its layout,
/// and pad_matmul_n pads n to aligned rows instead.)
bool env_on(const char* name) {
  const char* e = std::getenv(name);
  return !(e && std::string(e) == "0");
}

}  // namespace

int expand_matmul_batches(ir::Model& m) {
  int expanded = 0;
  std::vector<ir::Node> out;
  std::map<std::pair<ir::ValueId, std::vector<int64_t>>, ir::ValueId> made;
  for (auto& n : m.main.nodes) {
    if (!n.domain.empty() || n.op_type != "MatMul" || n.inputs.size() != 2) {
      out.push_back(n);
      continue;
    }
    const ir::Value &av = m.value(n.inputs[0]), &bv = m.value(n.inputs[1]);
    if (!av.shape || !bv.shape || !ir::is_static(*av.shape) || !ir::is_static(*bv.shape) || av.shape->size() < 3 ||
        bv.shape->size() < 3) {
      out.push_back(n);
      continue;
    }
    auto a = ir::to_sizes(*av.shape), b = ir::to_sizes(*bv.shape);
    std::vector<int64_t> ba(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
    if (numel(ba) == 1 || numel(bb) == 1) {  // lower_gemm's shared-operand forms
      out.push_back(n);
      continue;
    }
    const size_t r = std::max(ba.size(), bb.size());
    ba.insert(ba.begin(), r - ba.size(), 1);
    bb.insert(bb.begin(), r - bb.size(), 1);
    std::vector<int64_t> batch(r);
    bool ok = true;
    for (size_t k = 0; k < r; ++k) {
      if (ba[k] != bb[k] && ba[k] != 1 && bb[k] != 1) ok = false;
      batch[k] = ba[k] == 1 ? bb[k] : ba[k];  // a 1 broadcasts to the other side's size, 0 included
    }
    if (!ok || (ba == batch && bb == batch)) {  // not broadcastable (lower_gemm refuses it) or nothing to do
      out.push_back(n);
      continue;
    }
    ir::Node mm = n;
    for (int side = 0; side < 2; ++side) {
      const std::vector<int64_t>& have = side == 0 ? ba : bb;
      if (have == batch) continue;
      const std::vector<int64_t>& full = side == 0 ? a : b;
      std::vector<int64_t> shape = batch;
      shape.push_back(full[full.size() - 2]);
      shape.push_back(full.back());
      const ir::ValueId src = n.inputs[side];
      if (auto it = made.find({src, shape}); it != made.end()) {  // one copy per operand and shape
        mm.inputs[side] = it->second;
        continue;
      }
      const std::string base = fmt::format("{}_batch_expanded_{}", m.value(src).name, m.values.size());
      if (m.value(src).constant) {
        // A constant (a weight) is broadcast once here, not copied at every run.
        ir::Value cv = m.value(src);
        cv.name = base;
        cv.constant = broadcast_batches(*m.value(src).constant, have, shape);
        cv.shape = ir::Shape();
        for (auto d : shape) cv.shape->push_back(ir::Dim{d, ""});
        ir::ValueId c_id = m.add_value(std::move(cv));
        made[{src, shape}] = c_id;
        mm.inputs[side] = c_id;
        continue;
      }
      ir::Value sv;
      sv.name = m.value(n.inputs[side]).name + "_batch_shape";
      sv.dtype = DType::i64;
      sv.shape = ir::Shape{ir::Dim{static_cast<int64_t>(shape.size()), ""}};
      sv.constant = Tensor::from_bytes(DType::i64, {static_cast<int64_t>(shape.size())}, shape.data(),
                                       shape.size() * sizeof(int64_t));
      ir::ValueId shape_id = m.add_value(std::move(sv));
      ir::Value ev = m.value(n.inputs[side]);
      ev.name = base;
      ev.constant.reset();
      ev.shape = ir::Shape();
      for (auto d : shape) ev.shape->push_back(ir::Dim{d, ""});
      ir::ValueId e_id = m.add_value(std::move(ev));
      made[{src, shape}] = e_id;
      ir::Node ex;
      ex.op_type = "Expand";
      ex.name = base + "_expand";
      ex.opset = n.opset;
      ex.inputs = {n.inputs[side], shape_id};
      ex.outputs = {e_id};
      out.push_back(std::move(ex));
      mm.inputs[side] = e_id;
    }
    out.push_back(std::move(mm));
    ++expanded;
  }
  m.main.nodes = std::move(out);
  return expanded;
}

GemmLowered lower_gemm(Lowering& L, int i, const Uses& uses, const LowerOptions& opt, const std::vector<bool>& taken) {
  ir::Model& m = L.model;
  const ir::Node& n = m.main.nodes[i];
  // One element type for A, B, C and D: float32, float16 or bfloat16 (the
  // precision pass makes every input of a matmul the program's dtype).
  const DType dt = m.value(n.inputs[0]).dtype;
  if (dt != DType::f32 && dt != DType::f16 && dt != DType::bf16)
    refuse(n, fmt::format("input '{}' is {}; matmuls are float32, float16 or bfloat16 only in this version",
                          m.value(n.inputs[0]).name, dtype_name(dt)));
  for (auto v : n.inputs)
    if (v != ir::kNoValue && !of_type(m, v, dt))
      refuse(n, fmt::format("input '{}' is {} and input '{}' {}; a matmul's inputs must share one dtype", m.value(v).name,
                            dtype_name(m.value(v).dtype), m.value(n.inputs[0]).name, dtype_name(dt)));
  if (!of_type(m, n.outputs[0], dt))
    refuse(n, fmt::format("output '{}' is {}, the inputs {}", m.value(n.outputs[0]).name,
                          dtype_name(m.value(n.outputs[0]).dtype), dtype_name(dt)));
  auto a = L.dims(n, n.inputs[0]), b = L.dims(n, n.inputs[1]);
  GemmSpec s;
  s.dtype = dt;
  s.tf32 = dt == DType::f32 && opt.tf32;
  GemmLowered out;
  out.absorbed = {i};
  ir::Node g;
  g.op_type = "Gemm";
  g.domain = std::string(kCudaDomain);
  g.name = n.name;
  g.opset = n.opset;
  g.attrs["source_op"] = n.op_type;
  g.inputs = {n.inputs[0], n.inputs[1]};
  ir::ValueId bias = ir::kNoValue, c = ir::kNoValue;
  if (n.op_type == "MatMul") {
    if (a.empty() || b.empty()) refuse(n, "a rank-0 operand");
    int64_t M = a.size() == 1 ? 1 : a[a.size() - 2], K = a.back();
    int64_t K2 = b.size() == 1 ? b[0] : b[b.size() - 2], N = b.size() == 1 ? 1 : b.back();
    if (K != K2) refuse(n, fmt::format("inner dims {} and {} differ", K, K2));
    std::vector<int64_t> ba(a.begin(), a.end() - std::min<size_t>(a.size(), 2)), bb(b.begin(), b.end() - std::min<size_t>(b.size(), 2));
    int64_t na = numel(ba), nb = numel(bb);
    s.k = K;
    s.n = N;
    if (nb == 1) {
      s.m = na * M;  // B shared: A's batches are rows of one matmul
    } else if (na == 1) {
      s.m = M, s.batch = nb, s.stride_a = 0, s.stride_b = K * N;
    } else {
      size_t r = std::max(ba.size(), bb.size());
      ba.insert(ba.begin(), r - ba.size(), 1);
      bb.insert(bb.begin(), r - bb.size(), 1);
      if (ba != bb) refuse(n, fmt::format("batch dims [{}] and [{}] do not broadcast against each other", fmt::join(ba, ","), fmt::join(bb, ",")));
      s.m = M, s.batch = na, s.stride_a = M * K, s.stride_b = K * N;
    }
  } else {  // Gemm
    if (a.size() != 2 || b.size() != 2) refuse(n, "Gemm operands must be 2-D");
    s.trans_a = n.i("transA", 0) != 0;
    s.trans_b = n.i("transB", 0) != 0;
    s.m = s.trans_a ? a[1] : a[0];
    s.k = s.trans_a ? a[0] : a[1];
    s.n = s.trans_b ? b[0] : b[1];
    if ((s.trans_b ? b[1] : b[0]) != s.k) refuse(n, "inner dims differ");
    s.alpha = n.f("alpha", 1.f);
    float beta = n.f("beta", 1.f);
    if (n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue && beta != 0.f) {
      ir::ValueId cv = n.inputs[2];
      auto cd = L.dims(n, cv);
      if (bias_vector(L, cv, s.n, dt, /*need_constant=*/beta != 1.f)) {
        bias = cv;
        if (beta != 1.f) {  // fold beta into a new constant (16-bit: in float, rounded once)
          Tensor t = m.value(cv).constant->clone();
          for (int64_t k = 0; k < t.numel(); ++k) {
            if (dt == DType::f32) t.data<float>()[k] *= beta;
            else if (dt == DType::f16) t.data<uint16_t>()[k] = float_to_half(half_to_float(t.data<uint16_t>()[k]) * beta);
            else t.data<uint16_t>()[k] = float_to_bf16(bf16_to_float(t.data<uint16_t>()[k]) * beta);
          }
          ir::Value nv = m.value(cv);
          nv.name += "_beta";
          nv.constant = t;
          bias = m.add_value(nv);
        }
      } else if (numel(cd) == s.m * s.n && cd.size() == 2) {
        c = cv;
        s.has_c = true;
        s.beta = beta;
      } else {
        refuse(n, fmt::format("C of shape [{}] (only [n], [1,n] constants or a full [m,n] C are supported)", fmt::join(cd, ",")));
      }
    }
  }
  // Epilogues: a following Add of a [n] constant (the bias), an Add of a
  // residual, then Relu or Gelu.
  ir::ValueId y = n.outputs[0];
  auto single_reader = [&](ir::ValueId v) -> int {
    if (uses.is_output[v] || uses.readers[v].size() != 1) return -1;
    const int j = uses.readers[v][0];
    // A node another matmul absorbed already (two matmuls meeting at one
    // residual Add: the first one takes it).
    return static_cast<size_t>(j) < taken.size() && taken[j] ? -1 : j;
  };
  if (bias == ir::kNoValue && !s.has_c && s.batch == 1) {
    int j = single_reader(y);
    if (j >= 0) {
      const ir::Node& add = m.main.nodes[j];
      if (add.domain.empty() && add.op_type == "Add" && add.inputs.size() == 2) {
        ir::ValueId other = add.inputs[0] == y ? add.inputs[1] : add.inputs[0];
        if (other != y && bias_vector(L, other, s.n, dt) && of_type(m, add.outputs[0], dt) &&
            L.dims(add, add.outputs[0]) == L.dims(n, y)) {
          bias = other;
          y = add.outputs[0];
          out.absorbed.push_back(j);
        }
      }
    }
  }
  // A residual: a following Add of a value of D's full shape becomes C
  // (beta 1; cuBLASLt adds the bias after it: D = AB + C + bias).
  if (!s.has_c && s.batch == 1) {
    if (int j = single_reader(y); j >= 0) {
      const ir::Node& add = m.main.nodes[j];
      if (add.domain.empty() && add.op_type == "Add" && add.inputs.size() == 2 && add.inputs[0] != add.inputs[1]) {
        ir::ValueId other = add.inputs[0] == y ? add.inputs[1] : add.inputs[0];
        if (of_type(m, other, dt) && of_type(m, add.outputs[0], dt) && L.dims(add, other) == L.dims(n, y) &&
            L.dims(add, add.outputs[0]) == L.dims(n, y)) {
          c = other;
          s.has_c = true;
          s.beta = 1.f;
          y = add.outputs[0];
          out.absorbed.push_back(j);
        }
      }
    }
  }
  if (int j = single_reader(y); j >= 0) {
    const ir::Node& act = m.main.nodes[j];
    if (act.domain.empty() && act.op_type == "Relu" && of_type(m, act.outputs[0], dt)) {
      s.epilogue = 1;
      y = act.outputs[0];
      out.absorbed.push_back(j);
    } else if (act.domain.empty() && act.op_type == "Gelu" && of_type(m, act.outputs[0], dt) &&
               (act.s("approximate", "none") == "tanh" || is_half(dt))) {
      // cuBLASLt's GELU epilogue is the tanh form. It differs from the erf
      // form by at most 4.7e-4 in absolute terms (at x = +-2.70): a quarter
      // of a float16 ulp at y = 2.69, but 5% of y = -0.0094 at x = -2.70 and
      // more below (outputs there are near zero). 16-bit programs, whose
      // tolerances are absolute at the output's scale (docs/cuda.md), take
      // it for either form; float32 keeps the exact erf kernel.
      s.epilogue = 2;
      y = act.outputs[0];
      out.absorbed.push_back(j);
    }
  }
  s.has_bias = bias != ir::kNoValue;
  // The Cast of a 16-bit result to float32 (a model output the precision
  // pass gave back its dtype, e.g. an LM head's logits): cuBLASLt writes D
  // in float32 straight from its float32 accumulator. That saves a kernel
  // and a 16-bit copy of the result (GPT-2 at batch 32: 412 MB of logits),
  // and skips a rounding. Without bias and C: their type would follow D's.
  if (is_half(dt) && !s.has_bias && !s.has_c && env_on("KILN_CUDA_GEMM_OUT_CAST"))
    if (int j = single_reader(y); j >= 0) {
      const ir::Node& cast = m.main.nodes[j];
      if (cast.domain.empty() && cast.op_type == "Cast" && cast.i("to", 0) == 1 /* FLOAT */ &&
          of_type(m, cast.outputs[0], DType::f32) && L.dims(cast, cast.outputs[0]) == L.dims(n, y)) {
        s.out_dtype = DType::f32;
        y = cast.outputs[0];
        out.absorbed.push_back(j);
      }
    }
  if (s.has_bias) g.inputs.push_back(bias);
  if (s.has_c) g.inputs.push_back(c);
  g.outputs = {y};
  if (numel(L.dims(n, y)) != s.batch * s.m * s.n) refuse(n, "the output size does not match the matmul");
  set_gemm_attrs(g, s);
  set_gemm_decision(L, g, s, opt, n.label());
  out.node = std::move(g);
  return out;
}

}  // namespace kiln::targets::cuda
