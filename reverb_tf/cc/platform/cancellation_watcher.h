// SPDX-License-Identifier: Apache-2.0
// Turns "has this call been cancelled?" questions that nothing can push into
// Cancellation::Cancel(), with one thread for every watched call.
//
// gRPC's synchronous server API notices a client that went away only when
// asked (ServerContext::IsCancelled, which polls the call's completion queue:
// a system call), and has no callback for it. Asking every blocked call every
// 100 ms cost 17% of a core with 1,000 idle samplers. Here one thread asks,
// and only about calls that are blocked right now (their Cancellation has a
// wakeup registered): first `first_check` after the call started waiting,
// then at intervals doubling up to `max_interval`. A cancelled call's
// Cancellation fires, which wakes its blocked table call at once. Calls that
// are not blocked notice a departed client by themselves (a failed read or
// write).
//
// Thread safety: thread-safe. `is_cancelled` runs on the watcher thread while
// the Watch that registered it is alive; Cancel() runs there too, under the
// watcher's lock, so a Watch's destructor waits for a Cancel() in progress
// (the Cancellation may then be destroyed right after it).
#ifndef REVERB_TF_CC_PLATFORM_CANCELLATION_WATCHER_H_
#define REVERB_TF_CC_PLATFORM_CANCELLATION_WATCHER_H_

#include <cstdint>
#include <functional>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "reverb_tf/cc/platform/cancellation.h"

namespace reverb_tf {

class CancellationWatcher {
 public:
  // Requires 0 < first_check <= max_interval.
  CancellationWatcher(absl::Duration first_check, absl::Duration max_interval);
  // Joins the thread. Every Watch must have been destroyed.
  ~CancellationWatcher();

  CancellationWatcher(const CancellationWatcher&) = delete;
  CancellationWatcher& operator=(const CancellationWatcher&) = delete;

  // Registration of one call; unregisters on destruction.
  class Watch {
   public:
    Watch(Watch&& other) noexcept : watcher_(other.watcher_), id_(other.id_) {
      other.watcher_ = nullptr;
    }
    Watch(const Watch&) = delete;
    Watch& operator=(const Watch&) = delete;
    Watch& operator=(Watch&&) = delete;
    ~Watch();

   private:
    friend class CancellationWatcher;
    Watch(CancellationWatcher* watcher, uint64_t id)
        : watcher_(watcher), id_(id) {}
    CancellationWatcher* watcher_;
    uint64_t id_;
  };

  // While the returned Watch lives and `cancel` has a wakeup registered,
  // asks `is_cancelled()` on the schedule above and calls `cancel->Cancel()`
  // once it returns true. `cancel` must outlive the Watch.
  Watch Add(std::function<bool()> is_cancelled, Cancellation* cancel);

 private:
  struct Watched {
    std::function<bool()> is_cancelled;
    Cancellation* cancel;
    // While blocked: when to ask next and the interval after that. Infinite
    // past: not seen blocked yet.
    absl::Time next_check = absl::InfinitePast();
    absl::Duration interval;
  };
  void Run();
  void Remove(uint64_t id);

  const absl::Duration first_check_;
  const absl::Duration max_interval_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, Watched> watched_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_PLATFORM_CANCELLATION_WATCHER_H_
