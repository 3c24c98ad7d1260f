// SPDX-License-Identifier: Apache-2.0
// A one-shot cancellation signal for blocking calls.
//
// A caller that may need to abandon a blocking Table call (an RPC whose
// client went away, a dataset iterator being destroyed) passes a
// Cancellation. Cancel() wakes the blocked call at once through the wakeup it
// registered; the call then returns absl::CancelledError. Nothing polls.
//
// Thread safety: all methods are thread-safe. Wakeups run on the thread that
// calls Cancel(), outside the Cancellation's own lock, so a wakeup may take
// other locks (e.g. a table's) without risking lock-order inversion with
// Register/Unregister.
#ifndef REVERB_TF_CC_PLATFORM_CANCELLATION_H_
#define REVERB_TF_CC_PLATFORM_CANCELLATION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "reverb_tf/cc/platform/export.h"

namespace reverb_tf {

// Turns off absl's mutex deadlock detection, which Debian's absl build leaves
// on and which costs a graph update per lock acquisition on our hot paths.
// The absl copy is ours alone (TF has its own), so this affects only us.
// Idempotent; called when servers and clients are created.
REVERB_TF_EXPORT void DisableMutexDeadlockDetection();

class REVERB_TF_EXPORT Cancellation {
 public:
  using Id = uint64_t;

  // Marks cancelled and runs every registered wakeup once. Idempotent.
  void Cancel();

  bool IsCancelled() const {
    return cancelled_.load(std::memory_order_acquire);
  }

  // Whether a blocked call has registered a wakeup (is waiting) right now.
  bool HasWakeups() const {
    return num_wakeups_.load(std::memory_order_relaxed) > 0;
  }

  // Registers `wakeup` to run on Cancel(). Returns false (and registers
  // nothing) if already cancelled: callers usually hold a lock the wakeup
  // would take, so running it inline could self-deadlock.
  bool Register(std::function<void()> wakeup, Id* id);

  // Unregisters; after it returns `wakeup` will not START (it may still be
  // running on the cancelling thread if Cancel() raced with this call).
  void Unregister(Id id);

  // Unregisters and, if Cancel() is running wakeups right now, waits until
  // they have finished: use it when the wakeup touches an object about to be
  // destroyed. Must not be called while holding a lock a wakeup takes.
  void UnregisterAndWait(Id id);

 private:
  std::atomic<bool> cancelled_{false};
  std::atomic<size_t> num_wakeups_{0};  // wakeups_.size(), readable without mu_
  absl::Mutex mu_;
  Id next_id_ ABSL_GUARDED_BY(mu_) = 0;
  bool running_wakeups_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<Id, std::function<void()>> wakeups_ ABSL_GUARDED_BY(mu_);
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_PLATFORM_CANCELLATION_H_
