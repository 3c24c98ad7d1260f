// SPDX-License-Identifier: Apache-2.0
// TrajectoryWriter: streams steps and items to the server.
//
// The caller appends steps (one payload per flat column, or none when a
// column is missing in that step) and creates items that reference cells
// (column, episode step) of the last `num_keep_alive_refs` steps. The writer
// groups each column's consecutive steps into chunks and sends a chunk only
// when an item first references it, once per stream; every later item that
// references it reuses it. When a chunk can no longer be referenced (its steps
// left the keep-alive window) the server is told to release it.
//
// Chunking: a column's open chunk is closed when an item references one of
// its steps, when it reaches max_chunk_length steps (default:
// num_keep_alive_refs), when the column is missing in a step, and at the end
// of an episode.
//
// Sending happens on a background thread that packs queued items into one
// message, lingering up to 1 ms (or until 64 items are queued, or a flush
// asks) so that many small items share a message; a second thread reads the
// acknowledgements. To a server of this process (local_server.h) the
// sender hands each message over directly and gets the acknowledgements
// back from that call: no second thread, no serialization. Flush() waits
// for them. At most
// max_in_flight_items may be unacknowledged: CreateItem() blocks beyond that.
//
// Errors: a failed stream (server gone, item rejected) puts the writer in a
// permanent error state; every later call returns that status. Items the
// server acknowledged stay in their tables.
//
// Batched writing (options.num_lanes = B >= 1): one writer serves B
// environments that step together (a vectorised environment). Each
// environment is a lane with its own episodes. Lanes share the columns: a
// column's value in a step has B rows, row b being lane b's, and its chunks
// are lane chunks (chunk_store.h) holding every lane's rows, so a batch
// travels and is stored as one chunk per column rather than B; each lane's
// items reference that lane's rows. AppendBatch() appends one step to every
// lane from values whose leading dimension is B, and CreateItems() creates
// one item per chosen lane in one call; all lanes share one stream, so a
// batch of items travels in one message. Lanes step together, so a step
// index means the same step in every lane. In this mode Append(),
// CreateItem() and EndEpisode() are FAILED_PRECONDITION.
//
// Thread safety: thread-compatible for the caller (one thread at a time, as
// the Python TrajectoryWriter is used); the internal threads synchronize
// with it.
#ifndef REVERB_TF_CC_CLIENT_TRAJECTORY_WRITER_H_
#define REVERB_TF_CC_CLIENT_TRAJECTORY_WRITER_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
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
#include "reverb_tf/cc/platform/cancellation.h"
#include "reverb_tf/cc/platform/export.h"
#include "reverb_tf/cc/tensor_payload.h"

namespace reverb_tf {

class ClientStub;
struct WriterStream;

struct REVERB_TF_EXPORT TrajectoryWriterOptions {
  int32_t num_keep_alive_refs = 1;
  // 0: num_keep_alive_refs.
  int32_t max_chunk_length = 0;
  int32_t max_in_flight_items = 128;
  // 0: no compression; otherwise the zstd level of every chunk.
  int32_t zstd_level = 0;
  // How long an item may wait for its table's rate limiter on the server.
  absl::Duration rate_limiter_timeout = absl::InfiniteDuration();
  // Items are dm-reverb legacy Writer items (see Item::legacy_steps): each
  // column references all the item's steps, unsqueezed.
  bool legacy_items = false;
  // False: items are marked Item::unchecked, so that the server accepts
  // them even if they do not match the table's signature (the client-side
  // check is the caller's, as in dm-reverb).
  bool validate_items = true;
  // 0: a plain writer; B >= 1: a batched writer of B environments (lanes; see
  // the class comment).
  int32_t num_lanes = 0;

  absl::Status Validate() const;
};

// A reference from an item to some steps of one column.
struct REVERB_TF_EXPORT ItemColumn {
  int32_t column = 0;
  // Step indices as Append() returned them, in the order the item lists them.
  std::vector<int64_t> steps;
  bool squeeze = false;
};

class REVERB_TF_EXPORT TrajectoryWriter {
 public:
  ~TrajectoryWriter();
  TrajectoryWriter(const TrajectoryWriter&) = delete;
  TrajectoryWriter& operator=(const TrajectoryWriter&) = delete;

