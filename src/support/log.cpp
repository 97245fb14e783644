#include "support/log.h"

#include <unistd.h>

#include <ctime>
#include <fstream>
#include <sstream>

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>

namespace kiln {

spdlog::logger& log() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    // Not registered in spdlog's registry: a process may hold two copies of
    // kiln (the Python module and the ONNX Runtime plugin) sharing one
    // libspdlog, and the second registration of "kiln" would throw.
    auto l = std::make_shared<spdlog::logger>("kiln", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    l->set_pattern("kiln: %l: %v");
    const char* env = std::getenv("KILN_LOG");
    l->set_level(env ? spdlog::level::from_str(env) : spdlog::level::warn);
    return l;
  }();
  return *logger;
}

double ms_since_process_start() {
  std::ifstream f("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  // Field 22 (starttime, clock ticks after boot) counts from the field after
  // the command name's closing parenthesis (field 2 may hold spaces).
  auto close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return -1;
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i)
    if (i == 22) {
      timespec now{};
      if (clock_gettime(CLOCK_BOOTTIME, &now) != 0) return -1;
      double ticks = 0;
      try {
        ticks = std::stod(field);
      } catch (const std::exception&) {
        return -1;
      }
      const double start_s = ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
      return (static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9 - start_s) * 1e3;
    }
  return -1;
}

}  // namespace kiln
