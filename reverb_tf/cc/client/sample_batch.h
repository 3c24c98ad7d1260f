// SPDX-License-Identifier: Apache-2.0
// Batches of samples stacked column by column: what the TF-free readers
// (reverb_tf.NumpyDataset and its JAX and PyTorch adapters) receive, so that
// a batch of B items costs one call and no per-item work in Python.
#ifndef REVERB_TF_CC_CLIENT_SAMPLE_BATCH_H_
#define REVERB_TF_CC_CLIENT_SAMPLE_BATCH_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "reverb_tf/cc/client/client.h"
#include "reverb_tf/cc/dtype.h"
#include "reverb_tf/cc/platform/export.h"
#include "reverb_tf/cc/tensor_payload.h"

namespace reverb_tf {

// The bytes of a column of fixed-size elements: room for the whole batch,
// taken once and not zero-filled, since every byte kept is written (rows
// on the disk tier are read straight into it, where a std::string would
// first be filled with zeros: a third more memory traffic per row).
class REVERB_TF_EXPORT BatchBytes {
 public:
  // Room for `capacity` bytes, none kept yet.
  void Reset(size_t capacity) {
    block_.reset(new char[capacity]);
    size_ = 0;
    capacity_ = capacity;
  }
  // The next `n` bytes, which the caller must fill: where they start. At
  // most the room left.
  char* Grow(size_t n) {
    char* at = block_.get() + size_;
    size_ += n;
    return at;
  }
  void Append(absl::string_view bytes) {
    if (!bytes.empty())
      std::memcpy(Grow(bytes.size()), bytes.data(), bytes.size());
  }
  // Keeps only the first `size` bytes (at most size()).
  void Truncate(size_t size) { size_ = size; }

  const char* data() const { return block_.get(); }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  // The block, for an owner that outlives this one (the array handed to
  // Python); leaves this empty.
  std::unique_ptr<char[]> Release() {
    size_ = capacity_ = 0;
    return std::move(block_);
  }

 private:
  std::unique_ptr<char[]> block_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

// Column i of every sample of a batch, one after the other.
struct REVERB_TF_EXPORT StackedColumn {
  DType dtype = DType::kInvalid;
  // [batch size, the samples' shape of this column...].
  Shape shape;
  // The column is one step without its time dimension in every sample.
  bool squeezed = false;
  // Fixed-size dtypes: the row-major bytes of the whole batch.
  BatchBytes data;
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
