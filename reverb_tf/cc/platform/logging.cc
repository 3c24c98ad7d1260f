// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/platform/logging.h"

#include <unistd.h>

#include <cstdio>
#include <deque>
#include <string>
#include <thread>
#include <utility>

#include "absl/synchronization/mutex.h"

namespace reverb_tf {
namespace {

void WriteToStderr(LogSeverity severity, absl::string_view line) {
  const char* word = severity == LogSeverity::kWarning ? "WARNING: "
                     : severity == LogSeverity::kError ? "ERROR: "
                                                       : "";
  std::fprintf(stderr, "reverb_tf: %s%.*s\n", word,
               static_cast<int>(line.size()), line.data());
}

// The host's sink and the thread that hands it the queued lines.
class Delivery {
 public:
  void Set(LogSink sink) ABSL_LOCKS_EXCLUDED(mu_) {
    std::thread old_thread;
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      old_thread = std::move(thread_);
    }
    // It delivers what is queued before it ends.
    if (old_thread.joinable()) old_thread.join();
    LogSink old_sink;
    {
      absl::MutexLock lock(&mu_);
      old_sink = std::exchange(sink_, std::move(sink));
      stopping_ = false;
      if (sink_ != nullptr) {
        owner_pid_ = getpid();
        thread_ = std::thread([this] { Run(); });
      }
    }
    // The old sink is destroyed here, outside the lock: a host's sink may
    // need the host's lock to be destroyed.
  }

  void Log(LogSeverity severity, absl::string_view line)
      ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      if (sink_ != nullptr && thread_.joinable() && owner_pid_ == getpid()) {
        queue_.emplace_back(severity, std::string(line));
        return;
      }
    }
    WriteToStderr(severity, line);
  }

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    // Its own copy: Set() replaces sink_ only after this thread has ended.
    const LogSink sink = sink_;
    while (true) {
      mu_.Await(absl::Condition(
          +[](Delivery* d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(d->mu_) {
            return d->stopping_ || !d->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping, and everything delivered
      std::pair<LogSeverity, std::string> next = std::move(queue_.front());
      queue_.pop_front();
      mu_.Unlock();
      sink(next.first, next.second);
      mu_.Lock();
    }
  }

  absl::Mutex mu_;
  LogSink sink_ ABSL_GUARDED_BY(mu_);
  std::thread thread_ ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<LogSeverity, std::string>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  pid_t owner_pid_ ABSL_GUARDED_BY(mu_) = 0;
};

Delivery& TheDelivery() {
  // Never destroyed: threads may log while the process exits.
  static Delivery* const delivery = new Delivery();
  return *delivery;
}

}  // namespace

void SetLogSink(LogSink sink) { TheDelivery().Set(std::move(sink)); }

void Log(LogSeverity severity, absl::string_view line) {
  TheDelivery().Log(severity, line);
}

}  // namespace reverb_tf
