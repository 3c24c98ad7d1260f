// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/platform/cancellation_watcher.h"

#include <algorithm>
#include <utility>

namespace reverb_tf {

CancellationWatcher::CancellationWatcher(absl::Duration first_check,
                                         absl::Duration max_interval)
    : first_check_(first_check),
      max_interval_(std::max(first_check, max_interval)),
      thread_([this] { Run(); }) {}

CancellationWatcher::~CancellationWatcher() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

CancellationWatcher::Watch CancellationWatcher::Add(
    std::function<bool()> is_cancelled, Cancellation* cancel) {
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  watched_.emplace(id, Watched{std::move(is_cancelled), cancel});
  return Watch(this, id);
}

void CancellationWatcher::Remove(uint64_t id) {
  absl::MutexLock lock(&mu_);
  watched_.erase(id);
}

CancellationWatcher::Watch::~Watch() {
  if (watcher_ != nullptr) watcher_->Remove(id_);
}

void CancellationWatcher::Run() {
  absl::MutexLock lock(&mu_);
  const auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || !watched_.empty();
  };
  while (true) {
    mu_.Await(absl::Condition(&has_work));
    // Tick at the finest granularity (waking early only to stop); each call
    // is asked on its own schedule.
    mu_.AwaitWithTimeout(absl::Condition(&stop_), first_check_);
    if (stop_) return;
    const absl::Time now = absl::Now();
    for (auto& [id, watched] : watched_) {
      if (watched.cancel->IsCancelled()) continue;
      if (!watched.cancel->HasWakeups()) {
        watched.next_check =
            absl::InfinitePast();  // not blocked: nothing to wake
        continue;
      }
      if (watched.next_check == absl::InfinitePast()) {  // just started waiting
        watched.interval = first_check_;
        watched.next_check = now + first_check_;
        continue;
      }
      if (now < watched.next_check) continue;
      if (watched.is_cancelled()) {
        watched.cancel->Cancel();
        continue;
      }
      watched.interval = std::min(2 * watched.interval, max_interval_);
      watched.next_check = now + watched.interval;
    }
  }
}

}  // namespace reverb_tf
