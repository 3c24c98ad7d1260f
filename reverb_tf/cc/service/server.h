// SPDX-License-Identifier: Apache-2.0
// ReplayServer: a set of tables served over gRPC on one port, with the
// standard health service (grpc.health.v1: SERVING while up, NOT_SERVING from
// the start of Stop()) and server reflection beside the replay service.
//
// Used by the Python `reverb_tf.Server` (in-process) and by the
// `reverb_tf_server` binary. Stop() closes every table first, so RPCs blocked
// on a rate limiter return CANCELLED at once, then shuts gRPC down.
//
// With a write-ahead log, every acknowledged change is logged first, and
// Start() replays the log after the loaded checkpoint (a damaged log is
// replayed up to the damage, with a warning, and checkpointed at once). A
// log that cannot be written (a full disk; also a damaged log whose
// checkpoint fails at start) keeps the server serving reads: health stays
// SERVING, samples go on, and inserts, priority updates, deletes and resets
// fail with RESOURCE_EXHAUSTED (or the disk's error) until a checkpoint
// succeeds; the server tries one every WalOptions::retry_interval and on
// every Checkpoint call (metrics: reverb_tf_wal_writable).
//
// With a Checkpointer, Start() loads the latest checkpoint with the port open
// but the replay methods refusing calls (UNAVAILABLE) and health NOT_SERVING,
// so probes see a loading server rather than none; Start() returns once it
// is loaded and SERVING (a failed load fails Start: the server never serves
// a partial buffer). The Checkpoint RPC saves one, and
// `checkpoint_interval` adds periodic saves.
//
// Thread safety: thread-safe; Stop() is idempotent and may race Wait().
#ifndef REVERB_TF_CC_SERVICE_SERVER_H_
#define REVERB_TF_CC_SERVICE_SERVER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "reverb_tf/cc/checkpointing/checkpointer.h"
#include "reverb_tf/cc/checkpointing/wal.h"
#include "reverb_tf/cc/memory_budget.h"
#include "reverb_tf/cc/platform/export.h"
#include "reverb_tf/cc/security/auth.h"
#include "reverb_tf/cc/security/credentials.h"
#include "reverb_tf/cc/spill_store.h"
#include "reverb_tf/cc/table.h"
#include "reverb_tf/cc/wire/message_limits.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace reverb_tf {

class HeapReleaser;
class MetricsHttpServer;
class GrpcMemoryGuard;
class HealthService;
class ReplayService;

struct REVERB_TF_EXPORT ServerOptions {
  // 0 picks a free port.
  int port = 0;
  // The interface to listen on: "localhost" (the default: loopback only),
  // an address such as "10.0.0.5" or "::1", or "0.0.0.0" / "::" for every
  // interface. Anything reachable may insert, sample, reset and
  // checkpoint, so exposing the server is an explicit choice.
  std::string host = "localhost";
  // Largest message accepted or sent.
  int64_t max_message_bytes = kDefaultMaxMessageBytes;
  // Chunk bytes one InsertStream may hold, sent and not yet released
  // (writers release what leaves their keep-alive window).
  int64_t max_stream_chunk_bytes = int64_t{1} << 30;
  // Streams (insert, sample, mutate) served at once; more fail with
  // RESOURCE_EXHAUSTED. A SampleStream holds a thread, an InsertStream only
  // while one of its messages waits (replay_service.h). Hundreds of actors
  // with a writer each plus the learners' sample streams fit well within
  // the default.
  int64_t max_active_streams = 4096;
  // Most threads that poll the writers' and mutators' streams (1 to 16;
  // replay_service.h). They are also the only threads that read and write
  // the server's connections. The first always polls; the others only
  // while the first is busy. Two overlap the reading of one stream's next
  // message with the storing of its last, which a few writers flat out need
  // (one writer of small items: 83-85k items/s with two, 62-63k with one);
  // but a second poller hands messages from thread to thread, which a
  // quiet server should not pay (16 actors at 5 ms a step: 67-73 us of
  // server CPU per message with two always polling, 51-61 us with one).
  int stream_threads = 2;
  static constexpr int kMaxStreamThreads = 16;
  // Saves and restores the tables; null: the Checkpoint RPC fails with
  // FAILED_PRECONDITION.
  std::shared_ptr<Checkpointer> checkpointer;
  // With a checkpointer, also save every `checkpoint_interval` (0: never).
  absl::Duration checkpoint_interval = absl::ZeroDuration();
  // Serve Prometheus metrics over HTTP at GET /metrics on `host` and this
  // port (0: a free one; -1: no metrics endpoint). See MetricsText(). Plain
  // HTTP whatever `tls` says: it carries no replay data, only counters.
  int metrics_port = -1;
  // With a certificate: TLS, and with a client CA mutual TLS
  // (security/credentials.h). Health and reflection share the port and its
  // TLS.
  ServerTlsOptions tls;
  // Non-null: every replay call needs a bearer token of a role that may make
  // it (security/auth.h); health and reflection stay open to probes.
  std::shared_ptr<const TokenAuthenticator> auth;
  // A write-ahead log (checkpointing/wal.h): changes are acknowledged only
  // once logged, and a restart replays the log after the newest checkpoint.
  // Needs a checkpointer whose directory outlives the process (not a
  // CheckpointerOptions::temporary one), whose checkpoints truncate the log.
  std::optional<WalOptions> wal;
  // > 0: a memory budget of this many bytes (memory_budget.h): inserts of
  // new items and writers' chunks wait while the chunks and items held use
  // it up, and fail with RESOURCE_EXHAUSTED at their timeout. 0: none.
  int64_t memory_limit = 0;
  // With memory_limit: chunk bytes beyond the budget go to files in this
  // directory on local disk instead of making writers wait
  // (spill_store.h, docs/disk_tier.md); RAM keeps the items, the
  // selectors and the chunks most recently written or read. The directory
  // is this server's alone while it runs, and what an earlier run left in
  // it is deleted: checkpoints and the write-ahead log hold the data that
  // must survive a restart. Empty: no spilling.
  std::string spill_dir;
  // Spilled chunks are read through mappings of their files (about twice
  // as fast as pread: docs/disk_tier.md), whose pages count in the
  // process's RSS as the page cache they are; false reads them with pread,
  // and RSS stays near memory_limit while sampling too.
  bool spill_mmap = true;
  // Heap memory the server's data let go of goes back to the kernel
  // (platform/heap_release.h) after a drop of the chunk bytes held; with
  // this, also whenever the allocator holds much free memory. For a process
  // that is the server's own (the binary): in a host process, that memory
  // may be the host's to reuse.
  bool trim_idle_heap = false;
};

