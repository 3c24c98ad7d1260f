// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/patterns/pattern_facade.h"

#include <utility>

#include "reverb_tf/cc/patterns/pattern_engine.h"

namespace reverb_tf::tf_facade {
namespace {

Status FromAbsl(const absl::Status& status) {
  return Status{static_cast<int>(status.code()), std::string(status.message())};
}

void Convert(std::vector<patterns::Application>& applications,
             std::vector<PatternApplication>* out) {
  for (patterns::Application& application : applications) {
    PatternApplication converted;
    converted.config = application.config;
    converted.nodes.reserve(application.nodes.size());
    for (patterns::NodeSteps& node : application.nodes) {
      converted.nodes.push_back(
          PatternNodeSteps{node.column, std::move(node.steps), node.squeeze});
    }
    out->push_back(std::move(converted));
  }
  applications.clear();
}

class EngineImpl : public FacadePatternEngine {
 public:
  EngineImpl(std::vector<patterns::PatternConfig> configs, int32_t num_columns)
      : engine_(std::move(configs)) {
    columns_.reserve(num_columns);
    for (int32_t c = 0; c < num_columns; ++c) columns_.push_back(c);
    scalars_.resize(num_columns);
  }

  int32_t max_history() const override { return engine_.max_history(); }

  bool watched(int32_t column) const override {
    const std::vector<bool>& watched = engine_.watched();
    return column >= 0 && static_cast<size_t>(column) < watched.size() &&
           watched[column];
  }

  Status AppendStep(int64_t step_id, const std::vector<ColumnBytes>& values,
                    std::vector<PatternApplication>* out) override {
    for (size_t c = 0; c < scalars_.size(); ++c) {
      if (c < values.size() && watched(static_cast<int32_t>(c))) {
        const ColumnBytes& v = values[c];
        scalars_[c] = patterns::Scalar::FromBytes(v.dtype, v.num_elements,
                                                  v.data, v.size);
      } else {
        scalars_[c] = patterns::Scalar();
      }
    }
    absl::Status status =
        engine_.Append(step_id, columns_, scalars_, false, &applications_);
    Convert(applications_, out);
    return FromAbsl(status);
  }

  Status EndEpisode(bool clear_buffers,
                    std::vector<PatternApplication>* out) override {
    absl::Status status = engine_.EndEpisode(clear_buffers, &applications_);
    Convert(applications_, out);
    return FromAbsl(status);
  }

 private:
  patterns::PatternEngine engine_;
  std::vector<int32_t> columns_;
  std::vector<patterns::Scalar> scalars_;
  std::vector<patterns::Application> applications_;
};

}  // namespace

Status NewPatternEngine(const std::vector<std::string>& serialized_configs,
                        int32_t num_columns,
                        std::unique_ptr<FacadePatternEngine>* engine) {
  if (serialized_configs.empty()) {
    return Status{static_cast<int>(absl::StatusCode::kInvalidArgument),
                  "At least one config must be provided."};
  }
  absl::StatusOr<std::vector<patterns::PatternConfig>> configs =
      patterns::ParseConfigs(serialized_configs);
  if (!configs.ok()) return FromAbsl(configs.status());
  *engine = std::make_unique<EngineImpl>(*std::move(configs), num_columns);
  return Status{};
}

}  // namespace reverb_tf::tf_facade
