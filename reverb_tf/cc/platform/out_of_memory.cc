// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/platform/out_of_memory.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>

namespace reverb_tf {
namespace {

// The process's mapped size (VmSize), or -1 if it cannot be read.
int64_t MappedBytes() {
  const int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char text[64];
  const ssize_t n = read(fd, text, sizeof(text) - 1);
  close(fd);
  if (n <= 0) return -1;
  text[n] = '\0';
  char* end = nullptr;
  const long long pages = std::strtoll(text, &end, 10);  // first field: size
  if (end == text || pages < 0) return -1;
  return static_cast<int64_t>(pages) * sysconf(_SC_PAGESIZE);
}

}  // namespace

bool AddressSpaceFits(size_t bytes, size_t headroom) {
  // Queried every time: a supervisor may cap a running server (prlimit).
  rlimit limit;
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
    return true;
  }
  const int64_t mapped = MappedBytes();
  if (mapped < 0) return true;
  const uint64_t needed =
      static_cast<uint64_t>(mapped) + uint64_t{bytes} + uint64_t{headroom};
  return needed <= static_cast<uint64_t>(limit.rlim_cur);
}

}  // namespace reverb_tf
