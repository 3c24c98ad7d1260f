// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/platform/out_of_memory.h"

#include <sys/resource.h>

#include <cstdint>
#include <optional>

#include "reverb_tf/cc/platform/process_memory.h"

namespace reverb_tf {

bool AddressSpaceFits(size_t bytes, size_t headroom) {
  // Queried every time: a supervisor may cap a running server (prlimit).
  rlimit limit;
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
    return true;
  }
  const std::optional<ProcessMemory> memory = ReadProcessMemory();
  if (!memory.has_value()) return true;
  const uint64_t needed = static_cast<uint64_t>(memory->mapped_bytes) +
                          uint64_t{bytes} + uint64_t{headroom};
  return needed <= static_cast<uint64_t>(limit.rlim_cur);
}

}  // namespace reverb_tf
