// SPDX-License-Identifier: Apache-2.0
// Internal to ReplayServer (server.cc constructs it, local_adapter.cc
// defines it): ReplayServer::Local, what in-process clients reach
// (local_server.h) in place of the server's RPCs. Not an API.
//
// Thread safety: thread-safe; every call checks, under the adapter's mutex,
// that the server has not started stopping.
#ifndef REVERB_TF_CC_SERVICE_LOCAL_ADAPTER_H_
#define REVERB_TF_CC_SERVICE_LOCAL_ADAPTER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "reverb_tf/cc/service/server.h"
#include "reverb_tf/cc/table.h"
#include "reverb_tf/cc/wire/local_insert_stream.h"

namespace reverb_tf {

// What in-process clients reach (local_server.h): the server's tables,
// its log, its checkpoints and its insert streams (local_insert_stream.h),
// until the server starts stopping.
class ReplayServer::Local final
    : public LocalInsertServer,
      public std::enable_shared_from_this<ReplayServer::Local> {
 public:
  Local(ReplayServer* server, int64_t max_message_bytes)
      : server_(server), max_message_bytes_(max_message_bytes) {}

  // Ends access: calls from now on fail as RPCs to a stopped server would.
  // Insert streams' calls already running go on until AwaitIdle().
  void Detach();

  // Waits until no insert stream call is running. Call after Detach() and
  // after closing the tables, which wakes the calls blocked on them.
  void AwaitIdle();

  absl::StatusOr<std::unique_ptr<LocalInsertStream>> OpenInsertStream()
      override;
  absl::StatusOr<std::shared_ptr<Table>> FindTable(
      const std::string& name) override;
  absl::StatusOr<std::vector<TableInfo>> TableInfos() override;
  absl::Status Commit() override;
  absl::StatusOr<std::string> Checkpoint() override;

 private:
  // The InsertStream RPC's work without gRPC (local_adapter.cc).
  class InsertStream;

  absl::Status CheckServing() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  ReplayServer* server_ ABSL_GUARDED_BY(mu_);
  const int64_t max_message_bytes_;
  int active_writes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_SERVICE_LOCAL_ADAPTER_H_
