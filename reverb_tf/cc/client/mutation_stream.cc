// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/client/mutation_stream.h"

#include "absl/time/clock.h"
#include "reverb_tf/cc/client/client_stub.h"

namespace reverb_tf {
namespace {

void* TagOf(intptr_t op) { return reinterpret_cast<void*>(op); }

}  // namespace

MutationStream::~MutationStream() {
  if (open_ != nullptr) Close();
}

std::unique_ptr<MutationStream::Ticket> MutationStream::Send(
    const proto::MutatePrioritiesRequest& request, Cancellation* cancel) {
  {
    absl::MutexLock lock(&mu_);
    if (busy_) return nullptr;  // another request is on the stream
    if (open_ == nullptr && absl::Now() < reopen_at_) return nullptr;
    busy_ = true;
  }
  if (open_ == nullptr) {
    open_ = std::make_unique<Open>();
    stub_->Prepare(&open_->context);
    // The call starts with the first request: opening does not wait. With
    // the metadata corked, StartCall() performs nothing and its tag never
    // comes back.
    open_->context.set_initial_metadata_corked(true);
    open_->stream =
        stub_->stub()->PrepareAsyncMutateStream(&open_->context, &open_->cq);
    open_->stream->StartCall(nullptr);
  }
  std::unique_ptr<Ticket> ticket(new Ticket(this, cancel));
  open_->written = open_->read = false;
  open_->stream->Write(request, TagOf(kWrite));
  open_->stream->Read(&open_->response, TagOf(kRead));
  open_->ops_in_flight += 2;
  return ticket;
}

MutationStream::Ticket::Ticket(MutationStream* stream, Cancellation* cancel)
    : stream_(stream),
      cancel_(cancel),
      scoped_cancel_(std::make_unique<ScopedRpcCancellation>(
          cancel, &stream->open_->context)) {}

MutationStream::Ticket::~Ticket() {
  if (spent_) return;
  scoped_cancel_.reset();
  stream_->Close();
  stream_->Release();
}

absl::StatusOr<std::optional<proto::MutatePrioritiesResponse>>
MutationStream::Ticket::Await(absl::Time deadline) {
  Open& open = *stream_->open_;
  bool broken = false;
  while (!broken && !(open.written && open.read)) {
    void* tag;
    bool ok;
    grpc::CompletionQueue::NextStatus next;
    if (deadline == absl::InfiniteFuture()) {
      next = open.cq.Next(&tag, &ok) ? grpc::CompletionQueue::GOT_EVENT
                                     : grpc::CompletionQueue::SHUTDOWN;
    } else {
      next = open.cq.AsyncNext(&tag, &ok, absl::ToChronoTime(deadline));
    }
    if (next == grpc::CompletionQueue::TIMEOUT) {
      return absl::DeadlineExceededError(
          "the mutation stream has not answered yet");
    }
    if (next == grpc::CompletionQueue::SHUTDOWN)
      break;  // not reached: only Close() shuts it
    --open.ops_in_flight;
    if (!ok) broken = true;
    if (tag == TagOf(kWrite)) open.written = true;
    if (tag == TagOf(kRead)) open.read = true;
  }
  spent_ = true;
  scoped_cancel_.reset();
  if (!broken) {
    proto::MutatePrioritiesResponse response = std::move(open.response);
    stream_->Release();
    return response;
  }
  const bool cancelled = cancel_ != nullptr && cancel_->IsCancelled();
  stream_->Close();
  stream_->Release();
  if (cancelled) return absl::CancelledError("mutate_priorities was cancelled");
  return std::nullopt;
}

void MutationStream::Close() {
  Open& open = *open_;
  open.context.TryCancel();
  void* tag;
  bool ok;
  while (open.ops_in_flight > 0 && open.cq.Next(&tag, &ok))
    --open.ops_in_flight;
  // The server's status if it ended the stream (UNIMPLEMENTED from a server
  // that has no MutateStream), else CANCELLED from the line above.
  grpc::Status status;
  open.stream->Finish(&status, TagOf(kFinish));
  open.cq.Next(&tag, &ok);
  open.cq.Shutdown();
  while (open.cq.Next(&tag, &ok)) {
  }
  open_.reset();
  absl::MutexLock lock(&mu_);
  reopen_at_ =
      status.error_code() == grpc::StatusCode::UNIMPLEMENTED
          ? absl::InfiniteFuture()  // a server that has no MutateStream
          : absl::Now() + kReopenAfter;
}

void MutationStream::Release() {
  absl::MutexLock lock(&mu_);
  busy_ = false;
}

}  // namespace reverb_tf
