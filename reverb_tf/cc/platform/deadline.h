// SPDX-License-Identifier: Apache-2.0
// Timeouts, deadlines and sliced waiting: one place for the conventions the
// table, the service, the client and the Python binding share.
//
//   * A timeout of absl::InfiniteDuration() means "wait forever"; negative
//     timeouts mean "do not wait".
//   * On the wire a timeout is an int64 of milliseconds, < 0 for forever.
//   * CallInSlices() runs a blocking call (one taking a timeout) in bounded
//     slices so that something that cannot wake the call directly (an RPC
//     cancelled under gRPC's sync API, Ctrl-C in Python) is noticed between
//     slices.
#ifndef REVERB_TF_CC_PLATFORM_DEADLINE_H_
#define REVERB_TF_CC_PLATFORM_DEADLINE_H_

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace reverb_tf {

inline absl::Time DeadlineAfter(absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return absl::InfiniteFuture();
  return absl::Now() + std::max(timeout, absl::ZeroDuration());
}

inline int64_t TimeoutToMs(absl::Duration timeout) {
  return timeout == absl::InfiniteDuration()
             ? -1
             : absl::ToInt64Milliseconds(timeout);
}

inline absl::Duration TimeoutFromMs(int64_t ms) {
  return ms < 0 ? absl::InfiniteDuration() : absl::Milliseconds(ms);
}

// absl::Status has no .status(); gives both result shapes one accessor.
inline const absl::Status& StatusOf(const absl::Status& status) {
  return status;
}
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& value) {
  return value.status();
}

// Calls `call(slice)` with slices of at most `max_slice` until it returns
// anything but DEADLINE_EXCEEDED or `timeout` has passed (then the last
// DEADLINE_EXCEEDED result is returned; callers word their own message).
// Between slices `interrupted()` may return a non-OK status, which ends the
// wait with that status (it may also throw, e.g. to raise in Python).
template <typename Call, typename Interrupted>
auto CallInSlices(absl::Duration timeout, absl::Duration max_slice, Call call,
                  Interrupted interrupted) -> decltype(call(timeout)) {
  const absl::Time deadline = DeadlineAfter(timeout);
  while (true) {
    const absl::Duration slice = std::min(
        max_slice, std::max(absl::ZeroDuration(), deadline - absl::Now()));
    auto result = call(slice);
    if (result.ok() ||
        StatusOf(result).code() != absl::StatusCode::kDeadlineExceeded ||
        absl::Now() >= deadline) {
      return result;
    }
    if (absl::Status status = interrupted(); !status.ok()) return status;
  }
}

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_PLATFORM_DEADLINE_H_
