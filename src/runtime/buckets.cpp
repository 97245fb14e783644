#include "runtime/buckets.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>

#include "support/error.h"

namespace kiln::buckets {

namespace {

// Index of `symbol` in set.dims, or -1.
int dim_index(const artifact::BucketSet& set, const std::string& symbol) {
  for (size_t i = 0; i < set.dims.size(); ++i)
    if (set.dims[i].symbol == symbol) return static_cast<int>(i);
  return -1;
}

// Copies the region both tensors have in common (per axis the smaller size)
// from `from` into `to`: padding when `to` is larger, slicing when smaller.
// Rows of the innermost axis are copied with memcpy.
void copy_common(const Tensor& from, Tensor& to) {
  const auto& fs = from.shape();
  const auto& ts = to.shape();
  const size_t rank = fs.size(), es = dtype_size(from.dtype());
  if (rank == 0) {
    std::memcpy(to.raw(), from.raw(), es);
    return;
  }
  std::vector<int64_t> common(rank), fstride(rank, 1), tstride(rank, 1);
  for (size_t i = 0; i < rank; ++i) common[i] = std::min(fs[i], ts[i]);
  for (size_t i = rank - 1; i > 0; --i) {
    fstride[i - 1] = fstride[i] * fs[i];
    tstride[i - 1] = tstride[i] * ts[i];
  }
  for (auto c : common)
    if (c == 0) return;
  const auto* src = static_cast<const uint8_t*>(from.raw());
  auto* dst = static_cast<uint8_t*>(to.raw());
  const size_t row = static_cast<size_t>(common[rank - 1]) * es;
  std::vector<int64_t> idx(rank, 0);  // over the outer rank-1 axes of the common region
  while (true) {
    int64_t fo = 0, to_off = 0;
    for (size_t i = 0; i + 1 < rank; ++i) {
      fo += idx[i] * fstride[i];
      to_off += idx[i] * tstride[i];
    }
    std::memcpy(dst + to_off * static_cast<int64_t>(es), src + fo * static_cast<int64_t>(es), row);
    size_t ax = rank - 1;
    while (ax > 0) {
      --ax;
      if (++idx[ax] < common[ax]) break;
      idx[ax] = 0;
      if (ax == 0) return;
    }
    if (rank == 1) return;
  }
}

// The shape `t` has with each bucketed axis of `io` set from `sizes`.
std::vector<int64_t> resized(const artifact::BucketSet& set, const artifact::IoSymbols& io, const Tensor& t,
                             const std::vector<int64_t>& sizes) {
  std::vector<int64_t> shape = t.shape();
  for (size_t a = 0; a < io.axes.size() && a < shape.size(); ++a)
    if (int d = dim_index(set, io.axes[a]); d >= 0) shape[a] = sizes[static_cast<size_t>(d)];
  return shape;
}

}  // namespace

namespace {

/// The value of a scalar integer / bool input (one element), for a value guard.
int64_t guard_value(const std::string& name, const Tensor& t) {
  if (t.numel() != 1)
    fail(ErrorCode::invalid_input, "input '{}' has shape [{}]; the model reads it as one value (a scalar)", name,
         fmt::join(t.shape(), ","));
  switch (t.dtype()) {
    case DType::i64: return *t.data<int64_t>();
    case DType::i32: return *t.data<int32_t>();
    case DType::i16: return *t.data<int16_t>();
    case DType::i8: return *t.data<int8_t>();
    case DType::u8: return *t.data<uint8_t>();
    case DType::u16: return *t.data<uint16_t>();
    case DType::u32: return *t.data<uint32_t>();
    case DType::boolean: return *static_cast<const uint8_t*>(t.raw()) ? 1 : 0;
    default:
      fail(ErrorCode::invalid_input, "input '{}' is {}; the model reads it as an integer or bool value", name,
           dtype_name(t.dtype()));
  }
}

}  // namespace

std::vector<int64_t> request_sizes(const artifact::BucketSet& set, const std::map<std::string, Tensor>& inputs) {
  std::vector<int64_t> sizes(set.dims.size(), -1);
  std::vector<std::string> from(set.dims.size());
  std::vector<bool> given(set.dims.size(), false);
  for (size_t k = 0; k < set.dims.size(); ++k)
    if (set.dims[k].kind == artifact::DimKind::value) {
      auto it = inputs.find(set.dims[k].symbol);
      if (it == inputs.end()) fail(ErrorCode::invalid_input, "missing input '{}'", set.dims[k].symbol);
      sizes[k] = guard_value(set.dims[k].symbol, it->second);
      given[k] = true;
    }
  for (auto& io : set.inputs) {
    auto it = inputs.find(io.name);
    if (it == inputs.end()) continue;
    const Tensor& t = it->second;
    if (static_cast<size_t>(t.rank()) != io.axes.size())
      fail(ErrorCode::invalid_input, "input '{}' has rank {}, the model expects {}", io.name, t.rank(), io.axes.size());
    for (size_t a = 0; a < io.axes.size(); ++a) {
      int d = dim_index(set, io.axes[a]);
      if (d < 0) continue;
      auto k = static_cast<size_t>(d);
      int64_t v = t.dim(static_cast<int64_t>(a));
      if (v < (set.dims[k].kind == artifact::DimKind::specialized ? 0 : 1))
        fail(ErrorCode::invalid_input, "input '{}' dim {} ('{}') is {}; a bucketed dim must be at least 1", io.name, a,
             io.axes[a], v);
      if (given[k] && sizes[k] != v)
        fail(ErrorCode::invalid_input, "input '{}' dim {} ('{}') is {} but '{}' is {} in input '{}'", io.name, a,
             io.axes[a], v, io.axes[a], sizes[k], from[k]);
      sizes[k] = v;
      given[k] = true;
      from[k] = io.name;
    }
  }
  for (size_t k = 0; k < sizes.size(); ++k)
    if (!given[k])
      fail(ErrorCode::invalid_input, "no input gives the size of bucketed dim '{}'", set.dims[k].symbol);
  return sizes;
}

Choice choose(const artifact::BucketSet& set, const std::vector<int64_t>& request) {
  Choice c;
  c.sizes = request;
  for (size_t k = 0; k < set.dims.size(); ++k) {
    const artifact::BucketDim& d = set.dims[k];
    int64_t r = request[k];
    // Specialized dims and value guards: a program of exactly the request
    // (ProgramSet may round a specialized dim up once it has seen enough sizes).
    if (d.kind != artifact::DimKind::declared) continue;
    if (std::find(d.sizes.begin(), d.sizes.end(), r) != d.sizes.end()) continue;  // exact bucket
    std::string buckets = fmt::format("{}", fmt::join(d.sizes, ","));
    if (d.pad == artifact::PadMode::none) {
      c.inside = false;
      c.why += fmt::format("{}dim '{}' is {}, not one of its buckets {} (padding '{}' is not safe for this model)",
                           c.why.empty() ? "" : "; ", d.symbol, r, buckets, d.symbol);
    } else if (r < d.min || r > d.max) {
      c.inside = false;
      c.why += fmt::format("{}dim '{}' is {}, outside its range {}..{} (buckets {})", c.why.empty() ? "" : "; ",
                           d.symbol, r, d.min, d.max, buckets);
    } else {
      c.sizes[k] = *std::lower_bound(d.sizes.begin(), d.sizes.end(), r);
    }
  }
  return c;
}

bool serves(const artifact::BucketSet& set, const std::vector<int64_t>& program, const std::vector<int64_t>& request) {
  if (program.size() != set.dims.size() || request.size() != set.dims.size()) return false;
  for (size_t k = 0; k < set.dims.size(); ++k) {
    const artifact::BucketDim& d = set.dims[k];
    if (program[k] == request[k]) continue;
    if (d.kind == artifact::DimKind::value) return false;
    if (d.kind == artifact::DimKind::specialized) {
      // A specialized sequence is padded only when run() has checked the
      // request's keep-mask (masks_attend): an explicit artifact's program
      // serves its own sizes there.
      if (d.pad != artifact::PadMode::batch || request[k] > program[k] || request[k] < 1) return false;
      continue;
    }
    bool declared = std::find(d.sizes.begin(), d.sizes.end(), program[k]) != d.sizes.end();
    if (d.pad == artifact::PadMode::none || !declared || request[k] > program[k] || request[k] < d.min) return false;
  }
  return true;
}

namespace {

bool keep_mask_dtype(DType t) {
  return t == DType::boolean || t == DType::i64 || t == DType::i32 || t == DType::i16 || t == DType::i8 ||
         t == DType::u8 || t == DType::u16 || t == DType::u32 || t == DType::u64;
}

bool named_mask(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return name.find("mask") != std::string::npos;
}

/// Whether every row of `t` along `axis` has a nonzero first element.
bool rows_start_nonzero(const Tensor& t, size_t axis) {
  const auto& sh = t.shape();
  const size_t es = dtype_size(t.dtype());
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < axis; ++i) outer *= sh[i];
  for (size_t i = axis + 1; i < sh.size(); ++i) inner *= sh[i];
  const int64_t len = sh[axis];
  if (len == 0) return true;
  const auto* p = static_cast<const uint8_t*>(t.raw());
  static const uint8_t zero[8] = {};
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in)
      if (std::memcmp(p + (o * len * inner + in) * static_cast<int64_t>(es), zero, es) == 0) return false;
  return true;
}

}  // namespace

