// kiln public API: tensors.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kiln/dtype.h"

namespace kiln {

/// A dense, row-major (C order) tensor: dtype, shape and a byte buffer.
///
/// Copying a Tensor is shallow (the buffer is shared, like a shared_ptr);
/// use clone() for a deep copy. A Tensor may view memory it does not own
/// (for example constants mapped from an artifact with mmap); `keepalive`
/// holds whatever owns that memory. A rank-0 tensor (shape {}) has one element.
class Tensor {
 public:
  Tensor() = default;

  /// Allocates a zero-filled tensor. Throws kiln::Error(invalid_input) for a
  /// negative dimension or an unsupported dtype.
  Tensor(DType dtype, std::vector<int64_t> shape);

  /// Wraps existing memory without copying. `data` must hold at least
  /// nbytes() bytes and stay valid while `keepalive` (may be null) lives.
  static Tensor view(DType dtype, std::vector<int64_t> shape, void* data,
                     std::shared_ptr<const void> keepalive);

  /// Copies `bytes` (must be exactly numel()*dtype_size bytes) into a new tensor.
  static Tensor from_bytes(DType dtype, std::vector<int64_t> shape, const void* bytes, size_t nbytes);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t i) const { return shape_.at(static_cast<size_t>(i)); }
  /// Number of elements (product of the shape; 1 for rank 0).
  int64_t numel() const;
  /// Size of the data in bytes.
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool defined() const { return dtype_ != DType::undefined; }

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  template <class T> T* data() { return static_cast<T*>(data_); }
  template <class T> const T* data() const { return static_cast<const T*>(data_); }

  /// Deep copy into freshly owned memory.
  Tensor clone() const;
  /// Same data, new shape with the same element count; throws otherwise.
  Tensor reshaped(std::vector<int64_t> shape) const;
  /// "float32[1,3,224,224]"
  std::string describe() const;

 private:
  DType dtype_ = DType::undefined;
  std::vector<int64_t> shape_;
  void* data_ = nullptr;
  std::shared_ptr<const void> owner_;
};

/// "1x3x224x224" (empty string for rank 0).
std::string shape_to_string(const std::vector<int64_t>& shape);

}  // namespace kiln
