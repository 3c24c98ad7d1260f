// SPDX-License-Identifier: Apache-2.0
// Allocation failures as a status: a server that runs out of memory answers
// the call that needed it with RESOURCE_EXHAUSTED and goes on serving.
//
// A server under RLIMIT_AS or a memory cgroup's hard limit meets
// std::bad_alloc where a large message, chunk or response is allocated. The
// gRPC handlers, the in-process insert path and the metrics and health
// endpoints run their work under CatchOutOfMemory(), so no exception
// reaches gRPC (which would end the call with UNKNOWN "Unexpected error in
// RPC handling") or a C callback (which would terminate the process). Call
// sites that know what they are allocating (a message of N bytes, a chunk)
// wrap that step too, so the status says what did not fit; the outer guard
// names the call.
//
// What was allocated before the failure is released by the usual
// destructors as the status unwinds the call; the server's state is left as
// the call's own error paths leave it (nothing a failed call half-did is
// acknowledged).
//
// gRPC's own allocations (the slices its transport reads messages into)
// do not fail that way: under RLIMIT_AS a slice gRPC cannot get crashes the
// process (seen as SIGSEGV in its memory allocator's MakeSlice, reading the
// next messages of several streams at once). Two bounds keep them clear of
// the cap. Each server bounds what gRPC buffers for it with a
// grpc::ResourceQuota sized from the cap (service/grpc_memory_guard.h),
// which makes gRPC shrink its reads and refuse streams instead of growing,
// and reserves that size here. AddressSpaceFits() says whether an
// allocation of ours leaves the reservations plus kGrpcHeadroomBytes of
// what RLIMIT_AS allows, and a call that would not is refused as if it had
// run out (a memory cgroup needs no such check: there the kernel reclaims
// or kills, it does not fail an allocation).
//
// Thread safety: thread-safe (the reservations are one atomic counter).
#ifndef REVERB_TF_CC_PLATFORM_OUT_OF_MEMORY_H_
#define REVERB_TF_CC_PLATFORM_OUT_OF_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <new>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace reverb_tf {

// RESOURCE_EXHAUSTED: "the server ran out of memory while <what>".
inline absl::Status OutOfMemoryError(absl::string_view what) {
  return absl::ResourceExhaustedError(
      absl::StrCat("the server ran out of memory while ", what));
}

// Address space that our allocations leave for gRPC's under RLIMIT_AS
// beyond what the servers' quotas reserve: its metadata, small buffers and
// what it reads before a quota's reclamation catches up.
inline constexpr size_t kGrpcHeadroomBytes = size_t{64} << 20;

// The soft limit of RLIMIT_AS, or nullopt when the address space is not
// capped (or the limit cannot be read).
std::optional<size_t> AddressSpaceCap();

// Adds `delta` (negative to give back) to the address space reserved for
// gRPC's buffers in this process.
void ReserveForGrpc(int64_t delta);

// kGrpcHeadroomBytes plus what ReserveForGrpc() holds.
size_t GrpcHeadroomBytes();

// False if the process's address space is capped (RLIMIT_AS) and mapping
// `bytes` more would leave less than `headroom` under the cap. Reads
// ReadProcessMemory() (a few microseconds): for large allocations only. True
// when there is no cap or the size cannot be read.
bool AddressSpaceFits(size_t bytes, size_t headroom = GrpcHeadroomBytes());

// fn() (returning absl::Status or absl::StatusOr<T>), or OutOfMemoryError(
// what) if it throws std::bad_alloc. `what` is a string, or a callable
// returning one, called only on failure (hot paths need not format it).
template <typename What, typename Fn>
auto CatchOutOfMemory(What&& what, Fn&& fn) -> decltype(fn()) {
  static_assert(std::is_constructible_v<decltype(fn()), absl::Status>,
                "fn must return absl::Status or absl::StatusOr");
  try {
    return std::forward<Fn>(fn)();
  } catch (const std::bad_alloc&) {
    if constexpr (std::is_invocable_v<What>) {
      return OutOfMemoryError(what());
    } else {
      return OutOfMemoryError(what);
    }
  }
}

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_PLATFORM_OUT_OF_MEMORY_H_