  // Adds one step; returns its index, counted over the writer's lifetime
  // (items reference steps by it, across episodes). `step[i]` empty:
  // column i is missing in this step. Columns may be added (the vector grows),
  // never removed. A column's dtype and step shape are fixed by its first
  // value; a mismatch is INVALID_ARGUMENT naming the column.
  //
  // With `partial_step`, the step stays open: the next Append() adds more
  // columns to the same step (and returns the same index) until one is made
  // without it. A column may be given once per step. Cells of an open step
  // can be referenced by items at once.
  absl::StatusOr<int64_t> Append(std::vector<std::optional<TensorPayload>> step,
                                 bool partial_step = false);

  // Queues an item for `table`. The item must pass ValidateItem() (checked
  // first, before the writer's state), and every referenced cell must exist
  // and be within the keep-alive window. Blocks while max_in_flight_items
  // are unacknowledged (bounded by `timeout`).
  absl::Status CreateItem(const std::string& table, double priority,
                          const std::vector<ItemColumn>& columns,
                          absl::Duration timeout = absl::InfiniteDuration(),
                          Cancellation* cancel = nullptr);

  // Waits until at most `block_until_num_items` items are unacknowledged;
  // ValidateFlush() first.
  absl::Status Flush(int32_t block_until_num_items, absl::Duration timeout,
                     Cancellation* cancel = nullptr);

  // Closes every open chunk, starts a new episode (step 0) and flushes. With
  // clear_buffers the old episode's cells can no longer be referenced.
  // FAILED_PRECONDITION while a partial step is open (checked first): end
  // it with Append(..., partial_step=false), or FinishStep().
  absl::Status EndEpisode(bool clear_buffers, absl::Duration timeout,
                          Cancellation* cancel = nullptr);

  // Ends an open partial step as it stands, its missing columns missing (as
  // Append() of nothing more without partial_step); nothing if none is
  // open. For a writer whose episode ends with the step its caller left
  // open (StructuredWriter).
  absl::Status FinishStep();

  // Per-column overrides; 0 keeps the current value (max_chunk_length
  // shortened to fit a smaller keep-alive window). The result must pass
  // ValidateColumnOptions().
  absl::Status Configure(int32_t column, int32_t num_keep_alive_refs,
                         int32_t max_chunk_length);

  // -- Batched writing (num_lanes >= 1) ---------------------------------------

  // Appends one step to every lane. `step[c]` (empty: column c missing in
  // this step, in every lane) has a leading dimension of num_lanes; row b is
  // lane b's value. Columns are checked and added as by Append(), against the
  // rows' dtype and shape. Returns the step's index, the same in every lane.
  absl::StatusOr<int64_t> AppendBatch(
      std::vector<std::optional<TensorPayload>> step);

  // Queues one item per lane in `lanes` (distinct, in [0, num_lanes)), with
  // `priorities[i]` for lanes[i]. `columns` name columns and step indices,
  // as for CreateItem(); each lane's item references that lane's rows. All
  // items are checked before any is queued: an error names the lane and queues
  // nothing. Blocks while the in-flight window lacks room for all of them (or,
  // for more items than the window holds, until nothing is in flight).
  absl::Status CreateItems(const std::string& table,
                           absl::Span<const double> priorities,
                           const std::vector<ItemColumn>& columns,
                           absl::Span<const int32_t> lanes,
                           absl::Duration timeout = absl::InfiniteDuration(),
                           Cancellation* cancel = nullptr);

  // Ends the current episode of each of `lanes`: closes their open chunks
  // and starts a new episode (new id, step 0). With clear_buffers their
  // earlier cells can no longer be referenced. Does not wait for items
  // (episodes of B environments end every few steps); Flush() does.
  absl::Status EndLaneEpisodes(absl::Span<const int32_t> lanes,
                               bool clear_buffers);

  // Steps of each lane's current episode.
  std::vector<int32_t> LaneEpisodeSteps() const;

  int32_t num_lanes() const { return options_.num_lanes; }

  // Opens the stream now rather than at the first CreateItem(), so that the
  // server counts this writer at once (writer placement over shards).
  absl::Status Connect();

  // Ends the stream without waiting for acknowledgements (as dm-reverb's
  // close(): call Flush() first to make sure items are stored). Queued items
  // are still sent; the server gets up to `grace` to store them, after which
  // the stream is cancelled and items still waiting for a rate limiter are
  // dropped.
  absl::Status Close(absl::Duration grace = absl::Seconds(1));

