// SPDX-License-Identifier: Apache-2.0
// Table: the replay buffer itself.
//
// A table stores Items (item.h) under unique keys. Two selectors decide
// which item Sample() returns (the sampler) and which item is evicted when an
// insert finds the table at max_size (the remover). A RateLimiter decides
// when inserts and samples may proceed; callers that it does not admit block
// until it does, until their timeout expires (DEADLINE_EXCEEDED), until their
// Cancellation fires (CANCELLED) or until the table is closed (CANCELLED).
// An item sampled max_times_sampled times is removed.
//
// Invariants (checked by table_stress_test.cc):
//   * size() == number of keys in the sampler == number in the remover
//     <= max_size;
//   * every stored item's times_sampled < max_times_sampled (when > 0);
//   * chunks are referenced only by items (and by SampledItems callers
//     hold), so removing an item releases whatever chunks only it used.
//
// Thread safety: thread-safe. One mutex guards all state; blocked callers
// wait on a condition variable, not while holding the lock. Items removed by
// eviction or by max_times_sampled are destroyed after the lock is released,
// so freeing large chunks never stalls other callers.
#ifndef REVERB_TF_CC_TABLE_H_
#define REVERB_TF_CC_TABLE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "reverb_tf/cc/item.h"
#include "reverb_tf/cc/memory_budget.h"
#include "reverb_tf/cc/platform/cancellation.h"
#include "reverb_tf/cc/platform/export.h"
#include "reverb_tf/cc/platform/table_memory.h"
#include "reverb_tf/cc/rate_limiters/rate_limiter.h"
#include "reverb_tf/cc/sample_info.h"
#include "reverb_tf/cc/selectors/item_selector.h"

namespace reverb_tf {

struct REVERB_TF_EXPORT TableOptions {
  std::string name;
  SelectorOptions sampler;
  SelectorOptions remover;
  int64_t max_size = 0;
  // < 1 means unlimited (kept as given: TableInfo reports it).
  int32_t max_times_sampled = 0;
  RateLimiterOptions rate_limiter;
  std::optional<TableSignature> signature;

  // InvalidArgument naming the offending option. What every table must
  // satisfy, also one restored from a checkpoint or a write-ahead log.
  absl::Status Validate() const;

  // Validate(), and for a table a program configures anew (Python's Table,
  // the server binary's --config) the rate limiter's CheckLive when items
  // stay until removed (max_times_sampled < 1): a configuration that can
  // deadlock is refused at start rather than hanging later. Restores skip
  // it, so that no saved table is ever refused.
  absl::Status CheckNew() const;
};

// A sample as the table hands it out: what it reports of the item
// (SampleInfo, which the layers above pass on as it is) and the item's
// trajectory over the table's chunks.
struct SampledItem : SampleInfo {
  // True if this sample reached max_times_sampled and removed the item.
  bool removed = false;
  Trajectory trajectory;
};

struct MutationResult {
  int64_t updated = 0;
  int64_t deleted = 0;
  // Keys named by the call that the table did not hold (already evicted or
  // never inserted); they are skipped, which is what a learner updating
  // priorities of possibly-evicted items needs.
  int64_t missing = 0;
};

// What a table has done since it was created in this process, for metrics:
// unlike the rate limiter's counters these are never reset (Reset(), a
// checkpoint restore) and only grow.
struct TableCounters {
  int64_t inserted = 0;          // new items (not replacements)
  int64_t sampled = 0;           // items handed out by Sample()
  int64_t priority_updates = 0;  // applied MutatePriorities updates
  int64_t deleted = 0;           // removed by MutatePriorities deletes
  int64_t evicted = 0;           // removed by the remover (table over max_size)
  int64_t sampled_out = 0;       // removed after max_times_sampled samples
  int64_t resets = 0;
  // Items accepted (Item::unchecked) that do not match the signature.
  int64_t off_signature = 0;
};

// How the priorities of a table's items are distributed, kept up to date as
// items come, go and change priority (O(1) each), for dashboards: bucket 0
// counts priorities <= 0, bucket i in [1, 21] those in (2^(i-12), 2^(i-11)],
// with the first of those taking everything in (0, 2^-10] and the last
// bucket everything above 2^10 (and NaN never occurs: priorities are checked).
struct PriorityHistogram {
  static constexpr int kNumBuckets = 23;
  // Upper bound of bucket i (the last is +infinity).
  static double UpperBound(int bucket);
  static int BucketOf(double priority);

