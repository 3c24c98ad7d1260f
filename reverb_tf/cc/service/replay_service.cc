// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/service/replay_service.h"

#include <algorithm>
#include <limits>
#include <new>
#include <optional>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/support/async_stream.h"
#include "grpcpp/support/method_handler.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/proto_buffer_writer.h"
#include "reverb_tf/cc/platform/deadline.h"
#include "reverb_tf/cc/platform/out_of_memory.h"
#include "reverb_tf/cc/platform/status_macros.h"
#include "reverb_tf/cc/service/guarded_call.h"
#include "reverb_tf/cc/service/request_echo.h"
#include "reverb_tf/cc/wire/conversions.h"
#include "reverb_tf/cc/wire/insert_request_reader.h"

namespace reverb_tf {
namespace {

// Messages from this size on are checked against the address space left
// before they are parsed (out_of_memory.h). Smaller ones are parsed into
// memory malloc has mostly mapped already (its arenas, which the mapped size
// counts whether used or not); from glibc's largest mmap threshold on, every
// allocation maps new address space.
constexpr size_t kCheckedMessageBytes = size_t{32} << 20;

// MutateStream's position in the proto's service.
constexpr int kMutateStreamMethod = 6;

// Words a rate limiter timeout for the client.
absl::Status WordTimeout(absl::Status status, absl::Duration timeout,
                         const std::string& what) {
  if (status.code() != absl::StatusCode::kDeadlineExceeded) return status;
  return absl::DeadlineExceededError(
      absl::StrCat("rate limiter timeout: could not ", what, " within ",
                   absl::FormatDuration(timeout)));
}

// Protobuf's parsing of a request; InsertRequest's puts chunk bytes into
// recycled buffers of the store (wire/insert_request_reader.h).
template <typename Request>
bool ParseRequest(grpc::ByteBuffer* buffer, Request* message, ChunkStore*) {
  return grpc::SerializationTraits<Request>::Deserialize(buffer, message).ok();
}

template <>
bool ParseRequest(grpc::ByteBuffer* buffer, proto::InsertRequest* message,
                  ChunkStore* store) {
  if (grpc::ProtoBufferReader scan(buffer); !MayHoldLargeChunks(&scan)) {
    return grpc::SerializationTraits<proto::InsertRequest>::Deserialize(buffer,
                                                                        message)
        .ok();
  }
  grpc::ProtoBufferReader reader(buffer);
  return ReadInsertRequest(&reader, message, [store](size_t size) {
    return store->TakeBuffer(size);
  });
}

// Parses `buffer` into `message` (cleared first), counting its bytes as
// received: INVALID_ARGUMENT "<what()> is not a valid <Request> (N bytes)"
// if it does not parse, RESOURCE_EXHAUSTED "... while reading <what()> ..."
// if it does not fit in memory. `what` names the message for the caller (a
// stream's message N, a unary call's request); called only on failure.
template <typename Request, typename What>
absl::Status ParseMessage(grpc::ByteBuffer* buffer, const What& what,
                          ServiceMetrics* metrics, ChunkStore* store,
                          Request* message) {
  const size_t bytes = buffer->Length();
  metrics->received_bytes.fetch_add(static_cast<int64_t>(bytes),
                                    std::memory_order_relaxed);
  message->Clear();
  bool parsed = false;
  RETURN_IF_ERROR(CatchOutOfMemory(
      [&] { return absl::StrCat("reading ", what(), " (", bytes, " bytes)"); },
      [&] {
        // Parsing takes about the message's size again; a large message
        // that would leave too little for gRPC's own buffers is refused
        // here (out_of_memory.h), once kept chunk buffers are given back.
        if (bytes >= kCheckedMessageBytes && !AddressSpaceFits(bytes)) {
          if (store != nullptr) store->FreeRecycledBuffers();
          if (!AddressSpaceFits(bytes)) throw std::bad_alloc();
        }
        parsed = ParseRequest(buffer, message, store);
        return absl::OkStatus();
      }));
  if (!parsed) {
    return absl::InvalidArgumentError(
        absl::StrCat(what(), " is not a valid ", Request::descriptor()->name(),
                     " (", bytes, " bytes)"));
  }
  return absl::OkStatus();
}

// Names message `count` of a stream for ParseMessage.
auto StreamMessage(int64_t count) {
  return [count] { return absl::StrCat("message ", count, " of this stream"); };
}

// Serializes `message` into `buffer`, counting its bytes as sent; false if
// it cannot be serialized.
template <typename Response>
bool SerializeMessage(const Response& message, ServiceMetrics* metrics,
                      grpc::ByteBuffer* buffer) {
  bool own_buffer = false;
  if (!grpc::SerializationTraits<Response>::Serialize(message, buffer,
                                                      &own_buffer)
           .ok()) {
    return false;
  }
  metrics->sent_bytes.fetch_add(static_cast<int64_t>(buffer->Length()),
                                std::memory_order_relaxed);
  return true;
}

// A typed view of a stream the service reads as raw bytes: Read() tells a
// message it cannot parse from the end of the stream.
template <typename Request, typename Response>
class ParsedStream {
 public:
  ParsedStream(ReplayService::RawStream* raw, ServiceMetrics* metrics,
               ChunkStore* store = nullptr)
      : raw_(raw), metrics_(metrics), store_(store) {}

