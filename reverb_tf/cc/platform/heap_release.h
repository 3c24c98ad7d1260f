// SPDX-License-Identifier: Apache-2.0
// Gives freed heap memory back to the kernel after the data a server holds
// shrinks (a reset, a queue that drains, mass eviction, dead writers).
//
// glibc's malloc keeps freed memory in its arenas for reuse, and after the
// first large blocks are freed it raises its mmap threshold, so that later
// blocks of that size (chunks of 1 MiB items, say) come from the arenas
// too: measured, a server that held 1,000 items of 1 MiB kept 788 MB
// resident after a reset that left no chunk alive. malloc_trim(0) returns
// the free pages of every arena (madvise) at the cost of one walk of the
// free lists, so HeapReleaser calls it only after the held bytes have
// dropped by a margin since the last look, from a thread of its own.
//
// LimitMallocArenas() bounds the address space glibc reserves: each arena
// beyond the main one maps 64 MiB (mostly never touched), and glibc allows
// 8 per core, one for each new thread that allocates. Measured on 2 cores,
// the binary mapped 710 MB before serving and grew by hundreds of MB as
// gRPC's threads came, all of which counts against an address-space cap
// (`ulimit -v`, a batch scheduler's virtual-memory limit): with one arena
// per core it maps 198 MB, and server throughput did not change (7
// alternating rounds of bench/scale_bench.py against the binary).
//
// Every server runs a HeapReleaser (service/server.h), the binary and a
// Python-hosted one alike: trimming after the server's own data dropped
// changes no setting of the host process. Only the binary also trims when idle
// (below) and caps the arenas: a host process's allocator is its own, and
// its other work (TensorFlow, Python) may reuse what it freed.
//
// Thread safety: HeapReleaser is thread-safe; the destructor stops the
// thread. LimitMallocArenas() must run before the process starts threads.
#ifndef REVERB_TF_CC_PLATFORM_HEAP_RELEASE_H_
#define REVERB_TF_CC_PLATFORM_HEAP_RELEASE_H_

#include <cstdint>
#include <functional>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace reverb_tf {

// Caps glibc's malloc arenas at one per core (at least 2), unless the
// environment sets MALLOC_ARENA_MAX (glibc's own knob), which is left to
// apply.
void LimitMallocArenas();

class HeapReleaser {
 public:
  // Every `period`, reads `held_bytes()` (what the process keeps on
  // purpose, e.g. live chunk bytes); once it is at least `min_drop` bytes
  // below its peak since the last trim, trims the heap (and once more a
  // period later) and starts a new peak. With `trim_idle`, also trims, at
  // most every kIdleTrimEvery, while the process is idle (it used at most
  // kIdleCpuShare of a core since it was last asked) and the arenas hold at
  // least kIdleTrimFreeBytes free and a quarter of `held_bytes()` (a busy
  // server reuses what it frees; an idle one gives it back). `held_bytes` must
  // be callable from another thread until the destructor returns.
  HeapReleaser(std::function<int64_t()> held_bytes, absl::Duration period,
               bool trim_idle, int64_t min_drop = int64_t{32} << 20);
  ~HeapReleaser();

  HeapReleaser(const HeapReleaser&) = delete;
  HeapReleaser& operator=(const HeapReleaser&) = delete;

  static constexpr absl::Duration kIdleTrimEvery = absl::Seconds(2);
  static constexpr int64_t kIdleTrimFreeBytes = int64_t{8} << 20;
  static constexpr double kIdleCpuShare = 0.05;

 private:
  void Run(absl::Duration period, bool trim_idle, int64_t min_drop);

  const std::function<int64_t()> held_bytes_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_PLATFORM_HEAP_RELEASE_H_
