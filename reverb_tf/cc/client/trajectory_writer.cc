// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/client/trajectory_writer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/client_context.h"
#include "reverb_tf/cc/client/client_stub.h"
#include "reverb_tf/cc/platform/deadline.h"
#include "reverb_tf/cc/platform/status_macros.h"
#include "reverb_tf/cc/proto/service.grpc.pb.h"
#include "reverb_tf/cc/wire/conversions.h"
#include "reverb_tf/cc/wire/insert_frame.h"

namespace reverb_tf {

// A closed chunk of one column. Its payload stays here while any of its cells
// is referenceable (ReadCells() serves Python's TrajectoryColumn.numpy() from
// it), and is never changed: the message that carries the chunk to a remote
// server hands gRPC its bytes in place (wire/insert_frame.h) and keeps the
// chunk alive until they are sent, so nothing is copied.
struct WriterChunk {
  uint64_t key = 0;
  uint64_t episode_id = 0;
  int32_t episode_step = 0;
  int32_t num_steps = 0;
  std::optional<TensorPayload> payload;
  // Attached to a queued item, so on (or on its way to) the server.
  bool scheduled = false;
};

struct TrajectoryWriter::ColumnState {
  bool initialized = false;
  DType dtype = DType::kInvalid;
  Shape step_shape;
  int32_t keep_alive = 1;
  int32_t max_chunk_length = 1;
  // Payloads of the open chunk's steps, and the first one's episode step.
  std::vector<TensorPayload> open;
  int32_t open_episode_step = 0;
  // Referenceable cells in step order; the last open.size() are open.
  std::deque<Cell> cells;
};

struct TrajectoryWriter::QueuedItem {
  absl::Time enqueued;
  proto::Item item;
  std::vector<std::shared_ptr<WriterChunk>> chunks;
};

struct WriterStream {
  // A server of this process (local_server.h): messages go to it
  // directly, acknowledged as they are stored; no receiver thread.
  std::unique_ptr<LocalInsertStream> local;
  grpc::ClientContext context;
  // Writes serialized InsertRequests (InsertFrame), reads InsertResponses.
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, proto::InsertResponse>> rw;
  bool sender_done = false;
  // Read() has returned false: nothing more will be acknowledged.
  bool reads_done = false;
  bool receiver_done = false;
  // Error set from a broken write, to be replaced by Finish()'s status.
  bool provisional_error = false;
};

namespace {

constexpr size_t kReleaseBatch = 64;
// The sender waits until this many items are queued, a flush asks, or the
// oldest queued item has waited kLinger: many small items then share one
// message (and one wake-up of every thread on the path) instead of one each.
constexpr size_t kSendBatch = 64;
constexpr absl::Duration kLinger = absl::Milliseconds(1);
// Environments of one batched writer: far beyond any vectorised environment,
// and small enough that columns * lanes stays a modest table.
constexpr int32_t kMaxLanes = 65536;

absl::Status CheckStepValue(const TensorPayload& value) {
  if (value.compression != Compression::kNone) {
    return absl::InvalidArgumentError("step values must be uncompressed");
  }
  return value.Validate();
}

}  // namespace

absl::Status TrajectoryWriterOptions::Validate() const {
  if (num_keep_alive_refs < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_keep_alive_refs must be >= 1, got ", num_keep_alive_refs));
  }
  if (max_chunk_length < 0 || max_chunk_length > num_keep_alive_refs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_chunk_length must be in [1, num_keep_alive_refs=", num_keep_alive_refs,
        "] (0: num_keep_alive_refs), got ", max_chunk_length));
  }
  if (max_in_flight_items < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_in_flight_items must be >= 1, got ", max_in_flight_items));
  }
  if (num_lanes < 0 || num_lanes > kMaxLanes) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_lanes must be in [0, ", kMaxLanes, "], got ", num_lanes));
  }
  if (zstd_level < 0 || zstd_level > 19) {
    return absl::InvalidArgumentError(
        absl::StrCat("zstd_level must be in [0, 19], got ", zstd_level));
  }
  return absl::OkStatus();
}

TrajectoryWriter::TrajectoryWriter(std::shared_ptr<ClientStub> stub,
                                   const TrajectoryWriterOptions& options)
    : stub_(std::move(stub)), options_(options) {
  std::random_device seed;
  rng_.seed((uint64_t{seed()} << 32) | seed());
  lanes_.resize(LaneCount());
  for (Lane& lane : lanes_) lane.episode_id = rng_();
}

TrajectoryWriter::~TrajectoryWriter() { Close().IgnoreError(); }

int32_t TrajectoryWriter::num_columns() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int32_t>(columns_.size());
}

int32_t TrajectoryWriter::episode_steps() const {
  absl::MutexLock lock(&mu_);
  return lanes_[0].episode_step;
}

std::vector<int32_t> TrajectoryWriter::LaneEpisodeSteps() const {
  absl::MutexLock lock(&mu_);
  std::vector<int32_t> steps;
  steps.reserve(lanes_.size());
  for (const Lane& lane : lanes_) steps.push_back(lane.episode_step);
  return steps;
}