  // True with a message, false at the end of the stream (the client
  // half-closed or went away), INVALID_ARGUMENT if a message does not parse.
  absl::StatusOr<bool> Read(Request* message) {
    grpc::ByteBuffer buffer;
    if (!raw_->Read(&buffer)) return false;
    RETURN_IF_ERROR(ParseMessage(&buffer, StreamMessage(++count_), metrics_,
                                 store_, message));
    return true;
  }

  // False if the client is gone.
  bool Write(const Response& message) {
    grpc::ByteBuffer buffer;
    return SerializeMessage(message, metrics_, &buffer) && raw_->Write(buffer);
  }

 private:
  ReplayService::RawStream* raw_;
  ServiceMetrics* metrics_;
  ChunkStore* const store_;  // InsertRequest's only
  int64_t count_ = 0;
};

// A unary method of the service, as the generated base class declares it.
template <typename Request, typename Response>
using UnaryMethod = grpc::Status (ReplayService::*)(grpc::ServerContext*,
                                                    const Request*, Response*);

// Serves a unary call read as raw bytes (see the header): parses its one
// request, runs `method` and writes the response with the status. A request
// that does not parse is the caller's error, INVALID_ARGUMENT naming the
// method (gRPC's typed handler would answer INTERNAL).
template <typename Request, typename Response>
grpc::Status ServeUnary(ReplayService* service, const char* name,
                        UnaryMethod<Request, Response> method,
                        grpc::ServerContext* context,
                        ReplayService::RawStream* stream,
                        ServiceMetrics* metrics) {
  grpc::ByteBuffer buffer;
  if (!stream->Read(&buffer)) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat(name, ": the call carried no request")));
  }
  Request request;
  if (absl::Status parsed = ParseMessage(
          &buffer,
          [name] { return absl::StrCat("the request of a ", name, " call"); },
          metrics, nullptr, &request);
      !parsed.ok()) {
    return ToGrpcStatus(parsed);
  }
  Response response;
  grpc::Status status = (service->*method)(context, &request, &response);
  if (!status.ok()) return status;
  grpc::ByteBuffer out;
  if (!SerializeMessage(response, metrics, &out)) {
    return ToGrpcStatus(absl::InternalError(
        absl::StrCat(name, ": the response could not be serialized")));
  }
  // Sent with the status, as gRPC sends a unary call's response.
  stream->WriteLast(out, grpc::WriteOptions());
  return status;
}

// Observes how long a unary call took, however it returns.
class CallTimer {
 public:
  explicit CallTimer(LatencyHistogram* histogram) : histogram_(histogram) {}
  CallTimer(const CallTimer&) = delete;
  CallTimer& operator=(const CallTimer&) = delete;
  ~CallTimer() { histogram_->Observe(absl::Now() - start_); }

 private:
  LatencyHistogram* const histogram_;
  const absl::Time start_ = absl::Now();
};

// Counts a stream as active for its lifetime.
class StreamSlot {
 public:
  StreamSlot(std::atomic<int64_t>* active, int64_t limit) : active_(active) {
    if (active_->fetch_add(1, std::memory_order_relaxed) >= limit) {
      active_->fetch_sub(1, std::memory_order_relaxed);
      active_ = nullptr;
    }
  }
  StreamSlot(const StreamSlot&) = delete;
  StreamSlot& operator=(const StreamSlot&) = delete;
  ~StreamSlot() {
    if (active_ != nullptr) active_->fetch_sub(1, std::memory_order_relaxed);
  }
  bool ok() const { return active_ != nullptr; }

 private:
  std::atomic<int64_t>* active_;
};

}  // namespace

