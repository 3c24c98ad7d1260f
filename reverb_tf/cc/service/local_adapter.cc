// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/service/local_adapter.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "reverb_tf/cc/platform/out_of_memory.h"
#include "reverb_tf/cc/platform/status_macros.h"
#include "reverb_tf/cc/service/replay_service.h"

namespace reverb_tf {

// The InsertStream RPC's work (ReplayService::InsertSession) without gRPC.
// The session points into the service, so every call first checks, under
// mu_, that the server has not stopped, and counts itself while it runs:
// Stop() waits for the count to drop (AwaitIdle) before the service may
// go. Chunks the session still holds may outlive the service (chunks
// keep their store's accounting alive).
class ReplayServer::Local::InsertStream final : public LocalInsertStream {
 public:
  InsertStream(std::shared_ptr<Local> local, ReplayService* service)
      : local_(std::move(local)), session_(service, &cancel_) {}

  absl::Status Write(
      proto::InsertRequest& request,
      absl::FunctionRef<void(const proto::InsertResponse&)> ack) override {
    if (!error_.ok()) return error_;
    // The limit gRPC enforces on a received message, so that a writer
    // meets the same server whichever way it reaches it.
    const int64_t limit = local_->max_message_bytes_;
    if (const size_t bytes = request.ByteSizeLong();
        bytes > static_cast<size_t>(limit)) {
      error_ = absl::ResourceExhaustedError(absl::StrCat(
          "an insert message of ", bytes, " bytes is larger than the server's ",
          "max_message_bytes (", limit, ")"));
      return error_;
    }
    {
      absl::MutexLock lock(&local_->mu_);
      error_ = local_->CheckServing();
      if (!error_.ok()) return error_;
      ++local_->active_writes_;
    }
    absl::StatusOr<bool> processed =
        CatchOutOfMemory("inserting from an in-process writer", [&] {
          return session_.Process(
              request, [&ack](const proto::InsertResponse& response) {
                ack(response);
                return true;
              });
        });
    {
      absl::MutexLock lock(&local_->mu_);
      --local_->active_writes_;
    }
    if (!processed.ok()) error_ = processed.status();
    return error_;
  }

  void Cancel() override { cancel_.Cancel(); }

 private:
  const std::shared_ptr<Local> local_;
  Cancellation cancel_;
  ReplayService::InsertSession session_;
  absl::Status error_;
};

void ReplayServer::Local::Detach() {
  absl::MutexLock lock(&mu_);
  server_ = nullptr;
}

void ReplayServer::Local::AwaitIdle() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* active) { return *active == 0; }, &active_writes_));
}

absl::StatusOr<std::unique_ptr<LocalInsertStream>>
ReplayServer::Local::OpenInsertStream() {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckServing());
  return std::unique_ptr<LocalInsertStream>(
      new InsertStream(shared_from_this(), server_->service_.get()));
}

absl::StatusOr<std::shared_ptr<Table>> ReplayServer::Local::FindTable(
    const std::string& name) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckServing());
  return server_->FindTable(name);
}

absl::StatusOr<std::vector<TableInfo>> ReplayServer::Local::TableInfos() {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckServing());
  return server_->service_->TableInfos();
}

absl::Status ReplayServer::Local::Commit() {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckServing());
  return server_->wal_ != nullptr ? server_->wal_->Commit() : absl::OkStatus();
}

absl::StatusOr<std::string> ReplayServer::Local::Checkpoint() {
  // Under mu_: Stop() (Detach) waits for it, as for a Checkpoint RPC.
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckServing());
  ASSIGN_OR_RETURN(CheckpointStats stats, server_->Checkpoint());
  return stats.path;
}

absl::Status ReplayServer::Local::CheckServing() const {
  if (server_ != nullptr) return absl::OkStatus();
  return absl::UnavailableError(
      "the replay server of this process has stopped");
}

}  // namespace reverb_tf