  // Configure()'s rule: num_keep_alive_refs >= 1, and max_chunk_length 0
  // (unset) or in [1, num_keep_alive_refs]. Static, so a column that does not
  // exist yet can be checked.
  static absl::Status ValidateColumnOptions(int32_t num_keep_alive_refs,
                                            int32_t max_chunk_length);
  // CreateItem()'s and CreateItems()' rules on their arguments alone (for a
  // priority each): the priority is not NaN, the item has a column, every
  // column references a step, a squeezed column exactly one. In dm-reverb's
  // words (INVALID_ARGUMENT). Static, so that a caller can check before it
  // does anything else (the Python writer: before it fetches the table's
  // signature or reports a closed writer).
  static absl::Status ValidateItem(double priority,
                                   const std::vector<ItemColumn>& columns);
  // Flush()'s rule: block_until_num_items >= 0 (INVALID_ARGUMENT).
  static absl::Status ValidateFlush(int32_t block_until_num_items);

  // -- What the Python adapter reads instead of keeping its own copy --------

  // Names `column` for error messages: `name` is its path in the step
  // structure ("obs/pixels", what signature messages call its data path),
  // `label` how other messages name it after "column " (the Python adapter
  // gives the path as a tuple, "('obs', 'pixels')", as dm-reverb's messages
  // do; empty: the name in quotes). The column may not exist yet: names are
  // kept until it does.
  void SetColumnName(int32_t column, std::string name, std::string label = "");

  // CreateItem() checks items for `table` against `signature` (none: not
  // checked here; the server still checks), naming the signature's column
  // and this writer's column in the error.
  void SetTableSignature(const std::string& table,
                         std::optional<TableSignature> signature);

  // Steps since the history began: since the writer was created or the last
  // EndEpisode(clear_buffers=true), counting an open partial step.
  int64_t history_length() const;

  // The step index of history entry `index` of `column` (negative indices
  // count back from the newest step). OUT_OF_RANGE: no such entry;
  // FAILED_PRECONDITION: the cell left the keep-alive window, or the column
  // has no value in that step.
  absl::StatusOr<int64_t> HistoryStep(int32_t column, int64_t index) const;

  // Whether an item may still reference (column, step).
  bool IsReferenceable(int32_t column, int64_t step) const;

  // The values of `steps` of `column` (in a batched writer: lane `lane`'s
  // rows), stacked along a new dimension 0 (uncompressed).
  // FAILED_PRECONDITION if a cell cannot be referenced any more: the writer
  // keeps only the keep-alive window, and a lane's cells end with its
  // episode (EndLaneEpisodes with clear_buffers).
  absl::StatusOr<TensorPayload> ReadCells(int32_t column,
                                          absl::Span<const int64_t> steps,
                                          int32_t lane = 0);

  // The dtype and step shape of `column`, once its first value arrived.
  std::optional<std::pair<DType, Shape>> ColumnType(int32_t column) const;

  // A partial step is open (Append(..., partial_step=true) was the last call).
  bool step_open() const;

  int32_t num_columns() const;
  int32_t episode_steps() const;
  // Items created and not yet acknowledged.
  int64_t num_in_flight_items() const;

 private:
  friend class Client;

  struct Cell {
    int64_t step;
    // Chunk holding the cell once its column's open chunk was closed.
    std::shared_ptr<struct WriterChunk> chunk;
    int32_t offset_in_chunk = 0;
  };
  struct ColumnState;
  struct QueuedItem;
  // One environment's episode (a plain writer has one lane).
  struct Lane {
    uint64_t episode_id = 0;
    int32_t episode_step = 0;
    // Batched writers: the lane's cells of earlier steps were cleared with
    // its episode (the other lanes' rows of those steps live on).
    int64_t first_step = 0;
  };

  TrajectoryWriter(std::shared_ptr<ClientStub> stub,
                   const TrajectoryWriterOptions& options);

  // How long ErrorLocked() waits for the status of a stream that broke.
  static constexpr absl::Duration kStatusWait = absl::Seconds(5);

