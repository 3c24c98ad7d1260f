// SPDX-License-Identifier: Apache-2.0
// Batches of samples stacked column by column: what the TF-free readers
// (reverb_tf.NumpyDataset and its JAX and PyTorch adapters) receive, so that
// a batch of B items costs one call and no per-item work in Python.
#ifndef REVERB_TF_CC_CLIENT_SAMPLE_BATCH_H_
#define REVERB_TF_CC_CLIENT_SAMPLE_BATCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "reverb_tf/cc/client/client.h"
#include "reverb_tf/cc/dtype.h"
#include "reverb_tf/cc/platform/export.h"
#include "reverb_tf/cc/tensor_payload.h"

namespace reverb_tf {

// Column i of every sample of a batch, one after the other.
struct REVERB_TF_EXPORT StackedColumn {
  DType dtype = DType::kInvalid;
  // [batch size, the samples' shape of this column...].
  Shape shape;
  // The column is one step without its time dimension in every sample.
  bool squeezed = false;
  // Fixed-size dtypes: the row-major bytes of the whole batch.
  std::string data;
  // kString: every element of the batch in row-major order.
  std::vector<std::string> strings;
};

struct REVERB_TF_EXPORT StackedBatch {
  std::vector<SampleInfo> infos;
  std::vector<StackedColumn> columns;

  int64_t size() const { return static_cast<int64_t>(infos.size()); }
};

// Blocks for up to `batch_size` samples of `sampler` and stacks them into
// `batch` (cleared first); each sample is copied into the batch as it
// arrives. Every sample must have the first one's columns, dtypes and shapes
// (INVALID_ARGUMENT naming the column and both shapes otherwise), as
// tf.data's batch() requires.
//
// Returns OK with a full batch. If the sampler ends (OUT_OF_RANGE: its
// max_samples) or fails (DEADLINE_EXCEEDED, CANCELLED, NOT_FOUND, ...)
// before the batch is full, returns that status with the samples that came
// before it stacked in `batch` (possibly none): they were taken from the
// table, so the caller should hand them on (a queue would lose them).
// INVALID_ARGUMENT for samples that cannot be stacked, with `batch`
// unspecified.
//
// Thread safety: as Sampler::Next(): one caller per sampler at a time.
REVERB_TF_EXPORT absl::Status NextStackedBatch(Sampler* sampler,
                                               int64_t batch_size,
                                               StackedBatch* batch);

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_CLIENT_SAMPLE_BATCH_H_