absl::Status TrajectoryWriter::RequireLanes(bool batched, const char* what) const {
  if ((options_.num_lanes > 0) == batched) return absl::OkStatus();
  return absl::FailedPreconditionError(
      batched ? absl::StrCat(what, " is for batched writers (num_lanes >= 1)")
              : absl::StrCat(what, " is not for batched writers: use the batched call"));
}

int64_t TrajectoryWriter::num_in_flight_items() const {
  absl::MutexLock lock(&mu_);
  return in_flight_;
}

void TrajectoryWriter::FailLocked(absl::Status status) {
  if (error_.ok()) error_ = std::move(status);
  cv_.SignalAll();
}

absl::Status TrajectoryWriter::ErrorLocked() {
  if (!error_.ok() && stream_ != nullptr && stream_->provisional_error) {
    // A write failed, and the receiver is about to learn why from Finish():
    // the server's status names the cause (RESOURCE_EXHAUSTED, a rejected
    // item), the placeholder only says that the stream broke.
    mu_.AwaitWithTimeout(
        absl::Condition(+[](WriterStream* stream) { return !stream->provisional_error; },
                        stream_.get()),
        kStatusWait);
  }
  return error_;
}

absl::Status TrajectoryWriter::AwaitLocked(absl::FunctionRef<bool()> done,
                                           absl::Duration timeout,
                                           Cancellation* cancel,
                                           const char* what) {
  const absl::Time deadline = DeadlineAfter(timeout);
  Cancellation::Id id = 0;
  const bool registered =
      cancel != nullptr && cancel->Register(
                               [this] {
                                 absl::MutexLock lock(&mu_);
                                 cv_.SignalAll();
                               },
                               &id);
  absl::Status status;
  while (!done()) {
    if (!error_.ok()) {
      status = ErrorLocked();
      break;
    }
    if (cancel != nullptr && cancel->IsCancelled()) {
      status = absl::CancelledError(absl::StrCat("cancelled while waiting to ", what));
      break;
    }
    if (cv_.WaitWithDeadline(&mu_, deadline) && !done()) {
      status = absl::DeadlineExceededError(absl::StrCat(
          "timed out waiting to ", what, " (", in_flight_, " items unacknowledged)"));
      break;
    }
  }
  if (registered) cancel->Unregister(id);
  return status;
}

absl::StatusOr<int64_t> TrajectoryWriter::Append(
    std::vector<std::optional<TensorPayload>> step, bool partial_step) {
  RETURN_IF_ERROR(RequireLanes(false, "Append()"));
  absl::MutexLock lock(&mu_);
  return AppendLocked(std::move(step), partial_step);
}

absl::StatusOr<int64_t> TrajectoryWriter::AppendBatch(
    std::vector<std::optional<TensorPayload>> step) {
  RETURN_IF_ERROR(RequireLanes(true, "AppendBatch()"));
  const int32_t lanes = options_.num_lanes;
  absl::MutexLock lock(&mu_);
  std::vector<std::optional<TensorPayload>> rows(step.size() * lanes);
  for (size_t c = 0; c < step.size(); ++c) {
    if (!step[c].has_value()) continue;
    const TensorPayload& batch = *step[c];
    if (batch.compression != Compression::kNone || batch.shape.empty() ||
        batch.shape[0] != lanes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "append: ", ColumnLabelLocked(static_cast<int32_t>(c * lanes)),
          " must be uncompressed with a leading dimension of ", lanes,
          " (one row per environment), got shape ", ShapeDebugString(batch.shape)));
    }
    RETURN_IF_ERROR(batch.Validate());
    for (int32_t b = 0; b < lanes; ++b) {
      ASSIGN_OR_RETURN(TensorPayload row, SliceRows(batch, b, 1));
      row.shape.erase(row.shape.begin());
      rows[c * lanes + b] = std::move(row);
    }
  }
  return AppendLocked(std::move(rows), /*partial_step=*/false);
}

