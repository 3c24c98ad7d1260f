// SPDX-License-Identifier: Apache-2.0
// Batched writing: lanes of environments that step together.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "reverb_tf/cc/client/trajectory_writer.h"
#include "reverb_tf/cc/client/trajectory_writer_internal.h"
#include "reverb_tf/cc/platform/deadline.h"
#include "reverb_tf/cc/platform/status_macros.h"

namespace reverb_tf {

std::vector<int32_t> TrajectoryWriter::LaneEpisodeSteps() const {
  absl::MutexLock lock(&mu_);
  std::vector<int32_t> steps;
  steps.reserve(lanes_.size());
  for (const Lane& lane : lanes_) steps.push_back(lane.episode_step);
  return steps;
}

absl::Status TrajectoryWriter::RequireLanes(bool batched,
                                            const char* what) const {
  if ((options_.num_lanes > 0) == batched) return absl::OkStatus();
  return absl::FailedPreconditionError(
      batched ? absl::StrCat(what, " is for batched writers (num_lanes >= 1)")
              : absl::StrCat(
                    what, " is not for batched writers: use the batched call"));
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
          " (one row per environment), got shape ",
          ShapeDebugString(batch.shape)));
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

absl::Status TrajectoryWriter::CreateItems(
    const std::string& table, absl::Span<const double> priorities,
    const std::vector<ItemColumn>& columns, absl::Span<const int32_t> lanes,
    absl::Duration timeout, Cancellation* cancel) {
  RETURN_IF_ERROR(RequireLanes(true, "CreateItems()"));
  const int32_t num_lanes = options_.num_lanes;
  if (priorities.size() != lanes.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("create_items: ", priorities.size(), " priorities for ",
                     lanes.size(), " environments"));
  }
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(ErrorLocked());
  if (closing_) return absl::FailedPreconditionError("the writer is closed");
  // Batched column indices, checked here so that errors name them rather
  // than a lane's native column.
  for (const ItemColumn& ref : columns) {
    if (ref.column < 0 || static_cast<int64_t>(ref.column) * num_lanes >=
                              static_cast<int64_t>(columns_.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("item references column ", ref.column,
                       " but the writer has ", columns_.size() / num_lanes));
    }
  }
  std::vector<bool> seen(num_lanes, false);
  std::vector<std::unique_ptr<QueuedItem>> items;
  items.reserve(lanes.size());
  std::vector<ItemColumn> lane_columns = columns;
  for (size_t i = 0; i < lanes.size(); ++i) {
    const int32_t lane = lanes[i];
    if (lane < 0 || lane >= num_lanes || seen[lane]) {
      return absl::InvalidArgumentError(
          absl::StrCat("create_items: environment ", lane,
                       lane < 0 || lane >= num_lanes
                           ? absl::StrCat(" is not in [0, ", num_lanes, ")")
                           : std::string(" is listed twice")));
    }
    seen[lane] = true;
    for (size_t k = 0; k < columns.size(); ++k) {
      lane_columns[k].column = columns[k].column * num_lanes + lane;
    }
    absl::StatusOr<std::unique_ptr<QueuedItem>> item =
        BuildItemLocked(table, priorities[i], lane_columns);
    if (!item.ok()) {
      return absl::Status(
          item.status().code(),
          absl::StrCat("environment ", lane, ": ", item.status().message()));
    }
    items.push_back(*std::move(item));
  }
  if (items.empty()) return absl::OkStatus();
  return EnqueueLocked(std::move(items), timeout, cancel);
}

absl::Status TrajectoryWriter::EndLaneEpisodes(absl::Span<const int32_t> lanes,
                                               bool clear_buffers) {
  RETURN_IF_ERROR(RequireLanes(true, "EndLaneEpisodes()"));
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(ErrorLocked());
  for (const int32_t lane : lanes) {
    if (lane < 0 || lane >= options_.num_lanes) {
      return absl::InvalidArgumentError(
          absl::StrCat("end_episode: environment ", lane, " is not in [0, ",
                       options_.num_lanes, ")"));
    }
  }
  return EndLaneEpisodesLocked(lanes, clear_buffers);
}

absl::Status TrajectoryWriter::EndLaneEpisodesLocked(
    absl::Span<const int32_t> lanes, bool clear_buffers) {
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

}  // namespace reverb_tf
