// The cuda precision pass: float32 -> float16 / bfloat16 inside a program
// (precision.h has the policy).
#include "targets/cuda/compile/precision.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <set>

#include "support/error.h"
#include "support/half.h"
#include "support/log.h"
#include "targets/cuda/compile/body_reads.h"

namespace kiln::targets::cuda {

namespace {

/// Matmuls and convolutions: 16-bit inputs, fp32 accumulation in cuBLASLt / cuDNN.
const std::set<std::string> kHalfOps = {"MatMul", "Gemm", "Conv", "ConvTranspose"};

/// Operators whose generated kernels load and store float16 / bfloat16 and
/// compute in float (gen_elementwise, gen_data, gen_reduce, gen_pool).
const std::set<std::string> kFollowOps = {
    // element-wise (gen_elementwise.cpp)
    "Add", "Sub", "Mul", "Div", "Sum", "Mean", "Max", "Min", "Pow", "PRelu", "Equal", "Less", "LessOrEqual", "Greater",
    "GreaterOrEqual", "Where", "Not", "Identity", "Expand", "Dropout", "Abs", "Neg", "Relu", "Sign", "Clip", "Mod", "Exp",
    "Log", "Sqrt", "Tanh", "Erf", "Floor", "Ceil", "Round", "Sin", "Cos", "Sigmoid", "Softplus", "IsNaN", "IsInf", "Tan",
    "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Reciprocal", "Softsign", "LeakyRelu", "Elu",
    "Celu", "Selu", "HardSigmoid", "HardSwish", "Shrink", "ThresholdedRelu", "Mish", "Gelu",
    // data movement (gen_data.cpp: bits are moved, never computed on)
    "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Gather", "Concat", "Slice", "Split", "GatherElements",
    "Trilu", "Tile", "Pad", "GatherND", "ScatterElements", "ScatterND", "DepthToSpace", "SpaceToDepth",
    // normalizations, softmax, reductions (gen_reduce.cpp: float internals)
    "Softmax", "LogSoftmax", "Hardmax", "LayerNormalization", "InstanceNormalization", "GroupNormalization",
    "BatchNormalization", "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare",
    "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ArgMax", "ArgMin", "GlobalAveragePool",
    "GlobalMaxPool",
    // pools (gen_pool.cpp), nearest Resize (gen_resize.cpp; moves bits)
    "MaxPool", "AveragePool", "LpPool", "Resize"};

/// fp16 only: results that can overflow fp16 while the inputs do not.
const std::set<std::string> kFp32OutOpsF16 = {"Exp",      "Pow",      "ReduceSum", "ReduceSumSquare",
                                              "ReduceL1", "ReduceL2", "ReduceProd"};

/// Whether input `i` of `n` is data the node computes on in its compute
/// dtype (else it is a parameter, shape or attribute-like input that keeps
/// its dtype: normalization parameters and Pow's exponent stay float32,
/// Resize's roi / scales and Dropout's ratio are not data at all).
bool is_data_input(const ir::Node& n, size_t i) {
  const std::string& op = n.op_type;
  if (op == "Pow") return i == 0;  // the exponent keeps float32 (1/3 is not a 16-bit number)
  if (op == "Resize" || op == "Dropout" || op == "BatchNormalization" || op == "LayerNormalization" ||
      op == "InstanceNormalization" || op == "GroupNormalization")
    return i == 0;
  return true;
}

/// Outputs that keep float32 whatever the node computes in (ONNX's type U
/// of LayerNormalization's Mean and InvStdDev, which its stash_type makes float32).
bool keeps_f32_output(const ir::Node& n, size_t k) { return n.op_type == "LayerNormalization" && k >= 1; }

std::string short_name(DType t) { return t == DType::f16 ? "f16" : t == DType::bf16 ? "bf16" : "f32"; }

/// The largest finite value of 16-bit type `t` (fp16 65504, bf16 3.3895e38).
float largest_finite(DType t) { return half_max(t == DType::bf16); }

/// A copy of float32 / float16 / bfloat16 tensor `t` as dtype `to` (one of
/// the same three), rounded to nearest even. Converting to 16 bits, a finite
/// value beyond the type's largest finite one becomes that value (sign
/// kept) rather than infinity; `clamped` says whether any did.
Tensor convert_tensor(const Tensor& t, DType to, bool& clamped) {
  Tensor out(to, t.shape());
  const int64_t n = t.numel();
  const float top = to == DType::f32 ? 0.f : largest_finite(to);
  const DType from = t.dtype();
  int any = 0;
  // Elements are independent: large weights are converted on all threads
  // (the precision check converts every constant once per round).
#pragma omp parallel for schedule(static) reduction(| : any) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    float f = from == DType::f32   ? t.data<float>()[i]
              : from == DType::f16 ? half_to_float(t.data<uint16_t>()[i])
                                   : bf16_to_float(t.data<uint16_t>()[i]);
    if (to != DType::f32 && std::isfinite(f) && std::fabs(f) > top) {
      f = std::copysign(top, f);
      any = 1;
    }
    if (to == DType::f32) out.data<float>()[i] = f;
    else if (to == DType::f16) out.data<uint16_t>()[i] = float_to_half(f);
    else out.data<uint16_t>()[i] = float_to_bf16(f);
  }
  clamped = any != 0;
  return out;
}

/// An integer or bool dtype: a Cast from it to float32 makes data, not a
/// float32 result of float arithmetic.
bool is_integer_or_bool(DType t) {
  return t != DType::undefined && t != DType::string && !dtype_is_float(t) && !dtype_is_float8(t);
}

class Converter {
 public:
  Converter(ir::Model& m, DType to, const std::set<std::string>& keep, ConvertedConstants* cache)
      : m_(m), to_(to), keep_(keep), cache_(cache) {
    const size_t n = m.values.size();
    orig_.resize(n);
    for (size_t i = 0; i < n; ++i) orig_[i] = m.values[i].dtype;
    graph_input_.assign(n, false);
    graph_output_.assign(n, false);
    for (auto v : m.main.inputs) graph_input_[v] = true;
    for (auto v : m.main.outputs) graph_output_[v] = true;
  }

