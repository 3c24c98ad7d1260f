// SPDX-License-Identifier: Apache-2.0
// Batched writing: lanes of environments that step together.
#include <algorithm>
#include <cmath>
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
  // The batch stays whole: it is the step's value of every lane, and the
  // rows of lane chunks (AppendLocked checks the rest).
  for (size_t c = 0; c < step.size(); ++c) {
    if (!step[c].has_value()) continue;
    const TensorPayload& batch = *step[c];
    if (batch.compression != Compression::kNone || batch.shape.empty() ||
        batch.shape[0] != lanes) {
      return absl::InvalidArgumentError(
          absl::StrCat("append: ", ColumnLabelLocked(static_cast<int32_t>(c)),
                       " must be uncompressed with a leading dimension of ",
                       lanes, " (one row per environment), got shape ",
                       ShapeDebugString(batch.shape)));
    }
  }
  return AppendLocked(std::move(step), /*partial_step=*/false);
}

absl::Status TrajectoryWriter::CreateItems(
    const std::string& table, absl::Span<const double> priorities,
    const std::vector<ItemColumn>& columns, absl::Span<const int32_t> lanes,
    absl::Duration timeout, Cancellation* cancel) {
  // ValidateItem's rules first: the columns once, then every priority.
  RETURN_IF_ERROR(
      ValidateItem(priorities.empty() ? 0.0 : priorities[0], columns));
  for (const double priority : priorities) {
    if (std::isnan(priority)) return ValidateItem(priority, columns);
  }
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
  if (lanes.empty()) return absl::OkStatus();
  ++build_round_;
  // Every lane's item has the same columns: one check for all of them.
  RETURN_IF_ERROR(CheckSignatureLocked(table, columns));
  std::vector<bool> seen(num_lanes, false);
  std::vector<std::unique_ptr<QueuedItem>> items;
  // The lanes' items differ only in their rows, a step's row plus the lane
  // (lane chunks): one item batch carries them all, built once, unless the
  // items are the legacy kind a batch cannot describe.
  const bool as_batch = !options_.legacy_items;
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
    absl::Status status;
    if (i == 0 || !as_batch) {
      absl::StatusOr<std::unique_ptr<QueuedItem>> item =
          BuildItemLocked(table, priorities[i], columns, lane);
      if (item.ok()) items.push_back(*std::move(item));
      status = item.status();
    } else {
      status = CheckLaneCellsLocked(columns, lane);
    }
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat("environment ", lane,
                                                      ": ", status.message()));
    }
  }
  if (as_batch) {
    QueuedItem& queued = *items.front();
    proto::ItemBatch& batch = queued.batch;
    batch.set_table(table);
    batch.set_unchecked(queued.item.unchecked());
    batch.mutable_columns()->Swap(queued.item.mutable_columns());
    // Lane 0's rows: each item's lane is added back on the server.
    for (proto::Column& column : *batch.mutable_columns()) {
      for (proto::Slice& slice : *column.mutable_slices()) {
        slice.set_offset(slice.offset() - lanes[0]);
      }
    }
    batch.mutable_keys()->Reserve(static_cast<int>(lanes.size()));
    batch.add_keys(queued.item.key());
    for (size_t i = 1; i < lanes.size(); ++i) batch.add_keys(rng_());
    batch.mutable_priorities()->Assign(priorities.begin(), priorities.end());
    batch.mutable_lanes()->Assign(lanes.begin(), lanes.end());
    queued.item.Clear();
  }
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
  if (lanes.empty()) return absl::OkStatus();
  // Every open chunk closes, every lane's with it: a chunk's rows keep
  // their lane's episode.
  for (size_t c = 0; c < columns_.size(); ++c) {
    RETURN_IF_ERROR(CloseOpenChunkLocked(static_cast<int32_t>(c)));
  }
  if (options_.num_lanes > 0) {
    // The other lanes still reference these steps' rows: the lane only
    // stops referencing its own (the chunks go with the keep-alive window).
    for (const int32_t lane : lanes) {
      if (clear_buffers) lanes_[lane].first_step = step_counter_;
      lanes_[lane].episode_step = 0;
      lanes_[lane].episode_id = rng_();
    }
    return absl::OkStatus();
  }
  // A plain writer's cells are its one lane's: they go, and their chunks
  // are released on the server.
  if (clear_buffers) {
    for (auto& column : columns_) {
      std::shared_ptr<WriterChunk> previous;
      for (Cell& cell : column->cells) {
        if (cell.chunk != previous && cell.chunk->scheduled) {
          release_queue_.push_back(cell.chunk->key);
        }
        previous = cell.chunk;
      }
      column->cells.clear();
    }
    cv_.SignalAll();
  }
  lanes_[0].episode_step = 0;
  lanes_[0].episode_id = rng_();
  return absl::OkStatus();
}

}  // namespace reverb_tf
