// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/patterns/pattern_engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "reverb_tf/cc/dtype.h"
#include "reverb_tf/cc/platform/status_macros.h"
#include "reverb_tf/cc/proto/patterns_cc.pb.h"

namespace reverb_tf::patterns {
namespace {

absl::Status ConfigError(int index, const std::string& table,
                         const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(
      "Invalid configuration at position ", index,
      table.empty() ? std::string() : absl::StrCat(" (table '", table, "')"),
      ": ", what));
}

absl::Status NodeFromProto(const PatternNode& proto,
                           PatternConfig::Node* node) {
  node->column = proto.flat_source_index();
  node->has_start = proto.start_or_none_case() == PatternNode::kStart;
  node->start = proto.start();
  node->has_stop = proto.stop_or_none_case() == PatternNode::kStop;
  node->stop = proto.stop();
  node->has_step = proto.step_or_none_case() == PatternNode::kStep;
  node->step = node->has_step ? proto.step() : 1;
  if (node->column < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "`flat_source_index` must be >= 0 but got ", node->column, "."));
  }
  if (!node->has_start && !node->has_stop) {
    return absl::InvalidArgumentError(
        "At least one of `start` and `stop` must be specified.");
  }
  if (node->has_start && node->start >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("`start` must be < 0 but got ", node->start, "."));
  }
  if (node->has_stop && node->stop > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("`stop` must be <= 0 but got ", node->stop, "."));
  }
  if (!node->has_start && node->stop >= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "`stop` must be < 0 when `start` isn't set but got ", node->stop, "."));
  }
  if (node->has_start && node->has_stop && node->stop <= node->start) {
    return absl::InvalidArgumentError(
        absl::StrCat("`stop` (", node->stop, ") must be > `start` (",
                     node->start, ") when both are specified."));
  }
  if (node->has_step && !node->has_start) {
    return absl::InvalidArgumentError(
        "`step` must only be set when `start` is set.");
  }
  if (node->has_step && node->step <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("`step` must be > 0 but got ", node->step, "."));
  }
  return absl::OkStatus();
}

absl::Status ConditionFromProto(const Condition& proto,
                                PatternConfig::Condition* condition) {
  using Left = PatternConfig::Condition::Left;
  using Cmp = PatternConfig::Condition::Cmp;
  switch (proto.left_case()) {
    case Condition::kStepIndex:
      condition->left = Left::kStepIndex;
      break;
    case Condition::kStepsSinceApplied:
      condition->left = Left::kStepsSinceApplied;
      break;
    case Condition::kBufferLength:
      condition->left = Left::kBufferLength;
      break;
    case Condition::kIsEndEpisode:
      condition->left = Left::kIsEndEpisode;
      break;
    case Condition::kFlatSourceIndex:
      condition->left = Left::kData;
      condition->data_column = proto.flat_source_index();
      if (condition->data_column < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("Condition `flat_source_index` must be >= 0 but got ",
                         condition->data_column, "."));
      }
      break;
    case Condition::LEFT_NOT_SET:
      return absl::InvalidArgumentError(
          "Conditions must specify a value for `left`.");
  }
  switch (proto.cmp_case()) {
    case Condition::kEq:
      condition->cmp = Cmp::kEq;
      condition->value = proto.eq();
      break;
    case Condition::kGe:
      condition->cmp = Cmp::kGe;
      condition->value = proto.ge();
      break;
    case Condition::kModEq:
      condition->cmp = Cmp::kModEq;
      condition->mod = proto.mod_eq().mod();
      condition->value = proto.mod_eq().eq();
      if (condition->mod <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "`mod_eq.mod` must be > 0 but got ", condition->mod, "."));
      }
      if (condition->value < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "`mod_eq.eq` must be >= 0 but got ", condition->value, "."));
      }
      break;
    case Condition::CMP_NOT_SET:
      return absl::InvalidArgumentError(
          "Conditions must specify a value for `cmp`.");
  }
  condition->inverse = proto.inverse();
  if (condition->left == Left::kIsEndEpisode &&
      (condition->cmp != Cmp::kEq || condition->value != 1 ||
       condition->inverse)) {
    return absl::InvalidArgumentError(
        "Condition must use `eq=1` (and not `inverse`) when using "
        "`is_end_episode`.");
  }
  return absl::OkStatus();
}

template <typename T>
T Load(const char* data) {
  T value;
  std::memcpy(&value, data, sizeof(T));
  return value;
}

}  // namespace

