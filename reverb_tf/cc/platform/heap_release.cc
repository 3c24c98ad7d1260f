// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/platform/heap_release.h"

#include <malloc.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>
#include <thread>
#include <utility>

#include "absl/time/clock.h"

namespace reverb_tf {
namespace {

// CPU time this process has used.
absl::Duration ProcessCpuTime() {
  struct rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) != 0) return absl::ZeroDuration();
  return absl::DurationFromTimeval(usage.ru_utime) +
         absl::DurationFromTimeval(usage.ru_stime);
}

}  // namespace

void LimitMallocArenas() {
  const char* configured = std::getenv("MALLOC_ARENA_MAX");
  if (configured != nullptr && configured[0] != '\0') return;
  mallopt(M_ARENA_MAX,
          std::max(2, static_cast<int>(std::thread::hardware_concurrency())));
}

HeapReleaser::HeapReleaser(std::function<int64_t()> held_bytes,
                           absl::Duration period, bool trim_idle,
                           int64_t min_drop)
    : held_bytes_(std::move(held_bytes)) {
  thread_ = std::thread([this, period, trim_idle, min_drop] {
    Run(period, trim_idle, min_drop);
  });
}

HeapReleaser::~HeapReleaser() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void HeapReleaser::Run(absl::Duration period, bool trim_idle,
                       int64_t min_drop) {
  int64_t peak = held_bytes_();
  // What holders free shortly after the data goes (stream buffers, the
  // last batches in flight) lands after the first trim: trim once more.
  bool again = false;
  absl::Time last_trim = absl::InfinitePast();
  // Where the last look at whether the process is idle began.
  absl::Time idle_since = absl::Now();
  absl::Duration idle_since_cpu = ProcessCpuTime();
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stopping_), period)) {
    mu_.Unlock();
    const int64_t held = held_bytes_();
    peak = std::max(peak, held);
    const bool dropped = peak - held >= min_drop;
    bool trim = dropped || again;
    again = dropped;
    // Memory freed later than that (connections closed by their clients'
    // garbage collectors, say) sits free in the arenas: trim when much of
    // it does, at most every kIdleTrimEvery.
    // Only an idle process is asked: mallinfo2() walks every free block
    // with each arena locked, which took 2.6% of a busy server's CPU with
    // a million items (a stall for every allocating thread), and a busy
    // server reuses what it frees anyway.
    const absl::Time now = absl::Now();
    if (trim_idle && !trim && now - last_trim >= kIdleTrimEvery &&
        now - idle_since >= kIdleTrimEvery) {
      const absl::Duration cpu = ProcessCpuTime();
      const bool idle =
          cpu - idle_since_cpu <= kIdleCpuShare * (now - idle_since);
      idle_since = now;
      idle_since_cpu = cpu;
      if (idle) {
        const struct mallinfo2 info = mallinfo2();
        const int64_t free_bytes = static_cast<int64_t>(info.fordblks);
        trim = free_bytes >= std::max<int64_t>(kIdleTrimFreeBytes, held / 4);
      }
    }
    if (trim) {
      malloc_trim(0);
      peak = held;
      last_trim = absl::Now();
    }
    mu_.Lock();
  }
}

}  // namespace reverb_tf