  std::array<int64_t, kNumBuckets> counts{};
};

struct TableInfo {
  TableOptions options;
  TableCounters counters;
  PriorityHistogram priorities;
  int64_t current_size = 0;
  // Items that have been sampled at least once.
  int64_t num_unique_samples = 0;
  // Episodes (of the first chunk of an item) with at least one item in the
  // table, and episodes whose last item left it since the last Reset().
  int64_t num_episodes = 0;
  int64_t num_deleted_episodes = 0;
  // ItemSelector::TotalWeight() of the sampler, and the smallest weight of
  // an item it can choose (MinProbability() * TotalWeight(); 0 if none).
  double sampler_total_weight = 0;
  double sampler_min_item_weight = 0;
  RateLimiterInfo rate_limiter_info;
};

// The smaller of two smallest item weights (TableInfo::
// sampler_min_item_weight), 0 standing for none: how those of several
// tables combine.
inline double SmallerItemWeight(double a, double b) {
  if (!(a > 0)) return b > 0 ? b : 0.0;
  return b > 0 && b < a ? b : a;
}

// A table's contents copied in one pass under its lock, for checkpoints.
//
// The copy holds no per-item allocation: flat arrays of item, column and
// slice records plus a pointer to the chunk of every slice. Chunks are
// immutable, so the pointers are a snapshot of the data; while any snapshot
// of a table is alive the table keeps the items it removes (and trajectories
// it replaces) instead of freeing them, so every pointed-to chunk stays
// alive without the snapshot touching a reference count. That keeps the
// pause to a sequential pass over the items: chunk memory is not visited
// under the lock. Serializing happens afterwards, while the table serves.
struct REVERB_TF_EXPORT TableSnapshot {
  struct ItemRecord {
    Key key;
    double priority;
    int32_t times_sampled;
    uint32_t num_columns;
    // Index of the item's first column in `columns`.
    uint64_t first_column;
    // Position in insertion order (see ItemSelector::AppendInsertionRanks);
    // 0 for every item when the table's selectors do not depend on it.
    uint64_t rank;
  };
  struct ColumnRecord {
    // Index of the column's first slice in `slices` / `chunks`.
    uint64_t first_slice;
    uint32_t num_slices;
    bool squeeze;
  };
  struct SliceRecord {
    int32_t offset;
    int32_t length;
  };

  TableOptions options;
  RateLimiterInfo rate_limiter;
  int64_t num_unique_samples = 0;
  // Oldest first (sorted by rank).
  std::vector<ItemRecord> items;
  std::vector<ColumnRecord> columns;
  std::vector<SliceRecord> slices;
  // chunks[i] is the chunk of slices[i] (repeated for every slice using it),
  // valid while `pin` is held.
  std::vector<const Chunk*> chunks;
  std::shared_ptr<const void> pin;
  // How long the table's lock was held to take the snapshot.
  absl::Duration pause;
};

class Table;

// Told of every change a table applies, under the table's lock and so in
// the order the changes take effect (what a write-ahead log records:
// checkpointing/wal.h). Evictions are not reported: replaying the inserts
// evicts again. Implementations must be quick and must not call the table.
class TableJournal {
 public:
  virtual ~TableJournal() = default;
  // `item` was inserted, or replaced the stored item of its key.
  virtual void Inserted(const Table& table, const Item& item) = 0;
  // A MutatePriorities call was applied; once per call. A call that
  // succeeds passes all its updates and deletes (keys the table lacked
  // included). A call that fails because the sampler refused an update
  // keeps the updates before it applied, so it passes those, for a replay
  // to agree with the table: the updates of present keys before the
  // refused one and no deletes (no call at all if none was applied).
  virtual void Mutated(const Table& table,
                       absl::Span<const std::pair<Key, double>> updates,
                       absl::Span<const Key> deletes) = 0;
  // Sampling removed `key` (it reached max_times_sampled).
  virtual void SampledOut(const Table& table, Key key) = 0;
  virtual void WasReset(const Table& table) = 0;
  // OK while changes can be recorded; otherwise why not (e.g. the log's disk
  // is full). The table then refuses inserts, priority updates, deletes and
  // resets with this status and goes on serving samples. Called under the
  // table's lock, so it must be as quick as the other methods.
  virtual absl::Status Writable() const { return absl::OkStatus(); }
};

class REVERB_TF_EXPORT Table : public std::enable_shared_from_this<Table> {
 public:
  // Fails with InvalidArgument if `options` are invalid. `seed` seeds the
  // random selectors.
  static absl::StatusOr<std::shared_ptr<Table>> Create(TableOptions options,
                                                       uint64_t seed);

