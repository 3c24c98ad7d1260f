// SPDX-License-Identifier: Apache-2.0
// Checkpoints: saving every table of a server to disk and loading them back.
//
// A checkpoint is a directory under the checkpointer's root, named by its
// UTC creation time (so names sort chronologically), holding one data file
// (record_file.h) with these entries:
//
//   header   proto::CheckpointHeader: each table's options, item count and
//            rate-limiter counters, and the number of chunks;
//   chunk    once per distinct chunk, however many items and tables use it;
//   items    batches of one table's items, oldest first: key, priority,
//            times_sampled and their trajectories as chunk slices;
//   end      the counts again, so a file cut at a record boundary is still
//            recognised as incomplete.
//
// A server with a spill directory (docs/disk_tier.md) does not rewrite the
// bytes of chunks that are on disk: their entries ("chunk on disk", format
// 2) give the record's place, size and CRC-32C in a spill segment file, and
// the checkpoint holds a hard link to each such file in `spill/` (sealed
// first, so it never changes again). Loading into a store with a spill
// directory takes those files in without reading them; any other load
// reads the records, checking their checksums. Chunks that cannot be
// linked (another file system) are written out as usual.
//
// Save() snapshots each table (TableSnapshot: the only time the table is
// paused) and then writes without holding any table lock. It writes into a
// temporary directory that is renamed into place once the file is complete
// and fsynced, so a crash at any point leaves the previous checkpoints
// intact; only then are checkpoints beyond `keep` removed. Temporary
// directories left by a crashed process are removed the next time.
//
// Load() is all or nothing: on any error the tables are reset and the error
// names the checkpoint and, for damaged files, the record (DataLoss).
//
// Thread safety: Checkpointer is thread-safe; saves are serialized.
#ifndef REVERB_TF_CC_CHECKPOINTING_CHECKPOINTER_H_
#define REVERB_TF_CC_CHECKPOINTING_CHECKPOINTER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "reverb_tf/cc/platform/export.h"
#include "reverb_tf/cc/table.h"

namespace reverb_tf {

struct REVERB_TF_EXPORT CheckpointerOptions {
  // Directory holding the checkpoints; created if missing.
  std::string root;
  // A checkpoint directory to load when `root` holds none (e.g. one copied
  // from another experiment). Empty: none.
  std::string fallback_checkpoint_path;
  // Complete checkpoints to keep under `root` (>= 1). One, as dm-reverb
  // keeps: the previous one is removed only once the new one is complete.
  int keep = 1;
  // If not empty, checkpoint files and directories are given this group.
  std::string group;
  // What LoadLatest does when the newest checkpoint is damaged (a record
  // fails its checksum or a file is missing): by default it fails, so that
  // nobody trains on an older buffer without knowing. With this set it loads
  // the newest intact checkpoint instead (keep > 1 leaves older ones on
  // disk), warns on stderr and reports the skipped ones. Errors that are not
  // damage (a table missing or with another signature) fail either way.
  bool load_previous_if_damaged = false;
  // `root` is a new temporary directory of this process (Python's
  // TempDirCheckpointer): a restart does not find its checkpoints, so a
  // write-ahead log, which they truncate, refuses it (ReplayServer::Start).
  bool temporary = false;
};

struct REVERB_TF_EXPORT LoadedCheckpoint {
  // The checkpoint loaded, or "" if there was nothing to load.
  std::string path;
  // Newer checkpoints skipped as damaged, newest first, each with the
  // damage ("<path>: <error>"); empty unless load_previous_if_damaged.
  std::vector<std::string> skipped;
  // The write-ahead log position the loaded checkpoint holds (0: none).
  uint64_t wal_position = 0;
};

struct REVERB_TF_EXPORT CheckpointStats {
  std::string path;
  // Longest time a table was locked for its snapshot.
  absl::Duration max_table_pause;
  absl::Duration total;
  int64_t num_items = 0;
  int64_t num_chunks = 0;
  // The data file's size.
  uint64_t bytes = 0;
  // Chunk bytes left in spill segment files the checkpoint links to (not
  // rewritten), and how many files.
  uint64_t bytes_on_disk = 0;
  int64_t spill_files = 0;
};

class REVERB_TF_EXPORT Checkpointer {
 public:
  // InvalidArgument for bad options; Unavailable if the root cannot be
  // created.
  static absl::StatusOr<std::unique_ptr<Checkpointer>> Create(
      CheckpointerOptions options);

  // Writes a checkpoint of `tables` and returns its path. `wal_position`:
  // the write-ahead log entries it holds (checkpointing/wal.h), recorded.
  absl::StatusOr<CheckpointStats> Save(
      absl::Span<const std::shared_ptr<Table>> tables,
      uint64_t wal_position = 0);

  // Loads the newest checkpoint under the root into `tables` (which must be
  // empty), or the fallback checkpoint if the root holds none. A damaged
  // newest checkpoint is DATA_LOSS unless load_previous_if_damaged (above).
  // The chunks are made in `store` (null: a store of their own), so that a
  // server's accounting counts them.
  absl::StatusOr<LoadedCheckpoint> LoadLatest(
      absl::Span<const std::shared_ptr<Table>> tables,
      ChunkStore* store = nullptr);

  // Complete checkpoints under the root, oldest first.
  absl::StatusOr<std::vector<std::string>> List() const;

  const CheckpointerOptions& options() const { return options_; }

 private:
  explicit Checkpointer(CheckpointerOptions options);

  absl::Status RemoveStaleTemporaries() const;

  const CheckpointerOptions options_;
  absl::Mutex save_mu_;
  std::string last_name_ ABSL_GUARDED_BY(save_mu_);
};

// Loads the checkpoint directory `path` into `tables`, all or nothing.
// Every table in the checkpoint must exist in `tables` with the same
// signature (InvalidArgument naming the table otherwise); tables the
// checkpoint does not mention stay empty. The tables' own options apply
// (see Table::LoadItems / FinishLoad).
// Loads `path` into `tables` (empty ones); its write-ahead log position goes
// to `wal_position` if given; its chunks are made in `store` if given.
REVERB_TF_EXPORT absl::Status LoadCheckpoint(
    const std::string& path, absl::Span<const std::shared_ptr<Table>> tables,
    uint64_t* wal_position = nullptr, ChunkStore* store = nullptr);

// What a checkpoint holds, read back in full.
struct REVERB_TF_EXPORT CheckpointSummary {
  std::string path;
  std::string written_by;
  uint64_t file_bytes = 0;
  int64_t num_chunks = 0;
  uint64_t wal_position = 0;
  // Each table as loaded from the checkpoint (options, size, counters).
  std::vector<TableInfo> tables;
};

// Reads every record of the checkpoint directory `path`, verifying each
// checksum and decoding every chunk and item into tables built from the
// checkpoint's own header, as a server would load it: DATA_LOSS names the
// damaged record. Holds the whole checkpoint in memory while it runs.
// `progress(bytes_read, file_bytes)`, if set, is called every few MB.
REVERB_TF_EXPORT absl::StatusOr<CheckpointSummary> InspectCheckpoint(
    const std::string& path,
    std::function<void(uint64_t bytes_read, uint64_t file_bytes)> progress =
        nullptr);

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_CHECKPOINTING_CHECKPOINTER_H_
