// SPDX-License-Identifier: Apache-2.0
// The SampleStream method.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/arena.h"
#include "reverb_tf/cc/platform/deadline.h"
#include "reverb_tf/cc/service/replay_service.h"
#include "reverb_tf/cc/service/service_messages.h"
#include "reverb_tf/cc/wire/conversions.h"

namespace reverb_tf {

using service_internal::ParsedStream;
using service_internal::StreamSlot;
using service_internal::WordTimeout;

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
  google::protobuf::Arena arena;
  absl::flat_hash_set<ChunkKey> sent;  // chunks in the response being built
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

    // Pack samples into as few responses as the byte budget allows. Each
    // response is built on an arena reset for the next one: its many small
    // messages (items, columns, slices, chunks) are neither malloc'd nor
    // freed one by one, which in a table of millions of chunks (a large,
    // fragmented heap) cost the sampling thread about half its time in
    // malloc.
    arena.Reset();
    auto* response =
        google::protobuf::Arena::CreateMessage<proto::SampleResponse>(&arena);
    response->set_ordered(ordered);
    sent.clear();
    int64_t bytes = 0;
    for (const SampledItem& sample : *samples) {
      if (response->items_size() > 0 && bytes >= limits_.max_response_bytes) {
        if (!stream.Write(*response)) return grpc::Status::OK;
        arena.Reset();
        response =
            google::protobuf::Arena::CreateMessage<proto::SampleResponse>(
                &arena);
        response->set_ordered(ordered);
        sent.clear();
        bytes = 0;
      }
      absl::StatusOr<int64_t> added = SampleToProto(sample, response, &sent);
      if (!added.ok()) return ToGrpcStatus(added.status());
      bytes += *added;
    }
    if (!stream.Write(*response)) return grpc::Status::OK;
    latency.Observe(absl::Now() - started);
  }
}

}  // namespace reverb_tf