bool masks_attend(const artifact::BucketSet& set, const std::map<std::string, Tensor>& inputs, size_t k) {
  for (auto& io : set.inputs) {
    auto it = inputs.find(io.name);
    if (it == inputs.end() || !keep_mask_dtype(it->second.dtype()) || !named_mask(io.name)) continue;
    for (size_t a = 0; a < io.axes.size() && a < it->second.shape().size(); ++a)
      if (io.axes[a] == set.dims[k].symbol && !rows_start_nonzero(it->second, a)) return false;
  }
  return true;
}

std::map<std::string, Tensor> pad_inputs(const artifact::BucketSet& set, const std::map<std::string, Tensor>& inputs,
                                         const std::vector<int64_t>& program) {
  std::map<std::string, Tensor> out = inputs;
  for (auto& io : set.inputs) {
    auto it = out.find(io.name);
    if (it == out.end()) continue;
    std::vector<int64_t> shape = resized(set, io, it->second, program);
    if (shape == it->second.shape()) continue;
    if (dtype_size(it->second.dtype()) == 0)
      fail(ErrorCode::invalid_input, "input '{}' ({}) cannot be padded to a bucket; give it at a bucket's size",
           io.name, dtype_name(it->second.dtype()));
    // Zeros: padding rows of a batch, and for a sequence the masked-out
    // positions (an attention mask of 0 excludes them from every real position).
    Tensor padded(it->second.dtype(), shape);
    copy_common(it->second, padded);
    it->second = std::move(padded);
  }
  return out;
}

