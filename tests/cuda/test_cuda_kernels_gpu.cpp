// The cuda target's fast generated kernels on a GPU (label `cuda`): warp- and
// block-per-row Softmax / LogSoftmax / LayerNormalization, vectorized
// element-wise chains and transposes (contiguous runs and shared-memory
// tiles), in float32 and with --precision fp16, against the ref target; and
// the run-time alignment fallback of every vectorized kernel, by launching the
// generated kernel itself on pointers 2 bytes off a 16-byte boundary. Without
// a CUDA device the binary prints SKIPPED and exits 77 (CTest's skip code).
//
// Tolerances: an element passes when |cuda - ref| <= atol + rtol * |ref|.
// float32: the kernels compute in float like the ref target (or better), in
// another order: 1e-4 relative (1e-5 to 1e-7 absolute by what the values
// are). fp16: every input and 16-bit intermediate is rounded (unit roundoff
// u = 2^-11 = 4.9e-4); Softmax of inputs of magnitude <= 4 carries about
// 2 * 4u + u = 4.4e-3 relative -> 1e-2; LogSoftmax 3 * 4u absolute plus the
// rounding of outputs up to 16 (u * 16) -> 2e-2; LayerNormalization of inputs
// 3 +- 2 (a rounding of up to 9.8e-4 per element, normalised by a deviation
// of about 0.7, times |scale| <= 1, plus the output's rounding) -> 2e-2; a
// transpose only rounds its input: 1e-3 relative.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>

#include "artifact/artifact.h"
#include "cuda_models.h"
#include "kiln/errors.h"
#include "kiln/session.h"
#include "onnx/importer.h"
#include "passes/passes.h"
#include "support/half.h"
#include "targets/cuda/compile/lowering.h"
#include "targets/cuda/run/cuda_ops.h"
#include "targets/cuda/run/driver.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;

struct Tol {
  double rtol, atol;
};

SessionOptions options(Target t, Precision p = Precision::fp32) {
  SessionOptions o;
  o.target = t;
  o.precision = p;
  o.use_cache = false;
  return o;
}

/// offset + amplitude * sin(0.37 i + phase): smooth, signed, no two rows alike.
Tensor wave(DType dt, const std::vector<int64_t>& shape, float amplitude, float phase, float offset = 0.f) {
  Tensor t(dt, shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    float v = offset + amplitude * std::sin(0.37f * static_cast<float>(i) + phase) +
              0.25f * amplitude * std::cos(0.011f * static_cast<float>(i));
    if (dt == DType::f32) t.data<float>()[i] = v;
    else if (dt == DType::i64) t.data<int64_t>()[i] = static_cast<int64_t>(std::lround(v * 100));
    else if (dt == DType::f16) t.data<uint16_t>()[i] = float_to_half(v);
  }
  return t;
}

/// Every graph input of `s`, filled by wave() with its own phase.
std::map<std::string, Tensor> inputs_for(const Session& s, float amplitude, float offset = 0.f) {
  std::map<std::string, Tensor> in;
  float phase = 0.1f;
  for (auto& t : s.inputs()) {
    in[t.name] = wave(t.dtype, t.dims, amplitude, phase, offset);
    phase += 0.7f;
  }
  return in;
}

/// Checks got against want element by element; returns the worst |g - w| / (atol + rtol |w|).
double expect_close(const Tensor& got, const Tensor& want, const std::string& what, Tol tol) {
  EXPECT_EQ(got.shape(), want.shape()) << what;
  EXPECT_EQ(got.dtype(), want.dtype()) << what;
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) return INFINITY;
  double worst = 0;
  int bad = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    double g, w;
    if (want.dtype() == DType::f32) g = got.data<float>()[i], w = want.data<float>()[i];
    else if (want.dtype() == DType::i64) g = double(got.data<int64_t>()[i]), w = double(want.data<int64_t>()[i]);
    else if (want.dtype() == DType::boolean) g = got.data<bool>()[i], w = want.data<bool>()[i];
    else {
      ADD_FAILURE() << what << ": unexpected dtype";
      return INFINITY;
    }
    double err = std::fabs(g - w), lim = tol.atol + tol.rtol * std::fabs(w);
    double ratio = lim > 0 ? err / lim : (err == 0 ? 0 : INFINITY);
    if (!(err <= lim)) {
      if (bad++ < 5) ADD_FAILURE() << what << "[" << i << "]: cuda " << g << ", ref " << w;
      ratio = std::isnan(ratio) ? INFINITY : ratio;
    }
    worst = std::max(worst, ratio);
  }
  if (bad > 5) ADD_FAILURE() << what << ": " << bad << " elements out of tolerance";
  return worst;
}

