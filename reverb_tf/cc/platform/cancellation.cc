// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/platform/cancellation.h"

#include <utility>

namespace reverb_tf {

void DisableMutexDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

void Cancellation::Cancel() {
  std::vector<std::function<void()>> to_run;
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_.exchange(true, std::memory_order_acq_rel)) return;
    for (auto& [id, wakeup] : wakeups_) to_run.push_back(std::move(wakeup));
    wakeups_.clear();
    num_wakeups_.store(0, std::memory_order_relaxed);
    running_wakeups_ = true;
  }
  for (auto& wakeup : to_run) wakeup();
  absl::MutexLock lock(&mu_);
  running_wakeups_ = false;
}

void Cancellation::UnregisterAndWait(Id id) {
  absl::MutexLock lock(&mu_);
  wakeups_.erase(id);
  num_wakeups_.store(wakeups_.size(), std::memory_order_relaxed);
  mu_.Await(absl::Condition(
      +[](bool* running) { return !*running; }, &running_wakeups_));
}

bool Cancellation::Register(std::function<void()> wakeup, Id* id) {
  absl::MutexLock lock(&mu_);
  if (cancelled_.load(std::memory_order_acquire)) return false;
  *id = next_id_++;
  wakeups_.emplace(*id, std::move(wakeup));
  num_wakeups_.store(wakeups_.size(), std::memory_order_relaxed);
  return true;
}

void Cancellation::Unregister(Id id) {
  absl::MutexLock lock(&mu_);
  wakeups_.erase(id);
  num_wakeups_.store(wakeups_.size(), std::memory_order_relaxed);
}

}  // namespace reverb_tf
