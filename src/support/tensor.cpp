#include "kiln/tensor.h"

#include <cstdlib>
#include <cstring>

#include <fmt/ranges.h>

#include "support/error.h"

namespace kiln {

namespace {
int64_t checked_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) fail(ErrorCode::invalid_input, "negative dimension {} in shape [{}]", d, shape_to_string(shape));
    if (d != 0 && n > (int64_t{1} << 48) / d)
      fail(ErrorCode::invalid_input, "tensor shape [{}] is too large", shape_to_string(shape));
    n *= d;
  }
  return n;
}

// 64-byte aligned so kernels may use aligned vector loads.
std::shared_ptr<void> alloc_bytes(size_t n) {
  size_t rounded = (n + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!p) fail(ErrorCode::internal, "out of memory allocating {} bytes", n);
  std::memset(p, 0, rounded == 0 ? 64 : rounded);
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}
}  // namespace

Tensor::Tensor(DType dtype, std::vector<int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) {
  if (dtype_size(dtype) == 0) fail(ErrorCode::unsupported, "tensors of dtype {} are not supported", dtype_name(dtype));
  auto buf = alloc_bytes(static_cast<size_t>(checked_numel(shape_)) * dtype_size(dtype));
  data_ = buf.get();
  owner_ = std::move(buf);
}

Tensor Tensor::view(DType dtype, std::vector<int64_t> shape, void* data, std::shared_ptr<const void> keepalive) {
  checked_numel(shape);
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.data_ = data;
  t.owner_ = std::move(keepalive);
  return t;
}

Tensor Tensor::from_bytes(DType dtype, std::vector<int64_t> shape, const void* bytes, size_t nbytes) {
  Tensor t(dtype, std::move(shape));
  if (nbytes != t.nbytes())
    fail(ErrorCode::invalid_input, "{} needs {} bytes, got {}", t.describe(), t.nbytes(), nbytes);
  if (nbytes) std::memcpy(t.data_, bytes, nbytes);
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

Tensor Tensor::clone() const {
  Tensor t(dtype_, shape_);
  if (nbytes()) std::memcpy(t.data_, data_, nbytes());
  return t;
}

Tensor Tensor::reshaped(std::vector<int64_t> shape) const {
  Tensor t = *this;
  t.shape_ = std::move(shape);
  if (checked_numel(t.shape_) != numel())
    fail(ErrorCode::internal, "cannot reshape {} to [{}]", describe(), shape_to_string(t.shape_));
  return t;
}

std::string Tensor::describe() const {
  return fmt::format("{}[{}]", dtype_name(dtype_), fmt::join(shape_, ","));
}

std::string shape_to_string(const std::vector<int64_t>& shape) { return fmt::format("{}", fmt::join(shape, "x")); }

}  // namespace kiln
