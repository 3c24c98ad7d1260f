#include "reverb_tf/cc/client/client.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "reverb_tf/cc/client/client_stub.h"
#include "reverb_tf/cc/platform/deadline.h"
#include "reverb_tf/cc/platform/status_macros.h"
#include "reverb_tf/cc/wire/conversions.h"

namespace reverb_tf {
namespace {

// Materializes one column of a sampled item from the response's chunks.
// `decompressed` caches chunks already decompressed for this response.
absl::StatusOr<TensorPayload> AssembleColumn(
    const proto::Column& column,
    const absl::flat_hash_map<ChunkKey, proto::Chunk*>& chunks,
    absl::flat_hash_map<ChunkKey, TensorPayload>* decompressed) {
  std::vector<TensorPayload> parts;
  parts.reserve(column.slices_size());
  for (const proto::Slice& slice : column.slices()) {
    auto cached = decompressed->find(slice.chunk_key());
    if (cached == decompressed->end()) {
      auto it = chunks.find(slice.chunk_key());
      if (it == chunks.end()) {
        return absl::InternalError(absl::StrCat(
            "the server sent a slice of chunk ", slice.chunk_key(),
            " without the chunk"));
      }
      // Chunks in a response are used once per response: take the bytes.
      ASSIGN_OR_RETURN(TensorPayload payload,
                       PayloadFromProto(it->second->mutable_tensor()));
      ASSIGN_OR_RETURN(payload, Decompress(std::move(payload)));
      cached = decompressed->emplace(slice.chunk_key(), std::move(payload)).first;
    }
    const TensorPayload& chunk = cached->second;
    if (slice.offset() == 0 && slice.length() == chunk.shape[0] &&
        column.slices_size() == 1) {
      parts.push_back(chunk);
    } else {
      ASSIGN_OR_RETURN(TensorPayload part,
                       SliceRows(chunk, slice.offset(), slice.length()));
      parts.push_back(std::move(part));
    }
  }
  TensorPayload result;
  if (parts.size() == 1) {
    result = std::move(parts[0]);
  } else {
    ASSIGN_OR_RETURN(result, ConcatRows(parts));
  }
  if (column.squeeze()) result.shape.erase(result.shape.begin());
  return result;
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
    sample.columns.reserve(item.columns_size());
    for (const proto::Column& column : item.columns()) {
      ASSIGN_OR_RETURN(TensorPayload payload, AssembleColumn(column, chunks, &decompressed));
      sample.columns.push_back(std::move(payload));
      sample.squeezed.push_back(column.squeeze());
    }
  }
  return absl::OkStatus();
}

absl::Status RetryUnavailable(absl::FunctionRef<absl::Status(int)> attempt,
                              absl::FunctionRef<bool()> may_retry) {
  constexpr int kMaxAttempts = 5;
  absl::Duration backoff = absl::Milliseconds(100);
  absl::Status status = attempt(0);
  for (int i = 1; i < kMaxAttempts && status.code() == absl::StatusCode::kUnavailable &&
                  may_retry();
       ++i) {
    absl::SleepFor(backoff);
    backoff *= 2;
    status = attempt(i);
  }
  return status;
}

struct SamplerStream {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<proto::SampleRequest, proto::SampleResponse>> rw;
};

Sampler::Sampler(std::shared_ptr<ClientStub> stub, std::string table,
                 const SamplerOptions& options)
    : stub_(std::move(stub)), table_(std::move(table)), options_(options) {
  OpenStream();
}

void Sampler::OpenStream() {
  auto stream = std::make_unique<SamplerStream>();
  stream->rw = stub_->stub()->SampleStream(&stream->context);
  granted_ = returned_;
  absl::MutexLock lock(&stream_mu_);
  stream_ = std::move(stream);
  if (cancelled_.load()) stream_->context.TryCancel();
}

Sampler::~Sampler() {
  if (!error_.ok()) return;  // the stream is already finished
  if (returned_ == granted_ && next_in_buffer_ == buffer_.size()) {
    stream_->rw->WritesDone();  // nothing outstanding: end it politely
  } else {
    stream_->context.TryCancel();  // samples in flight nobody will read
  }
  stream_->rw->Finish().ok();  // the outcome no longer matters
}

void Sampler::Cancel() {
  absl::MutexLock lock(&stream_mu_);
  cancelled_.store(true);
  if (stream_ != nullptr) stream_->context.TryCancel();
}

absl::Status Sampler::Fail(absl::Status status) {
  error_ = status;
  stream_->context.TryCancel();
  stream_->rw->Finish().ok();
  return status;
}

absl::Status Sampler::Refill() {
  // Top the credits back up to max_in_flight ahead of what was consumed.
  int64_t target = returned_ + options_.max_in_flight;
  if (options_.max_samples >= 0) target = std::min(target, options_.max_samples);
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
  proto::SampleResponse response;
  if (!stream_->rw->Read(&response)) {
    absl::Status status = stub_->RpcStatus(stream_->rw->Finish());
    return status.ok() ? absl::UnavailableError("the server ended the sample stream") : status;
  }
  if (absl::Status status = DecodeSampleResponse(&response, &buffer_); !status.ok()) {
    return Fail(status);
  }
  if (buffer_.empty()) return Fail(absl::InternalError("empty sample response"));
  return absl::OkStatus();
}

absl::Status Sampler::Next(Sample* sample) {
  RETURN_IF_ERROR(error_);
  if (options_.max_samples >= 0 && returned_ >= options_.max_samples) {
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

bool Sampler::TryNext(Sample* sample) {
  if (!error_.ok() || next_in_buffer_ == buffer_.size() ||
      (options_.max_samples >= 0 && returned_ >= options_.max_samples)) {
    return false;
  }
  *sample = std::move(buffer_[next_in_buffer_++]);
  ++returned_;
  return true;
}

absl::StatusOr<std::unique_ptr<Sampler>> Client::NewSampler(const std::string& table,
                                                            const SamplerOptions& options) {
  if (options.max_in_flight < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_in_flight_samples_per_worker must be >= 1, got ", options.max_in_flight));
  }
  return std::unique_ptr<Sampler>(new Sampler(stub_, table, options));
}

absl::StatusOr<std::unique_ptr<Client>> Client::Create(
    const std::string& server_address, const ClientOptions& options) {
  if (server_address.empty()) {
    return absl::InvalidArgumentError("server_address is empty");
  }
  if (options.max_message_bytes < 1024 || options.max_message_bytes > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_message_bytes must be in [1 KiB, 2 GiB), got ", options.max_message_bytes));
  }
  DisableMutexDeadlockDetection();
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  arguments.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  // Each Client gets its own connection, so several clients in one process
  // (actors in threads) do not share one TCP stream.
  arguments.SetInt("grpc.use_local_subchannel_pool", 1);
  // Reconnect quickly to a server that is (re)starting: the default first
  // backoff of 1 s would make every bounded retry of ours fail fast.
  // GRPC_ARG_MIN_RECONNECT_BACKOFF_MS is left alone: gRPC uses it as the
  // least time a connection attempt may take (default 20 s); at 100 ms, as
  // it once was here, a loaded machine can abort handshakes ("tcp handshaker
  // shutdown") before they complete.
  arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  auto channel = grpc::CreateCustomChannel(
      server_address, grpc::InsecureChannelCredentials(), arguments);
  return std::unique_ptr<Client>(new Client(
      server_address,
      std::make_shared<ClientStub>(server_address, std::move(channel),
                                   options.max_message_bytes)));
}

Client::Client(std::string address, std::shared_ptr<ClientStub> stub)
    : address_(std::move(address)), stub_(std::move(stub)) {}

Client::~Client() = default;

namespace {

// One unary call with `timeout` and `cancel` applied.
template <typename Request, typename Response>
absl::Status Unary(ClientStub& stub,
                   grpc::Status (proto::ReplayService::Stub::*method)(
                       grpc::ClientContext*, const Request&, Response*),
                   const Request& request, Response* response, absl::Duration timeout,
                   Cancellation* cancel, bool wait_for_ready = false) {
  grpc::ClientContext context;
  SetTimeout(&context, timeout);
  context.set_wait_for_ready(wait_for_ready);
  ScopedRpcCancellation scoped(cancel, &context);
  return stub.RpcStatus((stub.stub()->*method)(&context, request, response));
}

}  // namespace

absl::StatusOr<std::vector<TableInfo>> Client::ServerInfo(absl::Duration timeout,
                                                          Cancellation* cancel) {
  proto::ServerInfoResponse response;
  // With a deadline, a server that is not up yet (a learner started before
  // its replay server) is waited for until the deadline, as dm-reverb does;
  // without one, an unreachable server fails at once instead of hanging.
  const bool wait_for_ready = timeout != absl::InfiniteDuration();
  RETURN_IF_ERROR(Unary(*stub_, &proto::ReplayService::Stub::ServerInfo,
                        proto::ServerInfoRequest(), &response, timeout, cancel,
                        wait_for_ready));
  std::vector<TableInfo> tables;
  for (const proto::TableInfo& table : response.tables()) {
    ASSIGN_OR_RETURN(TableInfo info, TableInfoFromProto(table));
    tables.push_back(std::move(info));
  }
  return tables;
}

absl::StatusOr<MutationResult> Client::MutatePriorities(
    const std::string& table, absl::Span<const std::pair<Key, double>> updates,
    absl::Span<const Key> deletes, absl::Duration timeout, Cancellation* cancel) {
  proto::MutatePrioritiesRequest request;
  request.set_table(table);
  request.mutable_keys()->Reserve(updates.size());
  request.mutable_priorities()->Reserve(updates.size());
  for (const auto& [key, priority] : updates) {
    request.add_keys(key);
    request.add_priorities(priority);
  }
  request.mutable_deletes()->Add(deletes.begin(), deletes.end());
  proto::MutatePrioritiesResponse response;
  RETURN_IF_ERROR(Unary(*stub_, &proto::ReplayService::Stub::MutatePriorities, request,
                        &response, timeout, cancel));
  return MutationResult{response.updated(), response.deleted(), response.missing()};
}

absl::Status Client::Reset(const std::string& table, absl::Duration timeout,
                           Cancellation* cancel) {
  proto::ResetRequest request;
  request.set_table(table);
  proto::ResetResponse response;
  return Unary(*stub_, &proto::ReplayService::Stub::Reset, request, &response, timeout,
               cancel);
}

absl::StatusOr<std::string> Client::Checkpoint(absl::Duration timeout,
                                               Cancellation* cancel) {
  proto::CheckpointResponse response;
  RETURN_IF_ERROR(Unary(*stub_, &proto::ReplayService::Stub::Checkpoint,
                        proto::CheckpointRequest(), &response, timeout, cancel));
  return response.path();
}

absl::StatusOr<std::vector<Sample>> Client::SampleItems(
    const std::string& table, int64_t num_samples, SamplerOptions options,
    Cancellation* cancel) {
  if (num_samples < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_samples must be >= 1, got ", num_samples));
  }
  options.max_in_flight = num_samples;
  options.max_samples = num_samples;
  ASSIGN_OR_RETURN(std::unique_ptr<Sampler> sampler, NewSampler(table, options));
  Cancellation::Id id = 0;
  Sampler* raw = sampler.get();
  if (cancel != nullptr && !cancel->Register([raw] { raw->Cancel(); }, &id)) {
    return absl::CancelledError("sampling was cancelled before it started");
  }
  // Grown as samples arrive: a huge num_samples must not allocate up front.
  std::vector<Sample> samples;
  samples.reserve(static_cast<size_t>(std::min<int64_t>(num_samples, 1024)));
  absl::Status status;
  for (int64_t i = 0; i < num_samples && status.ok(); ++i) {
    status = sampler->Next(&samples.emplace_back());
  }
  if (!status.ok() && !samples.empty()) samples.pop_back();
  if (cancel != nullptr) cancel->UnregisterAndWait(id);
  RETURN_IF_ERROR(status);
  return samples;
}

absl::StatusOr<std::unique_ptr<TrajectoryWriter>> Client::NewTrajectoryWriter(
    const TrajectoryWriterOptions& options) {
  RETURN_IF_ERROR(options.Validate());
  return std::unique_ptr<TrajectoryWriter>(new TrajectoryWriter(stub_, options));
}

}  // namespace reverb_tf