absl::StatusOr<int64_t> TrajectoryWriter::AppendLocked(
    std::vector<std::optional<TensorPayload>> step, bool partial_step) {
  RETURN_IF_ERROR(ErrorLocked());
  if (closing_) return absl::FailedPreconditionError("the writer is closed");
  if (step.size() < columns_.size()) step.resize(columns_.size());
  // Validate everything before changing anything.
  for (size_t c = 0; c < step.size(); ++c) {
    if (!step[c].has_value()) continue;
    if (absl::Status status = CheckStepValue(*step[c]); !status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("append: ", ColumnLabelLocked(c), ": ", status.message()));
    }
    if (step_open_ && c < filled_.size() && filled_[c]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "append: ", ColumnLabelLocked(c),
          " was already given in the open (partial) step; omit it or set it to None"));
    }
    // The messages open with dm-reverb's phrases, which programs may match.
    if (c < columns_.size() && columns_[c]->initialized &&
        step[c]->dtype != columns_[c]->dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Tensor of wrong dtype provided for ", ColumnLabelLocked(c), ". Got ",
          DTypeName(step[c]->dtype), " but expected ", DTypeName(columns_[c]->dtype),
          " (append: every value of a column has the dtype and shape of its first)"));
    }
    if (c < columns_.size() && columns_[c]->initialized &&
        step[c]->shape != columns_[c]->step_shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Tensor of incompatible shape provided for ", ColumnLabelLocked(c), ". Got ",
          ShapeDebugString(step[c]->shape), " which is incompatible with ",
          ShapeDebugString(columns_[c]->step_shape),
          " (append: every value of a column has the dtype and shape of its first)"));
    }
  }
  while (columns_.size() < step.size()) {
    auto column = std::make_unique<ColumnState>();
    column->keep_alive = options_.num_keep_alive_refs;
    column->max_chunk_length = options_.max_chunk_length > 0
                                   ? options_.max_chunk_length
                                   : options_.num_keep_alive_refs;
    columns_.push_back(std::move(column));
  }
  if (!step_open_) {
    ++step_counter_;
    filled_.assign(columns_.size(), false);
  }
  filled_.resize(columns_.size(), false);
  const int64_t global_step = step_counter_ - 1;
  for (size_t c = 0; c < step.size(); ++c) {
    if (!step[c].has_value()) continue;
    ColumnState& column = *columns_[c];
    if (!column.initialized) {
      column.initialized = true;
      column.dtype = step[c]->dtype;
      column.step_shape = step[c]->shape;
    }
    if (column.open.empty()) {
      column.open_episode_step = lanes_[LaneOf(static_cast<int32_t>(c))].episode_step;
    }
    column.open.push_back(*std::move(step[c]));
    column.cells.push_back(Cell{global_step, nullptr, 0});
    filled_[c] = true;
    if (static_cast<int32_t>(column.open.size()) >= column.max_chunk_length) {
      RETURN_IF_ERROR(CloseOpenChunkLocked(static_cast<int32_t>(c)));
    }
  }
  step_open_ = partial_step;
  if (!partial_step) RETURN_IF_ERROR(FinishStepLocked());
  return global_step;
}

absl::Status TrajectoryWriter::FinishStepLocked() {
  for (size_t c = 0; c < columns_.size(); ++c) {
    // A chunk holds consecutive steps: a gap ends it.
    if (c >= filled_.size() || !filled_[c]) {
      RETURN_IF_ERROR(CloseOpenChunkLocked(static_cast<int32_t>(c)));
    }
  }
  step_open_ = false;
  for (Lane& lane : lanes_) ++lane.episode_step;
  ReleaseOldChunksLocked();
  return absl::OkStatus();
}

absl::Status TrajectoryWriter::CloseOpenChunkLocked(int32_t c) {
  ColumnState& column = *columns_[c];
  if (column.open.empty()) return absl::OkStatus();
  TensorPayload payload;
  payload.dtype = column.dtype;
  payload.shape.push_back(static_cast<int64_t>(column.open.size()));
  payload.shape.insert(payload.shape.end(), column.step_shape.begin(),
                       column.step_shape.end());
  if (column.open.size() == 1) {
    payload.data = std::move(column.open[0].data);  // the common 1-step chunk
  } else {
    size_t bytes = 0;
    for (const TensorPayload& value : column.open) bytes += value.data.size();
    payload.data.reserve(bytes);
    // Row-major concatenation; string encodings concatenate just as well.
    for (const TensorPayload& value : column.open) payload.data.append(value.data);
  }
  payload.uncompressed_size = static_cast<int64_t>(payload.data.size());
  if (options_.zstd_level > 0) {
    ASSIGN_OR_RETURN(payload, Compress(std::move(payload), options_.zstd_level));
  }
  auto chunk = std::make_shared<WriterChunk>();
  chunk->key = rng_();
  chunk->episode_id = lanes_[LaneOf(c)].episode_id;
  chunk->episode_step = column.open_episode_step;
  chunk->num_steps = static_cast<int32_t>(column.open.size());
  chunk->payload = std::move(payload);
  const size_t first = column.cells.size() - column.open.size();
  for (size_t i = first; i < column.cells.size(); ++i) {
    column.cells[i].chunk = chunk;
    column.cells[i].offset_in_chunk = static_cast<int32_t>(i - first);
  }
  column.open.clear();
  return absl::OkStatus();
}

void TrajectoryWriter::ReleaseOldChunksLocked() {
  for (auto& column : columns_) {
    const int64_t oldest_allowed = step_counter_ - column->keep_alive;
    while (!column->cells.empty() && column->cells.front().step < oldest_allowed) {
      std::shared_ptr<WriterChunk> chunk = std::move(column->cells.front().chunk);
      column->cells.pop_front();
      const bool last_cell_of_chunk =
          chunk != nullptr &&
          (column->cells.empty() || column->cells.front().chunk != chunk);
      if (last_cell_of_chunk && chunk->scheduled) release_queue_.push_back(chunk->key);
    }
  }
  if (release_queue_.size() >= kReleaseBatch) cv_.SignalAll();
}

absl::Status TrajectoryWriter::CreateItem(const std::string& table,
                                          double priority,
                                          const std::vector<ItemColumn>& columns,
                                          absl::Duration timeout,
                                          Cancellation* cancel) {
  RETURN_IF_ERROR(RequireLanes(false, "CreateItem()"));
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(ErrorLocked());
  if (closing_) return absl::FailedPreconditionError("the writer is closed");
  std::vector<std::unique_ptr<QueuedItem>> items(1);
  ASSIGN_OR_RETURN(items[0], BuildItemLocked(table, priority, columns));
  return EnqueueLocked(std::move(items), timeout, cancel);
}

