#include <gtest/gtest.h>

#include <fstream>

#include "../cache/cache_test_util.h"
#include "model_builder.h"
#include "onnx/importer.h"
#include "support/error.h"

namespace kiln::testing {
namespace {

ErrorCode code_of(const std::function<void()>& f, std::string* msg = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (msg) *msg = e.what();
    return e.code();
  }
  return static_cast<ErrorCode>(0);
}

TEST(Importer, ImportsInputsInitializersAndNodes) {
  auto b = mlp_model();
  auto bytes = b.bytes();
  ir::Model m = onnx_import::import_bytes(bytes.data(), bytes.size(), ".", "mlp");
  EXPECT_EQ(m.opset, 17);
  ASSERT_EQ(m.main.inputs.size(), 1u);
  const ir::Value& x = m.value(m.main.inputs[0]);
  EXPECT_EQ(x.name, "x");
  EXPECT_EQ(x.dtype, DType::f32);
  ASSERT_TRUE(x.shape.has_value());
  EXPECT_FALSE((*x.shape)[0].is_static());
  EXPECT_EQ((*x.shape)[0].symbol, "N");
  EXPECT_EQ((*x.shape)[1].value, 4);
  ASSERT_EQ(m.main.nodes.size(), 3u);
  EXPECT_EQ(m.main.nodes[0].op_type, "MatMul");
  const ir::Value& w = m.value(m.main.nodes[0].inputs[1]);
  ASSERT_TRUE(w.constant.has_value());
  EXPECT_EQ(w.constant->shape(), (std::vector<int64_t>{4, 3}));
  EXPECT_FLOAT_EQ(w.constant->data<float>()[3 * 3 + 2], 0.4f - 0.4f);  // W[3][2] = 0.1*4 - 0.2*2
  EXPECT_FLOAT_EQ(w.constant->data<float>()[1], -0.1f);                // W[0][1] = 0.1 - 0.2
}

TEST(Importer, InputThatIsAlsoInitializerIsAConstant) {
  ModelBuilder b;
  b.input("x", 1, {2});
  b.input("bias", 1, {2});
  b.initializer("bias", {2}, {1.f, 2.f});
  b.node("Add", {"x", "bias"}, {"y"});
  b.output("y");
  auto bytes = b.bytes();
  ir::Model m = onnx_import::import_bytes(bytes.data(), bytes.size(), ".", "m");
  ASSERT_EQ(m.main.inputs.size(), 1u);
  EXPECT_EQ(m.value(m.main.inputs[0]).name, "x");
  EXPECT_TRUE(m.value(m.main.nodes[0].inputs[1]).constant.has_value());
}

TEST(Importer, ReadsExternalData) {
  TempDir dir;
  const std::vector<float> w{1.5f, -2.f, 3.25f};  // what external_data_model stores at offset 8
  const auto model = external_data_model(dir.path());
  ir::Model m = onnx_import::import_file(model);
  const Tensor& c = *m.value(m.main.nodes[0].inputs[1]).constant;
  EXPECT_EQ(std::vector<float>(c.data<float>(), c.data<float>() + 3), w);

  // The digest covers the external file: change one weight byte, the digest changes.
  std::string d1 = onnx_import::model_digest(model);
  {
    std::fstream f(dir / "weights.bin", std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(12);
    f.put('\x7f');
  }
  EXPECT_NE(d1, onnx_import::model_digest(model));
}

TEST(Importer, ExternalDataOutsideTheModelDirectoryIsRefused) {
  ModelBuilder b;
  b.input("x", 1, {1});
  auto* t = b.graph().add_initializer();
  t->set_name("w");
  t->set_data_type(1);
  t->add_dims(1);
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* e = t->add_external_data();
  e->set_key("location");
  e->set_value("../../etc/passwd");
  b.node("Mul", {"x", "w"}, {"y"});
  b.output("y");
  auto bytes = b.bytes();
  std::string msg;
  EXPECT_EQ(code_of([&] { onnx_import::import_bytes(bytes.data(), bytes.size(), "/tmp", "m"); }, &msg),
            ErrorCode::invalid_model);
  EXPECT_NE(msg.find("must not leave"), std::string::npos) << msg;
}

TEST(Importer, NotOnnxAndTruncatedAreInvalidModel) {
  std::string junk = "this is certainly not a protobuf \xff\xff\xff\xff";
  std::string msg;
  EXPECT_EQ(code_of([&] { onnx_import::import_bytes(junk.data(), junk.size(), ".", "junk.onnx"); }, &msg),
            ErrorCode::invalid_model);
  EXPECT_NE(msg.find("junk.onnx"), std::string::npos) << msg;
  auto bytes = mlp_model().bytes();
  for (size_t cut : {bytes.size() / 3, bytes.size() / 2, bytes.size() - 5}) {
    EXPECT_EQ(code_of([&] { onnx_import::import_bytes(bytes.data(), cut, ".", "cut"); }), ErrorCode::invalid_model)
        << "cut at " << cut;
  }
  EXPECT_EQ(code_of([&] { onnx_import::import_bytes(bytes.data(), 0, ".", "empty"); }), ErrorCode::invalid_model);
}

TEST(Importer, UnsupportedOperatorNamesOpDomainOpsetAndNode) {
  ModelBuilder b;
  auto* os = b.proto().add_opset_import();
  os->set_domain("com.example");
  os->set_version(3);
  b.input("x", 1, {1});
  auto& n = b.node("FooBar", {"x"}, {"y"}, "my_node");
  n.set_domain("com.example");
  b.output("y");
  auto bytes = b.bytes();
  std::string msg;
  EXPECT_EQ(code_of([&] { onnx_import::import_bytes(bytes.data(), bytes.size(), ".", "m"); }, &msg),
            ErrorCode::unsupported);
  for (const char* part : {"FooBar", "com.example", "3", "my_node"}) EXPECT_NE(msg.find(part), std::string::npos) << msg;
}

TEST(Importer, UndefinedInputNameIsInvalidModel) {
  ModelBuilder b;
  b.input("x", 1, {1});
  b.node("Relu", {"nope"}, {"y"}, "r");
  b.output("y");
  auto bytes = b.bytes();
  std::string msg;
  EXPECT_EQ(code_of([&] { onnx_import::import_bytes(bytes.data(), bytes.size(), ".", "m"); }, &msg),
            ErrorCode::invalid_model);
  EXPECT_NE(msg.find("'nope'"), std::string::npos) << msg;
}

TEST(Importer, OpsetOutsideTheSupportedRangeIsUnsupported) {
  ModelBuilder b(99);
  b.input("x", 1, {1});
  b.node("Relu", {"x"}, {"y"});
  b.output("y");
  auto bytes = b.bytes();
  std::string msg;
  EXPECT_EQ(code_of([&] { onnx_import::import_bytes(bytes.data(), bytes.size(), ".", "m"); }, &msg),
            ErrorCode::unsupported);
  EXPECT_NE(msg.find("99"), std::string::npos) << msg;
}

TEST(Importer, DigestCoversWeights) {
  TempDir dir;
  mlp_model(1.0f).save(dir / "a.onnx");
  mlp_model(1.0f).save(dir / "b.onnx");
  mlp_model(2.0f).save(dir / "c.onnx");
  EXPECT_EQ(onnx_import::model_digest(dir / "a.onnx"), onnx_import::model_digest(dir / "b.onnx"));
  EXPECT_NE(onnx_import::model_digest(dir / "a.onnx"), onnx_import::model_digest(dir / "c.onnx"));
  EXPECT_EQ(onnx_import::model_digest(dir / "a.onnx").size(), 32u);
}

}  // namespace
}  // namespace kiln::testing
