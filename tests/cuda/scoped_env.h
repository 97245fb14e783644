// An environment variable set for one scope, for the cuda tests that compare
// a lowering with and without one of its measurement switches
// (KILN_CUDA_GEMM_PAD_N, KILN_CUDA_DWCONV, KILN_CUDA_GEMM_SPLIT_K, ...).
#pragma once
#include <cstdlib>
#include <string>

namespace kiln::testing {

/// Sets `name` to `value` (nullptr: unsets it) until the end of the scope,
/// then unsets it: the switches are unset in the tests' environment.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, const char* value) : name_(std::move(name)) {
    if (value) setenv(name_.c_str(), value, 1);
    else unsetenv(name_.c_str());
  }
  ~ScopedEnv() { unsetenv(name_.c_str()); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
};

}  // namespace kiln::testing