absl::Status TrajectoryWriter::CreateItems(const std::string& table,
                                           absl::Span<const double> priorities,
                                           const std::vector<ItemColumn>& columns,
                                           absl::Span<const int32_t> lanes,
                                           absl::Duration timeout, Cancellation* cancel) {
  RETURN_IF_ERROR(RequireLanes(true, "CreateItems()"));
  const int32_t num_lanes = options_.num_lanes;
  if (priorities.size() != lanes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "create_items: ", priorities.size(), " priorities for ", lanes.size(), " environments"));
  }
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(ErrorLocked());
  if (closing_) return absl::FailedPreconditionError("the writer is closed");
  // Batched column indices, checked here so that errors name them rather
  // than a lane's native column.
  for (const ItemColumn& ref : columns) {
    if (ref.column < 0 || static_cast<int64_t>(ref.column) * num_lanes >=
                              static_cast<int64_t>(columns_.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "item references column ", ref.column, " but the writer has ",
          columns_.size() / num_lanes));
    }
  }
  std::vector<bool> seen(num_lanes, false);
  std::vector<std::unique_ptr<QueuedItem>> items;
  items.reserve(lanes.size());
  std::vector<ItemColumn> lane_columns = columns;
  for (size_t i = 0; i < lanes.size(); ++i) {
    const int32_t lane = lanes[i];
    if (lane < 0 || lane >= num_lanes || seen[lane]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "create_items: environment ", lane,
          lane < 0 || lane >= num_lanes ? absl::StrCat(" is not in [0, ", num_lanes, ")")
                                        : std::string(" is listed twice")));
    }
    seen[lane] = true;
    for (size_t k = 0; k < columns.size(); ++k) {
      lane_columns[k].column = columns[k].column * num_lanes + lane;
    }
    absl::StatusOr<std::unique_ptr<QueuedItem>> item =
        BuildItemLocked(table, priorities[i], lane_columns);
    if (!item.ok()) {
      return absl::Status(item.status().code(),
                          absl::StrCat("environment ", lane, ": ", item.status().message()));
    }
    items.push_back(*std::move(item));
  }
  if (items.empty()) return absl::OkStatus();
  return EnqueueLocked(std::move(items), timeout, cancel);
}

absl::StatusOr<std::unique_ptr<TrajectoryWriter::QueuedItem>> TrajectoryWriter::BuildItemLocked(
    const std::string& table, double priority, const std::vector<ItemColumn>& columns) {
  if (columns.empty()) {
    return absl::InvalidArgumentError("an item needs at least one column");
  }
  RETURN_IF_ERROR(CheckSignatureLocked(table, columns));
  auto queued = std::make_unique<QueuedItem>();
  queued->item.set_key(rng_());
  queued->item.set_table(table);
  queued->item.set_priority(priority);
  queued->item.set_legacy_steps(options_.legacy_items);
  queued->item.set_unchecked(!options_.validate_items);
  for (const ItemColumn& ref : columns) {
    if (ref.column < 0 || ref.column >= static_cast<int32_t>(columns_.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("item references column ", ref.column, " but the writer has ",
                       columns_.size()));
    }
    if (ref.steps.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("item references no steps of column ", ref.column));
    }
    if (ref.squeeze && ref.steps.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a squeezed column must reference exactly one step, column ", ref.column,
          " references ", ref.steps.size()));
    }
    ColumnState& column = *columns_[ref.column];
    proto::Column* out = queued->item.add_columns();
    out->set_squeeze(ref.squeeze);
    for (int64_t step : ref.steps) {
      const int64_t index = CellIndexLocked(ref.column, step);
      if (index < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            ColumnLabelLocked(ref.column), " has no value at step ", step,
            ": it is missing there, not appended yet, cleared by end_episode, or older ",
            "than the last ",
            column.keep_alive, " steps (num_keep_alive_refs)"));
      }
      // Closing the open chunk changes no cell's position.
      if (column.cells[index].chunk == nullptr) {
        RETURN_IF_ERROR(CloseOpenChunkLocked(ref.column));
      }
      const Cell* it = &column.cells[index];
      const std::shared_ptr<WriterChunk>& chunk = it->chunk;
      const int slices = out->slices_size();
      proto::Slice* last = slices > 0 ? out->mutable_slices(slices - 1) : nullptr;
      if (last != nullptr && last->chunk_key() == chunk->key &&
          last->offset() + last->length() == it->offset_in_chunk) {
        last->set_length(last->length() + 1);  // extends the previous slice
      } else {
        proto::Slice* slice = out->add_slices();
        slice->set_chunk_key(chunk->key);
        slice->set_offset(it->offset_in_chunk);
        slice->set_length(1);
      }
      if (!chunk->scheduled &&
          std::find(queued->chunks.begin(), queued->chunks.end(), chunk) ==
              queued->chunks.end()) {
        queued->chunks.push_back(chunk);
      }
    }
  }
  // An item whose new chunks cannot fit one message would break the stream
  // for everyone on it; refuse it here, leaving the writer usable.
  int64_t bytes = 0;
  for (const auto& chunk : queued->chunks) bytes += chunk->payload->data.size();
  if (bytes > stub_->max_message_bytes() * 3 / 4) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the item needs ", bytes, " bytes of new chunk data, more than fits one message (",
        "max_message_bytes=", stub_->max_message_bytes(), ")"));
  }
  return queued;
}

