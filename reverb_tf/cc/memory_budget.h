// SPDX-License-Identifier: Apache-2.0
// A server-wide memory budget: inserts wait for room instead of the process
// growing until the kernel's OOM killer ends it.
//
// What is counted is what clients make the server hold: the bytes of every
// live chunk of the server's ChunkStore (data and headers, received from
// writers or loaded from a checkpoint or the write-ahead log) plus
// kItemBytes for each item of its tables (the item, its columns, its slots
// in the key map and the selectors: docs/core_design.md measures about
// 300 bytes for a small item besides its chunks). gRPC's buffers, thread
// stacks and the allocator's own overhead are not counted, so a process
// limit (a cgroup, RLIMIT_AS) should leave room above the budget for them.
//
// While used() >= limit(): an insert of a new key into a table that is not
// full waits (like an insert the rate limiter holds back, within the
// writer's timeout, woken by deletes, evictions, resets and items sampled
// out), and a writer stream's new chunk waits likewise; at the timeout both
// fail with RESOURCE_EXHAUSTED naming the budget. A full table's insert
// evicts an item, so it goes on. Replacements, samples, priority updates,
// deletes, resets and checkpoints never wait.
//
// Thread safety: thread-safe; HasRoom() and used() are lock-free reads, so
// tables may call them under their own locks.
#ifndef REVERB_TF_CC_MEMORY_BUDGET_H_
#define REVERB_TF_CC_MEMORY_BUDGET_H_

#include <atomic>
#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "reverb_tf/cc/chunk_store.h"
#include "reverb_tf/cc/platform/cancellation.h"
#include "reverb_tf/cc/platform/export.h"

namespace reverb_tf {

class REVERB_TF_EXPORT MemoryBudget {
 public:
  // Counted per item, besides its chunks.
  static constexpr int64_t kItemBytes = 300;
  // How often a waiting call looks again (room is freed by other tables and
  // by chunk references dropped anywhere, which do not signal).
  static constexpr absl::Duration kRecheck = absl::Milliseconds(5);

  // `limit` > 0 bytes over `store`'s chunks (the store must outlive the
  // budget) and the items that `count_items` counts (lock-free: the
  // server sums its tables' Table::approximate_size()).
  MemoryBudget(int64_t limit, const ChunkStore* store,
               std::function<int64_t()> count_items);

  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  int64_t limit() const { return limit_; }
  // Chunk bytes plus kItemBytes per item, now.
  int64_t used() const;
  bool HasRoom() const { return used() < limit_; }

  // Waits until HasRoom(), `deadline`, `cancel` or Close(): OK, the
  // Exhausted() status, CANCELLED. For a writer stream's chunks (tables wait
  // under their own locks, through Table's rate-limit wait).
  absl::Status AwaitRoom(absl::Time deadline, Cancellation* cancel,
                         absl::string_view what);

  // RESOURCE_EXHAUSTED naming the budget and how much is used, for a call
  // that waited for room until its timeout; IsExhausted() recognizes it.
  absl::Status Exhausted(absl::string_view what) const;
  static bool IsExhausted(const absl::Status& status);

  // Waiting calls fail with CANCELLED from now on (the server is stopping).
  void Close() { closed_.store(true, std::memory_order_relaxed); }
  bool closed() const { return closed_.load(std::memory_order_relaxed); }

  // Calls waiting for room now, and calls refused at their timeout so far.
  int64_t waiting() const { return waiting_.load(std::memory_order_relaxed); }
  int64_t refused() const { return refused_.load(std::memory_order_relaxed); }
  // For Table: counts a call that starts / stops waiting, and a refusal.
  void NoteWaiting(int delta) {
    waiting_.fetch_add(delta, std::memory_order_relaxed);
  }
  void NoteRefused() { refused_.fetch_add(1, std::memory_order_relaxed); }

 private:
  const int64_t limit_;
  const ChunkStore* const store_;
  const std::function<int64_t()> count_items_;
  std::atomic<bool> closed_{false};
  std::atomic<int64_t> waiting_{0};
  std::atomic<int64_t> refused_{0};
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_MEMORY_BUDGET_H_
