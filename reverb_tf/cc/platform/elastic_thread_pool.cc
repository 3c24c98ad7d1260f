// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/platform/elastic_thread_pool.h"

#include <algorithm>
#include <iterator>
#include <utility>

namespace reverb_tf {

ElasticThreadPool::ElasticThreadPool(absl::Duration idle_timeout, int keep_idle)
    : idle_timeout_(idle_timeout), keep_idle_(keep_idle) {}

ElasticThreadPool::~ElasticThreadPool() {
  WaitIdle();
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    threads.swap(threads_);
  }
  for (std::thread& thread : threads) thread.join();
}

void ElasticThreadPool::Submit(std::function<void()> task) {
  std::vector<std::thread> ended;
  {
    absl::MutexLock lock(&mu_);
    tasks_.push_back(std::move(task));
    // Idle threads wait for tasks_ to change; one of them takes it.
    if (idle_ >= static_cast<int64_t>(tasks_.size())) return;
    // Threads that ended are joined here, outside the lock, so that a
    // long-lived pool does not keep their handles.
    if (!ended_.empty()) {
      auto is_ended = [this](const std::thread& t) {
        mu_.AssertHeld();
        return std::find(ended_.begin(), ended_.end(), t.get_id()) !=
               ended_.end();
      };
      auto split = std::stable_partition(
          threads_.begin(), threads_.end(),
          [&](const std::thread& t) { return !is_ended(t); });
      std::move(split, threads_.end(), std::back_inserter(ended));
      threads_.erase(split, threads_.end());
      ended_.clear();
    }
    ++live_;
    threads_.emplace_back([this] { Work(); });
  }
  for (std::thread& thread : ended) thread.join();
}

bool ElasticThreadPool::TakeTaskLocked(std::function<void()>* task) {
  ++idle_;
  auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !tasks_.empty() || stopping_;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&has_work), idle_timeout_) &&
      idle_ <= keep_idle_) {
    // Idle too long, but one of those kept.
    mu_.Await(absl::Condition(&has_work));
  }
  --idle_;
  if (tasks_.empty()) return false;  // stopping, or idle too long
  *task = std::move(tasks_.front());
  tasks_.pop_front();
  ++running_;
  return true;
}

void ElasticThreadPool::Work() {
  mu_.Lock();
  std::function<void()> task;
  while (TakeTaskLocked(&task)) {
    mu_.Unlock();
    task();
    task = nullptr;  // what the task holds goes before it counts as done
    mu_.Lock();
    --running_;
  }
  --live_;
  ended_.push_back(std::this_thread::get_id());
  mu_.Unlock();
}

void ElasticThreadPool::WaitIdle() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](ElasticThreadPool* pool) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pool->mu_) {
        return pool->tasks_.empty() && pool->running_ == 0;
      },
      this));
}

int64_t ElasticThreadPool::threads() const {
  absl::MutexLock lock(&mu_);
  return live_;
}

int64_t ElasticThreadPool::busy() const {
  absl::MutexLock lock(&mu_);
  return running_ + static_cast<int64_t>(tasks_.size());
}

}  // namespace reverb_tf