absl::Status TrajectoryWriter::EnqueueLocked(std::vector<std::unique_ptr<QueuedItem>> items,
                                             absl::Duration timeout, Cancellation* cancel) {
  const int64_t count = static_cast<int64_t>(items.size());
  // A batch larger than the window goes in once the window is empty.
  const int64_t room = std::max<int64_t>(options_.max_in_flight_items, count);
  RETURN_IF_ERROR(AwaitLocked(
      [this, count, room]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return in_flight_ + count <= room;
      },
      timeout, cancel, count == 1 ? "queue an item" : "queue the items"));
  RETURN_IF_ERROR(EnsureStreamLocked());
  // Only now: an item that timed out above is not queued, and its chunks
  // must still go with whichever item references them next.
  const absl::Time now = absl::Now();
  for (auto& queued : items) {
    for (const auto& chunk : queued->chunks) chunk->scheduled = true;
    queued->enqueued = now;
    queue_.push_back(std::move(queued));
  }
  in_flight_ += count;
  cv_.SignalAll();
  return absl::OkStatus();
}

absl::Status TrajectoryWriter::Connect() {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(ErrorLocked());
  return EnsureStreamLocked();
}

absl::Status TrajectoryWriter::EnsureStreamLocked() {
  if (stream_ != nullptr) return absl::OkStatus();
  auto stream = std::make_unique<WriterStream>();
  if (std::shared_ptr<LocalServer> local = stub_->Local(); local != nullptr) {
    ASSIGN_OR_RETURN(stream->local, local->OpenInsertStream());
  }
  stream_ = std::move(stream);
  // In-process: nothing to read, acknowledgements come back from Write().
  if (stream_->local == nullptr) {
    stub_->Prepare(&stream_->context);
    // The generated stub only writes InsertRequest messages; this call
    // writes the bytes of InsertFrame's, to the same method.
    static const grpc::internal::RpcMethod kInsertStream(
        "/reverb_tf.proto.ReplayService/InsertStream",
        grpc::internal::RpcMethod::BIDI_STREAMING);
    stream_->rw.reset(
        grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, proto::InsertResponse>::Create(
            stub_->channel(), kInsertStream, &stream_->context));
    receiver_ = std::thread([this, stream = stream_.get()] { ReceiveLoop(stream); });
  }
  sender_ = std::thread([this, stream = stream_.get()] { SendLoop(stream); });
  return absl::OkStatus();
}

void TrajectoryWriter::SendLoop(WriterStream* stream) {
  const int64_t byte_budget = stub_->max_message_bytes() / 2;
  const int64_t timeout_ms = TimeoutToMs(options_.rate_limiter_timeout);
  absl::MutexLock lock(&mu_);
  auto must_send = +[](TrajectoryWriter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) {
    return w->queue_.size() >= kSendBatch || w->flush_requested_ ||
           w->release_queue_.size() >= kReleaseBatch || w->closing_ ||
           !w->error_.ok() || w->stream_->reads_done;
  };
  while (true) {
    mu_.Await(absl::Condition(
        +[](TrajectoryWriter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) {
          return !w->queue_.empty() || w->release_queue_.size() >= kReleaseBatch ||
                 w->closing_ || !w->error_.ok() || w->stream_->reads_done;
        },
        this));
    if (!queue_.empty()) {
      mu_.AwaitWithDeadline(absl::Condition(must_send, this),
                            queue_.front()->enqueued + kLinger);
    }
    flush_requested_ = false;
    if (!error_.ok() || stream->reads_done) break;
    if (closing_ && queue_.empty()) break;
    proto::InsertRequest request;
    request.set_rate_limiter_timeout_ms(timeout_ms);
    int64_t bytes = 0;
    // An in-process server takes the bytes it is given, so it gets a copy in
    // the request; a remote one gets them in place, in `frame`.
    const bool local = stream->local != nullptr;
    InsertFrame frame;
    proto::Chunk chunk_fields;
    proto::Tensor tensor_fields;
    while (!queue_.empty() && (request.items_size() == 0 || bytes < byte_budget)) {
      QueuedItem& queued = *queue_.front();
      for (const auto& chunk : queued.chunks) {
        bytes += static_cast<int64_t>(chunk->payload->data.size());
        proto::Chunk* out = local ? request.add_chunks() : &chunk_fields;
        out->set_key(chunk->key);
        out->set_episode_id(chunk->episode_id);
        out->set_episode_step(chunk->episode_step);
        if (local) {
          PayloadToProto(*chunk->payload, out->mutable_tensor());
          continue;
        }
        tensor_fields.Clear();
        PayloadMetadataToProto(*chunk->payload, &tensor_fields);
        frame.AddChunk(chunk_fields, tensor_fields, chunk->payload->data, chunk);
      }
      *request.add_items() = std::move(queued.item);
      queue_.pop_front();
    }
    // Releases only once every queued item is in a message: a release applies
    // after the items of its message, and queued items may use the chunk.
    if (queue_.empty()) {
      request.mutable_release_chunk_keys()->Add(release_queue_.begin(),
                                                release_queue_.end());
      release_queue_.clear();
    }
    if (local) {
      mu_.Unlock();
      const absl::Status status =
          stream->local->Write(request, [this](const proto::InsertResponse& response) {
            absl::MutexLock lock(&mu_);
            in_flight_ -= response.keys_size();
            cv_.SignalAll();
          });
      mu_.Lock();
      if (!status.ok()) {
        FailLocked(status);
        break;
      }
      continue;
    }
    grpc::ByteBuffer message = frame.Finish(request);
    mu_.Unlock();
    const bool written = stream->rw->Write(message);
    mu_.Lock();
    if (!written) {
      // Finish() (in the receiver) will tell why; until then, a placeholder.
      if (error_.ok()) stream->provisional_error = true;
      FailLocked(absl::UnavailableError("the insert stream to the server broke"));
      break;
    }
  }
  if (error_.ok() && !stream->reads_done && stream->local == nullptr) {
    mu_.Unlock();
    stream->rw->WritesDone();
    mu_.Lock();
  }
  stream->sender_done = true;
  cv_.SignalAll();
}

