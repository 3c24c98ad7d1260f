// SPDX-License-Identifier: Apache-2.0
// The gRPC replay service: InsertStream, SampleStream and the unary calls,
// implemented over a fixed set of Tables.
//
// Writing: each InsertStream keeps the chunks its client sent in a
// stream-local map until the client releases them, so a chunk crosses the
// wire once however many items reference it. Items are inserted in order and
// acknowledged (InsertResponse.keys) only once they are in their table.
//
// Sampling: the client grants credits (SampleRequest.num_samples); the server
// sends at most that many samples, in responses of at most
// flexible_batch_size items, each chunk once per response.
//
// Priority mutations: one unary call each, or messages of a MutateStream,
// which a client keeps open to save each call's setup; a failed request is
// answered in its response and leaves that stream open.
//
// Streams: at most `max_active_streams` at once (more fail with
// RESOURCE_EXHAUSTED, so a flood of streams cannot exhaust the server's
// threads). InsertStream and SampleStream are on the synchronous gRPC API,
// one handler thread per active stream, since their calls block on rate
// limiters. MutateStreams never block on anything but a table's mutex, and
// are served on the completion-queue API by one thread of the service's own
// (StartMutateStreams) that polls the queue, so the thread that reads a
// message also applies it and writes the answer: gRPC's sync API hands each
// message from its polling thread to the stream's handler thread, which cost
// about three context switches and 30 us of CPU per message on this
// project's 2-core machines. One thread serves all of them: a second one
// polling the same queue brought the hand-off back. A long mutation (a huge
// request, a table paused by a checkpoint) therefore delays the other
// MutateStreams' next answers; a client whose stream is busy makes unary
// calls instead. Every method is served over raw byte buffers and parsed
// here, because gRPC's typed reader reports a message it cannot parse as the
// end of a stream, and its typed unary handler answers such a request with
// INTERNAL: a malformed message is the caller's error, INVALID_ARGUMENT
// naming the stream's message or the unary method.
//
// Cancellation: a stream's blocking table calls carry a Cancellation that one
// CancellationWatcher thread fires when gRPC reports the call cancelled (the
// sync API has no callback for it), so an abandoned call frees its thread
// within kMaxCancellationCheck (kFirstCancellationCheck if it had just
// blocked), at about one check per blocked stream per second.
// Close() on the tables frees every thread at once when the server stops.
//
// Thread safety: all handlers may run concurrently; the service itself holds
// only immutable state (the table map), thread-safe objects, the set of
// open MutateStreams (under its mutex) and the MutateStreams' queue and
// thread (set by StartMutateStreams, cleared by StopMutateStreams, which the
// server calls in that order from one thread).
#ifndef REVERB_TF_CC_SERVICE_REPLAY_SERVICE_H_
#define REVERB_TF_CC_SERVICE_REPLAY_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/support/byte_buffer.h"
#include "reverb_tf/cc/checkpointing/wal.h"
#include "reverb_tf/cc/chunk_store.h"
#include "reverb_tf/cc/memory_budget.h"
#include "reverb_tf/cc/platform/cancellation_watcher.h"
#include "reverb_tf/cc/proto/service.grpc.pb.h"
#include "reverb_tf/cc/security/auth.h"
#include "reverb_tf/cc/service/metrics.h"
#include "reverb_tf/cc/table.h"

namespace reverb_tf {

class ReplayService final : public proto::ReplayService::Service {
 public:
  // When a blocked stream is first asked whether its client is gone, and the
  // most the asking interval grows to (see CancellationWatcher).
  static constexpr absl::Duration kFirstCancellationCheck =
      absl::Milliseconds(100);
  static constexpr absl::Duration kMaxCancellationCheck = absl::Seconds(1);

  // Most samples one table call takes (under the table's lock), whatever
  // flexible_batch_size a client asks for.
  static constexpr int32_t kMaxSamplesPerCall = 1024;
  // Most credits a SampleStream may hold at once (a bound on the counter,
  // not on memory: samples are only taken kMaxSamplesPerCall at a time).
  static constexpr int64_t kMaxCredits = int64_t{1} << 50;