void slice_outputs(const artifact::BucketSet& set, std::map<std::string, Tensor>& outputs,
                   const std::vector<int64_t>& request) {
  for (auto& io : set.outputs) {
    auto it = outputs.find(io.name);
    if (it == outputs.end() || dtype_size(it->second.dtype()) == 0) continue;
    std::vector<int64_t> shape = resized(set, io, it->second, request);
    if (shape == it->second.shape()) continue;
    Tensor sliced(it->second.dtype(), shape);
    copy_common(it->second, sliced);
    it->second = std::move(sliced);
  }
}

std::vector<RowPart> plan_rows(int64_t n, const std::vector<std::pair<int64_t, double>>& programs, double* cost) {
  if (n < 1 || programs.empty()) return {};
  // Largest first: of equal plans, the one whose big parts come first (and
  // whose padded part, if any, is last) wins.
  std::vector<std::pair<int64_t, double>> by_size = programs;
  std::sort(by_size.begin(), by_size.end(), [](auto& a, auto& b) { return a.first > b.first; });
  // best[m]: cheapest cost of m rows; how[m]: the program of its first part
  // (the rest is best[m - size]); parts[m] breaks ties towards fewer calls.
  const auto un = static_cast<size_t>(n);
  std::vector<double> best(un + 1, std::numeric_limits<double>::infinity());
  std::vector<int64_t> how(un + 1, 0), parts(un + 1, 0);
  best[0] = 0;
  for (size_t m = 1; m <= un; ++m)
    for (auto& [size, c] : by_size) {
      if (size < 1) continue;
      // A program at least m rows long takes all m (padded: the last part);
      // a shorter one takes `size` full rows and leaves the rest.
      auto take = static_cast<size_t>(std::min<int64_t>(size, static_cast<int64_t>(m)));
      double total = c + best[m - take];
      int64_t calls = 1 + parts[m - take];
      if (total < best[m] - 1e-12 || (std::abs(total - best[m]) <= 1e-12 && calls < parts[m])) {
        best[m] = total;
        how[m] = size;
        parts[m] = calls;
      }
    }
  std::vector<RowPart> plan;
  for (int64_t m = n; m > 0;) {
    int64_t size = how[static_cast<size_t>(m)];
    int64_t rows = std::min(size, m);
    plan.push_back({rows, size});
    m -= rows;
  }
  if (cost) *cost = best[un];
  return plan;
}