Scalar Scalar::FromBytes(int32_t dtype, int64_t num_elements, const char* data,
                         size_t size) {
  if (num_elements != 1) return NonScalar();
  auto fits = [&](size_t bytes) { return size == bytes; };
  switch (static_cast<DType>(dtype)) {
    case DType::kBool:
      return fits(1) ? Integer(data[0] != 0) : NonScalar();
    case DType::kInt8:
      return fits(1) ? Integer(Load<int8_t>(data)) : NonScalar();
    case DType::kUint8:
      return fits(1) ? Integer(Load<uint8_t>(data)) : NonScalar();
    case DType::kInt16:
      return fits(2) ? Integer(Load<int16_t>(data)) : NonScalar();
    case DType::kUint16:
      return fits(2) ? Integer(Load<uint16_t>(data)) : NonScalar();
    case DType::kInt32:
      return fits(4) ? Integer(Load<int32_t>(data)) : NonScalar();
    case DType::kUint32:
      return fits(4) ? Integer(Load<uint32_t>(data)) : NonScalar();
    case DType::kInt64:
      return fits(8) ? Integer(Load<int64_t>(data)) : NonScalar();
    case DType::kUint64:
      return fits(8) ? Integer(static_cast<int64_t>(Load<uint64_t>(data)))
                     : NonScalar();
    case DType::kFloat:
      return fits(4) ? Float(Load<float>(data)) : NonScalar();
    case DType::kDouble:
      return fits(8) ? Float(Load<double>(data)) : NonScalar();
    default:
      return NonScalar();
  }
}

int32_t PatternConfig::NodeHistory(const Node& node) {
  if (node.has_start) return -node.start;  // stop > start when both are set
  return -node.stop;
}

int32_t PatternConfig::History() const {
  int32_t history = 0;
  for (const Node& node : nodes) history = std::max(history, NodeHistory(node));
  return history;
}

absl::StatusOr<PatternConfig> ConfigFromProto(
    const StructuredWriterConfig& proto, int index) {
  PatternConfig config;
  config.table = proto.table();
  if (proto.flat().empty())
    return ConfigError(index, config.table, "`flat` must not be empty.");
  if (config.table.empty())
    return ConfigError(index, config.table, "`table` must not be empty.");
  config.nodes.resize(proto.flat_size());
  for (int i = 0; i < proto.flat_size(); ++i) {
    absl::Status status = NodeFromProto(proto.flat(i), &config.nodes[i]);
    if (!status.ok()) {
      return ConfigError(index, config.table,
                         absl::StrCat("flat[", i, "]: ", status.message()));
    }
  }
  config.conditions.resize(proto.conditions_size());
  for (int i = 0; i < proto.conditions_size(); ++i) {
    absl::Status status =
        ConditionFromProto(proto.conditions(i), &config.conditions[i]);
    if (!status.ok()) {
      return ConfigError(
          index, config.table,
          absl::StrCat("conditions[", i, "]: ", status.message()));
    }
  }
  for (const PatternConfig::Node& node : config.nodes)
    config.columns_read.push_back(node.column);
  for (const PatternConfig::Condition& condition : config.conditions) {
    if (condition.left == PatternConfig::Condition::Left::kData) {
      config.columns_read.push_back(condition.data_column);
    }
  }
  std::sort(config.columns_read.begin(), config.columns_read.end());
  config.columns_read.erase(
      std::unique(config.columns_read.begin(), config.columns_read.end()),
      config.columns_read.end());
  switch (proto.priority().priority_fn_case()) {
    case Priority::kConstantFn:
      config.priority_kind = PatternConfig::PriorityKind::kConstant;
      config.constant_priority = proto.priority().constant_fn().value();
      break;
    case Priority::kTdError:
      config.priority_kind = PatternConfig::PriorityKind::kTdError;
      config.max_priority_weight =
          proto.priority().td_error().max_priority_weight();
      config.td_column = proto.priority().td_error().flat_source_index();
      break;
    case Priority::PRIORITY_FN_NOT_SET:
      // dm-reverb accepts it and fails when the config applies; so do we.
      config.priority_kind = PatternConfig::PriorityKind::kNone;
      break;
  }
  return config;
}

