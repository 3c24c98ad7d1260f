// SPDX-License-Identifier: Apache-2.0
// A thread pool for tasks that block: a thread for every task running at
// once, started when no idle thread can take a task, kept idle for a while
// after its task and then ended.
//
// What it is for: the replay service's insert messages that must wait for a
// rate limiter or the memory budget. They wait for as long as their clients
// allow, so a fixed pool would let waiting messages starve the others; the
// number of threads is bounded by what the caller submits (the service
// submits at most one task per stream, and streams are bounded).
//
// Thread safety: thread-safe. Tasks run on the pool's threads and must not
// destroy the pool.
#ifndef REVERB_TF_CC_PLATFORM_ELASTIC_THREAD_POOL_H_
#define REVERB_TF_CC_PLATFORM_ELASTIC_THREAD_POOL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace reverb_tf {

class ElasticThreadPool {
 public:
  // A thread idle for `idle_timeout` ends, unless it is one of the first
  // `keep_idle` idle threads.
  ElasticThreadPool(absl::Duration idle_timeout, int keep_idle);
  // Runs every task submitted (WaitIdle), then joins the threads.
  ~ElasticThreadPool();

  ElasticThreadPool(const ElasticThreadPool&) = delete;
  ElasticThreadPool& operator=(const ElasticThreadPool&) = delete;

  // Runs `task` on an idle thread, or on a new one if none is idle.
  void Submit(std::function<void()> task);

  // Returns once no task is queued or running.
  void WaitIdle();

  // Threads now (running a task or idle), and tasks running or queued.
  int64_t threads() const;
  int64_t busy() const;

 private:
  // A thread's loop, and its wait for the next task: false if it is to end.
  void Work();
  bool TakeTaskLocked(std::function<void()>* task)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration idle_timeout_;
  const int keep_idle_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  int64_t idle_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t running_ ABSL_GUARDED_BY(mu_) = 0;  // tasks being run
  int64_t live_ ABSL_GUARDED_BY(mu_) = 0;     // threads not yet ended
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Every thread started, joined by the destructor; ended ones are joined
  // when the next thread starts, so the list stays as long as live_ plus
  // the threads that ended since then.
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread::id> ended_ ABSL_GUARDED_BY(mu_);
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_PLATFORM_ELASTIC_THREAD_POOL_H_
