// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/client/stream_sampler.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "reverb_tf/cc/client/sample_columns.h"
#include "reverb_tf/cc/platform/deadline.h"
#include "reverb_tf/cc/platform/status_macros.h"
#include "reverb_tf/cc/wire/conversions.h"

namespace reverb_tf {
namespace {

// A chunk of a response and how many of the response's slices are still to
// use it.
struct ResponseChunk {
  proto::Chunk* chunk;
  int uses = 0;
};

// Materializes one column of a sampled item from the response's chunks.
// `decompressed` caches chunks already decompressed for this response.
absl::StatusOr<TensorPayload> AssembleColumn(
    const proto::Column& column,
    absl::flat_hash_map<ChunkKey, ResponseChunk>& chunks,
    absl::flat_hash_map<ChunkKey, TensorPayload>* decompressed) {
  return JoinSlices(
      column.slices_size(), column.squeeze(),
      [&](size_t i) -> absl::StatusOr<ChunkRows> {
        const proto::Slice& slice = column.slices(static_cast<int>(i));
        auto it = chunks.find(slice.chunk_key());
        if (it == chunks.end()) {
          return absl::InternalError(
              absl::StrCat("the server sent a slice of chunk ",
                           slice.chunk_key(), " without the chunk"));
        }
        auto cached = decompressed->find(slice.chunk_key());
        if (cached == decompressed->end()) {
          // Chunks in a response are used once per response: take the bytes.
          ASSIGN_OR_RETURN(
              TensorPayload payload,
              PayloadFromProto(it->second.chunk->mutable_tensor()));
          ASSIGN_OR_RETURN(payload, Decompress(std::move(payload)));
          cached = decompressed->emplace(slice.chunk_key(), std::move(payload))
                       .first;
        }
        // The chunk's last slice in the response may take its bytes (the
        // common case: a chunk sent for one item's column).
        const bool last = --it->second.uses == 0;
        return ChunkRows{&cached->second, slice.offset(), slice.length(),
                         last ? &cached->second : nullptr};
      });
}

}  // namespace

absl::Status DecodeSampleResponse(proto::SampleResponse* response,
                                  std::vector<Sample>* samples) {
  absl::flat_hash_map<ChunkKey, ResponseChunk> chunks;
  chunks.reserve(response->chunks_size());
  for (proto::Chunk& chunk : *response->mutable_chunks())
    chunks[chunk.key()] = ResponseChunk{&chunk};
  for (const proto::SampledItem& item : response->items()) {
    for (const proto::Column& column : item.columns()) {
      for (const proto::Slice& slice : column.slices()) {
        auto it = chunks.find(slice.chunk_key());
        if (it != chunks.end()) ++it->second.uses;
      }
    }
  }
  absl::flat_hash_map<ChunkKey, TensorPayload> decompressed;
  for (const proto::SampledItem& item : response->items()) {
    Sample& sample = samples->emplace_back();
    sample.info = SampleInfoFromProto(item.info());
    sample.columns.reserve(item.columns_size());
    for (const proto::Column& column : item.columns()) {
      ASSIGN_OR_RETURN(TensorPayload payload,
                       AssembleColumn(column, chunks, &decompressed));
      sample.columns.push_back(std::move(payload));
      sample.squeezed.push_back(column.squeeze());
    }
  }
  return absl::OkStatus();
}

int64_t SampleBudget::Take(int64_t wanted) {
  int64_t remaining = remaining_.load();
  while (true) {
    const int64_t share =
        std::max<int64_t>(1, (remaining + streams_ - 1) / streams_);
    const int64_t taken =
        std::min({wanted, share, std::max<int64_t>(remaining, 0)});
    if (taken == 0) return 0;
    if (remaining_.compare_exchange_weak(remaining, remaining - taken))
      return taken;
  }
}

struct SamplerStream {
  grpc::ClientContext context;
  std::unique_ptr<
      grpc::ClientReaderWriter<proto::SampleRequest, proto::SampleResponse>>
      rw;
};

StreamSampler::StreamSampler(std::shared_ptr<ClientStub> stub,
                             std::string table, const SamplerOptions& options,
                             std::shared_ptr<SampleBudget> budget)
    : stub_(std::move(stub)),
      table_(std::move(table)),
      options_(options),
      budget_(std::move(budget)) {
  OpenStream();
}

void StreamSampler::OpenStream() {
  auto stream = std::make_unique<SamplerStream>();
  stub_->Prepare(&stream->context);
  stream->rw = stub_->stub()->SampleStream(&stream->context);
  if (budget_ != nullptr) budget_->Give(granted_ - received_);
  granted_ = received_;
  stream_start_ = returned_;
  absl::MutexLock lock(&stream_mu_);
  stream_ = std::move(stream);
  if (cancelled_.load()) stream_->context.TryCancel();
}

StreamSampler::~StreamSampler() {
  if (budget_ != nullptr) budget_->Give(granted_ - received_);
  if (!error_.ok()) return;  // the stream is already finished
  if (returned_ == granted_ && next_in_buffer_ == buffer_.size()) {
    stream_->rw->WritesDone();  // nothing outstanding: end it politely
  } else {
    stream_->context.TryCancel();  // samples in flight nobody will read
  }
  stream_->rw->Finish().ok();  // the outcome no longer matters
}

void StreamSampler::Cancel() {
  absl::MutexLock lock(&stream_mu_);
  cancelled_.store(true);
  if (stream_ != nullptr) stream_->context.TryCancel();
}

absl::Status StreamSampler::Fail(absl::Status status) {
  error_ = status;
  stream_->context.TryCancel();
  stream_->rw->Finish().ok();
  return status;
}

bool StreamSampler::TopUp() {
  // Top the credits back up to max_in_flight ahead of what was consumed.
  int64_t target = returned_ + options_.max_in_flight;
  if (budget_ == nullptr && options_.max_samples >= 0) {
    target = std::min(target, options_.max_samples);
  }
  const int64_t per_stream = options_.max_samples_per_stream;
  if (per_stream > 0) target = std::min(target, stream_start_ + per_stream);
  if (budget_ != nullptr && target > granted_) {
    target = granted_ + budget_->Take(target - granted_);
  }
  if (target <= granted_) return true;
  proto::SampleRequest request;
  request.set_table(table_);
  request.set_num_samples(target - granted_);
  // Half the window per response by default, so that one response is
  // still on its way while the consumer reads the other.
  request.set_flexible_batch_size(
      options_.flexible_batch_size > 0
          ? options_.flexible_batch_size
          : static_cast<int32_t>(
                std::clamp<int64_t>(options_.max_in_flight / 2, 1, 1024)));
  request.set_rate_limiter_timeout_ms(
      TimeoutToMs(options_.rate_limiter_timeout));
  if (!stream_->rw->Write(request)) {
    if (budget_ != nullptr) budget_->Give(target - granted_);
    return false;
  }
  granted_ = target;
  return true;
}

void StreamSampler::TopUpAtLowWater() {
  // Half the window consumed: ask for more now rather than when the buffer
  // runs dry, so that the next samples are on their way before they are
  // needed (a learner then never waits a whole round trip for a batch).
  // A failed write is left to Refill(), which reads the stream's status.
  if (error_.ok() && granted_ - returned_ <= options_.max_in_flight / 2) {
    TopUp();
  }
}

absl::Status StreamSampler::Refill() {
  const int64_t per_stream = options_.max_samples_per_stream;
  while (true) {
    // A stream that no longer takes requests may still bring the samples
    // granted before: they are read first (Finish() waits for every message
    // to be read, and they are the caller's).
    if (!TopUp() && granted_ <= received_) {
      absl::Status status = stub_->RpcStatus(stream_->rw->Finish());
      return status.ok() ? absl::UnavailableError("the sample stream closed")
                         : status;
    }
    if (granted_ > received_) break;  // samples are on their way
    if (per_stream > 0 && returned_ - stream_start_ >= per_stream) {
      // This stream delivered its share: end it and go on with a new call.
      stream_->rw->WritesDone();
      if (absl::Status status = stub_->RpcStatus(stream_->rw->Finish());
          !status.ok()) {
        return status;
      }
      OpenStream();
      continue;
    }
    return absl::OutOfRangeError(
        "the sampler requested all the samples it may");
  }
  // The response's many small messages (chunks, items, their columns and
  // slices) come from an arena that is reset for the next one: no malloc and
  // free each. Decoding moves the chunk bytes out of it.
  arena_.Reset();
  auto* response =
      google::protobuf::Arena::CreateMessage<proto::SampleResponse>(&arena_);
  if (!stream_->rw->Read(response)) {
    absl::Status status = stub_->RpcStatus(stream_->rw->Finish());
    return status.ok()
               ? absl::UnavailableError("the server ended the sample stream")
               : status;
  }
  ordered_.store(response->ordered());
  if (absl::Status status = DecodeSampleResponse(response, &buffer_);
      !status.ok()) {
    return Fail(status);
  }
  if (buffer_.empty())
    return Fail(absl::InternalError("empty sample response"));
  received_ += static_cast<int64_t>(buffer_.size());
  return absl::OkStatus();
}

absl::Status StreamSampler::Next(Sample* sample) {
  RETURN_IF_ERROR(error_);
  if (budget_ == nullptr && options_.max_samples >= 0 &&
      returned_ >= options_.max_samples) {
    return absl::OutOfRangeError(absl::StrCat(
        "the sampler returned its max_samples=", options_.max_samples));
  }
  if (next_in_buffer_ == buffer_.size()) {
    buffer_.clear();
    next_in_buffer_ = 0;
    // Only a server not reachable yet is retried: once samples flowed, a
    // broken stream is the caller's to see (the samples in flight are gone).
    absl::Status status = RetryUnavailable(
        [this](int attempt) {
          if (attempt > 0) OpenStream();
          return Refill();
        },
        [this] {
          return returned_ == 0 && buffer_.empty() && !cancelled_.load();
        });
    if (!status.ok()) {
      if (error_.ok()) error_ = status;
      return status;
    }
  }
  *sample = std::move(buffer_[next_in_buffer_++]);
  ++returned_;
  TopUpAtLowWater();
  return absl::OkStatus();
}

bool StreamSampler::TryNext(Sample* sample) {
  if (!error_.ok() || next_in_buffer_ == buffer_.size() ||
      (budget_ == nullptr && options_.max_samples >= 0 &&
       returned_ >= options_.max_samples)) {
    return false;
  }
  *sample = std::move(buffer_[next_in_buffer_++]);
  ++returned_;
  TopUpAtLowWater();
  return true;
}

}  // namespace reverb_tf
