#include "reverb_tf/cc/client/mutation_stream.h"

#include "absl/cleanup/cleanup.h"
#include "reverb_tf/cc/client/client_stub.h"

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
  if (!mu_.TryLock()) return std::nullopt;  // another request is on the stream
  absl::Cleanup unlock = [this]() ABSL_UNLOCK_FUNCTION(mu_) { mu_.Unlock(); };
  if (open_ == nullptr) {
    if (absl::Now() < reopen_at_) return std::nullopt;
    open_ = std::make_unique<Open>();
    stub_->Prepare(&open_->context);
    // The call starts with the first request: opening does not wait.
    open_->context.set_initial_metadata_corked(true);
    open_->stream = stub_->stub()->MutateStream(&open_->context);
  }
  proto::MutatePrioritiesResponse response;
  bool answered;
  {
    ScopedRpcCancellation scoped(cancel, &open_->context);
    answered = open_->stream->Write(request) && open_->stream->Read(&response);
  }
  if (answered) return response;
  CloseLocked();
  if (cancel != nullptr && cancel->IsCancelled()) {
    return absl::CancelledError("mutate_priorities was cancelled");
  }
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