ReplayService::ReplayService(std::vector<std::shared_ptr<Table>> tables,
                             const Limits& limits)
    : limits_(limits) {
  for (auto& table : tables) {
    const std::string name = table->name();
    tables_.emplace(name, std::move(table));
  }
  // Serve the streaming methods over raw bytes (see the header). gRPC's
  // generated code offers this only for its async and callback APIs;
  // MarkMethodStreamed replaces a sync method's handler and keeps it sync.
  // Indices are the methods' positions in the proto's service.
  constexpr int kInsertStream = 0;
  constexpr int kSampleStream = 1;
  using RawHandler =
      grpc::internal::BidiStreamingHandler<ReplayService, grpc::ByteBuffer,
                                           grpc::ByteBuffer>;
  const auto guarded = [](const char* method, auto handler) {
    return [method, handler](ReplayService* service,
                             grpc::ServerContext* context, RawStream* stream) {
      return GuardedCall(method,
                         [&] { return (service->*handler)(context, stream); });
    };
  };
  MarkMethodStreamed(
      kInsertStream,
      new RawHandler(
          guarded("InsertStream", &ReplayService::HandleInsertStream), this));
  MarkMethodStreamed(
      kSampleStream,
      new RawHandler(
          guarded("SampleStream", &ReplayService::HandleSampleStream), this));
  // The unary methods too, so that a request that does not parse is
  // INVALID_ARGUMENT: the sync API's typed handler answers INTERNAL.
  const auto unary = [](const char* method, auto handler) {
    return [method, handler](ReplayService* service,
                             grpc::ServerContext* context, RawStream* stream) {
      return ServeUnary(service, method, handler, context, stream,
                        &service->metrics_);
    };
  };
  constexpr int kMutatePriorities = 2;
  constexpr int kReset = 3;
  constexpr int kServerInfo = 4;
  constexpr int kCheckpoint = 5;
  MarkMethodStreamed(
      kMutatePriorities,
      new RawHandler(
          unary("MutatePriorities", &ReplayService::MutatePriorities), this));
  MarkMethodStreamed(
      kReset, new RawHandler(unary("Reset", &ReplayService::Reset), this));
  MarkMethodStreamed(
      kServerInfo,
      new RawHandler(unary("ServerInfo", &ReplayService::ServerInfo), this));
  MarkMethodStreamed(
      kCheckpoint,
      new RawHandler(unary("Checkpoint", &ReplayService::Checkpoint), this));
  // On the completion-queue API, over raw bytes too.
  MarkMethodRaw(kMutateStreamMethod);
}

grpc::Status ReplayService::Admit(grpc::ServerContext* context, Role needed,
                                  const char* method) const {
  if (limits_.auth != nullptr) {
    const auto& metadata = context->client_metadata();
    auto it = metadata.find("authorization");
    const absl::string_view authorization =
        it == metadata.end()
            ? absl::string_view()
            : absl::string_view(it->second.data(), it->second.size());
    if (absl::Status status =
            limits_.auth->Authorize(authorization, needed, method);
        !status.ok()) {
      return ToGrpcStatus(status);
    }
  }
  return ToGrpcStatus(CheckAccepting());
}

absl::Status ReplayService::CheckAccepting() const {
  if (accepting_.load(std::memory_order_acquire)) return absl::OkStatus();
  return absl::UnavailableError(
      "the server is loading its checkpoint; retry when its health is SERVING");
}

absl::Status ReplayService::CommitLog() const {
  return wal_ == nullptr ? absl::OkStatus() : wal_->Commit();
}

grpc::Status ReplayService::TooManyStreams() const {
  return ToGrpcStatus(absl::ResourceExhaustedError(absl::StrCat(
      "this server already serves ", limits_.max_active_streams,
      " streams, its limit; retry later or raise max_active_streams")));
}

absl::StatusOr<std::shared_ptr<Table>> ReplayService::FindTable(
    const std::string& name) const {
  auto it = tables_.find(name);
  if (it == tables_.end()) {
    // dm-reverb's words, which programs match on.
    return absl::NotFoundError(absl::StrCat(
        "Priority table ", EchoedFromRequest(name), " was not found"));
  }
  return it->second;
}