  // error_, once it is final: a broken stream's placeholder is replaced by
  // the server's status (waiting up to kStatusWait for it).
  absl::Status ErrorLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CloseOpenChunkLocked(int32_t column)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the current step: columns without a value close their open chunk.
  absl::Status FinishStepLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseOldChunksLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The column's label ("N" for an unnamed one), and "column <label>".
  std::string ColumnNameLocked(int32_t column) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string ColumnLabelLocked(int32_t column) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Index in columns_[column]->cells of the cell at `step` that `lane` may
  // reference, or -1.
  int64_t CellIndexLocked(int32_t column, int64_t step, int32_t lane = 0) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckSignatureLocked(
      const std::string& table, const std::vector<ItemColumn>& columns) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rows per step of every column: the lanes of a batched writer, else 1.
  int32_t LaneCount() const { return std::max(1, options_.num_lanes); }
  // The chunk row holding `lane`'s value of `cell`'s step: a step's lanes
  // are adjacent rows, so one lane's steps are LaneCount() rows apart.
  int64_t RowOf(const Cell& cell, int32_t lane) const {
    return int64_t{cell.offset_in_chunk} * LaneCount() + lane;
  }
  absl::StatusOr<int64_t> AppendLocked(
      std::vector<std::optional<TensorPayload>> step, bool partial_step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checks `columns` (not against the table's signature: the caller does
  // that, once per call) and builds `lane`'s item, closing open chunks it
  // references and claiming unsent ones for this build_round_; changes
  // nothing else.
  // The error for an item referencing `step` of `column` where it has no
  // cell.
  absl::Status NoCellErrorLocked(int32_t column, int64_t step) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `lane` has a cell at every step `columns` reference (which
  // BuildItemLocked has checked to name valid columns).
  absl::Status CheckLaneCellsLocked(const std::vector<ItemColumn>& columns,
                                    int32_t lane) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::unique_ptr<QueuedItem>> BuildItemLocked(
      const std::string& table, double priority,
      const std::vector<ItemColumn>& columns, int32_t lane = 0)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits for room in the in-flight window, then queues `items` and marks
  // their chunks as sent. On error nothing is queued or marked.
  absl::Status EnqueueLocked(std::vector<std::unique_ptr<QueuedItem>> items,
                             absl::Duration timeout, Cancellation* cancel)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status EndLaneEpisodesLocked(absl::Span<const int32_t> lanes,
                                     bool clear_buffers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RequireLanes(bool batched, const char* what) const;
  absl::Status EnsureStreamLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status AwaitLocked(absl::FunctionRef<bool()> done,
                           absl::Duration timeout, Cancellation* cancel,
                           const char* what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The threads of `stream` (stream_, made once before they start and kept
  // until they are joined): its flags are read and written under mu_, its
  // calls (rw, local) made outside mu_ by the loop that owns them.
  void SendLoop(WriterStream* stream);
  void ReceiveLoop(WriterStream* stream);
  // SendLoop's steps. Waits until a message is due (enough items queued, a
  // flush, a full window, releases piling up, or the oldest item's linger
  // over and no earlier message unacknowledged: kMaxHold says how long);
  // false once the loop ends (an error, the stream ended, or closing with
  // nothing queued).
  bool AwaitSendLocked(const WriterStream& stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the queued items of the next message: up to about `byte_budget`
  // of chunk bytes (at least one item), its items before its item batches.
  std::vector<std::unique_ptr<QueuedItem>> TakeBatchLocked(
      bool takes_item_batches, int64_t byte_budget)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Builds the message of `batch` and `releases` and writes it to `stream`;
  // an error ends the stream.
  absl::Status SendBatch(WriterStream* stream,
                         std::vector<std::unique_ptr<QueuedItem>> batch,
                         const std::vector<uint64_t>& releases,
                         bool takes_item_batches, int64_t timeout_ms)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Tells a remote server that nothing more comes, unless the stream failed
  // or ended, then lets the receiver finish the call.
  void EndSendingLocked(WriterStream* stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<ClientStub> stub_;
  const TrajectoryWriterOptions options_;

  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  // Counts CreateItem() and CreateItems() calls (WriterChunk::claimed_in).
  uint64_t build_round_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Lane> lanes_ ABSL_GUARDED_BY(mu_);
  int64_t step_counter_ ABSL_GUARDED_BY(mu_) = 0;
  // step_counter_ when the history last began (see history_length()).
  int64_t history_start_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> column_names_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> column_labels_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, TableSignature> signatures_
      ABSL_GUARDED_BY(mu_);
  // A partial step is open; `filled_[c]`: column c has a value in it.
  bool step_open_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<bool> filled_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<ColumnState>> columns_ ABSL_GUARDED_BY(mu_);
  std::deque<std::unique_ptr<QueuedItem>> queue_ ABSL_GUARDED_BY(mu_);
  // Items in queue_ (a QueuedItem may be a batch of several), and the bytes
  // of the chunks they carry.
  int64_t queued_items_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<uint64_t> release_queue_ ABSL_GUARDED_BY(mu_);
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  // Set by Flush(): send what is queued now instead of lingering.
  bool flush_requested_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<WriterStream> stream_ ABSL_GUARDED_BY(mu_);
  std::thread sender_;
  std::thread receiver_;
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_CLIENT_TRAJECTORY_WRITER_H_
