// SPDX-License-Identifier: Apache-2.0
// The grpc.health.v1 service of a ReplayServer, on gRPC's synchronous API.
//
// gRPC's own health service (grpc::EnableDefaultHealthCheckService) is built
// on the callback API. With Debian's gRPC 1.51 and its epoll1 poller, a
// callback service gives the server a second set of polling threads
// ("nexting_thread"), which take turns with the sync server's pollers at the
// process's one epoll set: a replay request then often arrives on a thread
// that must hand it to the handler's thread, a wake-up more per message.
// Measured on a 2-core machine: a 256-key MutateStream request took 266 us
// with it and 232 us without (median of 5 alternating runs). This class
// answers the same protocol from the sync server's own threads.
//
// Protocol: Check answers a known service's status and NOT_FOUND for an
// unknown one; Watch sends the status at once (SERVICE_UNKNOWN for an
// unknown service) and again on every change, until the client leaves or
// Shutdown(). Shutdown() reports NOT_SERVING for every service, ends every
// Watch and ignores later SetServingStatus() calls, so a stopping server
// never looks healthy again.
//
// Thread safety: thread-safe.
#ifndef REVERB_TF_CC_SERVICE_HEALTH_SERVICE_H_
#define REVERB_TF_CC_SERVICE_HEALTH_SERVICE_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "reverb_tf/cc/platform/cancellation_watcher.h"
#include "reverb_tf/cc/proto/health.grpc.pb.h"

namespace reverb_tf {

class HealthService final : public grpc::health::v1::Health::Service {
 public:
  // Watch calls served at once by default; more fail with
  // RESOURCE_EXHAUSTED. Each holds a sync server thread, and a probe needs
  // one at most.
  static constexpr int kDefaultMaxWatches = 256;

  explicit HealthService(int max_watches = kDefaultMaxWatches);
  // Every Watch must have ended (the gRPC server has shut down).
  ~HealthService() override;

  // Sets the status of `service` ("" for the whole server), which becomes
  // known if it was not. No-op after Shutdown().
  void SetServingStatus(const std::string& service, bool serving)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Sets the status of every known service.
  void SetAllServingStatus(bool serving) ABSL_LOCKS_EXCLUDED(mu_);
  // NOT_SERVING everywhere, for good; Watch calls end. Idempotent.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  grpc::Status Check(grpc::ServerContext* context,
                     const grpc::health::v1::HealthCheckRequest* request,
                     grpc::health::v1::HealthCheckResponse* response) override
      ABSL_LOCKS_EXCLUDED(mu_);
  grpc::Status Watch(grpc::ServerContext* context,
                     const grpc::health::v1::HealthCheckRequest* request,
                     grpc::ServerWriter<grpc::health::v1::HealthCheckResponse>*
                         writer) override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using ServingStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

  ServingStatus StatusLocked(const std::string& service) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The calls' work; Check and Watch run it under GuardedCall()
  // (guarded_call.h), which answers an allocation failure with
  // RESOURCE_EXHAUSTED.
  grpc::Status CheckStatus(grpc::ServerContext* context,
                           const grpc::health::v1::HealthCheckRequest* request,
                           grpc::health::v1::HealthCheckResponse* response)
      ABSL_LOCKS_EXCLUDED(mu_);
  grpc::Status WatchStatus(
      grpc::ServerContext* context,
      const grpc::health::v1::HealthCheckRequest* request,
      grpc::ServerWriter<grpc::health::v1::HealthCheckResponse>* writer)
      ABSL_LOCKS_EXCLUDED(mu_);

  const int max_watches_;
  absl::Mutex mu_;
  absl::CondVar changed_;  // signalled on every status change and cancellation
  absl::flat_hash_map<std::string, bool> serving_ ABSL_GUARDED_BY(mu_);
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 1;  // bumped on every change
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  int watches_ ABSL_GUARDED_BY(mu_) = 0;
  // Notices Watch clients that went away while nothing changes (the sync
  // API tells a handler only when asked).
  CancellationWatcher cancellation_watcher_{absl::Milliseconds(100),
                                            absl::Seconds(1)};
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_SERVICE_HEALTH_SERVICE_H_
