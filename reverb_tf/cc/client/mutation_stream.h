// Internal to the client: one long-lived MutateStream to one server, which
// carries Client::MutatePriorities requests as messages instead of one
// unary call each. On this project's 2-core machines a unary call costs
// about 240 us of CPU on the two sides, most of it in thread wake-ups of
// the call's setup and of gRPC's sync server; a message of an open stream
// wakes one thread on each side.
#ifndef REVERB_TF_CC_CLIENT_MUTATION_STREAM_H_
#define REVERB_TF_CC_CLIENT_MUTATION_STREAM_H_

#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/sync_stream.h"
#include "reverb_tf/cc/platform/cancellation.h"
#include "reverb_tf/cc/proto/service.grpc.pb.h"

namespace reverb_tf {

class ClientStub;
class ScopedRpcCancellation;

// Contract: Mutate() answers a request over the stream, or tells the caller
// to make the unary call instead (std::nullopt): when another request is on
// the stream (concurrent callers never queue behind each other), when the
// stream broke (the server went away or restarted: the unary call then
// reports or recovers as it always did), or while a stream refused less
// than kReopenAfter ago is not retried (a server without MutateStream is
// never asked again). A request whose stream broke may have been applied
// before the break; priority updates and deletes are idempotent, so making
// it again is safe (only the counts of the second answer may differ).
//
// Thread-safe. `stub` must outlive the MutationStream.
class MutationStream {
 public:
  // How long after a failure the unary call is used before the stream is
  // opened again.
  static constexpr absl::Duration kReopenAfter = absl::Seconds(1);

  explicit MutationStream(ClientStub* stub) : stub_(stub) {}
  // Cancels the stream (the server's handler ends) and waits for it.
  ~MutationStream();
  MutationStream(const MutationStream&) = delete;
  MutationStream& operator=(const MutationStream&) = delete;

  // Sends `request` and waits for its response, however long the server
  // takes (callers with a deadline make the unary call). The response's
  // error_code, if set, is the request's own failure. CANCELLED if `cancel`
  // (may be null) fired; std::nullopt: make the unary call (see above).
  absl::StatusOr<std::optional<proto::MutatePrioritiesResponse>> Mutate(
      const proto::MutatePrioritiesRequest& request, Cancellation* cancel);

  // Mutate() in two halves, so that one request can be on several servers'
  // streams at once. Send() writes `request`: false means make the unary
  // call (as std::nullopt above); after true the stream stays taken until
  // the caller's one Receive(), which returns what Mutate() would. `cancel`
  // must outlive the Receive().
  absl::StatusOr<bool> Send(const proto::MutatePrioritiesRequest& request,
                            Cancellation* cancel) ABSL_NO_THREAD_SAFETY_ANALYSIS;
  absl::StatusOr<std::optional<proto::MutatePrioritiesResponse>> Receive()
      ABSL_NO_THREAD_SAFETY_ANALYSIS;

 private:
  using Stream = grpc::ClientReaderWriter<proto::MutatePrioritiesRequest,
                                          proto::MutatePrioritiesResponse>;
  struct Open {
    grpc::ClientContext context;
    std::unique_ptr<Stream> stream;
  };

  // The stream broke during a request: ends it; CANCELLED if the request's
  // cancellation fired, else std::nullopt (make the unary call).
  absl::StatusOr<std::optional<proto::MutatePrioritiesResponse>> EndRequestLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the open stream and notes when to try again.
  void CloseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ClientStub* const stub_;
  // Held from Send() to Receive(): one request at a time.
  absl::Mutex mu_;
  std::unique_ptr<Open> open_ ABSL_GUARDED_BY(mu_);
  // The request's cancellation, from Send() to Receive().
  Cancellation* cancel_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::unique_ptr<ScopedRpcCancellation> scoped_cancel_ ABSL_GUARDED_BY(mu_);
  absl::Time reopen_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_CLIENT_MUTATION_STREAM_H_