/// Compiles `model` for cuda with `p` and for ref, runs both on the same
/// inputs and checks every output with tol(output name).
void compare_with_ref(const ModelBuilder& model, Precision p, float amplitude, float offset,
                      const std::function<Tol(const std::string&)>& tol,
                      const std::function<void(const std::map<std::string, Tensor>&, const std::map<std::string, Tensor>&,
                                               const std::map<std::string, Tensor>&)>& extra = nullptr) {
  TempDir dir;
  model.save(dir / "m.onnx");
  Session ref(dir / "m.onnx", options(Target::ref()));
  Session gpu(dir / "m.onnx", options(Target::cuda(), p));
  auto in = inputs_for(ref, amplitude, offset);
  auto want = ref.run(in);
  auto got = gpu.run(in);
  ASSERT_EQ(got.size(), want.size());
  for (auto& [name, w] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    if (extra && w.dtype() == DType::boolean && p != Precision::fp32) continue;  // checked by `extra`
    double worst = expect_close(got.at(name), w, name, tol(name));
    std::printf("  %-5s %-8s worst error / tolerance %.3f\n", p == Precision::fp32 ? "fp32" : "fp16", name.c_str(), worst);
  }
  if (extra) extra(in, want, got);
}

bool starts(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

TEST(CudaKernels, SoftmaxAndLogSoftmaxRowsMatchRef) {
  for (Precision p : {Precision::fp32, Precision::fp16}) {
    SCOPED_TRACE(p == Precision::fp32 ? "fp32" : "fp16");
    const bool h = p != Precision::fp32;
    compare_with_ref(softmax_rows_model(), p, 4.f, 0.f, [&](const std::string& name) {
      if (starts(name, "lsm")) return h ? Tol{1e-3, 2e-2} : Tol{1e-5, 1e-5};
      return h ? Tol{1e-2, 1e-6} : Tol{1e-4, 1e-7};  // sm<L>, sm3d, smc
    });
  }
}

TEST(CudaKernels, LayerNormalizationRowsMatchRef) {
  for (Precision p : {Precision::fp32, Precision::fp16}) {
    SCOPED_TRACE(p == Precision::fp32 ? "fp32" : "fp16");
    const bool h = p != Precision::fp32;
    // Inputs 3 +- 2.5: a mean far from 0 checks the two-pass variance.
    compare_with_ref(layer_norm_rows_model(), p, 2.f, 3.f, [&](const std::string& name) {
      if (starts(name, "lnm")) return h ? Tol{1e-2, 2e-3} : Tol{1e-5, 1e-5};  // Mean stays float32
      if (starts(name, "lni")) return h ? Tol{1e-2, 1e-3} : Tol{1e-4, 1e-6};  // InvStdDev stays float32
      return h ? Tol{2e-2, 2e-2} : Tol{1e-4, 2e-5};
    });
  }
}

TEST(CudaKernels, ElementwiseChainsMatchRef) {
  for (Precision p : {Precision::fp32, Precision::fp16}) {
    SCOPED_TRACE(p == Precision::fp32 ? "fp32" : "fp16");
    const bool h = p != Precision::fp32;
    compare_with_ref(
        elementwise_chains_model(), p, 3.f, 0.f,
        [&](const std::string& name) {
          if (name == "gt") return Tol{0, 0};
          return h ? Tol{1e-2, 1e-2} : Tol{1e-5, 1e-6};
        },
        [&](const std::map<std::string, Tensor>& in, const std::map<std::string, Tensor>&,
            const std::map<std::string, Tensor>& got) {
          // Greater(ea, eb) on 16-bit inputs: exact except where rounding may tie or swap them.
          const Tensor &a = in.at("ea"), &b = in.at("eb"), &g = got.at("gt");
          int bad = 0, ties = 0;
          for (int64_t i = 0; i < g.numel(); ++i) {
            float x = a.data<float>()[i], y = b.data<float>()[i];
            // The comparison on the float16-rounded inputs, or on the float32 ones (either is right).
            bool want16 = half_to_float(float_to_half(x)) > half_to_float(float_to_half(y)), want32 = x > y;
            bool got_i = g.data<bool>()[i];
            if (got_i != want16 && got_i != want32 && bad++ < 5) ADD_FAILURE() << "gt[" << i << "]: " << x << " > " << y;
            ties += half_to_float(float_to_half(x)) == half_to_float(float_to_half(y));
          }
          EXPECT_LT(ties, g.numel() / 100);
        });
  }
}

TEST(CudaKernels, TransposesMatchRef) {
  for (Precision p : {Precision::fp32, Precision::fp16}) {
    SCOPED_TRACE(p == Precision::fp32 ? "fp32" : "fp16");
    const bool h = p != Precision::fp32;
    compare_with_ref(transposes_model(), p, 2.f, 0.f, [&](const std::string& name) {
      if (name == "tri" || !h) return Tol{0, 0};  // moves bits
      return Tol{1e-3, 1e-7};
    });
  }
}

// ---- the generated kernels themselves, on misaligned pointers

/// A model lowered for this GPU (precision as the model declares it), with
/// exactly one generated kernel, loaded; launch() runs it on buffers whose
/// addresses are `offset` bytes past a 256-byte boundary.
class OneKernel {
 public:
  explicit OneKernel(const ModelBuilder& b) {
    auto bytes = b.bytes();
    cp_.model = onnx_import::import_bytes(bytes.data(), bytes.size(), ".", "test");
    passes::bind_input_shapes(cp_.model, {});
    passes::infer_and_fold(cp_.model);
    passes::eliminate_dead_code(cp_.model);
    auto facts = targets::cuda::device_facts(0);
    targets::cuda::LowerOptions lo;
    lo.arch = facts.arch;
    lo.sm_count = facts.sm_count;
    lo.device = -1;
    targets::cuda::lower_for_cuda(cp_, lo);
    for (auto& n : cp_.model.main.nodes) {
      EXPECT_EQ(n.op_type, "Kernel") << n.label();
      if (n.op_type == "Kernel") node_ = &n;
    }
    if (cp_.model.main.nodes.size() != 1 || !node_) {
      ADD_FAILURE() << "expected one kernel node, got " << cp_.model.main.nodes.size() << " nodes";
      return;
    }
    bundle_ = targets::cuda::decode_bundle(cp_.kernels, "test");
    targets::cuda::use_device(0);
    const auto& d = targets::cuda::driver();
    targets::cuda::check(d.cuModuleLoadData(&module_, bundle_.cubin.data()), "cuModuleLoadData");
    targets::cuda::check(d.cuModuleGetFunction(&fn_, module_, node_->s("fn", "").c_str()), "cuModuleGetFunction");
  }
  ~OneKernel() {
    if (module_) targets::cuda::driver().cuModuleUnload(module_);
  }
  bool ok() const { return fn_ != nullptr; }
  std::string source() const {
    auto at = bundle_.source.find(node_->s("fn", "") + "(");
    return at == std::string::npos ? "" : bundle_.source.substr(at);
  }
  size_t bytes_of(ir::ValueId v) const {
    const ir::Value& val = cp_.model.value(v);
    return dtype_size(val.dtype) * static_cast<size_t>(numel_of(v));
  }
  int64_t numel_of(ir::ValueId v) const {
    int64_t n = 1;
    for (auto x : ir::to_sizes(*cp_.model.value(v).shape)) n *= x;
    return n;
  }
  /// The kernel's inputs by graph name, in kernel order.
  std::vector<std::string> input_names() const {
    std::vector<std::string> out;
    for (auto v : node_->inputs) out.push_back(cp_.model.value(v).name);
    return out;
  }

  /// Runs the kernel on `inputs` (raw bytes, kernel order) placed `offset`
  /// bytes into fresh buffers; returns each output's bytes.
  std::vector<std::vector<uint8_t>> launch(const std::vector<std::vector<uint8_t>>& inputs, size_t offset) const {
    const auto& d = targets::cuda::driver();
    std::vector<targets::cuda::DeviceBuffer> bufs;
    std::vector<CUdeviceptr> args;
    for (size_t k = 0; k < node_->inputs.size(); ++k) {
      size_t n = bytes_of(node_->inputs[k]);
      EXPECT_EQ(inputs.at(k).size(), n);
      bufs.emplace_back(n + 256, "test");
      args.push_back(bufs.back().get() + offset);
      targets::cuda::check(d.cuMemcpyHtoD(args.back(), inputs[k].data(), n), "cuMemcpyHtoD");
    }
    for (auto v : node_->outputs) {
      size_t n = bytes_of(v);
      bufs.emplace_back(n + 256, "test");
      args.push_back(bufs.back().get() + offset);
      std::vector<uint8_t> junk(n, 0xA5);  // a pattern no kernel writes
      targets::cuda::check(d.cuMemcpyHtoD(args.back(), junk.data(), n), "cuMemcpyHtoD");
    }
    std::vector<void*> params(args.size());
    for (size_t i = 0; i < args.size(); ++i) params[i] = &args[i];
    auto grid = node_->ints("grid"), block = node_->ints("block");
    targets::cuda::check(d.cuLaunchKernel(fn_, unsigned(grid[0]), unsigned(grid[1]), unsigned(grid[2]), unsigned(block[0]),
                                          unsigned(block[1]), unsigned(block[2]), unsigned(node_->i("smem", 0)), nullptr,
                                          params.data(), nullptr),
                         "cuLaunchKernel");
    targets::cuda::check(d.cuCtxSynchronize(), "cuCtxSynchronize (the kernel)");
    std::vector<std::vector<uint8_t>> out;
    for (size_t k = 0; k < node_->outputs.size(); ++k) {
      out.emplace_back(bytes_of(node_->outputs[k]));
      targets::cuda::check(d.cuMemcpyDtoH(out.back().data(), args[node_->inputs.size() + k], out.back().size()),
                           "cuMemcpyDtoH");
    }
    return out;
  }

 private:
  artifact::CompiledProgram cp_;
  const ir::Node* node_ = nullptr;
  targets::cuda::KernelBundle bundle_;
  CUmodule module_ = nullptr;
  CUfunction fn_ = nullptr;
};

std::vector<uint8_t> half_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t h = float_to_half(v[i]);
    std::memcpy(b.data() + 2 * i, &h, 2);
  }
  return b;
}
std::vector<float> half_values(const std::vector<uint8_t>& b) {
  std::vector<float> v(b.size() / 2);
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, b.data() + 2 * i, 2);
    v[i] = half_to_float(h);
  }
  return v;
}
std::vector<float> wave_values(size_t n, float amplitude, float phase, float offset = 0.f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = offset + amplitude * std::sin(0.37f * float(i) + phase);
  return v;
}

