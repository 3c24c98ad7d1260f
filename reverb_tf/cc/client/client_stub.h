// SPDX-License-Identifier: Apache-2.0
// Internal to the client: the gRPC channel and stub of one server, shared by
// a Client and its writers and samplers, and the glue between a Cancellation
// and an RPC.
//
// Thread safety: ClientStub is thread-safe, since a Client's threads and
// those of its writers and samplers share one: its fields are set at
// construction, and the gRPC channel and stub and the MutationStream are
// thread-safe. A ScopedRpcCancellation belongs to the thread making its RPC;
// the Cancellation may fire from any thread (ClientContext::TryCancel is
// thread-safe), and the destructor waits for a running callback, so the
// context outlives it.
#ifndef REVERB_TF_CC_CLIENT_CLIENT_STUB_H_
#define REVERB_TF_CC_CLIENT_CLIENT_STUB_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "reverb_tf/cc/client/mutation_stream.h"
#include "reverb_tf/cc/local_server.h"
#include "reverb_tf/cc/platform/cancellation.h"
#include "reverb_tf/cc/proto/service.grpc.pb.h"
#include "reverb_tf/cc/wire/conversions.h"

namespace reverb_tf {

class ClientStub {
 public:
  ClientStub(std::string address, std::shared_ptr<grpc::Channel> channel,
             int64_t max_message_bytes, std::string token = "")
      : address_(std::move(address)),
        channel_(std::move(channel)),
        stub_(proto::ReplayService::NewStub(channel_)),
        max_message_bytes_(max_message_bytes),
        authorization_(token.empty() ? "" : "Bearer " + token),
        loopback_port_(LoopbackPort(address_)),
        mutations_(std::make_unique<MutationStream>(this)) {}

  // The server of this process behind this address, reached without gRPC
  // (local_server.h); null if there is none (or it is another process's).
  std::shared_ptr<LocalServer> Local() const {
    return FindLocalServer(loopback_port_);
  }

  // Every call's context goes through here: it carries the bearer token.
  void Prepare(grpc::ClientContext* context) const {
    if (!authorization_.empty())
      context->AddMetadata("authorization", authorization_);
  }

  proto::ReplayService::Stub* stub() { return stub_.get(); }
  // The stream priority mutations to this server go over (see there).
  MutationStream& mutations() { return *mutations_; }
  grpc::Channel* channel() { return channel_.get(); }
  const std::string& address() const { return address_; }
  int64_t max_message_bytes() const { return max_message_bytes_; }

  // The outcome of an RPC for the caller: a lost or refused connection
  // (UNAVAILABLE) names the server, since gRPC's own words ("Socket
  // closed") do not say which one.
  absl::Status RpcStatus(const grpc::Status& status) const {
    absl::Status converted = FromGrpcStatus(status);
    if (converted.code() != absl::StatusCode::kUnavailable) return converted;
    return absl::UnavailableError(absl::StrCat(
        "replay server ", address_, " unavailable: ", converted.message()));
  }

 private:
  const std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<proto::ReplayService::Stub> stub_;
  const int64_t max_message_bytes_;
  const std::string authorization_;
  const int loopback_port_;
  // Last: it uses the stub and the channel until it is gone.
  const std::unique_ptr<MutationStream> mutations_;
};

// While alive, Cancel() on `cancel` (may be null) aborts the RPC of `context`.
class ScopedRpcCancellation {
 public:
  ScopedRpcCancellation(Cancellation* cancel, grpc::ClientContext* context)
      : cancel_(cancel) {
    if (cancel_ != nullptr &&
        !cancel_->Register([context] { context->TryCancel(); }, &id_)) {
      context->TryCancel();  // already cancelled: fail the RPC at once
      cancel_ = nullptr;
    }
  }
  ~ScopedRpcCancellation() {
    if (cancel_ != nullptr) cancel_->UnregisterAndWait(id_);
  }
  ScopedRpcCancellation(const ScopedRpcCancellation&) = delete;
  ScopedRpcCancellation& operator=(const ScopedRpcCancellation&) = delete;

 private:
  Cancellation* cancel_;
  Cancellation::Id id_ = 0;
};

// Sets a deadline unless `timeout` is infinite.
inline void SetTimeout(grpc::ClientContext* context, absl::Duration timeout) {
  if (timeout != absl::InfiniteDuration()) {
    context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  }
}

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_CLIENT_CLIENT_STUB_H_
