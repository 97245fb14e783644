// Throwing kiln::Error with a formatted message.
#pragma once
#include <fmt/format.h>

#include "kiln/errors.h"

namespace kiln {

/// Throws kiln::Error(code, fmt::format(f, args...)).
template <class... A>
[[noreturn]] void fail(ErrorCode code, fmt::format_string<A...> f, A&&... args) {
  throw Error(code, fmt::format(f, std::forward<A>(args)...));
}

}  // namespace kiln

/// Internal invariant check: a violation is a kiln bug (ErrorCode::internal).
#define KILN_CHECK(cond, ...)                                                              \
  do {                                                                                     \
    if (!(cond))                                                                           \
      ::kiln::fail(::kiln::ErrorCode::internal, "internal error at {}:{}: {} ({})", __FILE__, \
                   __LINE__, #cond, fmt::format(__VA_ARGS__));                             \
  } while (0)
