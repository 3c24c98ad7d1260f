// SPDX-License-Identifier: Apache-2.0
// Steps, items, flushes, episodes and the history (see
// trajectory_writer_internal.h for the other parts).
#include "reverb_tf/cc/client/trajectory_writer.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "reverb_tf/cc/client/trajectory_writer_internal.h"
#include "reverb_tf/cc/platform/deadline.h"
#include "reverb_tf/cc/platform/status_macros.h"

namespace reverb_tf {

using writer_internal::kMaxLanes;

namespace {

// The append checks' messages open with dm-reverb's sentences, which
// programs match with regular expressions: dtypes and shapes as TensorFlow
// prints them ("double", "[2,2]").
std::string TfDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat:
      return "float";
    case DType::kDouble:
      return "double";
    case DType::kHalf:
      return "half";
    default:
      return DTypeName(dtype);
  }
}

std::string TfShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

absl::Status CheckStepValue(const TensorPayload& value) {
  if (value.compression != Compression::kNone) {
    return absl::InvalidArgumentError("step values must be uncompressed");
  }
  return value.Validate();
}

// A batched writer's chunk has a row per lane and step, and chunk rows are
// int32 on the wire.
absl::Status CheckChunkRows(int64_t chunk_length, int32_t num_lanes) {
  if (chunk_length * std::max(1, num_lanes) > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_chunk_length (", chunk_length, ") times num_lanes (", num_lanes,
        ") must be at most 2^31-1: set a smaller max_chunk_length"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status TrajectoryWriterOptions::Validate() const {
  if (num_keep_alive_refs < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_keep_alive_refs must be >= 1, got ", num_keep_alive_refs));
  }
  if (max_chunk_length < 0 || max_chunk_length > num_keep_alive_refs) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_chunk_length must be in [1, num_keep_alive_refs=",
                     num_keep_alive_refs, "] (0: num_keep_alive_refs), got ",
                     max_chunk_length));
  }
  if (max_in_flight_items < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_in_flight_items must be >= 1, got ", max_in_flight_items));
  }
  if (num_lanes < 0 || num_lanes > kMaxLanes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_lanes must be in [0, ", kMaxLanes, "], got ", num_lanes));
  }
  RETURN_IF_ERROR(CheckChunkRows(
      max_chunk_length > 0 ? max_chunk_length : num_keep_alive_refs,
      num_lanes));
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
        absl::Condition(
            +[](WriterStream* stream) { return !stream->provisional_error; },
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
  const bool registered = cancel != nullptr && cancel->Register(
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
      status = absl::CancelledError(
          absl::StrCat("cancelled while waiting to ", what));
      break;
    }
    if (cv_.WaitWithDeadline(&mu_, deadline) && !done()) {
      status = absl::DeadlineExceededError(
          absl::StrCat("timed out waiting to ", what, " (", in_flight_,
                       " items unacknowledged)"));
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

absl::StatusOr<int64_t> TrajectoryWriter::AppendLocked(
    std::vector<std::optional<TensorPayload>> step, bool partial_step) {
  RETURN_IF_ERROR(ErrorLocked());
  if (closing_) return absl::FailedPreconditionError("the writer is closed");
  if (step.size() < columns_.size()) step.resize(columns_.size());
  // A batched writer's values hold one row per lane (AppendBatch() checked
  // that): the column's type is the rows'.
  const size_t row_dims = options_.num_lanes > 0 ? 1 : 0;
  const auto row_shape = [row_dims](const TensorPayload& value) {
    return absl::MakeConstSpan(value.shape).subspan(row_dims);
  };
  // Validate everything before changing anything.
  for (size_t c = 0; c < step.size(); ++c) {
    if (!step[c].has_value()) continue;
    if (absl::Status status = CheckStepValue(*step[c]); !status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "append: ", ColumnLabelLocked(c), ": ", status.message()));
    }
    if (step_open_ && c < filled_.size() && filled_[c]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Field ", ColumnNameLocked(c),
          " has already been set in the active step by previous (partial) "
          "append call and thus must be omitted or set to None (append)"));
    }
    // The messages open with dm-reverb's phrases, which programs may match.
    if (c < columns_.size() && columns_[c]->initialized &&
        step[c]->dtype != columns_[c]->dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Tensor of wrong dtype provided for ", ColumnLabelLocked(c), ". Got ",
          TfDTypeName(step[c]->dtype), " but expected ",
          TfDTypeName(columns_[c]->dtype),
          ". (append: every value of a column has the dtype and shape of its "
          "first)"));
    }
    if (c < columns_.size() && columns_[c]->initialized &&
        row_shape(*step[c]) != absl::MakeConstSpan(columns_[c]->step_shape)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Tensor of incompatible shape provided for ", ColumnLabelLocked(c),
          ". Got ", TfShapeString(row_shape(*step[c])),
          " which is incompatible with ",
          TfShapeString(columns_[c]->step_shape),
          ". (append: every value of a column has the dtype and shape of its "
          "first)"));
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
      const auto shape = row_shape(*step[c]);
      column.step_shape.assign(shape.begin(), shape.end());
    }
    // A lane chunk's lanes are at different steps of their episodes.
    if (column.open.empty()) {
      column.open_episode_step =
          options_.num_lanes > 0 ? 0 : lanes_[0].episode_step;
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

absl::Status TrajectoryWriter::CreateItem(
    const std::string& table, double priority,
    const std::vector<ItemColumn>& columns, absl::Duration timeout,
    Cancellation* cancel) {
  RETURN_IF_ERROR(ValidateItem(priority, columns));
  RETURN_IF_ERROR(RequireLanes(false, "CreateItem()"));
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(ErrorLocked());
  if (closing_) return absl::FailedPreconditionError("the writer is closed");
  ++build_round_;
  RETURN_IF_ERROR(CheckSignatureLocked(table, columns));
  std::vector<std::unique_ptr<QueuedItem>> items(1);
  ASSIGN_OR_RETURN(items[0], BuildItemLocked(table, priority, columns));
  return EnqueueLocked(std::move(items), timeout, cancel);
}

absl::Status TrajectoryWriter::Flush(int32_t block_until_num_items,
                                     absl::Duration timeout,
                                     Cancellation* cancel) {
  RETURN_IF_ERROR(ValidateFlush(block_until_num_items));
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(ErrorLocked());
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
    if (step_open_) {
      return absl::FailedPreconditionError(
          "end_episode called while a partial step is open; complete it with "
          "append(..., partial_step=False) first");
    }
    RETURN_IF_ERROR(ErrorLocked());
    const int32_t lane = 0;
    RETURN_IF_ERROR(
        EndLaneEpisodesLocked(absl::MakeConstSpan(&lane, 1), clear_buffers));
    if (clear_buffers) history_start_ = step_counter_;
  }
  return Flush(0, timeout, cancel);
}