class REVERB_TF_EXPORT ReplayServer {
 public:
  // The name under which grpc.health.v1 reports the replay service (the
  // empty name reports the whole server).
  static constexpr char kHealthServiceName[] = "reverb_tf.proto.ReplayService";

  // Starts serving `tables` (names must be unique), opening any that an
  // earlier server closed when it stopped (Table::Open); Stop() closes them.
  // A table is hosted by one running server at a time (Table::Host): Start
  // takes each table before it changes anything, and Stop() gives them
  // back. Fails with INVALID_ARGUMENT on bad options or a table another
  // running server hosts (CheckStart) and UNAVAILABLE if the address cannot
  // be bound.
  static absl::StatusOr<std::unique_ptr<ReplayServer>> Start(
      std::vector<std::shared_ptr<Table>> tables, const ServerOptions& options);

  // The checks Start() makes before it changes anything, for a caller that
  // makes what the options need (a checkpointer, whose Create makes its
  // directory) only if they pass: the options' values, unique table names,
  // no table hosted by a running server, and a write-ahead log's
  // checkpointer. `checkpointer` is the options of the checkpointer the
  // server will have (null: none), which `options.checkpointer` overrides.
  static absl::Status CheckStart(
      const std::vector<std::shared_ptr<Table>>& tables,
      const ServerOptions& options,
      const CheckpointerOptions* checkpointer = nullptr);

  // Builds the tables from their options, then Start()s.
  static absl::StatusOr<std::unique_ptr<ReplayServer>> StartFromOptions(
      const std::vector<TableOptions>& tables, const ServerOptions& options);

  ~ReplayServer();

  int port() const { return port_; }
  // The checkpoint Start() loaded, or "" if none.
  const std::string& loaded_checkpoint() const {
    return loaded_checkpoint_.path;
  }
  // What the write-ahead log replayed on start (empty without a log).
  const WalReplay& wal_replay() const { return wal_replay_; }
  // Newer checkpoints Start() skipped as damaged (see
  // CheckpointerOptions::load_previous_if_damaged), with their damage.
  const std::vector<std::string>& skipped_checkpoints() const {
    return loaded_checkpoint_.skipped;
  }

  // Chunks that items or writer streams hold, and their bytes (written by
  // clients or loaded from a checkpoint or the write-ahead log).
  int64_t num_live_chunks() const;
  int64_t num_live_chunk_bytes() const;
  // The disk tier's figures (an empty dir without ServerOptions::spill_dir).
  ChunkStore::SpillStats spill_stats() const;

  // Saves a checkpoint (what the Checkpoint RPC does).
  absl::StatusOr<CheckpointStats> Checkpoint();