  Table(const Table&) = delete;
  Table& operator=(const Table&) = delete;
  ~Table();

  const std::string& name() const { return options_.name; }

  // Inserts `item`, or, if its key is present, replaces its priority and
  // trajectory (a replacement is not rate limited and keeps times_sampled).
  // A new key blocks until the rate limiter admits it; if the table is then
  // over max_size, the remover's choice among all items, the new one
  // included, is evicted (EvictOverflowLocked).
  // Errors: InvalidArgument (bad priority, trajectory or signature mismatch),
  // DeadlineExceeded (limiter timeout), Cancelled (cancel or Close()), the
  // journal's status while it is not Writable().
  absl::Status InsertOrAssign(Item item,
                              absl::Duration timeout = absl::InfiniteDuration(),
                              Cancellation* cancel = nullptr);

  // InsertOrAssign of items[0], items[1], ... in order, under one lock
  // acquisition and without waiting: stops at the first item the rate
  // limiter or the memory budget would make wait (DeadlineExceeded, or the
  // budget's ResourceExhausted) or that is invalid. *stored counts the items
  // stored (moved from); the others are left as they were. One call instead
  // of one per item is what lets a batch of items be stored as a batch.
  absl::Status InsertAvailable(absl::Span<Item> items, int64_t* stored);

  // Samples between 1 and `max_samples` items: blocks only until the first
  // sample is allowed, then takes as many more as the limiter allows without
  // waiting. Errors as InsertOrAssign; InvalidArgument if max_samples < 1.
  absl::StatusOr<std::vector<SampledItem>> Sample(
      int32_t max_samples, absl::Duration timeout = absl::InfiniteDuration(),
      Cancellation* cancel = nullptr);

  // Applies priority updates and deletes; keys the table does not hold are
  // counted in `missing`. All priorities are validated before anything is
  // applied (InvalidArgument, nothing changed); the journal's status while
  // it is not Writable() (nothing changed). An update the sampler refuses
  // (a total weight that would overflow) ends the call with its
  // InvalidArgument: the updates before it stay applied (and journaled),
  // the ones after it and the deletes are not.
  absl::StatusOr<MutationResult> MutatePriorities(
      absl::Span<const std::pair<Key, double>> updates,
      absl::Span<const Key> deletes);

  // Removes every item and zeroes the rate limiter's counters; the
  // journal's status while it is not Writable() (nothing changed).
  absl::Status Reset();

  // Fails every blocked and future InsertOrAssign/Sample with Cancelled,
  // saying that the server is stopping (the only caller, besides the
  // destructor, is ReplayServer::Stop()).
  void Close();
  // Undoes Close(): a table outlives the server that hosted it (Python's
  // Table owns it from construction), and ReplayServer::Start() opens each
  // table it is given, so a table hosted again serves again.
  void Open();

  // A table is hosted by one running server at a time: ReplayServer::Start()
  // takes it (Host) before it changes anything and Stop() gives it back
  // (Unhost). `server` identifies the server; `port` is where it serves,
  // told once it is bound (SetHostPort; 0 until then). CheckHostable and
  // Host fail with INVALID_ARGUMENT, naming the port, while another server
  // hosts the table; Unhost by a server that does not host it does nothing.
  absl::Status CheckHostable(const void* server) const;
  absl::Status Host(const void* server);
  void SetHostPort(const void* server, int port);
  void Unhost(const void* server);