std::map<std::string, Tensor> slice_rows(const artifact::BucketSet& set, size_t dim,
                                         const std::map<std::string, Tensor>& inputs, int64_t offset, int64_t count) {
  std::map<std::string, Tensor> out = inputs;
  const std::string& sym = set.dims.at(dim).symbol;
  for (auto& io : set.inputs) {
    auto it = out.find(io.name);
    if (it == out.end() || io.axes.empty() || io.axes[0] != sym) continue;
    const Tensor& t = it->second;
    const size_t es = dtype_size(t.dtype());
    if (es == 0)
      fail(ErrorCode::invalid_input, "input '{}' ({}) cannot be split into row batches; give its batch at a size a "
           "program holds", io.name, dtype_name(t.dtype()));
    std::vector<int64_t> shape = t.shape();
    const size_t row = static_cast<size_t>(t.numel() / std::max<int64_t>(shape[0], 1)) * es;
    shape[0] = count;
    // The program only reads its inputs: a view of the caller's rows.
    auto* base = static_cast<uint8_t*>(const_cast<void*>(t.raw()));
    it->second = Tensor::view(t.dtype(), std::move(shape), base + static_cast<size_t>(offset) * row, nullptr);
  }
  return out;
}

std::map<std::string, Tensor> concat_rows(const artifact::BucketSet& set, size_t dim,
                                          std::vector<std::map<std::string, Tensor>>& parts) {
  if (parts.empty()) return {};
  std::map<std::string, Tensor> out = std::move(parts.front());
  const std::string& sym = set.dims.at(dim).symbol;
  for (auto& io : set.outputs) {
    auto first = out.find(io.name);
    if (first == out.end() || io.axes.empty() || io.axes[0] != sym) continue;
    std::vector<int64_t> shape = first->second.shape();
    int64_t rows = shape[0];
    for (size_t p = 1; p < parts.size(); ++p) {
      const Tensor& t = parts[p].at(io.name);
      if (t.rank() != static_cast<int64_t>(shape.size()) || t.dtype() != first->second.dtype() ||
          !std::equal(shape.begin() + 1, shape.end(), t.shape().begin() + 1))
        fail(ErrorCode::internal, "output '{}': the row parts of a split batch have shapes {} and {}", io.name,
             first->second.describe(), t.describe());
      rows += t.dim(0);
    }
    shape[0] = rows;
    Tensor whole(first->second.dtype(), shape);
    auto* dst = static_cast<uint8_t*>(whole.raw());
    size_t at = 0;
    for (size_t p = 0; p < parts.size(); ++p) {
      const Tensor& t = p == 0 ? first->second : parts[p].at(io.name);
      std::memcpy(dst + at, t.raw(), t.nbytes());
      at += t.nbytes();
    }
    first->second = std::move(whole);
  }
  return out;
}

std::string sizes_str(const artifact::BucketSet& set, const std::vector<int64_t>& sizes) {
  std::string s;
  for (size_t k = 0; k < set.dims.size() && k < sizes.size(); ++k)
    s += fmt::format("{}{}={}", k ? "," : "", set.dims[k].symbol, sizes[k]);
  return s;
}

}  // namespace kiln::buckets