  struct Limits {
    // Chunk bytes packed into one response.
    int64_t max_response_bytes;
    // Chunk bytes one InsertStream may hold (sent and not yet released):
    // beyond it the stream fails with RESOURCE_EXHAUSTED.
    int64_t max_stream_chunk_bytes;
    // Streams (insert, sample, mutate) open at once; more fail with
    // RESOURCE_EXHAUSTED.
    int64_t max_active_streams;
    // Non-null: every call needs a bearer token of a role that may make it
    // (security/auth.h): ServerInfo and SampleStream `reader`, InsertStream
    // MutatePriorities and MutateStream `writer`, Reset and Checkpoint
    // `admin`.
    std::shared_ptr<const TokenAuthenticator> auth;
  };

  ReplayService(std::vector<std::shared_ptr<Table>> tables,
                const Limits& limits);

  // One insert stream's state and work, shared by the InsertStream RPC and
  // by in-process writers (wire/local_insert_stream.h): the chunks the stream
  // sent and has not released, and the storing of each message's items.
  //
  // Thread-compatible: one message at a time. `service` and `cancel` must
  // outlive it.
  class InsertSession {
   public:
    InsertSession(ReplayService* service, Cancellation* cancel);
    ~InsertSession();
    InsertSession(const InsertSession&) = delete;
    InsertSession& operator=(const InsertSession&) = delete;

    // Stores `request`'s chunks (taking their bytes) and then its items and
    // item batches, in order, blocking on rate limiters for up to the request's
    // timeout (or until `cancel` fires), then drops the chunks the request
    // releases. The keys stored so far go to `ack` once the write-ahead log has
    // them: before any wait on a rate limiter, and at the end. Returns false if
    // `ack` returned false (the client is gone: stop, without error); an
    // error is the stream's status, and the stream must end. A chunk that
    // does not fit in memory is RESOURCE_EXHAUSTED naming it.
    absl::StatusOr<bool> Process(
        proto::InsertRequest& request,
        absl::FunctionRef<bool(const proto::InsertResponse&)> ack);

   private:
    // Decodes, verifies and stores one chunk, counting it against the
    // stream's limit.
    // Waits for the memory budget until `deadline` first.
    absl::Status AddChunk(proto::Chunk& proto_chunk, absl::Time deadline);
    // Stores `items` (their keys in order) in `table`, as many as the rate
    // limiter admits under one lock, then, before waiting, acknowledges the
    // keys so far (`response` through `ack`) and waits for the next one
    // for up to `timeout`. False if `ack` returned false.
    absl::StatusOr<bool> StoreItems(
        Table& table, absl::Span<Item> items, absl::Duration timeout,
        proto::InsertResponse* response,
        absl::FunctionRef<bool(const proto::InsertResponse&)> ack);

    ReplayService* const service_;
    Cancellation* const cancel_;
    // Counts this session while it exists.
    const std::shared_ptr<std::atomic<int64_t>> open_streams_;
    absl::flat_hash_map<ChunkKey, ChunkRef> chunks_;
    int64_t chunk_bytes_ = 0;  // data of the chunks in chunks_
  };

  // Changes are acknowledged only once `wal` (may be null: none) has them
  // (checkpointing/wal.h); set before serving.
  void set_wal(WriteAheadLog* wal) { wal_ = wal; }

  // Writer streams' chunks wait for room in `budget` (memory_budget.h; may
  // be null: none) as the tables' inserts do; set before serving.
  void set_memory_budget(MemoryBudget* budget) { budget_ = budget; }

  // Writes a checkpoint and returns its path; unset, the Checkpoint RPC
  // fails with FAILED_PRECONDITION.
  void set_checkpoint_fn(std::function<absl::StatusOr<std::string>()> fn) {
    checkpoint_fn_ = std::move(fn);
  }

  // The streaming methods; registered over raw byte buffers (see above).
  using RawStream =
      grpc::ServerReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>;
  grpc::Status HandleInsertStream(grpc::ServerContext* context,
                                  RawStream* stream);
  grpc::Status HandleSampleStream(grpc::ServerContext* context,
                                  RawStream* stream);

  // Chunks written through this service and still held by an item or a
  // stream.
  const ChunkStore& chunk_store() const { return chunk_store_; }
  // The same store, for chunks loaded from a checkpoint or the log before
  // serving (so that the memory budget counts them too).
  ChunkStore* mutable_chunk_store() { return &chunk_store_; }

  // While false (a checkpoint is loading), every replay method fails with
  // UNAVAILABLE saying so. True unless set.
  void set_accepting(bool accepting) {
    accepting_.store(accepting, std::memory_order_release);
  }

  // The table named `name`; NOT_FOUND echoing a bounded prefix of the name
  // (it comes from a request).
  absl::StatusOr<std::shared_ptr<Table>> FindTable(
      const std::string& name) const;

