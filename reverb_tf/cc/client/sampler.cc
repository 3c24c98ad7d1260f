// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/client/sampler.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "reverb_tf/cc/platform/deadline.h"
#include "reverb_tf/cc/platform/status_macros.h"
#include "reverb_tf/cc/wire/conversions.h"

namespace reverb_tf {
namespace {

// Rows [offset, offset + length) of a decompressed chunk.
struct ChunkRows {
  const TensorPayload* chunk;
  int64_t offset;
  int64_t length;
};

// Joins a column of `num_slices` slices, `slice(i)` being the i-th (its
// chunk need only stay valid until the next call): a single slice that
// covers its whole chunk is copied as is, others are cut out and
// concatenated. `squeeze` drops the time dimension.
absl::StatusOr<TensorPayload> JoinSlices(
    size_t num_slices, bool squeeze, absl::FunctionRef<absl::StatusOr<ChunkRows>(size_t)> slice) {
  std::vector<TensorPayload> parts;
  parts.reserve(num_slices);
  for (size_t i = 0; i < num_slices; ++i) {
    ASSIGN_OR_RETURN(const ChunkRows rows, slice(i));
    const TensorPayload& chunk = *rows.chunk;
    if (rows.offset == 0 && rows.length == chunk.shape[0] && num_slices == 1) {
      parts.push_back(chunk);
    } else {
      ASSIGN_OR_RETURN(TensorPayload part, SliceRows(chunk, rows.offset, rows.length));
      parts.push_back(std::move(part));
    }
  }
  TensorPayload result;
  if (parts.size() == 1) {
    result = std::move(parts[0]);
  } else {
    ASSIGN_OR_RETURN(result, ConcatRows(parts));
  }
  if (squeeze) result.shape.erase(result.shape.begin());
  return result;
}

// Materializes one column of a sampled item from the response's chunks.
// `decompressed` caches chunks already decompressed for this response.
absl::StatusOr<TensorPayload> AssembleColumn(
    const proto::Column& column,
    const absl::flat_hash_map<ChunkKey, proto::Chunk*>& chunks,
    absl::flat_hash_map<ChunkKey, TensorPayload>* decompressed) {
  return JoinSlices(
      column.slices_size(), column.squeeze(), [&](size_t i) -> absl::StatusOr<ChunkRows> {
        const proto::Slice& slice = column.slices(static_cast<int>(i));
        auto cached = decompressed->find(slice.chunk_key());
        if (cached == decompressed->end()) {
          auto it = chunks.find(slice.chunk_key());
          if (it == chunks.end()) {
            return absl::InternalError(absl::StrCat(
                "the server sent a slice of chunk ", slice.chunk_key(), " without the chunk"));
          }
          // Chunks in a response are used once per response: take the bytes.
          ASSIGN_OR_RETURN(TensorPayload payload,
                           PayloadFromProto(it->second->mutable_tensor()));
          ASSIGN_OR_RETURN(payload, Decompress(std::move(payload)));
          cached = decompressed->emplace(slice.chunk_key(), std::move(payload)).first;
        }
        return ChunkRows{&cached->second, slice.offset(), slice.length()};
      });
}

// A stream failure that another attempt may cure: the server went away
// (UNAVAILABLE) or ended the call while stopping (CANCELLED).
bool IsShardFailure(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsCancelled(status);
}

}  // namespace

absl::Status DecodeSampleResponse(proto::SampleResponse* response,
                                  std::vector<Sample>* samples) {
  absl::flat_hash_map<ChunkKey, proto::Chunk*> chunks;
  for (proto::Chunk& chunk : *response->mutable_chunks()) chunks[chunk.key()] = &chunk;
  absl::flat_hash_map<ChunkKey, TensorPayload> decompressed;
  for (const proto::SampledItem& item : response->items()) {
    Sample& sample = samples->emplace_back();
    sample.info.key = item.info().key();
    sample.info.probability = item.info().probability();
    sample.info.table_size = item.info().table_size();
    sample.info.priority = item.info().priority();
    sample.info.times_sampled = item.info().times_sampled();
    sample.info.rate_limited = item.info().rate_limited();
    sample.info.table_weight = item.info().table_weight();
    sample.info.min_probability = item.info().min_probability();
    sample.columns.reserve(item.columns_size());
    for (const proto::Column& column : item.columns()) {
      ASSIGN_OR_RETURN(TensorPayload payload, AssembleColumn(column, chunks, &decompressed));
      sample.columns.push_back(std::move(payload));
      sample.squeezed.push_back(column.squeeze());
    }
  }
  return absl::OkStatus();
}

int64_t SampleBudget::Take(int64_t wanted) {
  int64_t remaining = remaining_.load();
  while (true) {
    const int64_t share = std::max<int64_t>(1, (remaining + streams_ - 1) / streams_);
    const int64_t taken = std::min({wanted, share, std::max<int64_t>(remaining, 0)});
    if (taken == 0) return 0;
    if (remaining_.compare_exchange_weak(remaining, remaining - taken)) return taken;
  }
}

// ---------------------------------------------------------------- stream

struct SamplerStream {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<proto::SampleRequest, proto::SampleResponse>> rw;
};

StreamSampler::StreamSampler(std::shared_ptr<ClientStub> stub, std::string table,
                             const SamplerOptions& options,
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

absl::Status StreamSampler::Refill() {
  const int64_t per_stream = options_.max_samples_per_stream;
  while (true) {
    // Top the credits back up to max_in_flight ahead of what was consumed.
    int64_t target = returned_ + options_.max_in_flight;
    if (budget_ == nullptr && options_.max_samples >= 0) {
      target = std::min(target, options_.max_samples);
    }
    if (per_stream > 0) target = std::min(target, stream_start_ + per_stream);
    if (budget_ != nullptr && target > granted_) {
      target = granted_ + budget_->Take(target - granted_);
    }
    if (target > granted_) {
      proto::SampleRequest request;
      request.set_table(table_);
      request.set_num_samples(target - granted_);
      request.set_flexible_batch_size(
          options_.flexible_batch_size > 0
              ? options_.flexible_batch_size
              : static_cast<int32_t>(std::min<int64_t>(options_.max_in_flight, 1024)));
      request.set_rate_limiter_timeout_ms(TimeoutToMs(options_.rate_limiter_timeout));
      if (!stream_->rw->Write(request)) {
        absl::Status status = stub_->RpcStatus(stream_->rw->Finish());
        return status.ok() ? absl::UnavailableError("the sample stream closed") : status;
      }
      granted_ = target;
    }
    if (granted_ > received_) break;  // samples are on their way
    if (per_stream > 0 && returned_ - stream_start_ >= per_stream) {
      // This stream delivered its share: end it and go on with a new call.
      stream_->rw->WritesDone();
      if (absl::Status status = stub_->RpcStatus(stream_->rw->Finish()); !status.ok()) {
        return status;
      }
      OpenStream();
      continue;
    }
    return absl::OutOfRangeError("the sampler requested all the samples it may");
  }
  proto::SampleResponse response;
  if (!stream_->rw->Read(&response)) {
    absl::Status status = stub_->RpcStatus(stream_->rw->Finish());
    return status.ok() ? absl::UnavailableError("the server ended the sample stream") : status;
  }
  ordered_.store(response.ordered());
  if (absl::Status status = DecodeSampleResponse(&response, &buffer_); !status.ok()) {
    return Fail(status);
  }
  if (buffer_.empty()) return Fail(absl::InternalError("empty sample response"));
  received_ += static_cast<int64_t>(buffer_.size());
  return absl::OkStatus();
}

absl::Status StreamSampler::Next(Sample* sample) {
  RETURN_IF_ERROR(error_);
  if (budget_ == nullptr && options_.max_samples >= 0 && returned_ >= options_.max_samples) {
    return absl::OutOfRangeError(
        absl::StrCat("the sampler returned its max_samples=", options_.max_samples));
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
        [this] { return returned_ == 0 && buffer_.empty() && !cancelled_.load(); });
    if (!status.ok()) {
      if (error_.ok()) error_ = status;
      return status;
    }
  }
  *sample = std::move(buffer_[next_in_buffer_++]);
  ++returned_;
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
  return true;
}

// ------------------------------------------------------------ in-process

namespace {

// Chunks already uncompressed for this batch of samples (trajectories that
// overlap share them).
using ChunkCache = absl::flat_hash_map<const Chunk*, TensorPayload>;

// The rows of one uncompressed chunk of fixed-size elements, copied once:
// what nearly every column of a small item is. (The general path below
// copies the chunk into the cache and again into the column.)
absl::StatusOr<TensorPayload> RowsOfChunk(const ChunkSlice& slice, bool squeeze) {
  const Chunk& chunk = *slice.chunk;
  const absl::Span<const int64_t> shape = chunk.shape();
  if (shape.empty()) return absl::InvalidArgumentError("cannot slice a scalar chunk");
  if (slice.offset < 0 || slice.length < 0 || slice.offset + slice.length > shape[0]) {
    return absl::OutOfRangeError(absl::StrCat("rows [", slice.offset, ", ",
                                              slice.offset + slice.length,
                                              ") outside a chunk of ", shape[0], " rows"));
  }
  int64_t row_bytes = DTypeSize(chunk.dtype());
  for (size_t d = 1; d < shape.size(); ++d) row_bytes *= shape[d];
  TensorPayload out;
  out.dtype = chunk.dtype();
  out.shape.assign(shape.begin() + (squeeze ? 1 : 0), shape.end());
  if (!squeeze) out.shape[0] = slice.length;
  out.data.assign(chunk.data().data() + slice.offset * row_bytes, slice.length * row_bytes);
  out.uncompressed_size = static_cast<int64_t>(out.data.size());
  return out;
}

absl::StatusOr<TensorPayload> MaterializeColumn(const SlicedColumn& column, ChunkCache* cache) {
  if (column.slices().size() == 1 && column.slices()[0].chunk->compression() == Compression::kNone &&
      column.slices()[0].chunk->dtype() != DType::kString) {
    return RowsOfChunk(column.slices()[0], column.squeeze());
  }
  return JoinSlices(
      column.slices().size(), column.squeeze(), [&](size_t i) -> absl::StatusOr<ChunkRows> {
        const ChunkSlice& slice = column.slices()[i];
        auto cached = cache->find(slice.chunk.get());
        if (cached == cache->end()) {
          ASSIGN_OR_RETURN(TensorPayload payload, Decompress(slice.chunk->ToPayload()));
          cached = cache->emplace(slice.chunk.get(), std::move(payload)).first;
        }
        return ChunkRows{&cached->second, slice.offset, slice.length};
      });
}

absl::Status Materialize(const SampledItem& item, ChunkCache* cache, Sample* sample) {
  sample->info.key = item.key;
  sample->info.probability = item.probability;
  sample->info.table_size = item.table_size;
  sample->info.priority = item.priority;
  sample->info.times_sampled = item.times_sampled;
  sample->info.rate_limited = item.rate_limited;
  sample->info.table_weight = item.table_weight;
  sample->info.min_probability = item.min_probability;
  sample->columns.reserve(item.trajectory.size());
  sample->squeezed.reserve(item.trajectory.size());
  for (const SlicedColumn& column : item.trajectory) {
    ASSIGN_OR_RETURN(TensorPayload payload, MaterializeColumn(column, cache));
    sample->columns.push_back(std::move(payload));
    sample->squeezed.push_back(column.squeeze());
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status MaterializeSample(const SampledItem& item, Sample* sample) {
  ChunkCache cache;
  return Materialize(item, &cache, sample);
}

InProcessSampler::InProcessSampler(std::shared_ptr<ClientStub> stub, std::string table,
                                   const SamplerOptions& options)
    : stub_(std::move(stub)), table_(std::move(table)), options_(options) {}

absl::StatusOr<std::vector<SampledItem>> InProcessSampler::SampleTable(int64_t max_items) {
  std::shared_ptr<LocalServer> local = stub_->Local();
  if (local == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("replay server ", stub_->address(), " unavailable: it stopped"));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<Table> table, local->FindTable(table_));
  int64_t batch = options_.flexible_batch_size > 0
                      ? options_.flexible_batch_size
                      : std::min<int64_t>(options_.max_in_flight, 1024);
  batch = std::min(batch, max_items);
  if (options_.max_samples >= 0) batch = std::min(batch, options_.max_samples - returned_);
  batch = std::max<int64_t>(1, std::min<int64_t>(batch, 1024));
  ASSIGN_OR_RETURN(std::vector<SampledItem> samples,
                   table->Sample(static_cast<int32_t>(batch), options_.rate_limiter_timeout,
                                 &cancel_));
  // Items these samples removed stay removed after a crash (as the
  // service does before it sends them).
  if (std::any_of(samples.begin(), samples.end(),
                  [](const SampledItem& s) { return s.removed; })) {
    RETURN_IF_ERROR(local->Commit());
  }
  return samples;
}

absl::Status InProcessSampler::NextItems(int64_t max_items, std::vector<SampledItem>* items) {
  items->clear();
  RETURN_IF_ERROR(error_);
  if (buffered() > 0) {
    return absl::FailedPreconditionError("samples materialized by Next() are still buffered");
  }
  if (cancel_.IsCancelled()) return error_ = absl::CancelledError("the sampler was cancelled");
  if (options_.max_samples >= 0 && returned_ >= options_.max_samples) {
    return absl::OutOfRangeError(
        absl::StrCat("the sampler returned its max_samples=", options_.max_samples));
  }
  absl::StatusOr<std::vector<SampledItem>> samples = SampleTable(std::max<int64_t>(1, max_items));
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
  if (cancel_.IsCancelled()) return error_ = absl::CancelledError("the sampler was cancelled");
  if (options_.max_samples >= 0 && returned_ >= options_.max_samples) {
    return absl::OutOfRangeError(
        absl::StrCat("the sampler returned its max_samples=", options_.max_samples));
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

// --------------------------------------------------------------- sharded

ShardedSampler::ShardedSampler(std::vector<std::shared_ptr<ClientStub>> shards,
                               std::string table, const SamplerOptions& options,
                               const std::vector<ShardTable>& tables)
    : table_(std::move(table)),
      stream_options_(options),
      max_samples_(options.max_samples),
      reconnect_timeout_(options.reconnect_timeout),
      by_quota_(options.max_samples >= 0),
      rng_(std::random_device()()) {
  stream_options_.max_samples = -1;  // budgets count instead
  const int n = static_cast<int>(shards.size());
  const int total = options.num_streams < 1 ? n : std::max(options.num_streams, n);
  absl::MutexLock lock(&mu_);
  shards_.resize(n);
  for (int i = 0; i < n; ++i) {
    shards_[i].stub = std::move(shards[i]);
    shards_[i].streams_wanted = total / n + (i < total % n ? 1 : 0);
    if (i < static_cast<int>(tables.size())) {
      shards_[i].weight = tables[i].weight;
      shards_[i].size = tables[i].size;
      shards_[i].min_item_weight = tables[i].min_item_weight;
    }
  }
  if (by_quota_) {
    // A multinomial draw of max_samples over the weights, one binomial at a
    // time; without any weight, the shards alike.
    double left_weight = 0;
    for (int i = 0; i < n; ++i) left_weight += std::max(shards_[i].weight, 0.0);
    const bool alike = !(left_weight > 0);
    if (alike) left_weight = n;
    int64_t left = max_samples_;
    for (int i = 0; i < n; ++i) {
      const double w = alike ? 1.0 : std::max(shards_[i].weight, 0.0);
      const double p = left_weight > 0 ? std::min(1.0, w / left_weight) : 0.0;
      const int64_t quota =
          i == n - 1 ? left : std::binomial_distribution<int64_t>(left, p)(rng_);
      shards_[i].quota = quota;
      shards_[i].budget = std::make_shared<SampleBudget>(quota, shards_[i].streams_wanted);
      left -= quota;
      left_weight -= w;
    }
  }
  for (int i = 0; i < n; ++i) {
    if (by_quota_ && shards_[i].quota == 0) continue;  // owes nothing
    StartWorkerLocked(i);
  }
}

ShardedSampler::~ShardedSampler() {
  std::vector<std::unique_ptr<Worker>> workers;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (auto& worker : workers_) {
      if (worker->sampler != nullptr) worker->sampler->Cancel();
    }
    cv_.SignalAll();
    workers = std::move(workers_);
  }
  for (auto& worker : workers) worker->thread.join();
}

void ShardedSampler::StartWorkerLocked(int shard) {
  auto worker = std::make_unique<Worker>();
  worker->shard = shard;
  ++shards_[shard].streams_running;
  Worker* raw = worker.get();
  workers_.push_back(std::move(worker));
  raw->thread = std::thread([this, raw] { WorkerLoop(raw); });
}

void ShardedSampler::WorkerLoop(Worker* worker) {
  absl::Duration backoff = absl::Milliseconds(100);
  std::shared_ptr<ClientStub> stub;
  std::shared_ptr<SampleBudget> budget;
  {
    absl::MutexLock lock(&mu_);
    stub = shards_[worker->shard].stub;
    budget = shards_[worker->shard].budget;
  }
  while (true) {
    // Opening a stream may wait for a connection: not under the lock.
    auto sampler = std::make_unique<StreamSampler>(stub, table_, stream_options_, budget);
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      if (cancelled_) sampler->Cancel();
      std::swap(worker->sampler, sampler);
    }
    sampler.reset();  // the failed one, outside the lock
    absl::Status status;
    while (true) {
      Sample sample;
      // Only this thread replaces worker->sampler, so it stays alive here.
      status = worker->sampler->Next(&sample);
      if (!status.ok()) break;
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      Shard& shard = shards_[worker->shard];
      backoff = absl::Milliseconds(100);
      shard.weight = sample.info.table_weight;
      shard.size = sample.info.table_size;
      shard.min_item_weight = sample.info.min_probability * sample.info.table_weight;
      shard.up = true;
      shard.ever_up = true;
      first_delivery_ = std::min(first_delivery_, absl::Now());
      shard.failed = false;
      shard.stalled = false;
      if (worker->sampler->ordered()) {
        ordered_ = true;
      } else {
        while (shard.streams_running < shard.streams_wanted) StartWorkerLocked(worker->shard);
      }
      shard.queue.push_back(std::move(sample));
      cv_.SignalAll();
      const size_t capacity =
          static_cast<size_t>(stream_options_.max_in_flight) * shard.streams_running;
      auto room = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || shards_[worker->shard].queue.size() < capacity;
      };
      mu_.Await(absl::Condition(&room));
      if (stopping_) return;
    }
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    if (absl::IsOutOfRange(status)) {  // the budget is spent
      ++workers_finished_;
      cv_.SignalAll();
      return;
    }
    if (!IsShardFailure(status) || cancelled_) {
      if (fatal_.ok()) fatal_ = status;
      cv_.SignalAll();
      return;
    }
    // The shard went away: the others go on while this stream is reopened.
    Shard& shard = shards_[worker->shard];
    shard.up = false;
    if (!shard.failed) {
      shard.failed = true;
      shard.failed_since = absl::Now();
    }
    shard.last_error = status;
    cv_.SignalAll();
    auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
    mu_.AwaitWithTimeout(absl::Condition(&stop), backoff);
    if (stopping_) return;
    backoff = std::min(backoff * 2, absl::Seconds(2));
  }
}

int ShardedSampler::ChooseShardLocked(bool queued_only) {
  double total = 0;
  int candidates = 0;
  auto eligible = [&](const Shard& shard) {
    return queued_only ? !shard.queue.empty() : shard.up && !shard.stalled;
  };
  for (const Shard& shard : shards_) {
    if (!eligible(shard)) continue;
    ++candidates;
    total += std::max(shard.weight, 0.0);
  }
  if (candidates == 0) return -1;
  if (!(total > 0)) {
    // No weights (e.g. every priority 0): the candidates alike.
    int pick = static_cast<int>(std::uniform_int_distribution<int>(0, candidates - 1)(rng_));
    for (size_t i = 0; i < shards_.size(); ++i) {
      if (eligible(shards_[i]) && pick-- == 0) return static_cast<int>(i);
    }
  }
  double target = std::uniform_real_distribution<double>(0, total)(rng_);
  int last = -1;
  for (size_t i = 0; i < shards_.size(); ++i) {
    if (!eligible(shards_[i])) continue;
    last = static_cast<int>(i);
    target -= std::max(shards_[i].weight, 0.0);
    if (target < 0) return last;
  }
  return last;  // rounding left target at 0
}

void ShardedSampler::TakeLocked(int shard, Sample* sample) {
  *sample = std::move(shards_[shard].queue.front());
  shards_[shard].queue.pop_front();
  MergeInfoLocked(shard, &sample->info);
  ++shards_[shard].taken;
  ++returned_;
  quota_choice_ = -1;
  cv_.SignalAll();  // a worker may wait for room
}

void ShardedSampler::MergeInfoLocked(int shard, SampleInfo* info) {
  if (shards_.size() < 2 || ordered_) return;
  // The item's shard as it was when the item was chosen; the others as
  // they last reported.
  double total = std::max(info->table_weight, 0.0);
  int64_t size = info->table_size;
  double min_item_weight = info->min_probability * info->table_weight;
  for (size_t i = 0; i < shards_.size(); ++i) {
    if (static_cast<int>(i) == shard) continue;
    const Shard& other = shards_[i];
    total += std::max(other.weight, 0.0);
    size += other.size;
    min_item_weight = SmallerItemWeight(min_item_weight, other.min_item_weight);
  }
  if (!(total > 0)) return;  // nothing can be chosen: nothing to scale by
  info->probability *= info->table_weight / total;
  info->min_probability = min_item_weight / total;
  info->table_weight = total;
  info->table_size = size;
}

absl::Status ShardedSampler::AllFailedLocked() {
  absl::Time last_failure = absl::InfinitePast();
  for (const Shard& shard : shards_) {
    if (!shard.failed || !shard.queue.empty()) return absl::OkStatus();
    last_failure = std::max(last_failure, shard.failed_since);
  }
  if (absl::Now() - last_failure < reconnect_timeout_) return absl::OkStatus();
  std::vector<std::string> reasons;
  for (const Shard& shard : shards_) reasons.push_back(std::string(shard.last_error.message()));
  return absl::UnavailableError(absl::StrCat(
      "no shard of table '", table_, "' could be reached for ",
      absl::FormatDuration(reconnect_timeout_), ": ", absl::StrJoin(reasons, "; ")));
}

bool ShardedSampler::AwaitingFirstDeliveriesLocked() {
  if (!awaiting_first_deliveries_) return false;
  const bool grace_over = absl::Now() - first_delivery_ >= kStallGrace;
  bool awaiting = false;
  for (Shard& shard : shards_) {
    if (shard.ever_up || shard.failed) continue;
    if (grace_over) {
      shard.stalled = true;
    } else {
      awaiting = true;
    }
  }
  awaiting_first_deliveries_ = awaiting;
  return awaiting;
}

absl::Status ShardedSampler::Next(Sample* sample) {
  absl::MutexLock lock(&mu_);
  while (true) {
    if (cancelled_) return absl::CancelledError("the sampler was cancelled");
    RETURN_IF_ERROR(fatal_);
    if (max_samples_ >= 0 && returned_ >= max_samples_) {
      return absl::OutOfRangeError(
          absl::StrCat("the sampler returned its max_samples=", max_samples_));
    }
    if (by_quota_) return NextByQuotaLocked(sample);
    if (AwaitingFirstDeliveriesLocked()) {
      // Until every shard delivered (or the grace since the first passed).
      cv_.WaitWithTimeout(&mu_, first_delivery_ == absl::InfiniteFuture()
                                    ? absl::Milliseconds(100)
                                    : first_delivery_ + kStallGrace - absl::Now());
      continue;
    }
    int chosen = ChooseShardLocked(/*queued_only=*/false);
    if (chosen >= 0 && shards_[chosen].queue.empty()) {
      auto arrived = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return cancelled_ || !fatal_.ok() || !shards_[chosen].queue.empty() ||
               !shards_[chosen].up;
      };
      if (!mu_.AwaitWithTimeout(absl::Condition(&arrived), kStallGrace)) {
        shards_[chosen].stalled = true;
      }
      if (shards_[chosen].queue.empty()) chosen = ChooseShardLocked(/*queued_only=*/true);
    } else if (chosen < 0) {
      // No shard is up: what failed shards delivered before is still good.
      chosen = ChooseShardLocked(/*queued_only=*/true);
    }
    if (chosen >= 0 && !shards_[chosen].queue.empty()) {
      TakeLocked(chosen, sample);
      return absl::OkStatus();
    }
    if (chosen >= 0) continue;  // the chosen shard changed state: choose again
    if (workers_finished_ == static_cast<int>(workers_.size())) {
      return absl::OutOfRangeError("the sampler requested all the samples it may");
    }
    RETURN_IF_ERROR(AllFailedLocked());
    cv_.WaitWithTimeout(&mu_, absl::Milliseconds(100));
  }
}

int ShardedSampler::QuotaShardLocked() {
  if (quota_choice_ >= 0) return quota_choice_;
  int64_t owed = 0;
  for (const Shard& shard : shards_) owed += shard.quota - shard.taken;
  if (owed <= 0) return -1;
  int64_t target = std::uniform_int_distribution<int64_t>(0, owed - 1)(rng_);
  for (size_t i = 0; i < shards_.size(); ++i) {
    target -= shards_[i].quota - shards_[i].taken;
    if (target < 0) return quota_choice_ = static_cast<int>(i);
  }
  return -1;
}

absl::Status ShardedSampler::NextByQuotaLocked(Sample* sample) {
  const int chosen = QuotaShardLocked();
  if (chosen < 0) return absl::OutOfRangeError("the sampler returned all its samples");
  Shard& shard = shards_[chosen];
  while (shard.queue.empty()) {
    if (cancelled_) return absl::CancelledError("the sampler was cancelled");
    RETURN_IF_ERROR(fatal_);
    // The quota can only come from this shard: wait for it to come back,
    // up to reconnect_timeout.
    if (shard.failed && absl::Now() - shard.failed_since >= reconnect_timeout_) {
      return absl::UnavailableError(absl::StrCat(
          "shard ", shard.stub->address(), " of table '", table_, "' could not be reached for ",
          absl::FormatDuration(reconnect_timeout_), ": ", shard.last_error.message()));
    }
    cv_.WaitWithTimeout(&mu_, absl::Milliseconds(100));
  }
  TakeLocked(chosen, sample);
  return absl::OkStatus();
}

bool ShardedSampler::TryNext(Sample* sample) {
  absl::MutexLock lock(&mu_);
  if (cancelled_ || !fatal_.ok() || (max_samples_ >= 0 && returned_ >= max_samples_)) {
    return false;
  }
  // Only the shard the weights (or quotas) choose, so that a batch keeps
  // the proportions.
  const int chosen = by_quota_ ? QuotaShardLocked() : ChooseShardLocked(/*queued_only=*/false);
  if (chosen < 0 || shards_[chosen].queue.empty()) return false;
  TakeLocked(chosen, sample);
  return true;
}

void ShardedSampler::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  for (auto& worker : workers_) {
    if (worker->sampler != nullptr) worker->sampler->Cancel();
  }
  cv_.SignalAll();
}

}  // namespace reverb_tf
