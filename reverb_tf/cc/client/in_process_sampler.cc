// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/client/in_process_sampler.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "reverb_tf/cc/client/sample_columns.h"
#include "reverb_tf/cc/platform/deadline.h"
#include "reverb_tf/cc/platform/status_macros.h"

namespace reverb_tf {

namespace {

// Chunks already uncompressed for this batch of samples (trajectories that
// overlap share them).
using ChunkCache = absl::flat_hash_map<const Chunk*, TensorPayload>;

// The rows of one uncompressed chunk of fixed-size elements, copied once:
// what nearly every column of a small item is. (The general path below
// copies the chunk into the cache and again into the column.)
absl::StatusOr<TensorPayload> RowsOfChunk(const ChunkSlice& slice,
                                          bool squeeze) {
  const Chunk& chunk = *slice.chunk;
  const absl::Span<const int64_t> shape = chunk.shape();
  if (shape.empty())
    return absl::InvalidArgumentError("cannot slice a scalar chunk");
  if (slice.offset < 0 || slice.length < 0 ||
      slice.offset + slice.length > shape[0]) {
    return absl::OutOfRangeError(
        absl::StrCat("rows [", slice.offset, ", ", slice.offset + slice.length,
                     ") outside a chunk of ", shape[0], " rows"));
  }
  int64_t row_bytes = DTypeSize(chunk.dtype());
  for (size_t d = 1; d < shape.size(); ++d) row_bytes *= shape[d];
  TensorPayload out;
  out.dtype = chunk.dtype();
  out.shape.assign(shape.begin() + (squeeze ? 1 : 0), shape.end());
  if (!squeeze) out.shape[0] = slice.length;
  ASSIGN_OR_RETURN(const ChunkBytes bytes, chunk.Read());
  out.data.assign(bytes.view().data() + slice.offset * row_bytes,
                  slice.length * row_bytes);
  out.uncompressed_size = static_cast<int64_t>(out.data.size());
  return out;
}

absl::StatusOr<TensorPayload> MaterializeColumn(const SlicedColumn& column,
                                                ChunkCache* cache) {
  if (column.slices().size() == 1 &&
      column.slices()[0].chunk->compression() == Compression::kNone &&
      column.slices()[0].chunk->dtype() != DType::kString) {
    return RowsOfChunk(column.slices()[0], column.squeeze());
  }
  return JoinSlices(
      column.slices().size(), column.squeeze(),
      [&](size_t i) -> absl::StatusOr<ChunkRows> {
        const ChunkSlice& slice = column.slices()[i];
        auto cached = cache->find(slice.chunk.get());
        if (cached == cache->end()) {
          ASSIGN_OR_RETURN(TensorPayload payload, slice.chunk->ToPayload());
          ASSIGN_OR_RETURN(payload, Decompress(std::move(payload)));
          cached = cache->emplace(slice.chunk.get(), std::move(payload)).first;
        }
        return ChunkRows{&cached->second, slice.offset, slice.length};
      });
}

absl::Status Materialize(const SampledItem& item, ChunkCache* cache,
                         Sample* sample) {
  sample->info = item;
  sample->columns.reserve(item.trajectory.size());
  sample->squeezed.reserve(item.trajectory.size());
  for (const SlicedColumn& column : item.trajectory) {
    absl::StatusOr<TensorPayload> payload = MaterializeColumn(column, cache);
    if (!payload.ok()) {
      // Which item (a chunk's bytes may be unreadable from the spill
      // directory).
      return absl::Status(
          payload.status().code(),
          absl::StrCat("item ", item.key, ": ", payload.status().message()));
    }
    sample->columns.push_back(*std::move(payload));
    sample->squeezed.push_back(column.squeeze());
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status MaterializeSample(const SampledItem& item, Sample* sample) {
  ChunkCache cache;
  return Materialize(item, &cache, sample);
}

InProcessSampler::InProcessSampler(std::shared_ptr<ClientStub> stub,
                                   std::string table,
                                   const SamplerOptions& options)
    : stub_(std::move(stub)), table_(std::move(table)), options_(options) {}

absl::StatusOr<std::vector<SampledItem>> InProcessSampler::SampleTable(
    int64_t max_items) {
  std::shared_ptr<LocalServer> local = stub_->Local();
  if (local == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "replay server ", stub_->address(), " unavailable: it stopped"));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<Table> table, local->FindTable(table_));
  int64_t batch = options_.flexible_batch_size > 0
                      ? options_.flexible_batch_size
                      : std::min<int64_t>(options_.max_in_flight, 1024);
  batch = std::min(batch, max_items);
  if (options_.max_samples >= 0)
    batch = std::min(batch, options_.max_samples - returned_);
  batch = std::max<int64_t>(1, std::min<int64_t>(batch, 1024));
  ASSIGN_OR_RETURN(std::vector<SampledItem> samples,
                   table->Sample(static_cast<int32_t>(batch),
                                 options_.rate_limiter_timeout, &cancel_));
  // Items these samples removed stay removed after a crash (as the
  // service does before it sends them).
  if (std::any_of(samples.begin(), samples.end(),
                  [](const SampledItem& s) { return s.removed; })) {
    RETURN_IF_ERROR(local->Commit());
  }
  return samples;
}

absl::Status InProcessSampler::NextItems(int64_t max_items,
                                         std::vector<SampledItem>* items) {
  items->clear();
  RETURN_IF_ERROR(error_);
  if (buffered() > 0) {
    return absl::FailedPreconditionError(
        "samples materialized by Next() are still buffered");
  }
  if (cancel_.IsCancelled())
    return error_ = absl::CancelledError("the sampler was cancelled");
  if (options_.max_samples >= 0 && returned_ >= options_.max_samples) {
    return absl::OutOfRangeError(absl::StrCat(
        "the sampler returned its max_samples=", options_.max_samples));
  }
  absl::StatusOr<std::vector<SampledItem>> samples =
      SampleTable(std::max<int64_t>(1, max_items));
  if (!samples.ok()) return error_ = samples.status();
  *items = *std::move(samples);
  returned_ += static_cast<int64_t>(items->size());
  return absl::OkStatus();
}

absl::Status InProcessSampler::Refill() {
  ASSIGN_OR_RETURN(std::vector<SampledItem> samples, SampleTable(INT64_MAX));
  ChunkCache cache;
  buffer_.resize(samples.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    RETURN_IF_ERROR(Materialize(samples[i], &cache, &buffer_[i]));
  }
  return absl::OkStatus();
}

absl::Status InProcessSampler::Next(Sample* sample) {
  RETURN_IF_ERROR(error_);
  if (cancel_.IsCancelled())
    return error_ = absl::CancelledError("the sampler was cancelled");
  if (options_.max_samples >= 0 && returned_ >= options_.max_samples) {
    return absl::OutOfRangeError(absl::StrCat(
        "the sampler returned its max_samples=", options_.max_samples));
  }
  if (next_in_buffer_ == buffer_.size()) {
    buffer_.clear();
    next_in_buffer_ = 0;
    if (absl::Status status = Refill(); !status.ok()) {
      buffer_.clear();
      return error_ = status;
    }
  }
  *sample = std::move(buffer_[next_in_buffer_++]);
  ++returned_;
  return absl::OkStatus();
}

bool InProcessSampler::TryNext(Sample* sample) {
  if (!error_.ok() || next_in_buffer_ == buffer_.size() ||
      (options_.max_samples >= 0 && returned_ >= options_.max_samples)) {
    return false;
  }
  *sample = std::move(buffer_[next_in_buffer_++]);
  ++returned_;
  return true;
}

}  // namespace reverb_tf
