// SPDX-License-Identifier: Apache-2.0
// This process's memory as the kernel counts it (/proc/self/statm): what
// the metrics page reports and what RLIMIT_AS is held against.
//
// Thread safety: stateless.
#ifndef REVERB_TF_CC_PLATFORM_PROCESS_MEMORY_H_
#define REVERB_TF_CC_PLATFORM_PROCESS_MEMORY_H_

#include <cstdint>
#include <optional>

namespace reverb_tf {

struct ProcessMemory {
  int64_t mapped_bytes = 0;    // VmSize: the address space, RLIMIT_AS's measure
  int64_t resident_bytes = 0;  // VmRSS
};

// One read of /proc/self/statm (a few microseconds); nullopt if /proc
// cannot tell.
std::optional<ProcessMemory> ReadProcessMemory();

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_PLATFORM_PROCESS_MEMORY_H_