grpc::Status ReplayService::HandleInsertStream(grpc::ServerContext* context,
                                               RawStream* raw_stream) {
  if (grpc::Status admitted = Admit(context, Role::kWriter, "InsertStream");
      !admitted.ok()) {
    return admitted;
  }
  StreamSlot slot_in_limit(&active_streams_, limits_.max_active_streams);
  if (!slot_in_limit.ok()) return TooManyStreams();
  ParsedStream<proto::InsertRequest, proto::InsertResponse> stream(
      raw_stream, &metrics_, &chunk_store_);
  LatencyHistogram& latency = metrics_.latency[ServiceMetrics::kInsertStream];
  Cancellation cancel;
  const auto watch = cancellation_watcher_.Add(
      [context] { return context->IsCancelled(); }, &cancel);
  InsertSession session(this, &cancel);
  proto::InsertRequest request;
  while (true) {
    absl::StatusOr<bool> read = stream.Read(&request);
    if (!read.ok()) return ToGrpcStatus(read.status());
    if (!*read) break;
    const absl::Time received = absl::Now();
    absl::StatusOr<bool> processed = session.Process(
        request, [&stream](const proto::InsertResponse& response) {
          return stream.Write(response);
        });
    if (!processed.ok()) return ToGrpcStatus(processed.status());
    if (!*processed) break;  // client gone
    latency.Observe(absl::Now() - received);
  }
  return grpc::Status::OK;
}

ReplayService::InsertSession::InsertSession(ReplayService* service,
                                            Cancellation* cancel)
    : service_(service),
      cancel_(cancel),
      open_streams_(service->insert_streams_) {
  open_streams_->fetch_add(1, std::memory_order_relaxed);
}

ReplayService::InsertSession::~InsertSession() {
  open_streams_->fetch_sub(1, std::memory_order_relaxed);
}