absl::Status TrajectoryWriter::Configure(int32_t column,
                                         int32_t num_keep_alive_refs,
                                         int32_t max_chunk_length) {
  absl::MutexLock lock(&mu_);
  if (column < 0 || column >= static_cast<int32_t>(columns_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("cannot configure column ",
                                                   column, ": the writer has ",
                                                   columns_.size()));
  }
  ColumnState& state = *columns_[column];
  if (num_keep_alive_refs < 0 || max_chunk_length < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("configure: num_keep_alive_refs (", num_keep_alive_refs,
                     ") and max_chunk_length (", max_chunk_length,
                     ") must not be negative"));
  }
  const int32_t keep_alive =
      num_keep_alive_refs > 0 ? num_keep_alive_refs : state.keep_alive;
  // Unset: the current length, shortened to fit a smaller window.
  const int32_t chunk_length =
      max_chunk_length > 0 ? max_chunk_length
                           : std::min(state.max_chunk_length, keep_alive);
  absl::Status status = ValidateColumnOptions(keep_alive, chunk_length);
  if (status.ok()) status = CheckChunkRows(chunk_length, options_.num_lanes);
  if (!status.ok()) {
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

absl::Status TrajectoryWriter::FinishStep() {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(ErrorLocked());
  return step_open_ ? FinishStepLocked() : absl::OkStatus();
}

absl::Status TrajectoryWriter::ValidateItem(
    double priority, const std::vector<ItemColumn>& columns) {
  if (std::isnan(priority)) {
    return absl::InvalidArgumentError("`priority` must not be nan.");
  }
  if (columns.empty()) {
    return absl::InvalidArgumentError(
        "trajectory must not be empty. (An item needs at least one column.)");
  }
  for (const ItemColumn& column : columns) {
    if (column.steps.empty()) {
      return absl::InvalidArgumentError(
          "trajectory must not be empty. (A column references no steps.)");
    }
    if (column.squeeze && column.steps.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a squeezed column must reference exactly one step, column ",
          column.column, " references ", column.steps.size()));
    }
  }
  return absl::OkStatus();
}