  // The server's metrics in the Prometheus text format (docs/operations.md
  // lists them); what GET /metrics returns.
  std::string MetricsText() const;
  // The port of the metrics endpoint; -1 without one.
  int metrics_port() const;

  // The served table named `name`; NOT_FOUND if there is none.
  absl::StatusOr<std::shared_ptr<Table>> FindTable(
      const std::string& name) const;

  void Stop();
  // Blocks until Stop() has completed.
  void Wait();
  // Waits at most `timeout` for Stop() to complete; true if it has.
  bool WaitFor(absl::Duration timeout);

 private:
  ReplayServer() = default;
  // Start()'s steps, in its order. A step that fails returns its status,
  // and Start() destroys the server, whose Stop() undoes the steps before.
  // Takes each table for this server alone (Table::Host) and reopens it.
  absl::Status HostTables(const std::vector<std::shared_ptr<Table>>& tables);
  // The replay service with its limits, the memory budget and, given
  // `spill` (ServerOptions::spill_dir), its disk tier; it refuses calls
  // while a checkpointer's load is due.
  void BuildService(std::vector<std::shared_ptr<Table>> tables,
                    std::unique_ptr<SpillStore> spill,
                    const ServerOptions& options);
  // Health, reflection and the gRPC server on options' host and port,
  // retried with another free port for port 0 on both loopbacks.
  absl::Status Bind(const ServerOptions& options);
  // One attempt of Bind() on `port`: server_ and port_ set if every host
  // bound it, null otherwise.
  void TryBind(const std::vector<std::string>& hosts, int port,
               const ServerOptions& options);
  // Loads the latest checkpoint, replays the write-ahead log after it, and
  // opens the service and health once in.
  absl::Status LoadCheckpointAndLog(const ServerOptions& options);
  // For a log replayed up to damage: warns and checkpoints, so that the log
  // starts clean, or fails the log for writes if that checkpoint fails.
  void RecoverDamagedLog(const WalOptions& wal_options);
  // The metrics endpoint, the checkpoint thread and the heap releaser.
  absl::Status StartBackgroundThreads(const ServerOptions& options);
  // Lets clients of this process reach the server without gRPC, unless it
  // is secured.
  void RegisterInProcess(const ServerOptions& options);
  // Checkpoints every `interval` (0: never) and, while the log cannot be
  // written, every `retry` until it can, until Stop().
  void CheckpointPeriodically(absl::Duration interval, absl::Duration retry);
  // Checkpoint() for a log that has failed: saves the tables as they are,
  // then lets the log resume.
  absl::StatusOr<CheckpointStats> RecoverLog()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(checkpoint_mu_);
  // checkpointer_->Save(), an allocation failure as RESOURCE_EXHAUSTED.
  absl::StatusOr<CheckpointStats> SaveCheckpoint(uint64_t wal_position);
  // Counts a checkpoint's outcome.
  void NoteCheckpoint(const absl::StatusOr<CheckpointStats>& stats);

  std::vector<std::shared_ptr<Table>> tables_;
  // Null without ServerOptions::memory_limit. Before service_: the chunk
  // store's spill thread reads it until the store goes.
  std::unique_ptr<MemoryBudget> budget_;
  std::unique_ptr<ReplayService> service_;
  // Declared before server_, so that it outlives the gRPC server's calls.
  std::unique_ptr<HealthService> health_;
  // Bounds gRPC's buffers under an address-space cap (grpc_memory_guard.h).
  std::unique_ptr<GrpcMemoryGuard> grpc_memory_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::shared_ptr<Checkpointer> checkpointer_;
  LoadedCheckpoint loaded_checkpoint_;
  std::unique_ptr<WriteAheadLog> wal_;
  WalReplay wal_replay_;
  // What clients of this process reach without gRPC (local_server.h).
  class Local;
  std::shared_ptr<Local> local_;
  std::thread checkpoint_thread_;
  // One checkpoint at a time: a log's recovery must not race another save.
  absl::Mutex checkpoint_mu_;
  std::unique_ptr<MetricsHttpServer> metrics_http_;
  // After service_, whose chunk store it reads: destroyed first.
  std::unique_ptr<HeapReleaser> heap_releaser_;
  mutable absl::Mutex mu_;
  // Checkpoints written and failed by this process, and the last one.
  int64_t checkpoints_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t failed_checkpoints_ ABSL_GUARDED_BY(mu_) = 0;
  // Times a failed log resumed after a checkpoint.
  int64_t wal_recoveries_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<CheckpointStats> last_checkpoint_ ABSL_GUARDED_BY(mu_);
  absl::Time last_checkpoint_time_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_SERVICE_SERVER_H_
