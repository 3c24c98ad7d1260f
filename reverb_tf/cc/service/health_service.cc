// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/service/health_service.h"

#include <optional>

#include "absl/cleanup/cleanup.h"
#include "reverb_tf/cc/platform/cancellation.h"
#include "reverb_tf/cc/service/guarded_call.h"
#include "reverb_tf/cc/service/request_echo.h"

namespace reverb_tf {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

HealthService::HealthService(int max_watches) : max_watches_(max_watches) {}
HealthService::~HealthService() = default;

void HealthService::SetServingStatus(const std::string& service, bool serving) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  serving_[service] = serving;
  ++version_;
  changed_.SignalAll();
}

void HealthService::SetAllServingStatus(bool serving) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  for (auto& [service, status] : serving_) status = serving;
  ++version_;
  changed_.SignalAll();
}

void HealthService::Shutdown() {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  for (auto& [service, status] : serving_) status = false;
  shut_down_ = true;
  ++version_;
  changed_.SignalAll();
}

HealthService::ServingStatus HealthService::StatusLocked(
    const std::string& service) const {
  auto it = serving_.find(service);
  if (it == serving_.end()) return HealthCheckResponse::SERVICE_UNKNOWN;
  return it->second ? HealthCheckResponse::SERVING
                    : HealthCheckResponse::NOT_SERVING;
}

grpc::Status HealthService::Check(grpc::ServerContext* context,
                                  const HealthCheckRequest* request,
                                  HealthCheckResponse* response) {
  return GuardedCall("health Check",
                     [&] { return CheckStatus(context, request, response); });
}

grpc::Status HealthService::Watch(
    grpc::ServerContext* context, const HealthCheckRequest* request,
    grpc::ServerWriter<HealthCheckResponse>* writer) {
  return GuardedCall("health Watch",
                     [&] { return WatchStatus(context, request, writer); });
}

grpc::Status HealthService::CheckStatus(grpc::ServerContext* /*context*/,
                                        const HealthCheckRequest* request,
                                        HealthCheckResponse* response) {
  absl::ReaderMutexLock lock(&mu_);
  const ServingStatus status = StatusLocked(request->service());
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        "this server has no service named " +
                            QuotedFromRequest(request->service()));
  }
  response->set_status(status);
  return grpc::Status::OK;
}

grpc::Status HealthService::WatchStatus(
    grpc::ServerContext* context, const HealthCheckRequest* request,
    grpc::ServerWriter<HealthCheckResponse>* writer) {
  {
    absl::MutexLock lock(&mu_);
    if (watches_ >= max_watches_) {
      return grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          "this server already serves its limit of health Watch calls");
    }
    ++watches_;
  }
  // A client that leaves cancels `cancel`, whose wakeup wakes the wait below.
  Cancellation cancel;
  const CancellationWatcher::Watch watch = cancellation_watcher_.Add(
      [context] { return context->IsCancelled(); }, &cancel);
  Cancellation::Id wakeup;
  cancel.Register(
      [this] {
        absl::MutexLock lock(&mu_);
        changed_.SignalAll();
      },
      &wakeup);
  absl::Cleanup done = [&] {
    cancel.UnregisterAndWait(wakeup);  // its wakeup takes mu_: not held here
    absl::MutexLock lock(&mu_);
    --watches_;
  };

  uint64_t seen_version = 0;  // version_ starts at 1: the first pass sends
  std::optional<ServingStatus> sent;
  absl::MutexLock lock(&mu_);
  while (true) {
    if (seen_version != version_) {
      seen_version = version_;
      const ServingStatus status = StatusLocked(request->service());
      const bool ending = shut_down_;
      if (status != sent) {  // another service's change is not news here
        HealthCheckResponse response;
        response.set_status(status);
        mu_.Unlock();
        bool written;
        try {
          written = writer->Write(response);
        } catch (...) {
          mu_.Lock();  // for `lock` to release as the exception unwinds
          throw;
        }
        mu_.Lock();
        if (!written)
          return grpc::Status(grpc::StatusCode::CANCELLED,
                              "the client went away");
        sent = status;
      }
      if (ending) return grpc::Status::OK;  // NOT_SERVING was the last word
      continue;  // something may have changed while writing
    }
    if (cancel.IsCancelled()) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
    }
    changed_.Wait(&mu_);
  }
}

}  // namespace reverb_tf
