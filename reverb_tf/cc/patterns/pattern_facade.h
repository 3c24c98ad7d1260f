// SPDX-License-Identifier: Apache-2.0
// The pattern engine (pattern_engine.h) behind libreverb_tf.so's
// standard-library-only facade, for the PatternDataset kernel (kernels/),
// which must not see our absl or protobuf (docs/native_linking.md).
//
// Thread safety: a FacadePatternEngine is used by one thread at a time.
#ifndef REVERB_TF_CC_PATTERNS_PATTERN_FACADE_H_
#define REVERB_TF_CC_PATTERNS_PATTERN_FACADE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "reverb_tf/cc/client/tf_facade.h"
#include "reverb_tf/cc/platform/export.h"

namespace reverb_tf::tf_facade {

// The steps one pattern node of an applied config takes.
struct PatternNodeSteps {
  int32_t column = 0;
  std::vector<int64_t> steps;  // step ids, oldest first
  bool squeeze = false;        // one step, no time dimension
};

struct PatternApplication {
  int32_t config = 0;
  std::vector<PatternNodeSteps> nodes;  // flat order of the config's pattern
};

// A column's value in a step, as raw bytes (dtype in TF's numbering).
struct ColumnBytes {
  int32_t dtype = 0;
  int64_t num_elements = 0;
  const char* data = nullptr;
  size_t size = 0;
};

class REVERB_TF_EXPORT FacadePatternEngine {
 public:
  virtual ~FacadePatternEngine() = default;
  // Steps that must stay buffered for the configs.
  virtual int32_t max_history() const = 0;
  // The engine reads the value of this column (data conditions, TD errors).
  virtual bool watched(int32_t column) const = 0;
  // A complete step in which every one of `num_columns` columns has a value;
  // `values[c]` is read only for watched columns (may be default otherwise).
  virtual Status AppendStep(int64_t step_id,
                            const std::vector<ColumnBytes>& values,
                            std::vector<PatternApplication>* out) = 0;
  virtual Status EndEpisode(bool clear_buffers,
                            std::vector<PatternApplication>* out) = 0;
};

// Parses and validates serialized StructuredWriterConfig protos.
REVERB_TF_EXPORT Status NewPatternEngine(
    const std::vector<std::string>& serialized_configs, int32_t num_columns,
    std::unique_ptr<FacadePatternEngine>* engine);

}  // namespace reverb_tf::tf_facade

#endif  // REVERB_TF_CC_PATTERNS_PATTERN_FACADE_H_
