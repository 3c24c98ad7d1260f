// SPDX-License-Identifier: Apache-2.0
// StructuredWriter: a TrajectoryWriter driven by pattern configs.
//
// The caller appends steps (one payload per flat column, or none when the
// column is missing in that step) and ends episodes; after every append the
// PatternEngine (pattern_engine.h) says which configs apply, and the writer
// creates one item per applied config in its table, referencing the cells
// (column, step) the config's nodes take. The data of a step is sent once,
// however many items share it; the keep-alive window of the underlying
// TrajectoryWriter is the engine's history.
//
// Errors: invalid configs are INVALID_ARGUMENT at Create(); a column given
// twice in one step is FAILED_PRECONDITION (nothing recorded); dtype/shape
// changes are INVALID_ARGUMENT from the TrajectoryWriter; server-side
// failures put the TrajectoryWriter in its permanent error state.
//
// Thread safety: thread-compatible (one caller at a time, like the Python
// StructuredWriter); the TrajectoryWriter's own threads synchronize with it.
#ifndef REVERB_TF_CC_PATTERNS_STRUCTURED_WRITER_H_
#define REVERB_TF_CC_PATTERNS_STRUCTURED_WRITER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "reverb_tf/cc/client/trajectory_writer.h"
#include "reverb_tf/cc/patterns/pattern_engine.h"
#include "reverb_tf/cc/platform/cancellation.h"
#include "reverb_tf/cc/platform/export.h"
#include "reverb_tf/cc/tensor_payload.h"

namespace reverb_tf {

class Client;

class REVERB_TF_EXPORT StructuredWriter {
 public:
  // The TrajectoryWriter options the writer needs for `configs` (keep-alive
  // window = the longest history of any config).
  static TrajectoryWriterOptions WriterOptions(
      const std::vector<patterns::PatternConfig>& configs);

  // Opens a writer on `client` for serialized StructuredWriterConfig protos.
  // INVALID_ARGUMENT if there are none or one is invalid.
  static absl::StatusOr<std::unique_ptr<StructuredWriter>> Create(
      Client& client, const std::vector<std::string>& serialized_configs);

  // Wraps `writer`, which must be fresh and have at least
  // WriterOptions(configs).num_keep_alive_refs keep-alive refs.
  StructuredWriter(std::unique_ptr<TrajectoryWriter> writer,
                   std::vector<patterns::PatternConfig> configs);
  ~StructuredWriter();

  StructuredWriter(const StructuredWriter&) = delete;
  StructuredWriter& operator=(const StructuredWriter&) = delete;

  // Adds values to the current step (see PatternEngine::Append) and creates
  // the items of the configs that apply. Creating an item waits while the
  // TrajectoryWriter has max_in_flight_items unacknowledged, for at most
  // `timeout`: on DEADLINE_EXCEEDED the step is recorded and the remaining
  // items stay pending until CreatePendingItems() (or any later call).
  absl::Status Append(std::vector<std::optional<TensorPayload>> step,
                      bool partial_step,
                      absl::Duration timeout = absl::InfiniteDuration(),
                      Cancellation* cancel = nullptr);

  // Creates the items left pending by an Append() that timed out.
  absl::Status CreatePendingItems(absl::Duration timeout,
                                  Cancellation* cancel = nullptr);

  // Creates pending items (no deadline, but cancellable), then waits up to
  // `timeout` until at most `block_until_num_items` are unacknowledged.
  absl::Status Flush(int32_t block_until_num_items, absl::Duration timeout,
                     Cancellation* cancel = nullptr);

  // Applies the end-of-episode configs, creates their items (no deadline,
  // but cancellable), then ends the TrajectoryWriter's episode, which
  // flushes within `timeout`. Buffers and episode are reset even when the
  // flush times out.
  absl::Status EndEpisode(bool clear_buffers, absl::Duration timeout,
                          Cancellation* cancel = nullptr);

  // Flushes nothing; ends the stream (see TrajectoryWriter::Close).
  absl::Status Close();

  bool step_is_open() const { return engine_.step_is_open(); }
  TrajectoryWriter& trajectory_writer() { return *writer_; }

 private:
  struct PendingItem {
    int32_t config;
    double priority;
    std::vector<ItemColumn> columns;
  };

  void Enqueue(std::vector<patterns::Application>& applications);

  std::unique_ptr<TrajectoryWriter> writer_;
  patterns::PatternEngine engine_;
  // Reused buffers of Append().
  std::vector<int32_t> columns_;
  std::vector<patterns::Scalar> scalars_;
  std::vector<patterns::Application> applications_;
  std::deque<PendingItem> pending_;
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_PATTERNS_STRUCTURED_WRITER_H_
