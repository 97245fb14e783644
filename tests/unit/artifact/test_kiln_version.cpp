// kiln's version (the compat field kiln_version) is "<release>+<build id>" (support/version.h,
// cmake/build_id.cmake): the build id tells builds from different sources
// apart, so the artifacts and cache entries of one are never run by another.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "support/version.h"

namespace kiln::testing {
namespace {

TEST(Version, IsTheReleaseAPlusAndTwelveHexDigitsOfBuildId) {
  std::string v = version();
  EXPECT_TRUE(std::regex_match(v, std::regex(R"((0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\+[0-9a-f]{12})")))
      << v;
  EXPECT_TRUE(std::regex_match(std::string(build_id()), std::regex("[0-9a-f]{12}"))) << build_id();
  EXPECT_EQ(v, std::string(project_version()) + "+" + build_id());
  // A semantic version with build metadata (ONNX Runtime checks the plugin
  // EP's version against SemVer 2.0) and a PEP 440 version with a local label
  // (kiln.__version__): both hold for <d>.<d>.<d>+<hex>, checked above.
}

}  // namespace
}  // namespace kiln::testing
