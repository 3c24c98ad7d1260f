// SPDX-License-Identifier: Apache-2.0
// Internal to the replay service's .cc files (replay_service.cc,
// insert_stream.cc, sample_stream.cc, unary_calls.cc, mutate_stream.cc): the
// parsing and serializing of the raw-byte messages every method is served
// over (replay_service.h says why), and the stream slots and call timers
// they share. Not an API: nothing outside this directory includes it.
//
// Thread safety: the functions are safe to call concurrently on distinct
// arguments; a ParsedStream, CallTimer or StreamSlot belongs to one call.
#ifndef REVERB_TF_CC_SERVICE_SERVICE_MESSAGES_H_
#define REVERB_TF_CC_SERVICE_SERVICE_MESSAGES_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/proto_buffer_writer.h"
#include "reverb_tf/cc/chunk_store.h"
#include "reverb_tf/cc/platform/out_of_memory.h"
#include "reverb_tf/cc/platform/status_macros.h"
#include "reverb_tf/cc/service/metrics.h"
#include "reverb_tf/cc/service/replay_service.h"
#include "reverb_tf/cc/wire/conversions.h"
#include "reverb_tf/cc/wire/insert_request_reader.h"

namespace reverb_tf {
namespace service_internal {

// Messages from this size on are checked against the address space left
// before they are parsed (out_of_memory.h). Smaller ones are parsed into
// memory malloc has mostly mapped already (its arenas, which the mapped size
// counts whether used or not); from glibc's largest mmap threshold on, every
// allocation maps new address space.
inline constexpr size_t kCheckedMessageBytes = size_t{32} << 20;

// InsertStream's and MutateStream's positions in the proto's service.
inline constexpr int kInsertStreamMethod = 0;
inline constexpr int kMutateStreamMethod = 6;

// Words a rate limiter timeout for the client.
inline absl::Status WordTimeout(absl::Status status, absl::Duration timeout,
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
inline bool ParseRequest(grpc::ByteBuffer* buffer,
                         proto::InsertRequest* message, ChunkStore* store) {
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
inline auto StreamMessage(int64_t count) {
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
  // The count outlives this object: whoever kept it gives it back.
  void Keep() { active_ = nullptr; }

 private:
  std::atomic<int64_t>* active_;
};

}  // namespace service_internal
}  // namespace reverb_tf

#endif  // REVERB_TF_CC_SERVICE_SERVICE_MESSAGES_H_
