// Shared between session_load.cpp (run side) and session_compile.cpp (compile side).
#pragma once
#include <memory>
#include <string>

#include "kiln/session.h"
#include "runtime/program_set.h"

namespace kiln {

struct SessionAccess {
  static Session make(std::shared_ptr<const ProgramSet> p, SessionStats stats) {
    Session s;
    s.program_ = std::move(p);
    s.stats_ = std::move(stats);
    return s;
  }
  /// The programs behind a Session (tests).
  static const ProgramSet& programs(const Session& s) { return *s.program_; }
};

/// Reads the compat block, checks it can run here for opt.target, then reads
/// and validates the whole artifact (every program of a bucketed one; no
/// compiler: a missing bucket is an error at run time). Throws
/// Error(incompatible_artifact) listing every mismatching field,
/// Error(corrupt_artifact), Error(io).
std::shared_ptr<const ProgramSet> load_program(const std::filesystem::path& path, const SessionOptions& opt);

}  // namespace kiln