absl::Status ReplayService::InsertSession::AddChunk(proto::Chunk& proto_chunk,
                                                    absl::Time deadline) {
  const Limits& limits = service_->limits_;
  if (MemoryBudget* budget = service_->budget_;
      budget != nullptr && !budget->HasRoom()) {
    // Before the chunk's bytes are copied into the store: a stream may not
    // grow the server past its budget any more than an item may.
    RETURN_IF_ERROR(budget->AwaitRoom(
        deadline, cancel_, absl::StrCat("store chunk ", proto_chunk.key())));
  }
  auto payload = PayloadFromProto(proto_chunk.mutable_tensor());
  // A stored chunk must decompress to what it declares for every client
  // that samples it, so compressed chunks are decoded once here.
  if (payload.ok()) {
    if (absl::Status verified = VerifyCompressed(*payload); !verified.ok()) {
      payload = verified;
    }
  }
  if (!payload.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk ", proto_chunk.key(), ": ", payload.status().message()));
  }
  ASSIGN_OR_RETURN(ChunkRef chunk,
                   service_->chunk_store_.Insert(
                       proto_chunk.key(), proto_chunk.episode_id(),
                       proto_chunk.episode_step(), *std::move(payload),
                       proto_chunk.lane_episode_ids()));
  ChunkRef& slot = chunks_[proto_chunk.key()];
  if (slot != nullptr)
    chunk_bytes_ -= static_cast<int64_t>(slot->data().size());
  slot = std::move(chunk);
  chunk_bytes_ += static_cast<int64_t>(slot->data().size());
  if (chunk_bytes_ > limits.max_stream_chunk_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("this stream holds ", chunk_bytes_,
                     " bytes of chunks, more than the server's limit ", "of ",
                     limits.max_stream_chunk_bytes,
                     "; release chunks no item will reference again"));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> ReplayService::InsertSession::Process(
    proto::InsertRequest& request,
    absl::FunctionRef<bool(const proto::InsertResponse&)> ack) {
  const absl::Duration timeout =
      TimeoutFromMs(request.rate_limiter_timeout_ms());
  const absl::Time chunk_deadline = DeadlineAfter(timeout);
  ServiceMetrics& metrics = service_->metrics_;
  metrics.items_received[ServiceMetrics::kItem].fetch_add(
      request.items_size(), std::memory_order_relaxed);
  for (const proto::ItemBatch& batch : request.item_batches()) {
    metrics.items_received[ServiceMetrics::kItemBatch].fetch_add(
        batch.keys_size(), std::memory_order_relaxed);
  }
  for (proto::Chunk& proto_chunk : *request.mutable_chunks()) {
    RETURN_IF_ERROR(CatchOutOfMemory(
        [&] {
          return absl::StrCat("storing chunk ", proto_chunk.key(), " (",
                              proto_chunk.tensor().data().size(), " bytes)");
        },
        [&] { return AddChunk(proto_chunk, chunk_deadline); }));
  }
  proto::InsertResponse response;
  // Every acknowledgement tells the client it may send item batches.
  response.set_takes_item_batches(true);
  const auto find_table =
      [this](const std::string& name,
             uint64_t key) -> absl::StatusOr<std::shared_ptr<Table>> {
    auto table = service_->FindTable(name);
    if (!table.ok()) {
      // An item naming a table the server lacks is a bad item (dm-reverb
      // reports it as an invalid argument too), not a missing resource.
      return absl::InvalidArgumentError(
          absl::StrCat("item ", key, ": ", table.status().message()));
    }
    return table;
  };
  std::vector<Item> items;
  // Runs of items for one table are stored with one call each; an item
  // that fails to decode ends its run, the items before it stored first.
  const auto& proto_items = request.items();
  for (int first = 0; first < proto_items.size();) {
    const std::string& name = proto_items[first].table();
    ASSIGN_OR_RETURN(std::shared_ptr<Table> table,
                     find_table(name, proto_items[first].key()));
    items.clear();
    absl::Status decoded;
    int end = first;
    for (; end < proto_items.size() && proto_items[end].table() == name;
         ++end) {
      absl::StatusOr<Item> item = ItemFromProto(proto_items[end], chunks_);
      if (!item.ok()) {
        decoded = item.status();
        break;
      }
      items.push_back(*std::move(item));
    }
    ASSIGN_OR_RETURN(bool open, StoreItems(*table, absl::MakeSpan(items),
                                           timeout, &response, ack));
    if (!open) return false;
    RETURN_IF_ERROR(decoded);
    first = end;
  }
  for (const proto::ItemBatch& batch : request.item_batches()) {
    ASSIGN_OR_RETURN(
        std::shared_ptr<Table> table,
        find_table(batch.table(), batch.keys().empty() ? 0 : batch.keys(0)));
    items.clear();
    const absl::Status decoded = ItemsFromBatch(batch, chunks_, &items);
    ASSIGN_OR_RETURN(bool open, StoreItems(*table, absl::MakeSpan(items),
                                           timeout, &response, ack));
    if (!open) return false;
    RETURN_IF_ERROR(decoded);
  }
  for (ChunkKey key : request.release_chunk_keys()) {
    auto it = chunks_.find(key);
    if (it == chunks_.end()) continue;
    chunk_bytes_ -= static_cast<int64_t>(it->second->data().size());
    chunks_.erase(it);
  }
  // Acknowledged only once logged (a no-op without a write-ahead log).
  RETURN_IF_ERROR(service_->CommitLog());
  return ack(response);
}

absl::StatusOr<bool> ReplayService::InsertSession::StoreItems(
    Table& table, absl::Span<Item> items, absl::Duration timeout,
    proto::InsertResponse* response,
    absl::FunctionRef<bool(const proto::InsertResponse&)> ack) {
  size_t next = 0;
  while (next < items.size()) {
    int64_t stored = 0;
    const absl::Status status =
        table.InsertAvailable(items.subspan(next), &stored);
    for (int64_t i = 0; i < stored; ++i) {
      response->add_keys(items[next + i].key);  // moved from: keys stay
    }
    next += static_cast<size_t>(stored);
    if (status.ok()) break;
    if (status.code() != absl::StatusCode::kDeadlineExceeded &&
        !MemoryBudget::IsExhausted(status)) {
      return status;
    }
    // About to wait for the rate limiter or the memory budget: acknowledge
    // what is already stored, so the client's flush(block_until_num_items)
    // sees it.
    if (response->keys_size() > 0) {
      RETURN_IF_ERROR(service_->CommitLog());
      if (!ack(*response)) return false;
      response->clear_keys();
    }
    const Key key = items[next].key;
    RETURN_IF_ERROR(WordTimeout(
        table.InsertOrAssign(std::move(items[next]), timeout, cancel_), timeout,
        absl::StrCat("insert into table '", table.name(), "'")));
    response->add_keys(key);
    ++next;
  }
  return true;
}

grpc::Status ReplayService::HandleSampleStream(grpc::ServerContext* context,
                                               RawStream* raw_stream) {
  if (grpc::Status admitted = Admit(context, Role::kReader, "SampleStream");
      !admitted.ok()) {
    return admitted;
  }
  StreamSlot slot_in_limit(&active_streams_, limits_.max_active_streams);
  if (!slot_in_limit.ok()) return TooManyStreams();
  ParsedStream<proto::SampleRequest, proto::SampleResponse> stream(raw_stream,
                                                                   &metrics_);
  LatencyHistogram& latency = metrics_.latency[ServiceMetrics::kSampleStream];
  proto::SampleRequest request;
  absl::StatusOr<bool> read = stream.Read(&request);
  if (!read.ok()) return ToGrpcStatus(read.status());
  if (!*read) return grpc::Status::OK;
  auto table_or = FindTable(request.table());
  if (!table_or.ok()) return ToGrpcStatus(table_or.status());
  const std::shared_ptr<Table> table = *table_or;
  // Bounded, so that no request holds the table's lock for unbounded work.
  const int32_t batch =
      request.flexible_batch_size() > 0
          ? std::min(request.flexible_batch_size(), kMaxSamplesPerCall)
          : 64;
  const absl::Duration timeout =
      TimeoutFromMs(request.rate_limiter_timeout_ms());
  if (request.num_samples() < 0) {
    return ToGrpcStatus(absl::InvalidArgumentError("num_samples must be >= 0"));
  }
  if (request.num_samples() > kMaxCredits) {
    return ToGrpcStatus(absl::ResourceExhaustedError(absl::StrCat(
        "more than ", kMaxCredits, " samples requested on one stream")));
  }
  int64_t credits = request.num_samples();
  const std::string what =
      absl::StrCat("sample from table '", table->name(), "'");
  const bool ordered = table->options().sampler.ordered();
  Cancellation cancel;
  const auto watch = cancellation_watcher_.Add(
      [context] { return context->IsCancelled(); }, &cancel);
  while (true) {
    while (credits == 0) {
      read = stream.Read(&request);
      if (!read.ok()) return ToGrpcStatus(read.status());
      if (!*read) return grpc::Status::OK;  // client done
      if (request.num_samples() < 0) {
        return ToGrpcStatus(
            absl::InvalidArgumentError("num_samples must be >= 0"));
      }
      if (request.num_samples() > kMaxCredits - credits) {
        return ToGrpcStatus(absl::ResourceExhaustedError(absl::StrCat(
            "more than ", kMaxCredits, " samples requested on one stream")));
      }
      credits += request.num_samples();
    }
    const absl::Time started = absl::Now();
    auto samples =
        table->Sample(static_cast<int32_t>(std::min<int64_t>(credits, batch)),
                      timeout, &cancel);
    if (!samples.ok())
      return ToGrpcStatus(WordTimeout(samples.status(), timeout, what));
    credits -= static_cast<int64_t>(samples->size());
    // Items these samples removed (max_times_sampled) must stay removed
    // after a crash before anyone sees them.
    if (std::any_of(samples->begin(), samples->end(),
                    [](const SampledItem& s) { return s.removed; })) {
      if (absl::Status logged = CommitLog(); !logged.ok())
        return ToGrpcStatus(logged);
    }

    // Pack samples into as few responses as the byte budget allows.
    proto::SampleResponse response;
    response.set_ordered(ordered);
    absl::flat_hash_set<ChunkKey> sent;
    int64_t bytes = 0;
    for (const SampledItem& sample : *samples) {
      if (response.items_size() > 0 && bytes >= limits_.max_response_bytes) {
        if (!stream.Write(response)) return grpc::Status::OK;
        response.Clear();
        response.set_ordered(ordered);
        sent.clear();
        bytes = 0;
      }
      bytes += SampleToProto(sample, &response, &sent);
    }
    if (!stream.Write(response)) return grpc::Status::OK;
    latency.Observe(absl::Now() - started);
  }
}

grpc::Status ReplayService::MutatePriorities(
    grpc::ServerContext* context, const proto::MutatePrioritiesRequest* request,
    proto::MutatePrioritiesResponse* response) {
  CallTimer timer(&metrics_.latency[ServiceMetrics::kMutatePriorities]);
  if (grpc::Status admitted = Admit(context, Role::kWriter, "MutatePriorities");
      !admitted.ok()) {
    return admitted;
  }
  return ToGrpcStatus(
      CatchOutOfMemory("applying priority updates and deletes",
                       [&] { return Mutate(*request, response); }));
}

// One MutateStream, from gRPC handing it over to its end. Each event of the
// queue moves it on by one step, and at most one operation of it is in
// flight, so only the queue's thread touches it (EndMutateStreams' TryCancel
// of its context is gRPC's to make safe).
class ReplayService::MutateStreamCall {
 public:
  explicit MutateStreamCall(ReplayService* service) : service_(service) {}
  MutateStreamCall(const MutateStreamCall&) = delete;
  MutateStreamCall& operator=(const MutateStreamCall&) = delete;
  ~MutateStreamCall() {
    if (!registered_) return;
    absl::MutexLock lock(&service_->mutate_streams_mu_);
    service_->mutate_streams_.erase(&context_);
  }

  // Puts this call on the queue to receive the next MutateStream.
  void Await() {
    service_->RequestAsyncBidiStreaming(kMutateStreamMethod, &context_,
                                        &stream_, service_->mutate_queue_.get(),
                                        service_->mutate_queue_.get(), this);
  }

  // The outcome of the operation in flight; deletes the call at its end.
  void Proceed(bool ok) {
    std::optional<grpc::Status> end;
    // An allocation failure ends the call as it ends a sync handler's.
    if (grpc::Status failed = GuardedCall("MutateStream",
                                          [&] {
                                            end = Advance(ok);
                                            return grpc::Status::OK;
                                          });
        !failed.ok()) {
      end = std::move(failed);
    }
    if (!end.has_value()) return;
    if (step_ == Step::kFinishing) {
      delete this;
      return;
    }
    step_ = Step::kFinishing;
    stream_.Finish(*end, this);
  }

 private:
  enum class Step { kAccepting, kReading, kWriting, kFinishing };

  // Starts the next operation and returns nothing, or returns the status to
  // end the call with instead.
  std::optional<grpc::Status> Advance(bool ok) {
    switch (step_) {
      case Step::kAccepting: {
        // Not ok: the queue is shutting down, and no call came.
        if (!ok) {
          step_ = Step::kFinishing;
          return grpc::Status::OK;
        }
        service_->AwaitMutateStream();
        grpc::Status admitted = Admit();
        if (!admitted.ok()) return admitted;
        return Read();
      }
      case Step::kReading: {
        // Not ok: the client half-closed the stream or went away.
        if (!ok) return grpc::Status::OK;
        proto::MutatePrioritiesRequest request;
        if (absl::Status parsed = ParseMessage(
                &message_, StreamMessage(++count_), &service_->metrics_,
                /*store=*/nullptr, &request);
            !parsed.ok()) {
          return ToGrpcStatus(parsed);
        }
        proto::MutatePrioritiesResponse response;
        {
          CallTimer timer(
              &service_->metrics_.latency[ServiceMetrics::kMutatePriorities]);
          absl::Status status = service_->CheckAccepting();
          if (status.ok()) {
            status = CatchOutOfMemory(
                "applying priority updates and deletes",
                [&] { return service_->Mutate(request, &response); });
          }
          if (!status.ok()) {
            response.Clear();
            response.set_error_code(static_cast<int32_t>(status.code()));
            response.set_error_message(std::string(status.message()));
          }
        }
        message_.Clear();
        if (!SerializeMessage(response, &service_->metrics_, &message_)) {
          return grpc::Status(grpc::StatusCode::INTERNAL,
                              "a MutateStream answer did not serialize");
        }
        step_ = Step::kWriting;
        stream_.Write(message_, this);
        return std::nullopt;
      }
      case Step::kWriting:
        // Not ok: the client is gone.
        if (!ok) return grpc::Status::OK;
        return Read();
      case Step::kFinishing:
        return grpc::Status::OK;
    }
    return grpc::Status::OK;
  }

  grpc::Status Admit() {
    if (grpc::Status admitted =
            service_->Admit(&context_, Role::kWriter, "MutateStream");
        !admitted.ok()) {
      return admitted;
    }
    slot_.emplace(&service_->active_streams_,
                  service_->limits_.max_active_streams);
    if (!slot_->ok()) return service_->TooManyStreams();
    absl::MutexLock lock(&service_->mutate_streams_mu_);
    if (service_->mutate_streams_ended_) {
      return ToGrpcStatus(absl::UnavailableError("the server is stopping"));
    }
    service_->mutate_streams_.insert(&context_);
    registered_ = true;
    return grpc::Status::OK;
  }

  std::optional<grpc::Status> Read() {
    step_ = Step::kReading;
    stream_.Read(&message_, this);
    return std::nullopt;
  }

  ReplayService* const service_;
  grpc::ServerContext context_;
  grpc::ServerAsyncReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer> stream_{
      &context_};
  Step step_ = Step::kAccepting;
  // The message read, then the answer written.
  grpc::ByteBuffer message_;
  int64_t count_ = 0;
  std::optional<StreamSlot> slot_;
  bool registered_ = false;
};

void ReplayService::StartMutateStreams(
    std::unique_ptr<grpc::ServerCompletionQueue> queue) {
  mutate_queue_ = std::move(queue);
  AwaitMutateStream();
  mutate_thread_ = std::thread([this] { ServeMutateStreams(); });
}

void ReplayService::AwaitMutateStream() {
  {
    absl::MutexLock lock(&mutate_streams_mu_);
    if (mutate_streams_ended_) return;
  }
  (new MutateStreamCall(this))->Await();
}

void ReplayService::ServeMutateStreams() {
  void* tag = nullptr;
  bool ok = false;
  while (mutate_queue_->Next(&tag, &ok)) {
    static_cast<MutateStreamCall*>(tag)->Proceed(ok);
  }
}

void ReplayService::StopMutateStreams() {
  if (mutate_queue_ == nullptr) return;
  mutate_queue_->Shutdown();
  mutate_thread_.join();
  mutate_queue_.reset();
}

void ReplayService::DiscardQueue(
    std::unique_ptr<grpc::ServerCompletionQueue> queue) {
  queue->Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (queue->Next(&tag, &ok)) {
  }
}

void ReplayService::EndMutateStreams() {
  absl::MutexLock lock(&mutate_streams_mu_);
  mutate_streams_ended_ = true;
  // A handler leaves the set under this lock: each context is alive here.
  for (grpc::ServerContext* context : mutate_streams_) context->TryCancel();
}

absl::Status ReplayService::Mutate(
    const proto::MutatePrioritiesRequest& request,
    proto::MutatePrioritiesResponse* response) {
  ASSIGN_OR_RETURN(std::shared_ptr<Table> table, FindTable(request.table()));
  if (request.keys_size() != request.priorities_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(request.keys_size(), " keys but ",
                     request.priorities_size(), " priorities"));
  }
  std::vector<std::pair<Key, double>> updates;
  updates.reserve(request.keys_size());
  for (int i = 0; i < request.keys_size(); ++i) {
    updates.emplace_back(request.keys(i), request.priorities(i));
  }
  ASSIGN_OR_RETURN(MutationResult result,
                   table->MutatePriorities(
                       updates, absl::MakeConstSpan(request.deletes().data(),
                                                    request.deletes_size())));
  RETURN_IF_ERROR(CommitLog());
  response->set_updated(result.updated);
  response->set_deleted(result.deleted);
  response->set_missing(result.missing);
  return absl::OkStatus();
}

