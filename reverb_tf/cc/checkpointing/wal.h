// SPDX-License-Identifier: Apache-2.0
// The write-ahead log: no acknowledged change is lost when the server dies.
//
// The log is attached to every table as its TableJournal: each change (an
// insert, a priority update or delete, an item sampled out, a reset) queues
// an entry while the table's lock is held, so entries are in the order the
// changes took effect. Queuing is cheap: chunks are queued by reference and
// written from there. Before the service acknowledges a change it calls
// Commit(), which returns once every entry queued so far is in the log
// file, written by whichever caller got there first for all of them (group
// commit):
//   kEveryWrite  written and synced (fdatasync): survives a crash of the
//                machine;
//   kInterval    written (survives a crash of the process, SIGKILL included)
//                and synced every `interval`;
//   kNone        written; the kernel syncs when it likes.
//
// Files: <dir>/wal-<first position, 20 digits>.log, record files
// (record_file.h) whose entries are numbered ("positions") from 1 across
// files:
//   kChunk   a chunk (chunk_codec.h), logged before the first item of the
//            file that references it, so every file is self-contained;
//   kItem    table name, key, priority, legacy flag, columns of slices
//            (chunk key, offset, length) and squeeze flags;
//   kMutate  table name, updates (key, priority), deletes;
//   kReset   table name.
// A file is closed and the next begun at `segment_bytes`, and by Rotate().
//
// With checkpoints: the server Rotate()s before a checkpoint's snapshot and
// records the returned position in the checkpoint (every entry up to it took
// effect before the snapshot, so the checkpoint holds it); once the
// checkpoint is written, DropThrough() deletes the files it covers. On
// start, Open() replays the entries after the loaded checkpoint's position,
// in order, into the tables: entries that the checkpoint already holds
// replay to the same state (replacing an item, setting a priority again).
// A damaged or torn entry ends the replay there: what came before is
// applied, Open() says what was lost in WalReplay::damage, and files after
// it are renamed *.unreplayed; the server then checkpoints at once so the
// log starts clean.
//
// A log that cannot be written (a full disk, an I/O error) fails: Commit()
// and Writable() return "the write-ahead log cannot be written: <cause>"
// (RESOURCE_EXHAUSTED for a full disk), nothing more is queued, and the
// tables it journals refuse changes while sampling goes on. A checkpoint of
// the tables as they are then holds everything the log held: once one is
// saved, Resume() deletes the old files and accepts changes again (the
// server retries every `retry_interval`, and on every Checkpoint call).
//
// Evictions are not logged: replayed inserts evict again, which is exact for
// a Fifo, Lifo or heap remover and another random choice for a uniform or
// prioritized one. times_sampled of replayed items starts from what the
// checkpoint held (0 for items inserted after it).
//
// Thread safety: thread-safe. The journal methods take the log's own lock
// inside a table's lock (lock order: table, then log); Commit() and the
// other methods must not be called with a table's lock held.
#ifndef REVERB_TF_CC_CHECKPOINTING_WAL_H_
#define REVERB_TF_CC_CHECKPOINTING_WAL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "reverb_tf/cc/chunk_store.h"
#include "reverb_tf/cc/platform/export.h"
#include "reverb_tf/cc/table.h"

namespace reverb_tf {

class RecordWriter;

enum class WalSync { kEveryWrite, kInterval, kNone };

struct REVERB_TF_EXPORT WalOptions {
  std::string dir;
  WalSync sync = WalSync::kEveryWrite;
  // kInterval: how often the log is synced.
  absl::Duration interval = absl::Milliseconds(10);
  // A file is closed and the next begun once it holds about this much.
  int64_t segment_bytes = int64_t{64} << 20;
  // While the log cannot be written, how often the server tries the
  // checkpoint that lets it resume.
  absl::Duration retry_interval = absl::Seconds(5);

  // INVALID_ARGUMENT for an empty dir, a non-positive interval or size.
  absl::Status Validate() const;
};

// Parses "every_write", "every_n_ms" (kInterval) or "none".
REVERB_TF_EXPORT absl::StatusOr<WalSync> ParseWalSync(absl::string_view name);
// The name ParseWalSync() parses as `sync`.
REVERB_TF_EXPORT absl::string_view WalSyncName(WalSync sync);

// What Open() replayed.
struct REVERB_TF_EXPORT WalReplay {
  // Entries applied to the tables, and the files read.
  int64_t entries = 0;
  int64_t files = 0;
  // The position of the last good entry (the checkpoint's if none).
  uint64_t last_position = 0;
  // Empty if the log was intact; else what was damaged and what was not
  // replayed because of it.
  std::string damage;
};

struct REVERB_TF_EXPORT WalStats {
  uint64_t entries = 0;  // queued since Open()
  uint64_t bytes = 0;    // written to log files since Open()
  uint64_t commits = 0;  // writes to the file (each one or more Commit()s)
  uint64_t syncs = 0;
  uint64_t files = 0;  // log files now on disk
};

class REVERB_TF_EXPORT WriteAheadLog final : public TableJournal {
 public:
  // Replays the log in options.dir after `after` (the loaded checkpoint's
  // position; 0 without one) into `tables`, then begins a new file to
  // append to. DATA_LOSS if entries between `after` and the oldest file are
  // missing; a damaged entry is not an error (see `replayed->damage`).
  // Replayed chunks are made in `store` (null: a store of the replay's own).
  static absl::StatusOr<std::unique_ptr<WriteAheadLog>> Open(
      const WalOptions& options, uint64_t after,
      absl::Span<const std::shared_ptr<Table>> tables, WalReplay* replayed,
      ChunkStore* store = nullptr);