absl::StatusOr<std::vector<PatternConfig>> ParseConfigs(
    absl::Span<const std::string> serialized) {
  std::vector<PatternConfig> configs;
  configs.reserve(serialized.size());
  for (size_t i = 0; i < serialized.size(); ++i) {
    StructuredWriterConfig proto;
    if (!proto.ParseFromString(serialized[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("Invalid configuration at position ", i,
                       ": not a serialized StructuredWriterConfig"));
    }
    ASSIGN_OR_RETURN(PatternConfig config,
                     ConfigFromProto(proto, static_cast<int>(i)));
    configs.push_back(std::move(config));
  }
  return configs;
}

PatternEngine::PatternEngine(std::vector<PatternConfig> configs)
    : configs_(std::move(configs)), states_(configs_.size()) {
  for (const PatternConfig& config : configs_) {
    max_history_ = std::max(max_history_, config.History());
    auto watch = [&](int32_t column) {
      if (column < 0) return;
      if (watched_.size() <= static_cast<size_t>(column))
        watched_.resize(column + 1, false);
      watched_[column] = true;
    };
    for (const PatternConfig::Condition& condition : config.conditions) {
      if (condition.left == PatternConfig::Condition::Left::kData)
        watch(condition.data_column);
    }
    if (config.priority_kind == PatternConfig::PriorityKind::kTdError)
      watch(config.td_column);
  }
}

absl::Status PatternEngine::CheckAppend(
    absl::Span<const int32_t> columns) const {
  if (!step_open_) return absl::OkStatus();
  const std::vector<bool>& present = buffer_.back().present;
  for (int32_t column : columns) {
    if (static_cast<size_t>(column) < present.size() && present[column]) {
      return absl::FailedPreconditionError(
          absl::StrCat("A value for column ", column,
                       " was provided by more than one append in the same step "
                       "(partial_step)."));
    }
  }
  return absl::OkStatus();
}

absl::Status PatternEngine::Append(int64_t step_id,
                                   absl::Span<const int32_t> columns,
                                   absl::Span<const Scalar> scalars,
                                   bool partial,
                                   std::vector<Application>* out) {
  RETURN_IF_ERROR(CheckAppend(columns));
  if (!step_open_) {
    StepRecord record;
    if (buffer_.size() >= static_cast<size_t>(max_history_)) {
      record = std::move(buffer_.front());
      buffer_.pop_front();
    } else if (!spare_.empty()) {
      record = std::move(spare_.back());
      spare_.pop_back();
    }
    record.id = step_id;
    std::fill(record.present.begin(), record.present.end(), false);
    record.scalars.assign(watched_.size(), Scalar());
    buffer_.push_back(std::move(record));
    step_open_ = true;
    ++episode_steps_;
    for (ConfigState& state : states_) {
      ++state.steps_since_applied;
      state.applied_in_step = false;
    }
  }
  StepRecord& record = buffer_.back();
  for (size_t i = 0; i < columns.size(); ++i) {
    const size_t column = static_cast<size_t>(columns[i]);
    if (record.present.size() <= column)
      record.present.resize(column + 1, false);
    record.present[column] = true;
    if (column < watched_.size() && watched_[column] && i < scalars.size()) {
      record.scalars[column] = scalars[i];
    }
  }
  absl::Status status = TryConfigs(/*end_of_episode=*/false, out);
  if (!partial) step_open_ = false;
  return status;
}

absl::Status PatternEngine::EndEpisode(bool clear_buffers,
                                       std::vector<Application>* out) {
  absl::Status status;
  if (episode_steps_ > 0 && !buffer_.empty()) {
    // Configs applied in the last step stay applied; the others are tried
    // again, of which only those conditioned on is_end_episode can pass now.
    status = TryConfigs(/*end_of_episode=*/true, out);
  }
  step_open_ = false;
  episode_steps_ = 0;
  if (clear_buffers) {
    while (!buffer_.empty()) {
      spare_.push_back(std::move(buffer_.back()));
      buffer_.pop_back();
    }
  }
  return status;
}

absl::Status PatternEngine::TryConfigs(bool end_of_episode,
                                       std::vector<Application>* out) {
  for (size_t i = 0; i < configs_.size(); ++i) {
    ConfigState& state = states_[i];
    if (state.applied_in_step) continue;
    const PatternConfig& config = configs_[i];
    if (!ReadsCurrentStep(config)) continue;
    if (!ConditionsHold(config, state, end_of_episode)) continue;
    Application application;
    application.config = static_cast<int32_t>(i);
    if (!Resolve(config, &application)) continue;
    RETURN_IF_ERROR(
        ComputePriority(config, static_cast<int32_t>(i), &application));
    state.applied_in_step = true;
    state.steps_since_applied = 0;
    out->push_back(std::move(application));
  }
  return absl::OkStatus();
}

bool PatternEngine::ReadsCurrentStep(const PatternConfig& config) const {
  const std::vector<bool>& present = buffer_.back().present;
  for (int32_t column : config.columns_read) {
    if (static_cast<size_t>(column) < present.size() && present[column])
      return true;
  }
  return false;
}

bool PatternEngine::ConditionsHold(const PatternConfig& config,
                                   const ConfigState& state,
                                   bool end_of_episode) const {
  using Left = PatternConfig::Condition::Left;
  using Cmp = PatternConfig::Condition::Cmp;
  for (const PatternConfig::Condition& condition : config.conditions) {
    int64_t left = 0;
    switch (condition.left) {
      case Left::kStepIndex:
        left = episode_steps_ - 1;
        break;
      case Left::kStepsSinceApplied:
        left = state.steps_since_applied;
        break;
      case Left::kBufferLength:
        left = static_cast<int64_t>(buffer_.size());
        break;
      case Left::kIsEndEpisode:
        left = end_of_episode ? 1 : 0;
        break;
      case Left::kData: {
        const StepRecord& record = buffer_.back();
        const size_t column = static_cast<size_t>(condition.data_column);
        if (column >= record.present.size() || !record.present[column] ||
            column >= record.scalars.size() ||
            record.scalars[column].kind != Scalar::Kind::kInteger) {
          return false;  // no usable value: fails whatever `inverse` says
        }
        left = record.scalars[column].integer;
        break;
      }
    }
    bool holds = false;
    switch (condition.cmp) {
      case Cmp::kEq:
        holds = left == condition.value;
        break;
      case Cmp::kGe:
        holds = left >= condition.value;
        break;
      case Cmp::kModEq:
        holds = left % condition.mod == condition.value;
        break;
    }
    if (holds == condition.inverse) return false;
  }
  return true;
}

bool PatternEngine::Resolve(const PatternConfig& config,
                            Application* application) const {
  const int64_t length = static_cast<int64_t>(buffer_.size());
  application->nodes.resize(config.nodes.size());
  for (size_t n = 0; n < config.nodes.size(); ++n) {
    const PatternConfig::Node& node = config.nodes[n];
    if (PatternConfig::NodeHistory(node) > length) return false;
    NodeSteps& steps = application->nodes[n];
    steps.column = node.column;
    steps.steps.clear();
    const size_t column = static_cast<size_t>(node.column);
    auto take = [&](int64_t position) {
      const StepRecord& record = buffer_[position];
      if (column >= record.present.size() || !record.present[column])
        return false;
      steps.steps.push_back(record.id);
      return true;
    };
    if (!node.has_start) {
      steps.squeeze = true;
      if (!take(length + node.stop)) return false;
      continue;
    }
    steps.squeeze = false;
    const int64_t begin = length + node.start;
    const int64_t end = node.has_stop ? length + node.stop : length;
    steps.steps.reserve((end - begin + node.step - 1) / node.step);
    for (int64_t position = begin; position < end; position += node.step) {
      if (!take(position)) return false;
    }
  }
  return true;
}

absl::Status PatternEngine::ComputePriority(const PatternConfig& config,
                                            int32_t index,
                                            Application* application) const {
  switch (config.priority_kind) {
    case PatternConfig::PriorityKind::kConstant:
      application->priority = config.constant_priority;
      return absl::OkStatus();
    case PatternConfig::PriorityKind::kNone:
      return absl::InvalidArgumentError(absl::StrCat(
          "The config at position ", index, " (table '", config.table,
          "') has no priority function (`priority` is unset)."));
    case PatternConfig::PriorityKind::kTdError:
      break;
  }
  // The last node in flat order that reads the TD column decides.
  const PatternConfig::Node* source = nullptr;
  for (const PatternConfig::Node& node : config.nodes) {
    if (node.column == config.td_column) source = &node;
  }
  application->priority = 0;
  if (source == nullptr) return absl::OkStatus();
  // The node resolved against the buffer as it is now (see Resolve()).
  const int64_t length = static_cast<int64_t>(buffer_.size());
  int64_t begin = length + source->stop;
  int64_t end = begin + 1;
  if (source->has_start) {
    begin = length + source->start;
    end = source->has_stop ? length + source->stop : length;
  }
  double max_abs = 0;
  double sum_abs = 0;
  int64_t count = 0;
  for (int64_t position = begin; position < end; position += source->step) {
    const Scalar& scalar = buffer_[position].scalars[config.td_column];
    if (scalar.kind != Scalar::Kind::kInteger &&
        scalar.kind != Scalar::Kind::kFloat) {
      return absl::InvalidArgumentError(absl::StrCat(
          "TD Error expects a scalar tensor: the config at position ", index,
          " (table '", config.table, "') computes its priority from column ",
          config.td_column, ", whose values are not single numbers."));
    }
    const double value = std::abs(scalar.real);
    max_abs = std::max(max_abs, value);
    sum_abs += value;
    ++count;
  }
  const double mean_abs = sum_abs / static_cast<double>(count);
  const double weight = config.max_priority_weight;
  application->priority = weight * max_abs + (1.0 - weight) * mean_abs;
  return absl::OkStatus();
}

}  // namespace reverb_tf::patterns
