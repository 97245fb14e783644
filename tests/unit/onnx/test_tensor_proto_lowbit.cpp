// Tests for the 8-bit float and 4-bit integer decoding in
// src/onnx/tensor_proto.cpp. The packed layouts follow onnx.proto (4-bit
// values two per byte, element 2k in the low nibble; float8 one bit pattern
// per int32_data entry or raw_data byte); the bytes below were packed by hand.
#include <gtest/gtest.h>

#include "onnx/onnx_pb.h"
#include "onnx/tensor_proto.h"
#include "support/error.h"

namespace kiln::testing {
namespace {

onnx::TensorProto proto(int type, std::vector<int64_t> dims) {
  onnx::TensorProto tp;
  tp.set_data_type(type);
  for (auto d : dims) tp.add_dims(d);
  return tp;
}

TEST(TensorProtoLowBit, Int4FromRawDataIsUnpackedAndSignExtended) {
  // Elements [-8, 7, -1, 3, 5]: bytes 0x78 (low -8 = 0x8, high 7), 0x3F (-1 = 0xF, 3), 0x05.
  auto tp = proto(22, {5});
  tp.set_raw_data(std::string("\x78\x3F\x05", 3));
  Tensor t = onnx_import::tensor_from_proto(tp, ".", "t");
  EXPECT_EQ(t.dtype(), DType::i4);
  EXPECT_EQ(std::vector<int8_t>(t.data<int8_t>(), t.data<int8_t>() + 5), (std::vector<int8_t>{-8, 7, -1, 3, 5}));
}

TEST(TensorProtoLowBit, Uint4FromInt32Data) {
  // Elements [1, 15, 0, 9]: one packed byte per int32_data entry: 0xF1, 0x90.
  auto tp = proto(21, {2, 2});
  tp.add_int32_data(0xF1);
  tp.add_int32_data(0x90);
  Tensor t = onnx_import::tensor_from_proto(tp, ".", "t");
  EXPECT_EQ(t.dtype(), DType::u4);
  EXPECT_EQ(std::vector<uint8_t>(t.data<uint8_t>(), t.data<uint8_t>() + 4), (std::vector<uint8_t>{1, 15, 0, 9}));
}

TEST(TensorProtoLowBit, Int4WithWrongPackedSizeIsAnError) {
  auto tp = proto(22, {5});
  tp.set_raw_data(std::string("\x78\x3F", 2));  // needs 3 bytes
  EXPECT_THROW(onnx_import::tensor_from_proto(tp, ".", "t"), Error);
}

TEST(TensorProtoLowBit, Float8Forms) {
  auto tp = proto(17, {3});
  for (int v : {0x38, 0xC0, 0x7F}) tp.add_int32_data(v);
  Tensor t = onnx_import::tensor_from_proto(tp, ".", "t");
  EXPECT_EQ(t.dtype(), DType::f8e4m3fn);
  EXPECT_EQ(std::vector<uint8_t>(t.data<uint8_t>(), t.data<uint8_t>() + 3), (std::vector<uint8_t>{0x38, 0xC0, 0x7F}));
  auto raw = proto(20, {2});
  raw.set_raw_data(std::string("\x80\x04", 2));
  t = onnx_import::tensor_from_proto(raw, ".", "t");
  EXPECT_EQ(t.dtype(), DType::f8e5m2fnuz);
  EXPECT_EQ(t.data<uint8_t>()[0], 0x80);
  EXPECT_EQ(t.data<uint8_t>()[1], 0x04);
  EXPECT_EQ(onnx_import::dtype_from_onnx(18, "x"), DType::f8e4m3fnuz);
  EXPECT_EQ(onnx_import::dtype_from_onnx(19, "x"), DType::f8e5m2);
  EXPECT_THROW(onnx_import::dtype_from_onnx(23, "x"), Error);  // FLOAT4E2M1
}

}  // namespace
}  // namespace kiln::testing
