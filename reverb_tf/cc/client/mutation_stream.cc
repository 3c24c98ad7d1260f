#include "reverb_tf/cc/client/mutation_stream.h"

#include "absl/cleanup/cleanup.h"
#include "reverb_tf/cc/client/client_stub.h"
#include "reverb_tf/cc/platform/status_macros.h"

namespace reverb_tf {

MutationStream::~MutationStream() {
  absl::MutexLock lock(&mu_);
  if (open_ != nullptr) {
    open_->context.TryCancel();
    open_->stream->Finish().IgnoreError();
    open_.reset();
  }
}

absl::StatusOr<std::optional<proto::MutatePrioritiesResponse>> MutationStream::Mutate(
    const proto::MutatePrioritiesRequest& request, Cancellation* cancel) {
  ASSIGN_OR_RETURN(const bool sent, Send(request, cancel));
  if (!sent) return std::nullopt;
  return Receive();
}

// The lock is taken here and released by Receive() (or here, if nothing
// was sent): a hand-over the annotations cannot express.
absl::StatusOr<bool> MutationStream::Send(const proto::MutatePrioritiesRequest& request,
                                          Cancellation* cancel) {
  if (!mu_.TryLock()) return false;  // another request is on the stream
  if (open_ == nullptr) {
    if (absl::Now() < reopen_at_) {
      mu_.Unlock();
      return false;
    }
    open_ = std::make_unique<Open>();
    stub_->Prepare(&open_->context);
    // The call starts with the first request: opening does not wait.
    open_->context.set_initial_metadata_corked(true);
    open_->stream = stub_->stub()->MutateStream(&open_->context);
  }
  cancel_ = cancel;
  scoped_cancel_ = std::make_unique<ScopedRpcCancellation>(cancel, &open_->context);
  if (open_->stream->Write(request)) return true;  // Receive() unlocks
  absl::StatusOr<std::optional<proto::MutatePrioritiesResponse>> broken = EndRequestLocked();
  mu_.Unlock();
  if (!broken.ok()) return broken.status();
  return false;
}

absl::StatusOr<std::optional<proto::MutatePrioritiesResponse>> MutationStream::Receive() {
  absl::Cleanup unlock = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { mu_.Unlock(); };
  proto::MutatePrioritiesResponse response;
  if (open_->stream->Read(&response)) {
    scoped_cancel_.reset();
    cancel_ = nullptr;
    return response;
  }
  return EndRequestLocked();
}

absl::StatusOr<std::optional<proto::MutatePrioritiesResponse>>
MutationStream::EndRequestLocked() {
  scoped_cancel_.reset();
  const bool cancelled = cancel_ != nullptr && cancel_->IsCancelled();
  cancel_ = nullptr;
  CloseLocked();
  if (cancelled) return absl::CancelledError("mutate_priorities was cancelled");
  return std::nullopt;
}

void MutationStream::CloseLocked() {
  // The server's status has come if it ended the stream; otherwise this
  // ends it, and Finish() does not wait.
  open_->context.TryCancel();
  const grpc::Status status = open_->stream->Finish();
  open_.reset();
  reopen_at_ = status.error_code() == grpc::StatusCode::UNIMPLEMENTED
                   ? absl::InfiniteFuture()  // a server that has no MutateStream
                   : absl::Now() + kReopenAfter;
}

}  // namespace reverb_tf
