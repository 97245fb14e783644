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

/// Milliseconds since this process started (Linux: /proc/self/stat's
/// starttime against CLOCK_BOOTTIME; resolution one clock tick, 10 ms), or
/// -1 where that cannot be read. kiln run reports it with its first result
/// (a warm start's whole cost, process start and CUDA context included).
double ms_since_process_start();

}  // namespace kiln
