// SPDX-License-Identifier: Apache-2.0
// Internal to the client: one long-lived MutateStream to one server, which
// carries Client::MutatePriorities requests as messages instead of one
// unary call each. On this project's 2-core machines a unary call costs
// about 240 us of CPU on the two sides, most of it in thread wake-ups of
// the call's setup and of gRPC's sync server; a message of an open stream
// wakes one thread on each side.
//
// On gRPC's completion-queue API, with a queue of its own that the waiting
// thread polls itself: an answer wakes no other thread of this process, and
// a wait can be cut into slices (Python's main thread checks for Ctrl-C
// between them instead of handing the call to another thread).
#ifndef REVERB_TF_CC_CLIENT_MUTATION_STREAM_H_
#define REVERB_TF_CC_CLIENT_MUTATION_STREAM_H_

#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/client_context.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/support/async_stream.h"
#include "reverb_tf/cc/platform/cancellation.h"
#include "reverb_tf/cc/proto/service.grpc.pb.h"

namespace reverb_tf {

class ClientStub;
class ScopedRpcCancellation;

// Contract: Send() puts a request on the stream and returns its Ticket, or
// tells the caller to make the unary call instead (null): when another
// request is on the stream (concurrent callers never queue behind each
// other), or while a stream refused or broken less than kReopenAfter ago is
// not retried (a server without MutateStream is never asked again). The
// Ticket's answer may also be "make the unary call": the stream broke (the
// server went away or restarted; the unary call then reports or recovers as
// it always did). A request whose stream broke may have been applied before
// the break; priority updates and deletes are idempotent, so making it
// again is safe (only the counts of the second answer may differ).
//
// Thread-safe. `stub` must outlive the MutationStream, and every Ticket
// must be gone before it is destroyed.
class MutationStream {
 public:
  // How long after a failure the unary call is used before the stream is
  // opened again.
  static constexpr absl::Duration kReopenAfter = absl::Seconds(1);

  // One request on the stream, which it holds (no other request is sent)
  // until answered or destroyed. Not thread-safe: one thread at a time.
  class Ticket {
   public:
    // An unanswered request is abandoned: the stream is ended (the request
    // may or may not have been applied).
    ~Ticket();
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;

    // Waits until `deadline` for the answer, however long the server takes.
    // The response's error_code, if set, is the request's own failure.
    // std::nullopt: make the unary call (see above); CANCELLED if the
    // request's cancellation fired; DEADLINE_EXCEEDED: no answer yet (call
    // again). After any other result the Ticket is spent.
    absl::StatusOr<std::optional<proto::MutatePrioritiesResponse>> Await(
        absl::Time deadline);

   private:
    friend class MutationStream;
    Ticket(MutationStream* stream, Cancellation* cancel);

    MutationStream* const stream_;
    Cancellation* const cancel_;
    std::unique_ptr<ScopedRpcCancellation> scoped_cancel_;
    bool spent_ = false;
  };

  explicit MutationStream(ClientStub* stub) : stub_(stub) {}
  // Ends an open stream (the server's handler ends) and waits for it.
  ~MutationStream();
  MutationStream(const MutationStream&) = delete;
  MutationStream& operator=(const MutationStream&) = delete;

  // Writes `request` and returns its Ticket; null: make the unary call.
  // `cancel` (may be null) must outlive the Ticket.
  std::unique_ptr<Ticket> Send(const proto::MutatePrioritiesRequest& request,
                               Cancellation* cancel) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Stream = grpc::ClientAsyncReaderWriter<proto::MutatePrioritiesRequest,
                                               proto::MutatePrioritiesResponse>;
  // What the completion queue hands back.
  enum Op : intptr_t { kWrite = 1, kRead, kFinish };
  struct Open {
    grpc::ClientContext context;
    grpc::CompletionQueue cq;
    std::unique_ptr<Stream> stream;
    proto::MutatePrioritiesResponse response;
    int ops_in_flight = 0;
    bool written = false;
    bool read = false;
  };

  // Ends the open stream: cancels it, collects every operation still in
  // flight and the server's status, and notes when to try again.
  void Close();
  // Gives the stream back for the next request.
  void Release() ABSL_LOCKS_EXCLUDED(mu_);

  ClientStub* const stub_;
  absl::Mutex mu_;
  // A Ticket holds the stream.
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time reopen_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Touched only by the thread whose Ticket holds the stream (busy_), or by
  // the destructor: not guarded by mu_.
  std::unique_ptr<Open> open_;
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_CLIENT_MUTATION_STREAM_H_
