// Dropout reference kernel (inference): the output is the input and the mask
// all true; training with a ratio > 0 is refused (the values below are the
// inputs themselves, which is what the spec prescribes outside training).
#include "kiln/errors.h"
#include "op_test_util.h"

namespace kiln {
namespace {

using testing::make;
using testing::run_op;
using testing::values;

TEST(Dropout, InferenceIsIdentityWithTrueMask) {
  auto y = run_op("Dropout", {}, {make<float>({2, 2}, {1.5f, -2.f, 0.f, 7.f}), make<float>({}, {0.3f})}, 2);
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{1.5f, -2.f, 0.f, 7.f}));
  ASSERT_EQ(y[1].dtype(), DType::boolean);
  EXPECT_EQ(values<bool>(y[1]), (std::vector<bool>{true, true, true, true}));
}

TEST(Dropout, TrainingWithZeroRatioIsIdentity) {
  auto y = run_op("Dropout", {}, {make<int64_t>({3}, {4, 5, 6}), make<float>({}, {0.f}), make<bool>({}, {true})}, 2);
  EXPECT_EQ(values<int64_t>(y[0]), (std::vector<int64_t>{4, 5, 6}));
  EXPECT_EQ(values<bool>(y[1]), (std::vector<bool>{true, true, true}));
}

TEST(Dropout, TrainingFalseIgnoresRatio) {
  auto y = run_op("Dropout", {}, {make<float>({2}, {1.f, 2.f}), make<float>({}, {0.9f}), make<bool>({}, {false})});
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{1.f, 2.f}));
}

TEST(Dropout, RandomTrainingIsUnsupported) {
  try {
    run_op("Dropout", {}, {make<float>({2}, {1.f, 2.f}), make<float>({}, {0.5f}), make<bool>({}, {true})});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("training_mode"), std::string::npos) << e.what();
  }
}

TEST(Dropout, TrainingWithDefaultRatioIsUnsupported) {
  Tensor absent;
  EXPECT_THROW(run_op("Dropout", {}, {make<float>({2}, {1.f, 2.f}), absent, make<bool>({}, {true})}), Error);
}

}  // namespace
}  // namespace kiln
