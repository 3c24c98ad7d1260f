// SPDX-License-Identifier: Apache-2.0
// The pattern engine: decides, step by step, which StructuredWriter configs
// apply and which steps each of their pattern nodes takes.
//
// A config (reverb_tf/cc/proto/patterns.proto) is a flat list of pattern
// nodes, each naming a column of the flattened step and a step or a slice of
// steps counted back from the most recent one, plus conditions and a
// priority function. The engine sees the stream of steps as the writer (or
// the PatternDataset kernel) receives it: which columns have a value in each
// append, the scalar value of the few columns that conditions and TD-error
// priorities read, partial steps and episode ends. It never sees tensors, so
// the writer maps its answers to cells of its TrajectoryWriter and the
// dataset kernel to tensors it buffers.
//
// Semantics (those of dm-reverb 0.14, observed and pinned by tests):
//
//   * The engine buffers the most recent `max_history()` steps: the largest
//     -min(start, stop) over all nodes of all configs. A step opened by a
//     partial append is in the buffer at once.
//   * After every append (partial or not) each config that has not yet been
//     applied in the current step is tried, in config order, if at least one
//     column it reads (in a node or a data condition) has a value in the
//     current step. It applies when all its conditions hold and every step
//     every node references is in the buffer and has a value for the node's
//     column. Each config applies at most once per step.
//   * Node `stop = -k` (no start): the k-th most recent step, squeezed.
//     Node `start = -k[, stop][, step]`: Python's buffer[-k:stop:step]; it
//     needs k steps in the buffer.
//   * Conditions: step_index (0-based index of the most recent step in its
//     episode), steps_since_applied (steps opened since the config was last
//     applied; not reset by episode ends), buffer_length (steps in the
//     buffer), is_end_episode (1 only while EndEpisode() applies configs;
//     must be compared with eq 1), data (the value of a column in the most
//     recent step; the condition fails unless it is a single integer or
//     bool, whatever `inverse` says). Comparisons: eq, ge, mod_eq (C++ `%`,
//     so negative values have negative remainders); `inverse` negates.
//   * EndEpisode() tries the configs once more with is_end_episode = 1 and
//     the last step (open or not) as the current one, if the episode has any
//     step; it does not count as a step. Then the open step is closed, the
//     step index restarts at 0 and, with clear_buffers, the buffer empties.
//   * Priorities: constant, or TD error computed from the last node (in flat
//     order) that reads the TD column: w * max|x| + (1 - w) * mean|x| over
//     its steps; 0 if no node reads it. A config without a priority function
//     is an INVALID_ARGUMENT error when it applies, as in dm-reverb.
//
// Thread safety: thread-compatible (one caller at a time).
#ifndef REVERB_TF_CC_PATTERNS_PATTERN_ENGINE_H_
#define REVERB_TF_CC_PATTERNS_PATTERN_ENGINE_H_

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace reverb_tf::patterns {

class StructuredWriterConfig;

// A config in the engine's own form (parsed and validated).
struct PatternConfig {
  struct Node {
    int32_t column = 0;
    bool has_start = false;
    int32_t start = 0;
    bool has_stop = false;
    int32_t stop = 0;
    bool has_step = false;
    int32_t step = 1;
  };
  struct Condition {
    enum class Left {
      kStepIndex,
      kStepsSinceApplied,
      kBufferLength,
      kIsEndEpisode,
      kData
    };
    enum class Cmp { kEq, kGe, kModEq };
    Left left = Left::kStepIndex;
    int32_t data_column = 0;
    Cmp cmp = Cmp::kEq;
    int64_t value = 0;  // eq, ge, or mod_eq.eq
    int64_t mod = 1;    // mod_eq.mod
    bool inverse = false;
  };
  enum class PriorityKind { kNone, kConstant, kTdError };

  std::vector<Node> nodes;
  // The columns the nodes and data conditions read, each once.
  std::vector<int32_t> columns_read;
  std::string table;
  std::vector<Condition> conditions;
  PriorityKind priority_kind = PriorityKind::kNone;
  double constant_priority = 0;
  double max_priority_weight = 0;
  int32_t td_column = 0;

  // Steps a node (or the whole config) needs in the buffer.
  static int32_t NodeHistory(const Node& node);
  int32_t History() const;
};

// Converts and validates one config. INVALID_ARGUMENT names the config's
// position, its table and, for node errors, the node's flat index.
absl::StatusOr<PatternConfig> ConfigFromProto(
    const StructuredWriterConfig& proto, int index);

// Parses serialized StructuredWriterConfig protos and validates them.
absl::StatusOr<std::vector<PatternConfig>> ParseConfigs(
    absl::Span<const std::string> serialized);

// What the engine knows of a value the caller appended to a column it
// watches (see PatternEngine::watched()).
struct Scalar {
  enum class Kind : int8_t {
    kUnknown,    // not inspected (column not watched)
    kInteger,    // one element of an integer or bool dtype
    kFloat,      // one element of a floating dtype
    kNonScalar,  // more or fewer than one element, or another dtype
  };
  Kind kind = Kind::kUnknown;
  int64_t integer = 0;
  double real = 0;  // set for kInteger and kFloat

  static Scalar Integer(int64_t v) {
    return {Kind::kInteger, v, static_cast<double>(v)};
  }
  static Scalar Float(double v) { return {Kind::kFloat, 0, v}; }
  static Scalar NonScalar() { return {Kind::kNonScalar, 0, 0}; }

  // Reads a value given as raw row-major bytes of `dtype` (TF's numbering,
  // reverb_tf::DType): integers and bools give kInteger, float32/float64
  // kFloat, anything that is not exactly one such element kNonScalar.
  static Scalar FromBytes(int32_t dtype, int64_t num_elements, const char* data,
                          size_t size);
};

// The steps one node of an applied config takes.
struct NodeSteps {
  int32_t column = 0;
  // Step ids as the caller passed them to Append(), oldest first.
  std::vector<int64_t> steps;
  // One step without a time dimension.
  bool squeeze = false;
};

struct Application {
  // Index of the config in the engine's list.
  int32_t config = 0;
  double priority = 0;
  // One per node of the config, in flat order.
  std::vector<NodeSteps> nodes;
};

class PatternEngine {
 public:
  explicit PatternEngine(std::vector<PatternConfig> configs);

  const std::vector<PatternConfig>& configs() const { return configs_; }
  // Steps the buffer holds at most (>= 1).
  int32_t max_history() const { return max_history_; }
  // watched()[c]: the engine needs the Scalar of column c (data conditions,
  // TD errors). Columns beyond its size are not watched.
  const std::vector<bool>& watched() const { return watched_; }

  // Checks that none of `columns` already has a value in the open step
  // (FAILED_PRECONDITION otherwise). Changes nothing.
  absl::Status CheckAppend(absl::Span<const int32_t> columns) const;

  // Records values for `columns` in the current step (opening a new step,
  // with id `step_id`, if none is open), then appends to `out` the configs
  // that apply now. `scalars` is parallel to `columns` (only entries of
  // watched columns are read). With `partial`, the step stays open.
  //
  // Errors: FAILED_PRECONDITION for a column given twice in one step (the
  // engine is unchanged); INVALID_ARGUMENT for a config that cannot compute
  // its priority (the step is recorded, later configs are not tried).
  absl::Status Append(int64_t step_id, absl::Span<const int32_t> columns,
                      absl::Span<const Scalar> scalars, bool partial,
                      std::vector<Application>* out);

  // Applies end-of-episode configs (see above), then starts a new episode.
  absl::Status EndEpisode(bool clear_buffers, std::vector<Application>* out);

  bool step_is_open() const { return step_open_; }
  int64_t buffer_length() const { return static_cast<int64_t>(buffer_.size()); }

 private:
  struct StepRecord {
    int64_t id = 0;
    // present[c]: column c has a value in this step.
    std::vector<bool> present;
    // Scalars of watched columns, indexed by column (size of watched_).
    std::vector<Scalar> scalars;
  };
  struct ConfigState {
    int64_t steps_since_applied = 0;
    bool applied_in_step = false;
  };

  // Tries every config not yet applied in the current step.
  absl::Status TryConfigs(bool end_of_episode, std::vector<Application>* out);
  // Some column the config reads has a value in the current step.
  bool ReadsCurrentStep(const PatternConfig& config) const;
  bool ConditionsHold(const PatternConfig& config, const ConfigState& state,
                      bool end_of_episode) const;
  // Fills `application` if every referenced step has the node's column.
  bool Resolve(const PatternConfig& config, Application* application) const;
  absl::Status ComputePriority(const PatternConfig& config, int32_t index,
                               Application* application) const;

  const std::vector<PatternConfig> configs_;
  int32_t max_history_ = 1;
  std::vector<bool> watched_;

  std::vector<ConfigState> states_;
  std::deque<StepRecord> buffer_;
  // Records dropped from the buffer, reused to avoid allocations.
  std::vector<StepRecord> spare_;
  bool step_open_ = false;
  // Steps opened in the current episode; the most recent has index
  // episode_steps_ - 1.
  int64_t episode_steps_ = 0;
};

}  // namespace reverb_tf::patterns

#endif  // REVERB_TF_CC_PATTERNS_PATTERN_ENGINE_H_