void TrajectoryWriter::ReceiveLoop(WriterStream* stream) {
  proto::InsertResponse response;
  while (stream->rw->Read(&response)) {
    absl::MutexLock lock(&mu_);
    in_flight_ -= response.keys_size();
    cv_.SignalAll();
  }
  absl::MutexLock lock(&mu_);
  stream->reads_done = true;
  cv_.SignalAll();
  // Finish() must not race the sender's Write()/WritesDone().
  mu_.Await(absl::Condition(&stream->sender_done));
  mu_.Unlock();
  const absl::Status status = stub_->RpcStatus(stream->rw->Finish());
  mu_.Lock();
  if (closing_) {
    // Close() ended the stream; nothing is waiting for the outcome.
  } else if (!status.ok()) {
    if (error_.ok() || stream->provisional_error) error_ = status;
  } else {
    FailLocked(absl::UnavailableError("the server ended the insert stream"));
  }
  stream->provisional_error = false;
  stream->receiver_done = true;
  cv_.SignalAll();
}

absl::Status TrajectoryWriter::Flush(int32_t block_until_num_items,
                                     absl::Duration timeout,
                                     Cancellation* cancel) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(ErrorLocked());
  if (block_until_num_items < 0) {
    return absl::InvalidArgumentError("block_until_num_items must be >= 0");
  }
  if (in_flight_ > block_until_num_items) flush_requested_ = true;
  return AwaitLocked(
      [this, block_until_num_items]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return in_flight_ <= block_until_num_items;
      },
      timeout, cancel, "flush");
}

absl::Status TrajectoryWriter::EndEpisode(bool clear_buffers,
                                          absl::Duration timeout,
                                          Cancellation* cancel) {
  RETURN_IF_ERROR(RequireLanes(false, "EndEpisode()"));
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(ErrorLocked());
    if (step_open_) RETURN_IF_ERROR(FinishStepLocked());
    const int32_t lane = 0;
    RETURN_IF_ERROR(EndLaneEpisodesLocked(absl::MakeConstSpan(&lane, 1), clear_buffers));
    if (clear_buffers) history_start_ = step_counter_;
  }
  return Flush(0, timeout, cancel);
}

absl::Status TrajectoryWriter::EndLaneEpisodes(absl::Span<const int32_t> lanes,
                                               bool clear_buffers) {
  RETURN_IF_ERROR(RequireLanes(true, "EndLaneEpisodes()"));
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(ErrorLocked());
  for (const int32_t lane : lanes) {
    if (lane < 0 || lane >= options_.num_lanes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "end_episode: environment ", lane, " is not in [0, ", options_.num_lanes, ")"));
    }
  }
  return EndLaneEpisodesLocked(lanes, clear_buffers);
}

absl::Status TrajectoryWriter::EndLaneEpisodesLocked(absl::Span<const int32_t> lanes,
                                                     bool clear_buffers) {
  const size_t stride = static_cast<size_t>(LaneCount());
  for (const int32_t lane : lanes) {
    for (size_t c = lane; c < columns_.size(); c += stride) {
      RETURN_IF_ERROR(CloseOpenChunkLocked(static_cast<int32_t>(c)));
      if (!clear_buffers) continue;
      ColumnState& column = *columns_[c];
      std::shared_ptr<WriterChunk> previous;
      for (Cell& cell : column.cells) {
        if (cell.chunk != previous && cell.chunk->scheduled) {
          release_queue_.push_back(cell.chunk->key);
        }
        previous = cell.chunk;
      }
      column.cells.clear();
    }
    lanes_[lane].episode_step = 0;
    lanes_[lane].episode_id = rng_();
  }
  if (clear_buffers) cv_.SignalAll();
  return absl::OkStatus();
}