  int64_t size() const;
  // size() without the lock (a relaxed read, for the memory budget, which
  // sums every table's from inside another table's lock).
  int64_t approximate_size() const {
    return approximate_size_.load(std::memory_order_relaxed);
  }
  TableInfo info() const;
  // Whether `n` (>= 1) inserts / samples would pass the rate limiter now
  // (RateLimiter::CanInsertN / CanSampleN); INVALID_ARGUMENT if n < 1.
  absl::StatusOr<bool> CanInsert(int64_t n) const;
  absl::StatusOr<bool> CanSample(int64_t n) const;

  // A consistent copy of the table for a checkpoint (see TableSnapshot).
  TableSnapshot Snapshot() const;

  // Checkpoint restore, before the table is served. LoadItems adds items
  // (called repeatedly, oldest items first) without consulting the rate
  // limiter; this table's options apply: an item sampled max_times_sampled
  // times is dropped and a full table evicts as usual. FinishLoad then sets
  // the counters: if nothing was dropped and the rate limiter options are the
  // ones the checkpoint was written with (`saved`), the limiter counters and
  // num_unique_samples are restored exactly; otherwise num_unique_samples
  // counts the loaded items sampled before, and the limiter counters restart
  // as if the loaded items had just been inserted into the new limiter,
  // with the insert/sample balance clamped into the limiter's window, so a
  // stale limiter state can never block inserts for good.
  // LoadItems fails with InvalidArgument on a malformed trajectory or
  // priority, naming the item.
  absl::Status LoadItems(std::vector<Item> items);
  void FinishLoad(const TableInfo& saved);

  // Write-ahead log replay, after a checkpoint load and before serving:
  // InsertOrAssign without waiting for the rate limiter (it still counts the
  // insert). Mutations and resets replay through the usual methods.
  absl::Status ReplayInsert(Item item);

  // Reports every later change to `journal` (null: none); set before the
  // table is served. The journal must outlive the table's use.
  void SetJournal(TableJournal* journal);

  // Makes inserts of new keys into this table, while it is not full, wait
  // for room in `budget` (memory_budget.h; null: no budget); set before the
  // table is served. The budget must outlive the table's use.
  void SetMemoryBudget(MemoryBudget* budget);

  // Verifies the invariants listed at the top of this file; Internal error
  // describing the first violation. O(size); for tests and after restores.
  absl::Status CheckInvariants() const;
  const TableOptions& options() const { return options_; }

 private:
  Table(TableOptions options, std::unique_ptr<ItemSelector> sampler,
        std::unique_ptr<ItemSelector> remover);

  // Blocks until `ready()` holds (then counts a completed call in `stats`),
  // or fails with DeadlineExceeded / Cancelled. `ready()` is evaluated when
  // the table signals and, for conditions that change outside the table,
  // every `recheck`.
  absl::Status AwaitLocked(absl::FunctionRef<bool()> ready, absl::Time deadline,
                           Cancellation* cancel, RateLimiterCallStats* stats,
                           const char* what, bool* waited,
                           absl::Duration recheck = absl::InfiniteDuration())
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // CheckHostable()'s verdict.
  absl::Status CheckHostableLocked(const void* server) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // For an insert of a new key: waits while the memory budget is used up
  // and the table is not full; the budget's Exhausted() at the deadline.
  absl::Status AwaitMemoryLocked(absl::Time deadline, Cancellation* cancel)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NoteSizeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    approximate_size_.store(static_cast<int64_t>(items_.size()),
                            std::memory_order_relaxed);
  }