/// Launches `k` on float16 inputs aligned and at offsets 2, 4 and 8 bytes
/// (below the 16- or 8-byte vector accesses): every launch must give the same
/// bits, and the aligned one must match `reference` (float16-rounded inputs,
/// float math) within `tol`.
void check_offsets(const OneKernel& k, const std::vector<std::vector<float>>& inputs,
                   const std::function<std::vector<float>(const std::vector<std::vector<float>>&)>& reference, Tol tol,
                   const std::string& what) {
  ASSERT_TRUE(k.ok()) << what;
  std::vector<std::vector<uint8_t>> raw;
  std::vector<std::vector<float>> rounded;
  for (auto& v : inputs) {
    raw.push_back(half_bytes(v));
    rounded.push_back(half_values(raw.back()));
  }
  auto aligned = k.launch(raw, 0);
  ASSERT_EQ(aligned.size(), 1u);
  for (size_t off : {2, 4, 8, 6}) {
    auto moved = k.launch(raw, off);
    EXPECT_TRUE(moved[0] == aligned[0]) << what << ": offset " << off << " gives other bits";
  }
  std::vector<float> got = half_values(aligned[0]), want = reference(rounded);
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= tol.atol + tol.rtol * std::fabs(want[i])) && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: kernel " << got[i] << ", expected " << want[i];
}