absl::Status TrajectoryWriter::ValidateFlush(int32_t block_until_num_items) {
  if (block_until_num_items < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block_until_num_items must be >= 0, got ", block_until_num_items));
  }
  return absl::OkStatus();
}

absl::Status TrajectoryWriter::ValidateColumnOptions(
    int32_t num_keep_alive_refs, int32_t max_chunk_length) {
  if (num_keep_alive_refs < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_keep_alive_refs (", num_keep_alive_refs,
                     ") must be a positive integer"));
  }
  if (max_chunk_length != 0 &&
      (max_chunk_length < 1 || max_chunk_length > num_keep_alive_refs)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_chunk_length (", max_chunk_length,
        ") must be None or a positive integer <= num_keep_alive_refs (",
        num_keep_alive_refs, ")"));
  }
  return absl::OkStatus();
}

std::string TrajectoryWriter::ColumnNameLocked(int32_t column) const {
  if (column >= 0 && column < static_cast<int32_t>(column_labels_.size()) &&
      !column_labels_[column].empty()) {
    return column_labels_[column];
  }
  return absl::StrCat(column);
}

std::string TrajectoryWriter::ColumnLabelLocked(int32_t column) const {
  return absl::StrCat("column ", ColumnNameLocked(column));
}

void TrajectoryWriter::SetColumnName(int32_t column, std::string name,
                                     std::string label) {
  absl::MutexLock lock(&mu_);
  if (column < 0) return;
  if (column >= static_cast<int32_t>(column_names_.size())) {
    column_names_.resize(column + 1);
    column_labels_.resize(column + 1);
  }
  column_labels_[column] = label.empty() && !name.empty()
                               ? absl::StrCat("'", name, "'")
                               : std::move(label);
  column_names_[column] = std::move(name);
}