  // While the table holds more than max_size items, removes the one the
  // remover picks. Called after an insert, so the remover weighs the new item
  // too (a MinHeap remover turns away an item below every stored priority; a
  // Lifo remover drops the newest item), as dm-reverb does.
  absl::Status EvictOverflowLocked(std::vector<Item>* graveyard)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The priority rule of the table: a sampling weight (ValidatePriorityWeight)
  // if either selector is prioritized, else anything but NaN.
  absl::Status CheckPriority(double priority) const;
  void CountPriorityLocked(double priority, int delta)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    priorities_.counts[PriorityHistogram::BucketOf(priority)] += delta;
  }
  // Counts `item` in (delta 1) or out of (delta -1) its episode.
  void CountEpisodeLocked(const Item& item, int delta)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes `key` and moves its item into `graveyard` for destruction
  // outside the lock.
  absl::Status DeleteLocked(Key key, std::vector<Item>* graveyard)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Status AssignLocked(Item* item) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The journal's Writable() (OK without a journal).
  absl::Status WritableLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // InsertOrAssign, waiting for the rate limiter only if `rate_limited`.
  absl::Status Insert(Item item, absl::Duration timeout, Cancellation* cancel,
                      bool rate_limited);
  // Insert's checks that need no lock: priority, trajectory, signature
  // (*off_signature: an unchecked item that does not match it).
  absl::Status CheckInsert(const Item& item, bool* off_signature) const;
  // Insert's part under the lock (which AwaitLocked may release while it
  // waits). Moves from `item` only once it is stored; evicted items go to
  // `graveyard`.
  absl::Status InsertLocked(Item& item, bool off_signature, bool rate_limited,
                            absl::Time deadline, Cancellation* cancel,
                            std::vector<Item>* graveyard)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Counts one more sample of `item` and copies into `sample` what it
  // carries of the item: priority, times sampled (this one included) and
  // trajectory.
  void TakeSampleLocked(Item& item, SampledItem* sample)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sample()'s batch for tables without max_times_sampled: chooses up to
  // `max_samples` (at least one; the limiter allowed it) as the limiter
  // allows, then fills them in with the item fetches overlapped.
  absl::Status SampleBatchLocked(int32_t max_samples, bool waited,
                                 std::vector<SampledItem>* samples)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Ends one snapshot's hold on removed items (see TableSnapshot).
  void Unpin() const;

  const TableOptions options_;
  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // The running server hosting the table (Host), or null, and its port.
  const void* host_ ABSL_GUARDED_BY(mu_) = nullptr;
  int host_port_ ABSL_GUARDED_BY(mu_) = 0;
  TableCounters counters_ ABSL_GUARDED_BY(mu_);
  PriorityHistogram priorities_ ABSL_GUARDED_BY(mu_);
  TableMap<Key, Item> items_ ABSL_GUARDED_BY(mu_);
  const std::unique_ptr<ItemSelector> sampler_ ABSL_PT_GUARDED_BY(mu_);
  const std::unique_ptr<ItemSelector> remover_ ABSL_PT_GUARDED_BY(mu_);
  // Their priority_matters(), fixed at construction.
  const bool sampler_priority_matters_;
  const bool remover_priority_matters_;
  RateLimiter rate_limiter_ ABSL_GUARDED_BY(mu_);
  // Items LoadItems dropped or evicted; the saved limiter counters no longer
  // describe the table once any were.
  int64_t load_discarded_ ABSL_GUARDED_BY(mu_) = 0;
  // Live snapshots, and what the table removed while any was alive.
  mutable int32_t snapshots_alive_ ABSL_GUARDED_BY(mu_) = 0;
  mutable std::vector<Item> kept_for_snapshots_ ABSL_GUARDED_BY(mu_);
  int64_t num_unique_samples_ ABSL_GUARDED_BY(mu_) = 0;
  // Episode id -> items stored that belong to it (TableInfo::num_episodes).
  absl::flat_hash_map<uint64_t, int64_t> episode_items_ ABSL_GUARDED_BY(mu_);
  int64_t num_deleted_episodes_ ABSL_GUARDED_BY(mu_) = 0;
  TableJournal* journal_ ABSL_GUARDED_BY(mu_) = nullptr;
  MemoryBudget* budget_ ABSL_GUARDED_BY(mu_) = nullptr;
  // items_.size(), written under mu_ whenever it changes.
  std::atomic<int64_t> approximate_size_{0};
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_TABLE_H_