TEST(CudaKernels, MisalignedFloat16PointersTakeTheScalarPathWithTheSameResults) {
  {  // Add + Relu, 3003 elements: 375 vectors of 8 and a tail of 3
    ModelBuilder b(17);
    b.input("a", 10, {3, 1001}).input("b", 10, {3, 1001});
    b.node("Add", {"a", "b"}, {"s"});
    b.node("Relu", {"s"}, {"y"});
    b.output("y", 10, {3, 1001});
    OneKernel k(b);
    check_offsets(
        k, {wave_values(3003, 2.f, 0.1f), wave_values(3003, 1.5f, 0.9f)},
        [](const std::vector<std::vector<float>>& in) {
          std::vector<float> y(in[0].size());
          for (size_t i = 0; i < y.size(); ++i) y[i] = std::max(0.f, half_to_float(float_to_half(in[0][i] + in[1][i])));
          return y;
        },
        {0, 0}, "add+relu");
  }
  for (int64_t L : {128, 1000, 1030}) {  // Softmax rows: 4 and 8 halves per access; a block per row past 1024
    ModelBuilder b(17);
    b.input("x", 10, {13, L});
    ModelBuilder::attr_int(b.node("Softmax", {"x"}, {"y"}), "axis", -1);
    b.output("y", 10, {13, L});
    OneKernel k(b);
    check_offsets(
        k, {wave_values(13 * L, 4.f, 0.3f)},
        [L](const std::vector<std::vector<float>>& in) {
          std::vector<float> y(in[0].size());
          for (int64_t r = 0; r < 13; ++r) {
            const float* x = in[0].data() + r * L;
            double m = -INFINITY, s = 0;
            for (int64_t j = 0; j < L; ++j) m = std::max(m, double(x[j]));
            for (int64_t j = 0; j < L; ++j) s += std::exp(double(x[j]) - m);
            for (int64_t j = 0; j < L; ++j) y[r * L + j] = float(std::exp(double(x[j]) - m) / s);
          }
          return y;
        },
        {2e-3, 1e-7}, "softmax " + std::to_string(L));
  }
  // (No LayerNormalization here: kiln's shape inference takes float32 / float64
  // X only, as its reference kernels do; 16-bit layer norms come from the
  // precision pass, covered by LayerNormalizationRowsMatchRef in fp16.)
  {  // Transpose (0,2,1,3) of [2,5,3,8]: runs of 8 halves = one 16-byte access
    ModelBuilder b(17);
    b.input("x", 10, {2, 5, 3, 8});
    ModelBuilder::attr_ints(b.node("Transpose", {"x"}, {"y"}), "perm", {0, 2, 1, 3});
    b.output("y", 10, {2, 3, 5, 8});
    OneKernel k(b);
    check_offsets(
        k, {wave_values(240, 2.f, 0.4f)},
        [](const std::vector<std::vector<float>>& in) {
          std::vector<float> y(240);
          for (int n = 0; n < 2; ++n)
            for (int c = 0; c < 5; ++c)
              for (int h = 0; h < 3; ++h)
                for (int w = 0; w < 8; ++w) y[((n * 3 + h) * 5 + c) * 8 + w] = in[0][((n * 5 + c) * 3 + h) * 8 + w];
          return y;
        },
        {0, 0}, "transpose");
  }
}