  PrecisionStats run() {
    std::vector<ir::Node> nodes = std::move(m_.main.nodes);
    m_.main.nodes.clear();
    for (auto& n : nodes) rewrite(std::move(n));
    m_.main.nodes = std::move(out_);
    return st_;
  }

 private:
  bool was_f32(ir::ValueId v) const {
    return v != ir::kNoValue && static_cast<size_t>(v) < orig_.size() && orig_[v] == DType::f32;
  }
  /// Adds a value standing for a float32 value of the model (a converted
  /// copy, a cast's output, a model output's 16-bit internal): it counts as
  /// float32 data for the nodes that read it later.
  ir::ValueId add_value(ir::Value v) {
    ir::ValueId id = m_.add_value(std::move(v));
    orig_.push_back(DType::f32);
    graph_input_.push_back(false);
    graph_output_.push_back(false);
    return id;
  }
  /// A constant or a model input: converted where it is read, so it never
  /// forces float32 on a follow node.
  bool adaptable(ir::ValueId v) const {
    return m_.value(v).constant.has_value() || (static_cast<size_t>(v) < graph_input_.size() && graph_input_[v]);
  }

  /// v as dtype t: v itself, a converted constant, or the output of a Cast
  /// emitted before `reader` (one per value and dtype, reused).
  ir::ValueId as(ir::ValueId v, DType t, const ir::Node& reader) {
    if (m_.value(v).dtype == t) return v;
    auto key = std::make_pair(v, t);
    if (auto it = converted_.find(key); it != converted_.end()) return it->second;
    ir::Value nv = m_.value(v);
    nv.name = fmt::format("{}_{}", nv.name, short_name(t));
    nv.dtype = t;
    ir::ValueId id;
    if (nv.constant) {
      bool clamped = false;
      // Only the model's own constants are cached: ids made by this call
      // may name other values in another call.
      ConvertedConstants* cache = static_cast<size_t>(v) < orig_.size() ? cache_ : nullptr;
      const auto hit = cache ? cache->find(key) : ConvertedConstants::iterator();
      if (cache && hit != cache->end()) {
        nv.constant = hit->second.first;
        clamped = hit->second.second;
      } else {
        nv.constant = convert_tensor(*nv.constant, t, clamped);
        if (cache) cache->emplace(key, std::make_pair(*nv.constant, clamped));
      }
      if (clamped)
        log().debug("cuda precision: constant '{}' has finite values beyond the {} range, clamped to +-{:g}", nv.name,
                    dtype_name(t), largest_finite(t));
      id = add_value(std::move(nv));
      st_.wide.emplace(id, v);
      ++st_.constants;
      st_.clamped += clamped ? 1 : 0;
    } else {
      nv.constant.reset();
      id = add_value(std::move(nv));
      if (static_cast<size_t>(v) < graph_input_.size() && graph_input_[v] && t != DType::f32) st_.wide.emplace(id, v);
      ir::Node c;
      c.op_type = "Cast";
      c.name = fmt::format("{}_cast_{}", reader.name.empty() ? m_.value(v).name : reader.name, short_name(t));
      c.opset = reader.opset;
      c.inputs = {v};
      c.outputs = {id};
      c.attrs["to"] = static_cast<int64_t>(t);
      out_.push_back(std::move(c));
      ++st_.casts;
    }
    converted_.emplace(key, id);
    return id;
  }