  // Writes and syncs what is queued.
  ~WriteAheadLog() override;

  WriteAheadLog(const WriteAheadLog&) = delete;
  WriteAheadLog& operator=(const WriteAheadLog&) = delete;

  // TableJournal: queue an entry.
  void Inserted(const Table& table, const Item& item) override;
  void Mutated(const Table& table,
               absl::Span<const std::pair<Key, double>> updates,
               absl::Span<const Key> deletes) override;
  void SampledOut(const Table& table, Key key) override;
  void WasReset(const Table& table) override;
  // OK, or why the log cannot be written (what Commit() returns).
  absl::Status Writable() const override;

  // Returns once every entry queued before the call is as durable as the
  // sync policy makes it; the log's I/O error (e.g. a full disk) if it
  // failed, after which every Commit() fails and nothing more is written.
  absl::Status Commit();

  // Begins a new file for what comes next and writes what is queued;
  // returns the position of the last entry queued so far (for a checkpoint
  // that starts now), or the log's error.
  absl::StatusOr<uint64_t> Rotate();

  // Deletes the files whose entries are all at or below `position` (a
  // checkpoint holds them). The file being written is kept.
  absl::Status DropThrough(uint64_t position);

  // Fails the log as a write error would, with `cause` (not OK): e.g. the
  // checkpoint that a damaged log needs could not be written. No-op if the
  // log has already failed.
  void Fail(const absl::Status& cause);

  // The position of the last entry queued. While the log has failed nothing
  // is queued, so a checkpoint taken then holds every entry up to it.
  uint64_t last_position() const;

  // After a failure, once a checkpoint holding every entry up to
  // `checkpointed` (last_position() when it began) is saved: deletes every
  // log file, begins a new one and accepts changes again. OK at once if the
  // log has not failed; the new file's error if it cannot be begun (the log
  // stays failed).
  absl::Status Resume(uint64_t checkpointed);

  WalStats stats() const;
  const WalOptions& options() const { return options_; }

 private:
  struct Pending;

  WriteAheadLog(WalOptions options, uint64_t next_position);
  // Queues an entry; `chunk` (may be null) is its body.
  void QueueLocked(uint8_t type, std::string head, ChunkRef chunk = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void QueueRotationLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Begins a new file if the current one reached segment_bytes.
  void MaybeBeginFileLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Commit(), and with `everything` until nothing is queued (a new file's
  // mark included).
  absl::Status Write(bool everything);
  // Writes `batch` (outside mu_; one flusher at a time).
  absl::Status WriteBatch(std::vector<Pending>* batch, bool sync);
  // Deletes the files whose entries are all at or below `position`, and
  // with !keep_newest the newest file too (whatever it holds).
  absl::Status DropFiles(uint64_t position, bool keep_newest);
  void SyncEvery(absl::Duration interval);
  // Records the log's first error (worded for callers) and says so once on
  // stderr.
  void FailLocked(const absl::Status& cause) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const WalOptions options_;

  mutable absl::Mutex mu_;
  std::vector<Pending> pending_ ABSL_GUARDED_BY(mu_);
  uint64_t last_position_ ABSL_GUARDED_BY(mu_);
  // Entries up to these positions are written / synced.
  uint64_t written_ ABSL_GUARDED_BY(mu_);
  uint64_t synced_ ABSL_GUARDED_BY(mu_);
  bool flushing_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  // Chunks logged in the file being filled, and its size so far.
  absl::flat_hash_set<ChunkKey> file_chunks_ ABSL_GUARDED_BY(mu_);
  int64_t file_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  WalStats stats_ ABSL_GUARDED_BY(mu_);

  // Only the flusher (flushing_ set) touches the file.
  std::unique_ptr<RecordWriter> writer_;
  std::string writer_path_;
  std::thread syncer_;
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_CHECKPOINTING_WAL_H_