absl::Status TrajectoryWriter::Configure(int32_t column, int32_t num_keep_alive_refs,
                                         int32_t max_chunk_length) {
  absl::MutexLock lock(&mu_);
  if (column < 0 || column >= static_cast<int32_t>(columns_.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot configure column ", column, ": the writer has ", columns_.size()));
  }
  ColumnState& state = *columns_[column];
  if (num_keep_alive_refs < 0 || max_chunk_length < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "configure: num_keep_alive_refs (", num_keep_alive_refs, ") and max_chunk_length (",
        max_chunk_length, ") must not be negative"));
  }
  const int32_t keep_alive = num_keep_alive_refs > 0 ? num_keep_alive_refs : state.keep_alive;
  // Unset: the current length, shortened to fit a smaller window.
  const int32_t chunk_length =
      max_chunk_length > 0 ? max_chunk_length : std::min(state.max_chunk_length, keep_alive);
  if (absl::Status status = ValidateColumnOptions(keep_alive, chunk_length); !status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(ColumnLabelLocked(column), ": ", status.message()));
  }
  state.keep_alive = keep_alive;
  state.max_chunk_length = chunk_length;
  if (static_cast<int32_t>(state.open.size()) >= chunk_length) {
    RETURN_IF_ERROR(CloseOpenChunkLocked(column));
  }
  ReleaseOldChunksLocked();
  return absl::OkStatus();
}

absl::Status TrajectoryWriter::ValidateColumnOptions(int32_t num_keep_alive_refs,
                                                     int32_t max_chunk_length) {
  if (num_keep_alive_refs < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_keep_alive_refs (", num_keep_alive_refs, ") must be a positive integer"));
  }
  if (max_chunk_length != 0 && (max_chunk_length < 1 || max_chunk_length > num_keep_alive_refs)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_chunk_length (", max_chunk_length,
        ") must be None or a positive integer <= num_keep_alive_refs (", num_keep_alive_refs,
        ")"));
  }
  return absl::OkStatus();
}

std::string TrajectoryWriter::ColumnLabelLocked(int32_t column) const {
  if (column >= 0 && column < static_cast<int32_t>(column_names_.size()) &&
      !column_names_[column].empty()) {
    return absl::StrCat("column '", column_names_[column], "'");
  }
  return absl::StrCat("column ", column);
}

void TrajectoryWriter::SetColumnName(int32_t column, std::string name) {
  absl::MutexLock lock(&mu_);
  if (column < 0) return;
  if (column >= static_cast<int32_t>(column_names_.size())) column_names_.resize(column + 1);
  column_names_[column] = std::move(name);
}

void TrajectoryWriter::SetTableSignature(const std::string& table,
                                         std::optional<TableSignature> signature) {
  absl::MutexLock lock(&mu_);
  if (signature.has_value()) {
    signatures_[table] = *std::move(signature);
  } else {
    signatures_.erase(table);
  }
}

absl::Status TrajectoryWriter::CheckSignatureLocked(
    const std::string& table, const std::vector<ItemColumn>& columns) const {
  auto it = signatures_.find(table);
  if (it == signatures_.end()) return absl::OkStatus();
  const TableSignature& signature = it->second;
  const auto in_table = [&table](const absl::Status& status) {
    // dm-reverb's phrase first, for programs that match it; then which column.
    return absl::InvalidArgumentError(absl::StrCat(
        "Unable to create item in table '", table,
        "' since the provided trajectory is inconsistent with the table signature: ",
        status.message()));
  };
  if (absl::Status status = CheckColumnCount(columns.size(), signature); !status.ok()) {
    return in_table(status);
  }
  Shape shape;
  for (size_t i = 0; i < columns.size(); ++i) {
    const ItemColumn& ref = columns[i];
    // Bad references are CreateItem's to report.
    if (ref.column < 0 || ref.column >= static_cast<int32_t>(columns_.size()) ||
        !columns_[ref.column]->initialized) {
      continue;
    }
    const ColumnState& column = *columns_[ref.column];
    shape.clear();
    if (!ref.squeeze) shape.push_back(static_cast<int64_t>(ref.steps.size()));
    shape.insert(shape.end(), column.step_shape.begin(), column.step_shape.end());
    const absl::string_view name = ref.column < static_cast<int32_t>(column_names_.size())
                                       ? absl::string_view(column_names_[ref.column])
                                       : absl::string_view();
    if (absl::Status status =
            CheckColumnAgainstSpec(signature.columns[i], i, column.dtype, shape, ref.squeeze,
                                   options_.legacy_items, name);
        !status.ok()) {
      return in_table(status);
    }
  }
  return absl::OkStatus();
}

int64_t TrajectoryWriter::history_length() const {
  absl::MutexLock lock(&mu_);
  return step_counter_ - history_start_;
}

int64_t TrajectoryWriter::CellIndexLocked(int32_t column, int64_t step) const {
  if (column < 0 || column >= static_cast<int32_t>(columns_.size())) return -1;
  const std::deque<Cell>& cells = columns_[column]->cells;
  const int64_t size = static_cast<int64_t>(cells.size());
  // Almost always one of the newest cells.
  for (int64_t i = size - 1; i >= 0 && i >= size - 4; --i) {
    if (cells[i].step == step) return i;
    if (cells[i].step < step) return -1;
  }
  auto it = std::lower_bound(cells.begin(), cells.end(), step,
                             [](const Cell& cell, int64_t s) { return cell.step < s; });
  return it != cells.end() && it->step == step ? it - cells.begin() : -1;
}

