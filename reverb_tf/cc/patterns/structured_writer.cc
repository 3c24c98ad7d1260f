// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/patterns/structured_writer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "reverb_tf/cc/client/client.h"
#include "reverb_tf/cc/platform/status_macros.h"

namespace reverb_tf {

TrajectoryWriterOptions StructuredWriter::WriterOptions(
    const std::vector<patterns::PatternConfig>& configs) {
  int32_t history = 1;
  for (const patterns::PatternConfig& config : configs) {
    history = std::max(history, config.History());
  }
  TrajectoryWriterOptions options;
  options.num_keep_alive_refs = history;
  // As dm-reverb's writers: no limit on unconfirmed items (flush() is the
  // caller's brake), so append() never blocks on the window.
  options.max_in_flight_items = 1'000'000;
  return options;
}

absl::StatusOr<std::unique_ptr<StructuredWriter>> StructuredWriter::Create(
    Client& client, const std::vector<std::string>& serialized_configs) {
  if (serialized_configs.empty()) {
    return absl::InvalidArgumentError("At least one config must be provided.");
  }
  ASSIGN_OR_RETURN(std::vector<patterns::PatternConfig> configs,
                   patterns::ParseConfigs(serialized_configs));
  ASSIGN_OR_RETURN(std::unique_ptr<TrajectoryWriter> writer,
                   client.NewTrajectoryWriter(WriterOptions(configs)));
  return std::make_unique<StructuredWriter>(std::move(writer),
                                            std::move(configs));
}

StructuredWriter::StructuredWriter(std::unique_ptr<TrajectoryWriter> writer,
                                   std::vector<patterns::PatternConfig> configs)
    : writer_(std::move(writer)), engine_(std::move(configs)) {}

StructuredWriter::~StructuredWriter() = default;

absl::Status StructuredWriter::Append(
    std::vector<std::optional<TensorPayload>> step, bool partial_step,
    absl::Duration timeout, Cancellation* cancel) {
  // Items of an earlier append come first (their cells may leave the window).
  RETURN_IF_ERROR(CreatePendingItems(absl::InfiniteDuration(), cancel));
  columns_.clear();
  scalars_.clear();
  const std::vector<bool>& watched = engine_.watched();
  for (size_t c = 0; c < step.size(); ++c) {
    if (!step[c].has_value()) continue;
    columns_.push_back(static_cast<int32_t>(c));
    const TensorPayload& value = *step[c];
    if (c < watched.size() && watched[c]) {
      scalars_.push_back(value.compression == Compression::kNone
                             ? patterns::Scalar::FromBytes(
                                   static_cast<int32_t>(value.dtype),
                                   value.num_elements(), value.data.data(),
                                   value.data.size())
                             : patterns::Scalar::NonScalar());
    } else {
      scalars_.emplace_back();
    }
  }
  RETURN_IF_ERROR(engine_.CheckAppend(columns_));
  ASSIGN_OR_RETURN(const int64_t step_id,
                   writer_->Append(std::move(step), partial_step));
  applications_.clear();
  absl::Status status =
      engine_.Append(step_id, columns_, scalars_, partial_step, &applications_);
  Enqueue(applications_);
  RETURN_IF_ERROR(status);
  return CreatePendingItems(timeout, cancel);
}

void StructuredWriter::Enqueue(
    std::vector<patterns::Application>& applications) {
  for (patterns::Application& application : applications) {
    PendingItem item;
    item.config = application.config;
    item.priority = application.priority;
    item.columns.reserve(application.nodes.size());
    for (patterns::NodeSteps& node : application.nodes) {
      item.columns.push_back(
          ItemColumn{node.column, std::move(node.steps), node.squeeze});
    }
    pending_.push_back(std::move(item));
  }
  applications.clear();
}

absl::Status StructuredWriter::CreatePendingItems(absl::Duration timeout,
                                                  Cancellation* cancel) {
  while (!pending_.empty()) {
    const PendingItem& item = pending_.front();
    const std::string& table = engine_.configs()[item.config].table;
    RETURN_IF_ERROR(writer_->CreateItem(table, item.priority, item.columns,
                                        timeout, cancel));
    pending_.pop_front();
  }
  return absl::OkStatus();
}

absl::Status StructuredWriter::Flush(int32_t block_until_num_items,
                                     absl::Duration timeout,
                                     Cancellation* cancel) {
  // The argument first: a refused flush creates nothing.
  RETURN_IF_ERROR(TrajectoryWriter::ValidateFlush(block_until_num_items));
  RETURN_IF_ERROR(CreatePendingItems(absl::InfiniteDuration(), cancel));
  return writer_->Flush(block_until_num_items, timeout, cancel);
}

absl::Status StructuredWriter::EndEpisode(bool clear_buffers,
                                          absl::Duration timeout,
                                          Cancellation* cancel) {
  RETURN_IF_ERROR(CreatePendingItems(absl::InfiniteDuration(), cancel));
  applications_.clear();
  absl::Status applied = engine_.EndEpisode(clear_buffers, &applications_);
  Enqueue(applications_);
  absl::Status created = CreatePendingItems(absl::InfiniteDuration(), cancel);
  // The episode ends whatever happened above, as the engine's has, with the
  // step the caller left open (the engine applied its configs to it).
  absl::Status finished = writer_->FinishStep();
  absl::Status ended = finished.ok()
                           ? writer_->EndEpisode(clear_buffers, timeout, cancel)
                           : finished;
  // Items that could not be created reference cells of the ended episode.
  if (!created.ok()) pending_.clear();
  RETURN_IF_ERROR(applied);
  RETURN_IF_ERROR(created);
  return ended;
}

absl::Status StructuredWriter::Close() { return writer_->Close(); }

}  // namespace reverb_tf
