// SPDX-License-Identifier: Apache-2.0
// Keeps gRPC's own buffers inside a capped address space.
//
// Under RLIMIT_AS (`ulimit -v`, a batch scheduler's address-space limit)
// an allocation gRPC's transport cannot get crashes the process: with
// several streams each sending a large message, the transport reads the
// next messages while ours are parsed, and the server died with SIGSEGV in
// gRPC's slice allocation (platform/out_of_memory.h). A grpc::ResourceQuota
// bounds those buffers: past it gRPC shrinks its reads and flow-control
// windows and, still over, cancels streams (the client sees
// RESOURCE_EXHAUSTED) instead of allocating.
//
// The guard owns the server's quota. While the address space is not
// capped the quota is unbounded (gRPC behaves as without one, and writes
// cost the same). A thread looks at the cap every `period`, since a
// supervisor may set it on a running server (prlimit); when it changes the
// quota becomes
//   min(2 * max_message_bytes, (cap - mapped - kGrpcHeadroomBytes) / 2),
// at least kMinQuotaBytes, where `mapped` is the address space in use when
// the cap is seen: one largest message can always be read while another is
// parsed, and half of what is left stays for the tables. The same size is
// reserved with ReserveForGrpc(), so the server's own large allocations
// (AddressSpaceFits) leave it free.
//
// Thread safety: thread-safe. The destructor stops the thread and gives the
// reservation back; the quota itself lives on in gRPC while a server built
// with it does.
#ifndef REVERB_TF_CC_SERVICE_GRPC_MEMORY_GUARD_H_
#define REVERB_TF_CC_SERVICE_GRPC_MEMORY_GUARD_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/resource_quota.h"

namespace reverb_tf {

class GrpcMemoryGuard {
 public:
  // The smallest quota: below it gRPC could not read even small messages
  // without reclaiming.
  static constexpr size_t kMinQuotaBytes = size_t{16} << 20;

  // Starts the thread; Refresh() has run once when it returns.
  // `max_message_bytes`: the largest message the server accepts (> 0).
  explicit GrpcMemoryGuard(int64_t max_message_bytes,
                           absl::Duration period = absl::Milliseconds(200));
  ~GrpcMemoryGuard();

  GrpcMemoryGuard(const GrpcMemoryGuard&) = delete;
  GrpcMemoryGuard& operator=(const GrpcMemoryGuard&) = delete;

  // For grpc::ServerBuilder::SetResourceQuota (which takes a reference).
  const grpc::ResourceQuota& quota() const { return quota_; }

  // The quota's size, or 0 while it is unbounded (no cap).
  size_t quota_bytes() const ABSL_LOCKS_EXCLUDED(mu_);

  // Sizes the quota for the current cap if the cap changed since the last
  // call; the thread calls it every period.
  void Refresh() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Run(absl::Duration period) ABSL_LOCKS_EXCLUDED(mu_);

  const size_t max_message_bytes_;
  grpc::ResourceQuota quota_;
  mutable absl::Mutex mu_;
  std::optional<size_t> cap_ ABSL_GUARDED_BY(mu_);  // last seen
  size_t quota_bytes_ ABSL_GUARDED_BY(mu_) = 0;     // 0: unbounded
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_SERVICE_GRPC_MEMORY_GUARD_H_
