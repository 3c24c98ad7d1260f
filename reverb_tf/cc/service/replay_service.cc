// SPDX-License-Identifier: Apache-2.0
// The service's construction, admission and table lookup. Its methods are
// in insert_stream.cc, sample_stream.cc, unary_calls.cc and mutate_stream.cc.
#include "reverb_tf/cc/service/replay_service.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/support/method_handler.h"
#include "reverb_tf/cc/service/guarded_call.h"
#include "reverb_tf/cc/service/request_echo.h"
#include "reverb_tf/cc/service/service_messages.h"
#include "reverb_tf/cc/wire/conversions.h"

namespace reverb_tf {

using service_internal::kInsertStreamMethod;
using service_internal::kMutateStreamMethod;
using service_internal::ServeUnary;

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
  MarkMethodRaw(kInsertStreamMethod);
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

}  // namespace reverb_tf
