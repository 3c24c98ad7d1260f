// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/platform/process_memory.h"

#include <unistd.h>

#include <cstdio>

namespace reverb_tf {

std::optional<ProcessMemory> ReadProcessMemory() {
  std::FILE* statm = std::fopen("/proc/self/statm", "re");
  if (statm == nullptr) return std::nullopt;
  long long mapped = 0;
  long long resident = 0;
  const int read = std::fscanf(statm, "%lld %lld", &mapped, &resident);
  std::fclose(statm);
  if (read != 2 || mapped < 0 || resident < 0) return std::nullopt;
  const int64_t page = sysconf(_SC_PAGESIZE);
  return ProcessMemory{mapped * page, resident * page};
}

}  // namespace reverb_tf
