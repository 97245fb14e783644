// A static memory plan: intermediate values placed at byte offsets in one
// arena, reusing space between values whose lifetimes do not overlap.
#pragma once
#include <cstdint>
#include <vector>

namespace kiln::ir {

struct MemoryPlan {
  uint64_t arena_bytes = 0;        ///< size of the arena one run needs
  std::vector<int64_t> offsets;    ///< per ValueId: byte offset in the arena, -1 = allocated at run time
  std::vector<uint64_t> sizes;     ///< per ValueId: bytes reserved at that offset
  uint64_t naive_bytes = 0;        ///< sum of the sizes of all planned values (what no reuse would need)
  bool empty() const { return offsets.empty(); }
};

}  // namespace kiln::ir