// Session::run_device with caller buffers 4 bytes past a 16-byte boundary
// (float32-aligned, not vector-aligned) gives run()'s outputs bit for bit.
TEST(CudaKernels, RunDeviceAtUnalignedOffsetsGivesTheSameOutputs) {
  TempDir dir;
  ModelBuilder b(17);
  b.input("x", 1, {13, 128});
  b.initializer("g", {128}, wave_values(128, 1.f, 0.3f));
  b.initializer("c", {}, {0.5f});
  ModelBuilder::attr_int(b.node("Softmax", {"x"}, {"sm"}), "axis", -1);
  ModelBuilder::attr_int(b.node("LayerNormalization", {"x", "g"}, {"ln"}), "axis", -1);
  b.node("Mul", {"x", "c"}, {"xc"});
  b.node("Relu", {"xc"}, {"ew"});
  ModelBuilder::attr_ints(b.node("Transpose", {"x"}, {"tr"}), "perm", {1, 0});
  b.output("sm", 1, {13, 128}).output("ln", 1, {13, 128}).output("ew", 1, {13, 128}).output("tr", 1, {128, 13});
  b.save(dir / "m.onnx");
  for (Precision p : {Precision::fp32, Precision::fp16}) {
    SCOPED_TRACE(p == Precision::fp32 ? "fp32" : "fp16");
    Session gpu(dir / "m.onnx", options(Target::cuda(), p));
    std::map<std::string, Tensor> in = {{"x", wave(DType::f32, {13, 128}, 3.f, 0.2f)}};
    auto want = gpu.run(in);
    const auto& d = targets::cuda::driver();
    using targets::cuda::DeviceBuffer;
    const Tensor& x = in.at("x");
    DeviceBuffer dx(x.nbytes() + 256, "test");
    targets::cuda::check(d.cuMemcpyHtoD(dx.get() + 4, x.raw(), x.nbytes()), "cuMemcpyHtoD");
    std::map<std::string, DeviceBuffer> outs;
    std::map<std::string, DeviceTensor> out_args;
    for (auto& [name, t] : want) {
      outs.emplace(name, DeviceBuffer(t.nbytes() + 256, "test"));
      out_args[name] = {outs.at(name).get() + 4, t.nbytes()};
    }
    gpu.run_device({{"x", {dx.get() + 4, x.nbytes()}}}, out_args);
    for (auto& [name, t] : want) {
      Tensor got(t.dtype(), t.shape());
      targets::cuda::check(d.cuMemcpyDtoH(got.raw(), out_args.at(name).ptr, got.nbytes()), "cuMemcpyDtoH");
      EXPECT_EQ(std::memcmp(got.raw(), t.raw(), t.nbytes()), 0) << name;
    }
  }
}

}  // namespace
}  // namespace kiln::testing

int main(int argc, char** argv) {
  if (!kiln::targets::cuda::device_present()) {
    std::printf("SKIPPED: no CUDA device on this machine (the cuda kernel tests need one)\n");
    return 77;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
