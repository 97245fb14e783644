// Size and extent checks in src/onnx/tensor_proto.cpp: a TensorProto whose
// declared shape does not match its data is refused before the tensor is
// allocated, and external_data offset/length must be non-negative integers
// (ONNX docs/ExternalData.md). Found by fuzz_onnx_importer; the fuzz inputs
// are kept in fuzz/corpus/onnx_importer/crash-*.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "onnx/onnx_pb.h"
#include "onnx/tensor_proto.h"
#include "support/error.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;

onnx::TensorProto f32(std::vector<int64_t> dims) {
  onnx::TensorProto tp;
  tp.set_data_type(1);
  for (auto d : dims) tp.add_dims(d);
  return tp;
}

ErrorCode code_of(const onnx::TensorProto& tp, const fs::path& dir, std::string* what = nullptr) {
  try {
    onnx_import::tensor_from_proto(tp, dir, "initializer 'w'");
  } catch (const Error& e) {
    if (what) *what = e.what();
    return e.code();
  }
  return ErrorCode::internal;  // no error at all: the tests below expect one
}

void external(onnx::TensorProto& tp, const std::string& location, const std::string& offset = "",
              const std::string& length = "") {
  tp.set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [&](const char* k, const std::string& v) {
    auto* e = tp.add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  add("location", location);
  if (!offset.empty()) add("offset", offset);
  if (!length.empty()) add("length", length);
}

struct ExternalFile : ::testing::Test {
  fs::path dir = fs::temp_directory_path() / ("kiln-tp-sizes-" + std::to_string(::getpid()));
  void SetUp() override {
    fs::create_directories(dir);
    std::ofstream(dir / "w.bin", std::ios::binary).write("0123456789abcdef", 16);  // 16 bytes
  }
  void TearDown() override { fs::remove_all(dir); }
};

TEST(TensorProtoSizes, HugeShapeWithLittleRawDataIsRefusedWithoutAllocating) {
  // 2 x 1056914431 floats would be 8.4 GB; the model carries 144 bytes.
  auto tp = f32({2, 1056914431});
  tp.set_raw_data(std::string(144, '\0'));
  std::string what;
  EXPECT_EQ(code_of(tp, ".", &what), ErrorCode::invalid_model);
  EXPECT_NE(what.find("raw_data has 144 bytes"), std::string::npos) << what;
  EXPECT_NE(what.find("initializer 'w'"), std::string::npos) << what;
}

TEST(TensorProtoSizes, ShapeWhoseByteSizeOverflowsIsInvalidModel) {
  auto tp = f32({1LL << 31, 1LL << 31, 4});
  tp.set_raw_data("abcd");
  std::string what;
  EXPECT_EQ(code_of(tp, ".", &what), ErrorCode::invalid_model);
  EXPECT_NE(what.find("too large"), std::string::npos) << what;
}

TEST(TensorProtoSizes, TypedFieldCountIsCheckedAgainstTheShape) {
  auto tp = f32({1000000, 1000});
  tp.add_float_data(1.f);
  std::string what;
  EXPECT_EQ(code_of(tp, ".", &what), ErrorCode::invalid_model);
  EXPECT_NE(what.find("has 1 values"), std::string::npos) << what;
}

TEST_F(ExternalFile, ReadsAtOffset) {
  auto tp = f32({2});
  external(tp, "w.bin", "8", "8");
  Tensor t = onnx_import::tensor_from_proto(tp, dir, "w");
  std::string got(static_cast<const char*>(t.raw()), 8);
  EXPECT_EQ(got, "89abcdef");
}

TEST_F(ExternalFile, OffsetThatIsNotANumberIsInvalidModel) {
  for (const char* bad : {"x", "12x", "-4", " 4", "99999999999999999999999"}) {
    auto tp = f32({2});
    external(tp, "w.bin", bad);
    std::string what;
    EXPECT_EQ(code_of(tp, dir, &what), ErrorCode::invalid_model) << bad;
    EXPECT_NE(what.find("'offset'"), std::string::npos) << what;
  }
  auto tp = f32({2});
  external(tp, "w.bin", "0", "eight");
  EXPECT_EQ(code_of(tp, dir), ErrorCode::invalid_model);
}

TEST_F(ExternalFile, FileShorterThanTheShapeIsRefusedBeforeAllocating) {
  auto tp = f32({3, 108, 101, 110, 103, 116, 104});  // ~17.9 TB of floats, 16-byte file
  external(tp, "w.bin");
  std::string what;
  EXPECT_EQ(code_of(tp, dir, &what), ErrorCode::invalid_model);
  EXPECT_NE(what.find("too short"), std::string::npos) << what;
  auto at_end = f32({2});
  external(at_end, "w.bin", "12");  // 8 bytes needed at 12 of 16
  EXPECT_EQ(code_of(at_end, dir), ErrorCode::invalid_model);
}

TEST_F(ExternalFile, MissingFileIsAnIoError) {
  auto tp = f32({2});
  external(tp, "absent.bin");
  std::string what;
  EXPECT_EQ(code_of(tp, dir, &what), ErrorCode::io);
  EXPECT_NE(what.find("absent.bin"), std::string::npos) << what;
}

}  // namespace
}  // namespace kiln::testing
