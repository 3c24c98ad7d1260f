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
// threads). SampleStream is on the synchronous gRPC API, one handler thread
// per active stream, since its calls block on rate limiters. gRPC's sync
// API hands each message from its polling thread to the stream's handler
// thread, which cost about three context switches and 30 us of CPU per
// message on this project's 2-core machines, and holds a thread per stream.
// So the writers' streams are served on the completion-queue API instead,
// both kinds by one thread of the service's own that polls one queue
// (StartAsyncStreams): the thread that reads a message also applies it and
// writes the answer. A second polling thread brings the hand-off back, on
// the same queue or on a queue of its own: gRPC lets every thread polling
// such a queue read every connection of the server (the sync API's threads
// then poll nothing), so a message read by one is handed to the other. 16
// actors stepping every 5 ms cost the server 3.2 context switches and 67-73
// us of CPU per message with two threads, 1.3 and 51 us with one. But two
// read one stream's next message while its last is applied, which a single
// writer flat out gains from. So the first thread always polls, and the
// others (up to ServerOptions::stream_threads) poll only while the threads
// were busy for a quarter of the last 100 ms, parking (polling nothing)
// once that falls to a tenth. The calls' events are serialized per call
// (any of the threads delivers them).
//   * MutateStreams never block on anything but a table's mutex. A long
//     mutation (a huge request, a table paused by a checkpoint) therefore
//     delays the other streams' next messages; a client whose stream is
//     busy makes unary calls instead.
//   * InsertStreams store what they can without waiting on the polling
//     thread (InsertSession::Continue with may_block false). A message that
//     must wait (a rate limiter, the memory budget, a write-ahead log that
//     syncs every write, whose group commit needs concurrent committers)
//     is carried on by a thread of an elastic pool (BlockingCallPool: a
//     thread per message waiting at once, idle ones kept for a while), and
//     its stream goes back to the polling thread once the message is done.
//     Acknowledgements are written in order by the polling thread, the one
//     sent before a wait included, while the waiting goes on.
// Every method is served over raw byte buffers and parsed here, because
// gRPC's typed reader reports a message it cannot parse as the end of a
// stream, and its typed unary handler answers such a request with
// INTERNAL: a malformed message is the caller's error, INVALID_ARGUMENT
// naming the stream's message or the unary method.
//
// Cancellation: a stream's blocking table calls carry a Cancellation. For a
// SampleStream one CancellationWatcher thread fires it when gRPC reports the
// call cancelled (the sync API has no callback for it), so an abandoned call
// frees its thread within kMaxCancellationCheck (kFirstCancellationCheck if
// it had just blocked), at about one check per blocked stream per second;
// an InsertStream's fires when gRPC's done notification says the call was
// cancelled. Close() on the tables frees every thread at once when the
// server stops.
//
// Thread safety: all handlers may run concurrently; the service itself holds
// only immutable state (the table map), thread-safe objects, the set of
// open async streams (under its mutex) and the async streams' queues, pool
// and threads (set by StartAsyncStreams, cleared by StopAsyncStreams, which
// the server calls in that order from one thread).
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
#include "reverb_tf/cc/platform/elastic_thread_pool.h"
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
  // A message is stored in order: its chunks (taking their bytes), then its
  // items and item batches, blocking on rate limiters and the memory budget
  // for up to the request's timeout (or until `cancel` fires), then the
  // chunks the request releases are dropped. The keys stored so far go to
  // `ack` once the write-ahead log has them: before any wait, and at the
  // end. An error is the stream's status, and the stream must end. A chunk
  // that does not fit in memory is RESOURCE_EXHAUSTED naming it.
  //
  // Thread-compatible: one message at a time, from any thread (one after
  // the other). `service` and `cancel` must outlive it.
  class InsertSession {
   public:
    InsertSession(ReplayService* service, Cancellation* cancel);
    ~InsertSession();
    InsertSession(const InsertSession&) = delete;
    InsertSession& operator=(const InsertSession&) = delete;

    // Where a message stands when Continue returns.
    enum class Progress {
      kDone,        // stored and acknowledged
      kMustWait,    // stopped before a wait (may_block false): Continue again
      kClientGone,  // `ack` returned false: stop, without error
    };
    using Ack = absl::FunctionRef<bool(const proto::InsertResponse&)>;

    // Begin and Continue(true): the whole message, waiting where needed.
    // False if `ack` returned false.
    absl::StatusOr<bool> Process(proto::InsertRequest& request, Ack ack);

    // Starts on `request`, which must stay alive and unchanged until
    // Continue returns anything but kMustWait.
    void Begin(proto::InsertRequest* request);
    // Carries the begun message on from where it stopped. With `may_block`
    // false it stores what it can without waiting and returns kMustWait
    // before the first wait (the keys stored before it acknowledged), or
    // before committing to a write-ahead log that syncs every write (its
    // group commit needs the committers to be concurrent).
    absl::StatusOr<Progress> Continue(bool may_block, Ack ack);

   private:
    // A message's items for one table, decoded, and the status to end with
    // once they are stored (an item that did not decode ends its run).
    struct Run {
      std::shared_ptr<Table> table;  // null: `then` is the table's error
      std::vector<Item> items;
      absl::Status then;
    };

    // Decodes, verifies and stores one chunk, counting it against the
    // stream's limit. Waits for the memory budget until `deadline` first.
    absl::Status AddChunk(proto::Chunk& proto_chunk, absl::Time deadline);
    // The request's items and item batches as runs, in order, up to the
    // first that fails.
    void DecodeRuns();
    // Stores the runs from run_/next_item_ on; kMustWait at a wait when
    // !may_block.
    absl::StatusOr<Progress> StoreRuns(bool may_block, Ack ack);
    // Clears the message's state.
    void End();

    ReplayService* const service_;
    Cancellation* const cancel_;
    // Counts this session while it exists.
    const std::shared_ptr<std::atomic<int64_t>> open_streams_;
    absl::flat_hash_map<ChunkKey, ChunkRef> chunks_;
    int64_t chunk_bytes_ = 0;  // data of the chunks in chunks_

    // The message begun, and how far it got.
    proto::InsertRequest* request_ = nullptr;
    absl::Duration timeout_;
    absl::Time chunk_deadline_;
    int next_chunk_ = 0;
    bool decoded_ = false;
    std::vector<Run> runs_;
    size_t run_ = 0;
    size_t next_item_ = 0;
    proto::InsertResponse response_;
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

  // The sync streaming method and the unary methods are registered over
  // raw byte buffers (see above).
  using RawStream =
      grpc::ServerReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>;
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

  // Serves MutateStreams and InsertStreams from `queue`, which must come
  // from AddCompletionQueue() of the builder this service was registered
  // with (its only one: see above), on `threads` (>= 1) threads of the
  // service's own, from now until StopAsyncStreams(), which must have run
  // before the service is destroyed. Call once, after that server started.
  void StartAsyncStreams(std::unique_ptr<grpc::ServerCompletionQueue> queue,
                         int threads);
  // Ends every MutateStream and InsertStream at once and refuses new ones
  // (UNAVAILABLE): for the server's Stop(), after the tables closed (which
  // ends every wait). Between messages they wait for one, which nothing
  // else ends before gRPC's shutdown deadline.
  void EndAsyncStreams();
  // After the server's Shutdown(): waits for the insert messages still
  // being carried on by the pool, shuts the queue down and waits until its
  // threads have finished every call left on it. No-op if not started.
  void StopAsyncStreams();
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
  // One MutateStream's or InsertStream's state between its queue's events
  // (mutate_stream.cc, insert_stream.cc).
  class MutateStreamCall;
  class InsertStreamCall;
  // Every tag on the streams' queue is one: what its event does.
  class QueueEvent {
   public:
    virtual void Fire(bool ok) = 0;

   protected:
    ~QueueEvent() = default;
  };

  // The queue's threads: each hands events of the queue to their calls.
  // The first always polls and judges the load; the others poll only while
  // the load is high (ServerOptions::stream_threads says why).
  void ServeAsyncStreams(bool first);
  // Every kLoadWindow the first thread sets stream_load_high_ from the
  // share of the window the threads spent on events: on at kBusyOn, off at
  // kBusyOff.
  static constexpr absl::Duration kLoadWindow = absl::Milliseconds(100);
  static constexpr double kBusyOn = 0.25;
  static constexpr double kBusyOff = 0.10;
  static constexpr char kStreamThreadName[] = "reverb_streams";
  // Ask gRPC for the next MutateStream / InsertStream, unless they have
  // ended.
  void AwaitMutateStream();
  void AwaitInsertStream();
  // Admits an accepted async stream of a writer's `method`: the caller's
  // token and the loading state (Admit), a slot among max_active_streams,
  // and a place among the streams EndAsyncStreams cancels (UNAVAILABLE once
  // they have ended). On OK the stream holds the slot and the place until
  // UnregisterAsyncStream; otherwise it holds neither.
  grpc::Status RegisterAsyncStream(grpc::ServerContext* context,
                                   const char* method);
  void UnregisterAsyncStream(grpc::ServerContext* context);
  // An InsertStream is cancelled by EndAsyncStreams only while it waits for
  // its next message (a message being stored ends with its own status, a
  // closed table's for one that waited). Registered streams start idle.
  // False when marking it idle after the streams have ended: it must end
  // (UNAVAILABLE) instead of waiting for a message.
  bool SetAsyncStreamIdle(grpc::ServerContext* context, bool idle);
  // Whether EndAsyncStreams() has run.
  bool AsyncStreamsEnded();

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
  absl::Mutex async_streams_mu_;
  // The calls of the MutateStreams and InsertStreams being served, and
  // whether each waits for its next message.
  absl::flat_hash_map<grpc::ServerContext*, bool> async_streams_
      ABSL_GUARDED_BY(async_streams_mu_);
  bool async_streams_ended_ ABSL_GUARDED_BY(async_streams_mu_) = false;
  // A completion queue on which no operation starts once it is shut down:
  // gRPC aborts the process then ("assertion failed: grpc_cq_begin_op"),
  // and calls that the server's shutdown cancelled still end with an
  // operation (a Finish, or a Read or Write of a call that had not seen
  // the cancellation yet), which may come after StopAsyncStreams.
  class GatedQueue {
   public:
    void Open(std::unique_ptr<grpc::ServerCompletionQueue> queue) {
      queue_ = std::move(queue);
    }
    bool started() const { return queue_ != nullptr; }
    // Valid from Open() until Reset().
    grpc::ServerCompletionQueue* get() const { return queue_.get(); }
    // Runs `start`, which starts one operation on the queue, unless the
    // queue is shut down; false if it was (nothing ran).
    template <typename StartFn>
    bool Start(StartFn start) ABSL_LOCKS_EXCLUDED(mu_) {
      absl::MutexLock lock(&mu_);
      if (shut_down_) return false;
      start();
      return true;
    }
    void Shutdown() ABSL_LOCKS_EXCLUDED(mu_) {
      absl::MutexLock lock(&mu_);
      shut_down_ = true;
      queue_->Shutdown();
    }
    // After Shutdown() and once Next() returned false.
    void Reset() { queue_.reset(); }

   private:
    std::unique_ptr<grpc::ServerCompletionQueue> queue_;
    absl::Mutex mu_;
    bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  };

  GatedQueue stream_queue_;
  std::vector<std::thread> stream_threads_;
  std::atomic<int64_t> stream_busy_ns_{0};
  absl::Mutex stream_load_mu_;
  bool stream_load_high_ ABSL_GUARDED_BY(stream_load_mu_) = false;
  bool stream_threads_stopping_ ABSL_GUARDED_BY(stream_load_mu_) = false;
  // Carries on the insert messages that must wait (see the header).
  std::unique_ptr<ElasticThreadPool> insert_waits_;
  ChunkStore chunk_store_;
  std::function<absl::StatusOr<std::string>()> checkpoint_fn_;
  WriteAheadLog* wal_ = nullptr;
  MemoryBudget* budget_ = nullptr;
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_SERVICE_REPLAY_SERVICE_H_
