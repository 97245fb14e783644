// Test helpers: run one operator's reference kernel (and its shape
// inference) on concrete tensors without building a model.
#pragma once
#include <gtest/gtest.h>

#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ops/registry.h"

namespace kiln::testing {

/// Builds a tensor of type T (float, int64_t, ... ; bool for boolean) from values.
template <class T>
Tensor make(std::vector<int64_t> shape, std::vector<T> values) {
  DType dt = std::is_same_v<T, float>     ? DType::f32
             : std::is_same_v<T, double>  ? DType::f64
             : std::is_same_v<T, int64_t> ? DType::i64
             : std::is_same_v<T, int32_t> ? DType::i32
             : std::is_same_v<T, int8_t>  ? DType::i8
             : std::is_same_v<T, uint8_t> ? DType::u8
             : std::is_same_v<T, bool>    ? DType::boolean
                                          : DType::undefined;
  Tensor t(dt, shape);
  EXPECT_EQ(static_cast<size_t>(t.numel()), values.size()) << "test tensor size";
  for (size_t i = 0; i < values.size(); ++i) t.data<T>()[i] = values[i];
  return t;
}

/// Elements of t as a vector<T> (T must match the dtype's C++ type).
template <class T>
std::vector<T> values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

/// Expects t to have `shape` and every float32 element within `tol` of
/// `want` (absolute), naming the first differing flat index.
inline void expect_tensor_near(const Tensor& t, const std::vector<int64_t>& shape, const std::vector<float>& want,
                               float tol) {
  ASSERT_EQ(t.shape(), shape);
  ASSERT_EQ(static_cast<size_t>(t.numel()), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(t.data<float>()[i], want[i], tol) << i;
}

/// Runs op `op_type` (default domain and opset 21 unless given) on `inputs`
/// (an undefined Tensor = absent optional input). Also runs shape inference
/// with the inputs as constants and checks that every output it predicts
/// with a static shape matches the kernel's output shape and dtype.
std::vector<Tensor> run_op(const std::string& op_type, std::map<std::string, ir::AttrValue> attrs,
                           std::vector<Tensor> inputs, size_t num_outputs = 1, int opset = 21,
                           const std::string& domain = "");

}  // namespace kiln::testing