grpc::Status ReplayService::Reset(grpc::ServerContext* context,
                                  const proto::ResetRequest* request,
                                  proto::ResetResponse*) {
  CallTimer timer(&metrics_.latency[ServiceMetrics::kReset]);
  if (grpc::Status admitted = Admit(context, Role::kAdmin, "Reset");
      !admitted.ok()) {
    return admitted;
  }
  return GuardedCall("Reset", [&] {
    auto table = FindTable(request->table());
    if (!table.ok()) return ToGrpcStatus(table.status());
    if (absl::Status reset = (*table)->Reset(); !reset.ok())
      return ToGrpcStatus(reset);
    return ToGrpcStatus(CommitLog());
  });
}

std::vector<TableInfo> ReplayService::TableInfos() const {
  std::vector<std::string> names;
  for (const auto& [name, table] : tables_) names.push_back(name);
  std::sort(names.begin(), names.end());
  std::vector<TableInfo> infos;
  infos.reserve(names.size());
  for (const std::string& name : names)
    infos.push_back(tables_.at(name)->info());
  return infos;
}

grpc::Status ReplayService::ServerInfo(grpc::ServerContext* context,
                                       const proto::ServerInfoRequest*,
                                       proto::ServerInfoResponse* response) {
  CallTimer timer(&metrics_.latency[ServiceMetrics::kServerInfo]);
  if (grpc::Status admitted = Admit(context, Role::kReader, "ServerInfo");
      !admitted.ok()) {
    return admitted;
  }
  return GuardedCall("ServerInfo", [&] {
    for (const TableInfo& info : TableInfos())
      TableInfoToProto(info, response->add_tables());
    response->set_active_insert_streams(
        insert_streams_->load(std::memory_order_relaxed));
    return grpc::Status::OK;
  });
}

grpc::Status ReplayService::Checkpoint(grpc::ServerContext* context,
                                       const proto::CheckpointRequest*,
                                       proto::CheckpointResponse* response) {
  CallTimer timer(&metrics_.latency[ServiceMetrics::kCheckpoint]);
  if (grpc::Status admitted = Admit(context, Role::kAdmin, "Checkpoint");
      !admitted.ok()) {
    return admitted;
  }
  if (!checkpoint_fn_) {
    return ToGrpcStatus(absl::FailedPreconditionError(
        "this server was started without a checkpointer"));
  }
  return GuardedCall("Checkpoint", [&] {
    auto path = checkpoint_fn_();
    if (!path.ok()) return ToGrpcStatus(path.status());
    response->set_path(*path);
    return grpc::Status::OK;
  });
}

}  // namespace reverb_tf
