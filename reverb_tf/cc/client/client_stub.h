// Internal to the client: the gRPC channel and stub shared by a Client and
// its writers, and the glue between a Cancellation and an RPC.
#ifndef REVERB_TF_CC_CLIENT_CLIENT_STUB_H_
#define REVERB_TF_CC_CLIENT_CLIENT_STUB_H_

#include <cstdint>
#include <memory>

#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "reverb_tf/cc/platform/cancellation.h"
#include "reverb_tf/cc/proto/reverb_tf.grpc.pb.h"

namespace reverb_tf {

class ClientStub {
 public:
  ClientStub(std::shared_ptr<grpc::Channel> channel, int64_t max_message_bytes)
      : channel_(std::move(channel)),
        stub_(proto::ReplayService::NewStub(channel_)),
        max_message_bytes_(max_message_bytes) {}

  proto::ReplayService::Stub* stub() { return stub_.get(); }
  int64_t max_message_bytes() const { return max_message_bytes_; }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<proto::ReplayService::Stub> stub_;
  const int64_t max_message_bytes_;
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
