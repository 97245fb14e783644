#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <set>

#include "cli.h"
#include "support/error.h"
#include "support/half.h"
#include "support/npy.h"

namespace kiln::cli {

void add_precision_flags(CLI::App* sub, PrecisionArgs& a) {
  sub->add_option("--precision", a.precision,
                  "fp32 (default), fp16 or bf16 (cuda only: 16-bit values inside the program, fp32 accumulation; "
                  "inputs and outputs keep their dtypes)")
      ->capture_default_str();
  sub->add_flag("--tf32", a.tf32, "Allow TF32 tensor-core math for fp32 matmuls and convolutions (cuda, fp32 only)");
  sub->add_option("--precision-check", a.check,
                  "fp16 / bf16 on cuda: on (default) runs the 16-bit program against fp32 on sample inputs at compile "
                  "time (ref kernels, 16-bit rounding emulated: the same with or without a GPU) and keeps in fp32 the "
                  "nodes whose 16-bit error grows past the bound (`kiln inspect` lists them and why); off skips it")
      ->capture_default_str();
  sub->add_option("--check-input", a.check_inputs,
                  "NAME=FILE.npy: a sample input of the precision check of fp16 / bf16 cuda compiles (repeatable; "
                  "inputs not given are random); part of the cache key")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

void apply_precision(const PrecisionArgs& a, SessionOptions& opt) {
  opt.precision = parse_precision(a.precision);
  opt.allow_tf32 = a.tf32;
  if (a.check != "on" && a.check != "off")
    fail(ErrorCode::invalid_option, "--precision-check: unknown value '{}' (expected on or off)", a.check);
  opt.precision_check = parse_precision_check(a.check);
  for (auto& spec : a.check_inputs) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0)
      fail(ErrorCode::invalid_option, "--check-input '{}': expected NAME=FILE.npy", spec);
    const std::string name = spec.substr(0, eq);
    if (opt.precision_check_inputs.count(name))
      fail(ErrorCode::invalid_option, "--check-input: input '{}' is given twice", name);
    opt.precision_check_inputs[name] = read_npy(spec.substr(eq + 1));
  }
}

void parse_shapes(const std::vector<std::string>& specs, SessionOptions& opt) {
  for (auto& spec : specs) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0)
      fail(ErrorCode::invalid_option, "--shape '{}': expected NAME=DxDx... (e.g. images=1x3x640x640)", spec);
    std::string name = spec.substr(0, eq), dims = spec.substr(eq + 1);
    std::vector<int64_t> shape;
    size_t pos = 0;
    while (pos < dims.size()) {
      size_t x = dims.find('x', pos);
      std::string part = dims.substr(pos, x == std::string::npos ? std::string::npos : x - pos);
      try {
        size_t used = 0;
        long long v = std::stoll(part, &used);
        if (used != part.size() || v < 0) throw std::invalid_argument(part);
        shape.push_back(v);
      } catch (const std::exception&) {
        fail(ErrorCode::invalid_option, "--shape '{}': '{}' is not a dimension (non-negative integer)", spec, part);
      }
      if (x == std::string::npos) break;
      pos = x + 1;
      if (pos == dims.size()) fail(ErrorCode::invalid_option, "--shape '{}': trailing 'x'", spec);
    }
    if (opt.input_shapes.count(name)) fail(ErrorCode::invalid_option, "--shape: input '{}' is given twice", name);
    opt.input_shapes[name] = shape;
  }
}

void add_codegen_options(CLI::App* sub, CodegenArgs& a) {
  sub->add_option("--tuning", a.tuning,
                  "cuda: how matmul (cuBLASLt) and convolution (cuDNN) algorithms are chosen, once, at compile time: "
                  "heuristic (the libraries' heuristics, no timing; the only mode without a GPU), fast (default: "
                  "times the best few candidates) or exhaustive (times many, slower compile)")
      ->check(CLI::IsMember({"heuristic", "fast", "exhaustive"}));
  sub->add_option("--arch", a.arch,
                  "cuda: GPU architecture to compile for, e.g. sm_90 (H100/H200); default: the device's. Another "
                  "architecture, or no GPU here, cross-compiles: needs --tuning heuristic, and the libraries choose "
                  "their algorithms when the artifact is first loaded on such a GPU. A newer GPU than the architecture "
                  "runs the artifact through its stored PTX")
      ->check(CLI::Validator(
          [](std::string& v) { return v.empty() ? std::string("an empty architecture (expected sm_XY, e.g. sm_90)") : ""; },
          "sm_XY"));
  sub->add_option("--fallback", a.fallback,
                  "cuda: a node the cuda target cannot lower (no kernel for its operator, If / Loop / Scan, a shape "
                  "that depends on tensor values) runs on the host inside the same program, with copies at the "
                  "boundaries (host, the default; a note names the nodes), or refuses the compile naming each node "
                  "(error)")
      ->check(CLI::IsMember({"host", "error"}));
}

