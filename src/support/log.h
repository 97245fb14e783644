// Logging (spdlog) and timing.
#pragma once
#include <spdlog/spdlog.h>

#include <chrono>

namespace kiln {

/// The kiln logger (stderr). Level from $KILN_LOG (trace|debug|info|warn|error|off), default warn.
spdlog::logger& log();

/// Wall-clock stopwatch; ms() is milliseconds since construction.
class Stopwatch {
 public:
  Stopwatch() : t0_(std::chrono::steady_clock::now()) {}
  double ms() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace kiln