  /// An If / Loop / Scan (an island: its bodies stay as the model wrote
  /// them, in float32) reading in a body an activation this pass made
  /// 16-bit reads a Cast of it to float32 instead, emitted before `n` and
  /// shared with its other float32 readers. Bodies read constants and model
  /// inputs by their own (float32) ids, and the values bodies make are
  /// never narrowed: the pass rewrites the main graph only.
  void widen_body_reads(ir::Node& n) {
    bool any = false;
    auto narrowed = [&](ir::ValueId v) { return was_f32(v) && m_.value(v).dtype != DType::f32; };
    for_each_body_read(n, [&](ir::ValueId& v) { any |= narrowed(v); });
    if (!any) return;
    own_subgraphs(n);  // a copy of the model (the precision check's rounds) shares the bodies
    std::vector<ir::ValueId*> reads;  // collected first: as() appends values, never body reads
    for_each_body_read(n, [&](ir::ValueId& v) {
      if (narrowed(v)) reads.push_back(&v);
    });
    for (ir::ValueId* v : reads) *v = as(*v, DType::f32, n);
  }

  /// Why node `n` (role `role`) keeps a float32 output.
  std::string fp32_reason(const ir::Node& n, PrecisionRole role, bool kept, ir::ValueId promoted_by) const {
    switch (role) {
      case PrecisionRole::island:
        if (kept) return "kept in float32 by the precision check";
        if (is_control_flow(n))
          return "control flow: its bodies run in float32 (the precision pass does not convert subgraphs yet)";
        return n.domain.empty() ? fmt::format("runs as written in float32 (no 16-bit kernel for {})", n.op_type)
                                : fmt::format("runs as written in float32 (domain '{}')", n.domain);
      case PrecisionRole::fp32_out: return "writes float32 in fp16 programs (its result can exceed 65504)";
      case PrecisionRole::cast: return "an explicit Cast to float32";
      case PrecisionRole::half:
      case PrecisionRole::follow:
        break;
    }
    return promoted_by == ir::kNoValue ? std::string("float32")
                                       : fmt::format("promoted: reads the float32 activation '{}'",
                                                     m_.value(promoted_by).name);
  }

  void rewrite(ir::Node n) {
    for (auto& v : n.inputs)
      if (v != ir::kNoValue)
        if (auto it = renamed_.find(v); it != renamed_.end()) v = it->second;
    const std::string key = precision_node_key(m_, n);
    const bool kept = !keep_.empty() && keep_.count(key);
    PrecisionRole role = kept ? PrecisionRole::island : precision_role(n, to_);
    // A Cast from integers or bools to float32 makes the 16-bit type: the
    // data enters the float program rounded once, as a model input would.
    const bool data_cast = role == PrecisionRole::cast && n.inputs.size() == 1 && n.inputs[0] != ir::kNoValue &&
                           is_integer_or_bool(m_.value(n.inputs[0]).dtype) && n.outputs.size() == 1 &&
                           was_f32(n.outputs[0]);
    if (data_cast) {
      n.attrs["to"] = static_cast<int64_t>(to_);
      role = PrecisionRole::follow;  // outputs: the 16-bit type (its input is no float)
    }
    DType want = DType::f32;  // the dtype of the node's converted float outputs
    ir::ValueId promoted_by = ir::kNoValue;  // the float32 activation that kept a follow node float32
    switch (role) {
      case PrecisionRole::island:
        for (auto& v : n.inputs)
          if (was_f32(v) && m_.value(v).dtype != DType::f32) v = as(v, DType::f32, n);
        widen_body_reads(n);
        break;
      case PrecisionRole::cast:
      case PrecisionRole::fp32_out:
        break;
      case PrecisionRole::half:
      case PrecisionRole::follow:
        want = to_;
        if (role == PrecisionRole::follow)
          for (size_t i = 0; i < n.inputs.size(); ++i) {
            ir::ValueId v = n.inputs[i];
            if (was_f32(v) && is_data_input(n, i) && m_.value(v).dtype == DType::f32 && !adaptable(v)) {
              want = DType::f32;
              if (promoted_by == ir::kNoValue) promoted_by = v;
            }
          }
        for (size_t i = 0; i < n.inputs.size(); ++i)
          if (was_f32(n.inputs[i]) && is_data_input(n, i)) n.inputs[i] = as(n.inputs[i], want, n);
        break;
    }
    // Outputs: float32 ones take `want` (a cast keeps its `to`); a model
    // output computed in 16 bits is renamed and cast back after the node.
    std::vector<std::pair<ir::ValueId, ir::ValueId>> back;  // (16-bit internal, model output)
    bool has_f32_output = false, float_node = false;
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      ir::ValueId v = n.outputs[k];
      if (!was_f32(v)) continue;
      float_node = true;
      if (role == PrecisionRole::cast) {
        has_f32_output |= !keeps_f32_output(n, k);
        continue;
      }
      if (keeps_f32_output(n, k)) continue;  // float32 by ONNX's type, not left behind
      if (want == DType::f32) {
        has_f32_output = true;
        continue;
      }
      ++st_.values;
      if (graph_output_[v]) {
        ir::Value iv = m_.value(v);
        iv.name += "_" + short_name(want);
        iv.dtype = want;
        ir::ValueId id = add_value(std::move(iv));
        renamed_[v] = id;
        n.outputs[k] = id;
        back.emplace_back(id, v);
      } else {
        m_.value(v).dtype = want;
      }
    }
    if (float_node) {
      ++st_.float_nodes;
      if (has_f32_output) {
        ++st_.fp32_nodes;
        std::string why = fp32_reason(n, role, kept, promoted_by);
        log().debug("cuda precision: {} '{}' left float32: {}", n.op_type, key, why);
        st_.fp32.push_back({key, n.domain.empty() ? n.op_type : n.domain + "." + n.op_type, std::move(why)});
      } else {
        ++st_.nodes_16bit;
        st_.half.push_back({key, n.domain.empty() ? n.op_type : n.domain + "." + n.op_type, n.outputs,
                            st_.fp32.size()});
      }
    }
    const std::string name = n.name;
    const int opset = n.opset;
    out_.push_back(std::move(n));
    for (auto [internal, output] : back) {
      ir::Node c;
      c.op_type = "Cast";
      c.name = fmt::format("{}_output_f32", name.empty() ? m_.value(output).name : name);
      c.opset = opset;
      c.inputs = {internal};
      c.outputs = {output};
      c.attrs["to"] = static_cast<int64_t>(DType::f32);
      out_.push_back(std::move(c));
      ++st_.casts;
    }
  }