void apply_codegen(const CodegenArgs& a, SessionOptions& opt) {
  if (!a.tuning.empty()) opt.tuning = parse_tuning(a.tuning);
  opt.arch = a.arch;
  if (!a.fallback.empty()) opt.fallback = parse_fallback(a.fallback);
}

void add_specialize_flags(CLI::App* sub, SpecializeArgs& a, bool shapes) {
  if (shapes)
    sub->add_flag("--no-shape-specialization", a.no_shapes,
                  "Keep symbolic input dims symbolic: one program for every shape, whose nodes with dynamic shapes run "
                  "on reference kernels (slow). Default: a symbolic dim not fixed by --shape / --dim is specialized to "
                  "the shapes of the inputs given (one program per shape seen, cached; from a dim's third size on, "
                  "where padding is provably safe: a batch whose rows are kept apart runs split into row parts over "
                  "the programs held, padded onto one, or on a new power-of-two program, whichever is estimated "
                  "fastest; a sequence masked by an integer *mask* input is rounded up to a power of two)");
  sub->add_flag("--no-value-specialization", a.no_values,
                "Do not specialize on the value of scalar integer inputs that control flow or shapes depend on (a "
                "sample rate, a flag). Default: one program per value seen, with the If it steers folded to the "
                "branch taken");
}

void apply_specialize(const SpecializeArgs& a, SessionOptions& opt) {
  opt.specialize_shapes = !a.no_shapes;
  opt.specialize_values = !a.no_values;
}

void parse_dims(const std::vector<std::string>& specs, SessionOptions& opt) {
  for (auto& spec : specs) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0)
      fail(ErrorCode::invalid_option, "--dim '{}': expected NAME=SPEC (e.g. batch=1,2,4,8 or seq=1..512 or "
           "seq=1..512:16,64,128,512)", spec);
    std::string name = spec.substr(0, eq);
    if (opt.dims.count(name)) fail(ErrorCode::invalid_option, "--dim: dim '{}' is given twice", name);
    opt.dims[name] = DimSpec::parse(spec.substr(eq + 1), fmt::format("--dim '{}'", spec));
  }
}

const CLI::Validator& non_empty_path() {
  static const CLI::Validator v(
      [](std::string& s) { return s.empty() ? std::string("the path is empty") : std::string(); }, "PATH");
  return v;
}

std::vector<std::string> safe_names(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  std::set<std::string> used;
  for (auto& n : names) {
    std::string s;
    for (char c : n) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-') ? c : '_';
    if (s.empty() || s[0] == '.') s = "_" + s;
    // File names may hold 255 bytes ("<name>.npy" and the atomic write's
    // ".<name>.npy.tmp-<pid>-<hex>" among them): a long name keeps its first
    // 180 characters and gets 16 hex digits of its hash, so no output is
    // refused after others were written.
    if (s.size() > 200) s = s.substr(0, 180) + "-" + fmt::format("{:016x}", std::hash<std::string>{}(n));
    std::string base = s;
    for (int k = 2; used.count(s); ++k) s = base + "_" + std::to_string(k);
    used.insert(s);
    out.push_back(s);
  }
  return out;
}

std::string summarize(const Tensor& t) {
  if (t.numel() == 0) return t.describe() + " (empty)";
  if (!dtype_is_float(t.dtype())) {
    std::string first;
    for (int64_t i = 0; i < std::min<int64_t>(t.numel(), 6); ++i) {
      double v = 0;
      switch (t.dtype()) {
        case DType::i64: v = static_cast<double>(t.data<int64_t>()[i]); break;
        case DType::i32: v = t.data<int32_t>()[i]; break;
        case DType::boolean: v = t.data<bool>()[i]; break;
        case DType::u8: v = t.data<uint8_t>()[i]; break;
        case DType::i8: v = t.data<int8_t>()[i]; break;
        default: break;
      }
      first += fmt::format("{}{}", first.empty() ? "" : " ", v);
    }
    return fmt::format("{} first: {}{}", t.describe(), first, t.numel() > 6 ? " ..." : "");
  }
  double lo = INFINITY, hi = -INFINITY, sum = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = t.dtype() == DType::f32   ? t.data<float>()[i]
               : t.dtype() == DType::f64 ? t.data<double>()[i]
               : t.dtype() == DType::f16 ? half_to_float(t.data<uint16_t>()[i])
                                          : bf16_to_float(t.data<uint16_t>()[i]);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
  }
  return fmt::format("{} min {:.6g} max {:.6g} mean {:.6g}", t.describe(), lo, hi, sum / static_cast<double>(t.numel()));
}

json tensor_json(const std::string& name, const Tensor& t) {
  return {{"name", name}, {"dtype", dtype_name(t.dtype())}, {"shape", t.shape()}};
}

void print_json(const json& j) { std::cout << json_text(j) << std::endl; }

}  // namespace kiln::cli
