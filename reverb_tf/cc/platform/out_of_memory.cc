// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/platform/out_of_memory.h"

#include <sys/resource.h>

#include <atomic>
#include <cstdint>
#include <optional>

#include "reverb_tf/cc/platform/process_memory.h"

namespace reverb_tf {

namespace {

std::atomic<int64_t> grpc_reserved_bytes{0};

}  // namespace

std::optional<size_t> AddressSpaceCap() {
  rlimit limit;
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
    return std::nullopt;
  }
  return static_cast<size_t>(limit.rlim_cur);
}

void ReserveForGrpc(int64_t delta) {
  grpc_reserved_bytes.fetch_add(delta, std::memory_order_relaxed);
}

size_t GrpcHeadroomBytes() {
  const int64_t reserved = grpc_reserved_bytes.load(std::memory_order_relaxed);
  return kGrpcHeadroomBytes + static_cast<size_t>(reserved > 0 ? reserved : 0);
}

bool AddressSpaceFits(size_t bytes, size_t headroom) {
  // Queried every time: a supervisor may cap a running server (prlimit).
  const std::optional<size_t> cap = AddressSpaceCap();
  if (!cap.has_value()) return true;
  const std::optional<ProcessMemory> memory = ReadProcessMemory();
  if (!memory.has_value()) return true;
  const uint64_t needed = static_cast<uint64_t>(memory->mapped_bytes) +
                          uint64_t{bytes} + uint64_t{headroom};
  return needed <= static_cast<uint64_t>(*cap);
}

}  // namespace reverb_tf