  ir::Model& m_;
  DType to_;
  const std::set<std::string>& keep_;  ///< nodes the precision check keeps in float32
  ConvertedConstants* cache_;          ///< converted constants of earlier calls on this model, or null
  std::vector<DType> orig_;  ///< each value's dtype before the pass
  std::vector<bool> graph_input_, graph_output_;
  std::map<std::pair<ir::ValueId, DType>, ir::ValueId> converted_;
  std::map<ir::ValueId, ir::ValueId> renamed_;  ///< model output -> its 16-bit internal value
  std::vector<ir::Node> out_;
  PrecisionStats st_;
};

}  // namespace

PrecisionRole precision_role(const ir::Node& n, DType to) {
  if (!n.domain.empty()) return PrecisionRole::island;
  const std::string& op = n.op_type;
  if (op == "Cast") return PrecisionRole::cast;
  if (kHalfOps.count(op)) return PrecisionRole::half;
  if (to == DType::f16 && kFp32OutOpsF16.count(op)) return PrecisionRole::fp32_out;
  // Linear / cubic Resize weights and reducing scatters are float32-only kernels.
  if (op == "Resize" && n.s("mode", "nearest") != "nearest") return PrecisionRole::island;
  if ((op == "ScatterElements" || op == "ScatterND") && n.s("reduction", "none") != "none") return PrecisionRole::island;
  if (kFollowOps.count(op)) return PrecisionRole::follow;
  return PrecisionRole::island;
}

std::string precision_node_key(const ir::Model& m, const ir::Node& n) {
  if (!n.name.empty()) return n.name;
  for (auto v : n.outputs)
    if (v != ir::kNoValue) return m.value(v).name;
  return "";
}

PrecisionStats convert_precision(ir::Model& m, DType to, const std::set<std::string>& keep_fp32,
                                 ConvertedConstants* cache) {
  if (to != DType::f16 && to != DType::bf16)
    fail(ErrorCode::internal, "convert_precision: {} is not a 16-bit float type", dtype_name(to));
  Stopwatch sw;
  PrecisionStats st = Converter(m, to, keep_fp32, cache).run();
  log().info("cuda precision {}: {} values and {} constants 16-bit ({} clamped to the 16-bit range), {} casts; {} of {} "
             "float nodes 16-bit, {} left float32 ({:.1f} ms)",
             dtype_name(to), st.values, st.constants, st.clamped, st.casts, st.nodes_16bit, st.float_nodes,
             st.fp32_nodes, sw.ms());
  return st;
}

}  // namespace kiln::targets::cuda
