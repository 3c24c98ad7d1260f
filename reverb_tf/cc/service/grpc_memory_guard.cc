// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/service/grpc_memory_guard.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "reverb_tf/cc/platform/logging.h"
#include "reverb_tf/cc/platform/out_of_memory.h"
#include "reverb_tf/cc/platform/process_memory.h"

namespace reverb_tf {
namespace {

// What gRPC's quotas start at: growing back to it from a smaller size
// cannot overflow its signed count of free bytes.
constexpr size_t kUnboundedQuotaBytes =
    static_cast<size_t>(std::numeric_limits<intptr_t>::max());

constexpr size_t kMiB = size_t{1} << 20;

size_t QuotaFor(size_t cap, size_t max_message_bytes) {
  const std::optional<ProcessMemory> memory = ReadProcessMemory();
  const size_t mapped =
      memory.has_value() ? static_cast<size_t>(memory->mapped_bytes) : 0;
  const size_t spare =
      cap > mapped + kGrpcHeadroomBytes ? cap - mapped - kGrpcHeadroomBytes : 0;
  return std::max(GrpcMemoryGuard::kMinQuotaBytes,
                  std::min(2 * max_message_bytes, spare / 2));
}

}  // namespace

GrpcMemoryGuard::GrpcMemoryGuard(int64_t max_message_bytes,
                                 absl::Duration period)
    : max_message_bytes_(static_cast<size_t>(max_message_bytes)),
      quota_("reverb_tf_server") {
  Refresh();
  thread_ = std::thread([this, period] { Run(period); });
}

GrpcMemoryGuard::~GrpcMemoryGuard() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
  absl::MutexLock lock(&mu_);
  ReserveForGrpc(-static_cast<int64_t>(quota_bytes_));
}

size_t GrpcMemoryGuard::quota_bytes() const {
  absl::MutexLock lock(&mu_);
  return quota_bytes_;
}

void GrpcMemoryGuard::Refresh() {
  const std::optional<size_t> cap = AddressSpaceCap();
  absl::MutexLock lock(&mu_);
  if (cap == cap_) return;  // no cap at first: the quota starts unbounded
  cap_ = cap;
  const size_t bytes = cap.has_value() ? QuotaFor(*cap, max_message_bytes_) : 0;
  ReserveForGrpc(static_cast<int64_t>(bytes) -
                 static_cast<int64_t>(quota_bytes_));
  quota_bytes_ = bytes;
  quota_.Resize(bytes > 0 ? bytes : kUnboundedQuotaBytes);
  if (cap.has_value()) {
    Log(LogSeverity::kInfo,
        absl::StrCat("address space capped at ", *cap / kMiB,
                     " MiB: gRPC's buffers are bounded to ", bytes / kMiB,
                     " MiB, which the tables leave free"));
  }
}

void GrpcMemoryGuard::Run(absl::Duration period) {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), period)) return;
    }
    Refresh();
  }
}

}  // namespace reverb_tf
