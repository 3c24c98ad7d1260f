// SPDX-License-Identifier: Apache-2.0
// Chunking: closing columns' open chunks, the items' references to them,
// and releasing chunks that left the keep-alive window.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "reverb_tf/cc/client/trajectory_writer.h"
#include "reverb_tf/cc/client/trajectory_writer_internal.h"
#include "reverb_tf/cc/platform/deadline.h"
#include "reverb_tf/cc/platform/status_macros.h"
#include "reverb_tf/cc/wire/conversions.h"

namespace reverb_tf {

using writer_internal::kReleaseBatch;

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
  // Every step is LaneCount() rows (one, unless batched): step-major.
  payload.shape.push_back(static_cast<int64_t>(column.open.size()) *
                          LaneCount());
  payload.shape.insert(payload.shape.end(), column.step_shape.begin(),
                       column.step_shape.end());
  if (column.open.size() == 1) {
    payload.data = std::move(column.open[0].data);  // the common 1-step chunk
  } else {
    size_t bytes = 0;
    for (const TensorPayload& value : column.open) bytes += value.data.size();
    payload.data.reserve(bytes);
    // Row-major concatenation; string encodings concatenate just as well.
    for (const TensorPayload& value : column.open)
      payload.data.append(value.data);
  }
  payload.uncompressed_size = static_cast<int64_t>(payload.data.size());
  if (options_.zstd_level > 0) {
    ASSIGN_OR_RETURN(payload,
                     Compress(std::move(payload), options_.zstd_level));
  }
  auto chunk = std::make_shared<WriterChunk>();
  chunk->key = rng_();
  chunk->episode_id = lanes_[0].episode_id;
  if (options_.num_lanes > 0) {
    // Each lane's episode is the same over the chunk's steps: a lane's
    // episode ends only after every open chunk is closed.
    chunk->lane_episode_ids.reserve(lanes_.size());
    for (const Lane& lane : lanes_)
      chunk->lane_episode_ids.push_back(lane.episode_id);
  }
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
    while (!column->cells.empty() &&
           column->cells.front().step < oldest_allowed) {
      std::shared_ptr<WriterChunk> chunk =
          std::move(column->cells.front().chunk);
      column->cells.pop_front();
      const bool last_cell_of_chunk =
          chunk != nullptr &&
          (column->cells.empty() || column->cells.front().chunk != chunk);
      if (last_cell_of_chunk && chunk->scheduled)
        release_queue_.push_back(chunk->key);
    }
  }
  if (release_queue_.size() >= kReleaseBatch) cv_.SignalAll();
}

absl::Status TrajectoryWriter::NoCellErrorLocked(int32_t column,
                                                 int64_t step) const {
  return absl::InvalidArgumentError(absl::StrCat(
      ColumnLabelLocked(column), " has no value at step ", step,
      ": it is missing there, not appended yet, cleared by end_episode, or "
      "older than the last ",
      columns_[column]->keep_alive, " steps (num_keep_alive_refs)"));
}

absl::Status TrajectoryWriter::CheckLaneCellsLocked(
    const std::vector<ItemColumn>& columns, int32_t lane) const {
  for (const ItemColumn& ref : columns) {
    for (int64_t step : ref.steps) {
      if (CellIndexLocked(ref.column, step, lane) < 0) {
        return NoCellErrorLocked(ref.column, step);
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TrajectoryWriter::QueuedItem>>
TrajectoryWriter::BuildItemLocked(const std::string& table, double priority,
                                  const std::vector<ItemColumn>& columns,
                                  int32_t lane) {
  // The callers have checked ValidateItem().
  auto queued = std::make_unique<QueuedItem>();
  queued->item.set_key(rng_());
  queued->item.set_table(table);
  queued->item.set_priority(priority);
  queued->item.set_legacy_steps(options_.legacy_items);
  queued->item.set_unchecked(!options_.validate_items);
  for (const ItemColumn& ref : columns) {
    if (ref.column < 0 || ref.column >= static_cast<int32_t>(columns_.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("item references column ", ref.column,
                       " but the writer has ", columns_.size()));
    }
    ColumnState& column = *columns_[ref.column];
    proto::Column* out = queued->item.add_columns();
    out->set_squeeze(ref.squeeze);
    for (int64_t step : ref.steps) {
      const int64_t index = CellIndexLocked(ref.column, step, lane);
      if (index < 0) return NoCellErrorLocked(ref.column, step);
      // Closing the open chunk changes no cell's position.
      if (column.cells[index].chunk == nullptr) {
        RETURN_IF_ERROR(CloseOpenChunkLocked(ref.column));
      }
      const Cell* it = &column.cells[index];
      const std::shared_ptr<WriterChunk>& chunk = it->chunk;
      // Only a single lane's steps are adjacent rows (see RowOf).
      const int64_t row = RowOf(*it, lane);
      const int slices = out->slices_size();
      proto::Slice* last =
          slices > 0 ? out->mutable_slices(slices - 1) : nullptr;
      if (last != nullptr && last->chunk_key() == chunk->key &&
          last->offset() + last->length() == row) {
        last->set_length(last->length() + 1);  // extends the previous slice
      } else {
        proto::Slice* slice = out->add_slices();
        slice->set_chunk_key(chunk->key);
        slice->set_offset(static_cast<int32_t>(row));
        slice->set_length(1);
      }
      if (!chunk->scheduled && chunk->claimed_in != build_round_) {
        chunk->claimed_in = build_round_;
        queued->chunks.push_back(chunk);
      }
    }
  }
  // An item whose new chunks cannot fit one message would break the stream
  // for everyone on it; refuse it here, leaving the writer usable.
  const int64_t bytes = queued->chunk_bytes();
  if (bytes > stub_->max_message_bytes() * 3 / 4) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the item needs ", bytes,
                     " bytes of new chunk data, more than fits one message (",
                     "max_message_bytes=", stub_->max_message_bytes(), ")"));
  }
  return queued;
}

}  // namespace reverb_tf