  // Serves MutateStreams from `queue`, which must come from
  // AddCompletionQueue() of the builder this service was registered with,
  // on a thread of the service's own, from now until StopMutateStreams(),
  // which must have run before the service is destroyed. Call once, after
  // that server started.
  void StartMutateStreams(std::unique_ptr<grpc::ServerCompletionQueue> queue);
  // Ends every MutateStream at once and refuses new ones (UNAVAILABLE):
  // for the server's Stop(). Between requests they wait for a message,
  // which nothing else ends before gRPC's shutdown deadline.
  void EndMutateStreams();
  // After the server's Shutdown(): shuts the queue down and waits until its
  // thread has finished every call left on it. No-op if not started.
  void StopMutateStreams();
  // Shuts down a queue no call was requested on and drains it (a queue of
  // a server that did not start, or was given up).
  static void DiscardQueue(std::unique_ptr<grpc::ServerCompletionQueue> queue);

  // Each table's info, by name: what ServerInfo answers.
  std::vector<TableInfo> TableInfos() const;

  // What the service counted as it served (see metrics.h).
  const ServiceMetrics& metrics() const { return metrics_; }
  // Streams (insert, sample, mutate) being served now.
  int64_t active_streams() const {
    return active_streams_.load(std::memory_order_relaxed);
  }

  grpc::Status MutatePriorities(
      grpc::ServerContext* context,
      const proto::MutatePrioritiesRequest* request,
      proto::MutatePrioritiesResponse* response) override;
  grpc::Status Reset(grpc::ServerContext* context,
                     const proto::ResetRequest* request,
                     proto::ResetResponse* response) override;
  grpc::Status ServerInfo(grpc::ServerContext* context,
                          const proto::ServerInfoRequest* request,
                          proto::ServerInfoResponse* response) override;
  grpc::Status Checkpoint(grpc::ServerContext* context,
                          const proto::CheckpointRequest* request,
                          proto::CheckpointResponse* response) override;

 private:
  // One MutateStream's state between the queue's events (replay_service.cc).
  class MutateStreamCall;

  // The MutateStreams' thread: hands each event of the queue to its call.
  void ServeMutateStreams();
  // Asks gRPC for the next MutateStream, unless they have ended.
  void AwaitMutateStream();

  // One priority mutation, logged: the work of MutatePriorities and of
  // each MutateStream message.
  absl::Status Mutate(const proto::MutatePrioritiesRequest& request,
                      proto::MutatePrioritiesResponse* response);
  // UNAVAILABLE while a checkpoint loads (see set_accepting).
  absl::Status CheckAccepting() const;
  // WriteAheadLog::Commit(), if there is a log.
  absl::Status CommitLog() const;
  // RESOURCE_EXHAUSTED for a stream beyond limits_.max_active_streams.
  grpc::Status TooManyStreams() const;
  // What every method checks first: the caller's token may make the call
  // (UNAUTHENTICATED / PERMISSION_DENIED), and no checkpoint is loading
  // (UNAVAILABLE).
  grpc::Status Admit(grpc::ServerContext* context, Role needed,
                     const char* method) const;

  absl::flat_hash_map<std::string, std::shared_ptr<Table>> tables_;
  const Limits limits_;
  std::atomic<int64_t> active_streams_{0};
  // Insert streams open now, in-process ones included (what ServerInfo
  // tells writer placement); shared, so a session may outlive the service.
  const std::shared_ptr<std::atomic<int64_t>> insert_streams_ =
      std::make_shared<std::atomic<int64_t>>(0);
  std::atomic<bool> accepting_{true};
  ServiceMetrics metrics_;
  CancellationWatcher cancellation_watcher_{kFirstCancellationCheck,
                                            kMaxCancellationCheck};
  absl::Mutex mutate_streams_mu_;
  // The calls of the MutateStreams being served.
  absl::flat_hash_set<grpc::ServerContext*> mutate_streams_
      ABSL_GUARDED_BY(mutate_streams_mu_);
  bool mutate_streams_ended_ ABSL_GUARDED_BY(mutate_streams_mu_) = false;
  std::unique_ptr<grpc::ServerCompletionQueue> mutate_queue_;
  std::thread mutate_thread_;
  ChunkStore chunk_store_;
  std::function<absl::StatusOr<std::string>()> checkpoint_fn_;
  WriteAheadLog* wal_ = nullptr;
  MemoryBudget* budget_ = nullptr;
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_SERVICE_REPLAY_SERVICE_H_