void TrajectoryWriter::SetTableSignature(
    const std::string& table, std::optional<TableSignature> signature) {
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
    return absl::InvalidArgumentError(
        absl::StrCat("Unable to create item in table '", table,
                     "' since the provided trajectory is inconsistent with the "
                     "table signature: ",
                     status.message()));
  };
  if (absl::Status status = CheckColumnCount(columns.size(), signature);
      !status.ok()) {
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
    shape.insert(shape.end(), column.step_shape.begin(),
                 column.step_shape.end());
    const absl::string_view name =
        ref.column < static_cast<int32_t>(column_names_.size())
            ? absl::string_view(column_names_[ref.column])
            : absl::string_view();
    if (absl::Status status =
            CheckColumnAgainstSpec(signature.columns[i], i, column.dtype, shape,
                                   ref.squeeze, options_.legacy_items, name);
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

int64_t TrajectoryWriter::CellIndexLocked(int32_t column, int64_t step,
                                          int32_t lane) const {
  if (column < 0 || column >= static_cast<int32_t>(columns_.size())) return -1;
  if (step < lanes_[lane].first_step) return -1;
  const std::deque<Cell>& cells = columns_[column]->cells;
  const int64_t size = static_cast<int64_t>(cells.size());
  // Almost always one of the newest cells.
  for (int64_t i = size - 1; i >= 0 && i >= size - 4; --i) {
    if (cells[i].step == step) return i;
    if (cells[i].step < step) return -1;
  }
  auto it = std::lower_bound(
      cells.begin(), cells.end(), step,
      [](const Cell& cell, int64_t s) { return cell.step < s; });
  return it != cells.end() && it->step == step ? it - cells.begin() : -1;
}

absl::StatusOr<int64_t> TrajectoryWriter::HistoryStep(int32_t column,
                                                      int64_t index) const {
  absl::MutexLock lock(&mu_);
  const int64_t length = step_counter_ - history_start_;
  const int64_t position = index < 0 ? length + index : index;
  // A cell that cannot be referenced opens with dm-reverb's phrase (its
  // history holds None there; a ValueError). So does a negative index
  // before the first step, which it answers the same way; still out of
  // range (the Python adapter raises an error that is both).
  constexpr absl::string_view kNoCell =
      "TrajectoryColumns cannot contain any None data references: ";
  if (position < 0) {
    return absl::OutOfRangeError(absl::StrCat(
        kNoCell, ColumnLabelLocked(column), ": history index ", index,
        " is out of range: before the first of ", length, " steps"));
  }
  if (position >= length) {
    return absl::OutOfRangeError(absl::StrCat(
        "history index ", index, " out of range for ", length, " steps"));
  }
  const int64_t step = history_start_ + position;
  if (CellIndexLocked(column, step) >= 0) return step;
  const int32_t keep_alive =
      column >= 0 && column < static_cast<int32_t>(columns_.size())
          ? columns_[column]->keep_alive
          : options_.num_keep_alive_refs;
  const std::string why =
      step < step_counter_ - keep_alive
          ? absl::StrCat(
                "is older than the keep-alive window (num_keep_alive_refs=",
                keep_alive, ")")
          : "has no value in that step";
  return absl::FailedPreconditionError(
      absl::StrCat(kNoCell, ColumnLabelLocked(column), ": history index ",
                   index, " cannot be referenced: the cell ", why));
}

bool TrajectoryWriter::IsReferenceable(int32_t column, int64_t step) const {
  absl::MutexLock lock(&mu_);
  return CellIndexLocked(column, step) >= 0;
}

absl::StatusOr<TensorPayload> TrajectoryWriter::ReadCells(
    int32_t column, absl::Span<const int64_t> steps, int32_t lane) {
  absl::MutexLock lock(&mu_);
  if (lane < 0 || lane >= LaneCount()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "environment ", lane, " is not in [0, ", LaneCount(), ")"));
  }
  // Where each step's cell is; valid while mu_ is held.
  std::vector<int64_t> indices(steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    const int64_t step = steps[i];
    const int64_t index = indices[i] = CellIndexLocked(column, step, lane);
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
      // Still in the open chunk (the newest cells): no time dimension yet,
      // or, in a batched writer, every lane's row.
      const TensorPayload& open =
          state.open[index - static_cast<int64_t>(state.cells.size() -
                                                  state.open.size())];
      if (options_.num_lanes > 0) {
        ASSIGN_OR_RETURN(TensorPayload row, SliceRows(open, lane, 1));
        rows.push_back(std::move(row));
        continue;
      }
      TensorPayload row = open;
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
    ASSIGN_OR_RETURN(TensorPayload row,
                     SliceRows(*source, RowOf(cell, lane), 1));
    rows.push_back(std::move(row));
  }
  if (rows.empty()) {
    TensorPayload empty;
    empty.dtype = state.dtype;
    empty.shape.push_back(0);
    empty.shape.insert(empty.shape.end(), state.step_shape.begin(),
                       state.step_shape.end());
    return empty;
  }
  if (rows.size() == 1) return std::move(rows[0]);
  return ConcatRows(rows);
}

std::optional<std::pair<DType, Shape>> TrajectoryWriter::ColumnType(
    int32_t column) const {
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
