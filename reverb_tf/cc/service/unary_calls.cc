// SPDX-License-Identifier: Apache-2.0
// The unary methods: MutatePriorities, Reset, ServerInfo and Checkpoint,
// and the priority mutation MutateStream shares.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "reverb_tf/cc/platform/out_of_memory.h"
#include "reverb_tf/cc/platform/status_macros.h"
#include "reverb_tf/cc/service/guarded_call.h"
#include "reverb_tf/cc/service/replay_service.h"
#include "reverb_tf/cc/service/service_messages.h"
#include "reverb_tf/cc/wire/conversions.h"

namespace reverb_tf {

using service_internal::CallTimer;

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
    if (const ChunkStore::SpillStats spill = chunk_store().spill_stats();
        !spill.dir.empty()) {
      SpillStatsToProto(spill, response->mutable_spill());
    }
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