absl::StatusOr<int64_t> TrajectoryWriter::HistoryStep(int32_t column, int64_t index) const {
  absl::MutexLock lock(&mu_);
  const int64_t length = step_counter_ - history_start_;
  const int64_t position = index < 0 ? length + index : index;
  if (position < 0 || position >= length) {
    return absl::OutOfRangeError(
        absl::StrCat("history index ", index, " out of range for ", length, " steps"));
  }
  const int64_t step = history_start_ + position;
  if (CellIndexLocked(column, step) >= 0) return step;
  const int32_t keep_alive = column >= 0 && column < static_cast<int32_t>(columns_.size())
                                 ? columns_[column]->keep_alive
                                 : options_.num_keep_alive_refs;
  const std::string why =
      step < step_counter_ - keep_alive
          ? absl::StrCat("is older than the keep-alive window (num_keep_alive_refs=",
                         keep_alive, ")")
          : "has no value in that step";
  return absl::FailedPreconditionError(absl::StrCat(
      ColumnLabelLocked(column), ": history index ", index,
      " cannot be referenced: the cell ", why));
}

bool TrajectoryWriter::IsReferenceable(int32_t column, int64_t step) const {
  absl::MutexLock lock(&mu_);
  return CellIndexLocked(column, step) >= 0;
}

absl::StatusOr<TensorPayload> TrajectoryWriter::ReadCells(int32_t column,
                                                          absl::Span<const int64_t> steps) {
  absl::MutexLock lock(&mu_);
  // Where each step's cell is; valid while mu_ is held.
  std::vector<int64_t> indices(steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    const int64_t step = steps[i];
    const int64_t index = indices[i] = CellIndexLocked(column, step);
    if (index < 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          ColumnLabelLocked(column), " no longer holds step ", step,
          ": it left the keep-alive window or the history was cleared"));
    }
  }
  const ColumnState& state = *columns_[column];
  std::vector<TensorPayload> rows;
  rows.reserve(steps.size());
  // Chunks decompressed for this call.
  absl::flat_hash_map<const WriterChunk*, TensorPayload> uncompressed;
  for (const int64_t index : indices) {
    const Cell& cell = state.cells[index];
    if (cell.chunk == nullptr) {
      // Still in the open chunk (the newest cells): no time dimension yet.
      TensorPayload row =
          state.open[index - static_cast<int64_t>(state.cells.size() - state.open.size())];
      row.shape.insert(row.shape.begin(), 1);
      rows.push_back(std::move(row));
      continue;
    }
    const TensorPayload* source = &*cell.chunk->payload;
    if (source->compression != Compression::kNone) {
      auto it = uncompressed.find(cell.chunk.get());
      if (it == uncompressed.end()) {
        ASSIGN_OR_RETURN(TensorPayload plain, Decompress(*source));
        it = uncompressed.emplace(cell.chunk.get(), std::move(plain)).first;
      }
      source = &it->second;
    }
    ASSIGN_OR_RETURN(TensorPayload row, SliceRows(*source, cell.offset_in_chunk, 1));
    rows.push_back(std::move(row));
  }
  if (rows.empty()) {
    TensorPayload empty;
    empty.dtype = state.dtype;
    empty.shape.push_back(0);
    empty.shape.insert(empty.shape.end(), state.step_shape.begin(), state.step_shape.end());
    return empty;
  }
  if (rows.size() == 1) return std::move(rows[0]);
  return ConcatRows(rows);
}

std::optional<std::pair<DType, Shape>> TrajectoryWriter::ColumnType(int32_t column) const {
  absl::MutexLock lock(&mu_);
  if (column < 0 || column >= static_cast<int32_t>(columns_.size()) ||
      !columns_[column]->initialized) {
    return std::nullopt;
  }
  return std::make_pair(columns_[column]->dtype, columns_[column]->step_shape);
}

bool TrajectoryWriter::step_open() const {
  absl::MutexLock lock(&mu_);
  return step_open_;
}

absl::Status TrajectoryWriter::Close(absl::Duration grace) {
  {
    absl::MutexLock lock(&mu_);
    if (closing_) return absl::OkStatus();
    closing_ = true;
    cv_.SignalAll();
    // In-process, the sender is the whole stream.
    if (stream_ != nullptr &&
        !mu_.AwaitWithDeadline(absl::Condition(stream_->local != nullptr
                                                   ? &stream_->sender_done
                                                   : &stream_->receiver_done),
                               absl::Now() + grace)) {
      // Items still wait for a rate limiter: give them up rather than hang.
      if (stream_->local != nullptr) {
        stream_->local->Cancel();
      } else {
        stream_->context.TryCancel();
      }
    }
  }
  if (sender_.joinable()) sender_.join();
  if (receiver_.joinable()) receiver_.join();
  return absl::OkStatus();
}

}  // namespace reverb_tf
