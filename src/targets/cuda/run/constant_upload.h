// Uploading a program's constants on a thread of its own while the load goes
// on (internal to targets/cuda/run/program.cpp).
#pragma once
#include <exception>
#include <functional>
#include <system_error>
#include <thread>
#include <utility>

#include "support/log.h"
#include "targets/cuda/run/driver.h"

namespace kiln::targets::cuda {

/// Runs `upload` (host-to-device copies) on its own thread with `device`'s
/// context current. finish() waits for it, rethrows what it threw and returns
/// how long it took (ms); the destructor waits too, so no copy outlives the
/// buffers it writes (a load that throws first).
class ConstantUpload {
 public:
  // The function is kept in a member, not moved into the thread's closure:
  // when std::thread cannot start, the fallback below must still have it.
  ConstantUpload(int device, std::function<void()> upload) : upload_(std::move(upload)) {
    try {
      thread_ = std::thread([this, device] {
        Stopwatch sw;
        try {
          use_device(device);
          upload_();
        } catch (...) {
          error_ = std::current_exception();
        }
        ms_ = sw.ms();
      });
    } catch (const std::system_error&) {  // no thread to be had: upload here
      Stopwatch sw;
      upload_();
      ms_ = sw.ms();
    }
  }
  ConstantUpload(const ConstantUpload&) = delete;
  ConstantUpload& operator=(const ConstantUpload&) = delete;
  ~ConstantUpload() {
    if (thread_.joinable()) thread_.join();
  }
  double finish() {
    if (thread_.joinable()) thread_.join();
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    return ms_;
  }

 private:
  std::function<void()> upload_;
  std::thread thread_;
  std::exception_ptr error_;
  double ms_ = 0;
};

}  // namespace kiln::targets::cuda
