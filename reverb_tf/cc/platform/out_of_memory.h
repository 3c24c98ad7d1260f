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
// gRPC's own allocations (the slices its transport reads a message into)
// do not fail that way: under RLIMIT_AS a slice gRPC cannot get crashes the
// process. So our large allocations must fail first: AddressSpaceFits()
// says whether one leaves kGrpcHeadroomBytes of the address space that
// RLIMIT_AS allows, and a call that would not is refused as if it had run
// out (a memory cgroup needs no such check: there the kernel reclaims or
// kills, it does not fail an allocation).
//
// Thread safety: stateless.
#ifndef REVERB_TF_CC_PLATFORM_OUT_OF_MEMORY_H_
#define REVERB_TF_CC_PLATFORM_OUT_OF_MEMORY_H_

#include <cstddef>
#include <new>
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

// Address space that our allocations leave for gRPC's under RLIMIT_AS: more
// than the messages it buffers ahead on a stream (HTTP/2 flow control) and
// its read slices.
inline constexpr size_t kGrpcHeadroomBytes = size_t{64} << 20;

// False if the process's address space is capped (RLIMIT_AS) and mapping
// `bytes` more would leave less than `headroom` under the cap. Reads
// ReadProcessMemory() (a few microseconds): for large allocations only. True
// when there is no cap or the size cannot be read.
bool AddressSpaceFits(size_t bytes, size_t headroom = kGrpcHeadroomBytes);

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
