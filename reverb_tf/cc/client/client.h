// SPDX-License-Identifier: Apache-2.0
// Client: the C++ side of reverb_tf.Client, TFClient and the datasets.
//
// Unary calls (server info, priorities, reset, checkpoint), sampling through
// a SampleStream with flow-control credits, and TrajectoryWriters
// (trajectory_writer.h) for inserting. Every call takes a timeout and an
// optional Cancellation that aborts the RPC at once (ClientContext::TryCancel).
// The API uses core types only (no gRPC or protobuf), so the pybind module
// can use it through libreverb_tf.so.
//
// Thread safety: thread-safe; calls may run concurrently from many threads.
#ifndef REVERB_TF_CC_CLIENT_CLIENT_H_
#define REVERB_TF_CC_CLIENT_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "reverb_tf/cc/client/trajectory_writer.h"
#include "reverb_tf/cc/platform/cancellation.h"
#include "reverb_tf/cc/platform/export.h"
#include "reverb_tf/cc/sample_info.h"
#include "reverb_tf/cc/security/credentials.h"
#include "reverb_tf/cc/table.h"
#include "reverb_tf/cc/tensor_payload.h"
#include "reverb_tf/cc/wire/message_limits.h"

namespace reverb_tf {

namespace proto {
class SampleResponse;
}  // namespace proto

// One sampled item with its columns materialized (uncompressed).
struct REVERB_TF_EXPORT Sample {
  SampleInfo info;
  std::vector<TensorPayload> columns;
  // squeezed[i]: column i is one step returned without its time dimension.
  std::vector<bool> squeezed;
};

struct REVERB_TF_EXPORT ClientOptions {
  int64_t max_message_bytes = kDefaultMaxMessageBytes;
  // TLS and the bearer token; unset: the process's defaults
  // (security/credentials.h: SetDefaultClientSecurity or the environment).
  std::optional<ClientSecurity> security;
  // How long the shards a dns: target resolved to are trusted before the
  // name is resolved again (target.h).
  absl::Duration resolve_interval = absl::Seconds(30);
};

struct REVERB_TF_EXPORT SamplerOptions {
  // Samples each stream requests ahead of consumption (flow-control
  // credits).
  int64_t max_in_flight = 256;
  // Samples this sampler returns before Next() reports OUT_OF_RANGE; < 0: no
  // limit. Never more than this many are requested from the servers.
  int64_t max_samples = -1;
  absl::Duration rate_limiter_timeout = absl::InfiniteDuration();
  // Samples per response message; 0: min(max_in_flight, 1024).
  int32_t flexible_batch_size = 0;
  // Streams, each with its own thread decoding what it receives: < 1 (auto)
  // one per shard; otherwise this many, at least one per shard. A table whose
  // sampler hands items out in order (fifo, lifo, heaps) gets one stream per
  // shard whatever this says, since several would interleave the order.
  int32_t num_streams = -1;
  // A stream that has delivered this many samples is ended and a new one
  // opened (dm-reverb's max_samples_per_stream); < 0: no limit.
  int64_t max_samples_per_stream = -1;
  // With several streams: how long Next() waits for a shard to serve again
  // once the streams of every shard have failed, before UNAVAILABLE. While
  // some shard serves, failed streams are reopened in the background.
  absl::Duration reconnect_timeout = absl::Seconds(3);
};

// Appends the samples of a server's `response` to `samples`, consuming its
// chunk bytes. Nothing in the response is trusted: sizes are checked before
// anything is allocated; a malformed response is an error (INVALID_ARGUMENT
// or INTERNAL), never a crash.
absl::Status DecodeSampleResponse(proto::SampleResponse* response,
                                  std::vector<Sample>* samples);

// The client's one retry policy for a server that is briefly unreachable:
// calls `attempt(i)` for i = 0, 1, ... while it returns UNAVAILABLE and
// `may_retry()` holds, at most 5 times, sleeping 100, 200, 400, 800 ms in
// between (1.5 s in all). Returns the last status.
REVERB_TF_EXPORT absl::Status RetryUnavailable(
    absl::FunctionRef<absl::Status(int)> attempt,
    absl::FunctionRef<bool()> may_retry);

// Samples of one table, from one stream or merged from several
// (sampler.h). Items of several shards arrive in proportion to each shard's
// total sampling weight.
// Thread safety: Next() and TryNext() from one thread at a time; Cancel()
// from any thread.
class REVERB_TF_EXPORT Sampler {
 public:
  virtual ~Sampler() = default;
  // Blocks for the next sample. OUT_OF_RANGE after max_samples,
  // DEADLINE_EXCEEDED when the rate limiter timeout expires, CANCELLED after
  // Cancel(); the sampler is finished after any error. A server that is not
  // reachable yet (UNAVAILABLE before the first sample) is retried
  // per RetryUnavailable() (1.5 s in all).
  virtual absl::Status Next(Sample* sample) = 0;
  // Moves out a sample already received without blocking; false if none is
  // (or max_samples were returned). Errors are left for Next() to report.
  virtual bool TryNext(Sample* sample) = 0;
  virtual void Cancel() = 0;
};

// What a priority update or delete did, over every shard of the target.
struct REVERB_TF_EXPORT MutationReport {
  int64_t updated = 0;
  int64_t deleted = 0;
  // Keys that no reachable shard held (evicted, deleted, never inserted, or
  // held by an unreachable shard). Skipped, as one server skips them.
  int64_t missing = 0;
  // Shards that could not be reached (UNAVAILABLE), with the reason. Only a
  // target of several shards reports them here; with one, or when no shard
  // is reachable, the call fails with UNAVAILABLE instead.
  std::vector<std::string> unreachable;
  // What the front end (Python, a TF kernel) should log: set at most once a
  // minute per Client, counting the keys skipped since the last warning, so
  // that a skipped update is never silent and evictions do not flood logs.
  std::string warning;
};

// The tables of one shard, or why they could not be read.
struct REVERB_TF_EXPORT ShardInfo {
  std::string address;
  absl::StatusOr<std::vector<TableInfo>> tables;
  // The shard's disk tier (an empty dir without a spill directory).
  ChunkStore::SpillStats spill;
};

class Client;
class ClientStub;
class LocalServer;
class ShardSet;

// A MutatePriorities in two steps (Client::StartMutatePriorities): its
// requests are written to the shards' mutation streams, then their answers
// are awaited, in slices if the caller wants (Python's main thread checks
// for Ctrl-C between slices instead of handing the whole call to another
// thread), and Finish() makes the unary calls for shards whose stream did
// not take the request or broke, and reports.
//
// Not thread-safe: one thread at a time. The Client must outlive it.
class REVERB_TF_EXPORT PendingMutation {
 public:
  // Requests still unanswered are abandoned: their streams are ended, and
  // each may or may not have been applied.
  ~PendingMutation();
  PendingMutation(const PendingMutation&) = delete;
  PendingMutation& operator=(const PendingMutation&) = delete;

  // Waits until `deadline` for the streams' answers. OK once every stream
  // has answered or given its request up (Finish() then makes that one a
  // unary call); DEADLINE_EXCEEDED if the deadline came first (call again);
  // CANCELLED if the cancellation given at the start fired.
  absl::Status AwaitStreams(absl::Time deadline);
  // Whether Finish() will make unary calls, which may block on the network.
  bool NeedsCalls() const;
  // After AwaitStreams() returned OK: the unary calls still needed, with
  // `cancel` (may be null), then the report, as MutatePriorities().
  absl::StatusOr<MutationReport> Finish(Cancellation* cancel);

  // Opaque: what the client keeps of the call (client.cc).
  struct State;

 private:
  friend class Client;
  explicit PendingMutation(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// A client of one replay server or of several shards of the same tables
// (target.h): one gRPC channel per shard.
//   * a writer streams to one shard: the one with the fewest writers then
//     (ties broken in turn, from a random start), so that writers spread
//     across shards and refill one that restarted;
//   * samplers stream from every shard, merging in proportion to the
//     shards' sampling weights;
//   * priority updates and deletes go to every shard at once, in parallel:
//     keys are random, so the one shard that holds a key applies it and the
//     others count it as missing (docs/scale_out.md);
//   * server info, reset and checkpoint address every shard.
// Thread safety: thread-safe; calls may run concurrently from many threads.
class REVERB_TF_EXPORT Client {
 public:
  // Connects lazily: creation never fails on an unreachable server.
  // INVALID_ARGUMENT for a malformed target or options.
  static absl::StatusOr<std::unique_ptr<Client>> Create(
      const std::string& server_address, const ClientOptions& options = {});
  ~Client();

  const std::string& server_address() const { return address_; }

  // The shards the target names now (a dns: target is resolved again
  // after ClientOptions::resolve_interval).
  std::vector<std::string> ShardAddresses();

  // The tables of the target. With several shards: each table's counters
  // and sizes summed over the shards, its options and signature those of
  // the first shard; UNAVAILABLE naming the shards that could not be
  // reached. With a finite `timeout`, waits for an unreachable server to
  // come up until the deadline (DEADLINE_EXCEEDED); with an infinite one,
  // fails at once with UNAVAILABLE.
  absl::StatusOr<std::vector<TableInfo>> ServerInfo(
      absl::Duration timeout, Cancellation* cancel = nullptr);

  // The tables (options and signatures, which every shard shares) of the
  // first shard that answers: what writers and datasets need, while some
  // shard may be down. Every shard is asked at once without waiting for
  // connections; only if none answers is the target waited for as
  // ServerInfo() does, and its error returned.
  absl::StatusOr<std::vector<TableInfo>> ServerInfoOfAnyShard(
      absl::Duration timeout, Cancellation* cancel = nullptr);

  // The tables of every shard, asked in parallel; a shard that fails has
  // its status in place of its tables. With `wait_for_ready` and a finite
  // timeout, a shard that is not up yet is waited for until the deadline.
  std::vector<ShardInfo> ServerInfoByShard(absl::Duration timeout,
                                           Cancellation* cancel = nullptr,
                                           bool wait_for_ready = true);

  absl::StatusOr<MutationReport> MutatePriorities(
      const std::string& table,
      absl::Span<const std::pair<Key, double>> updates,
      absl::Span<const Key> deletes, absl::Duration timeout,
      Cancellation* cancel = nullptr);

  // MutatePriorities() without a deadline, over the network whether or not
  // the server runs in this process, in two steps (PendingMutation).
  // `cancel` (may be null) must outlive the PendingMutation.
  absl::StatusOr<std::unique_ptr<PendingMutation>> StartMutatePriorities(
      const std::string& table,
      absl::Span<const std::pair<Key, double>> updates,
      absl::Span<const Key> deletes, Cancellation* cancel = nullptr);

  // Resets `table` on every shard.
  absl::Status Reset(const std::string& table, absl::Duration timeout,
                     Cancellation* cancel = nullptr);

  // Paths of the checkpoints the shards wrote, in shard order. Every shard
  // is asked; if one fails, the error names it (and the paths written).
  absl::StatusOr<std::vector<std::string>> Checkpoint(
      absl::Duration timeout, Cancellation* cancel = nullptr);

  // Samples exactly `num_samples` items (unless an error ends the stream),
  // through a Sampler with `options` whose max_samples is num_samples and
  // max_in_flight at most num_samples.
  absl::StatusOr<std::vector<Sample>> SampleItems(
      const std::string& table, int64_t num_samples, SamplerOptions options,
      Cancellation* cancel = nullptr);

  absl::StatusOr<std::unique_ptr<TrajectoryWriter>> NewTrajectoryWriter(
      const TrajectoryWriterOptions& options);

  absl::StatusOr<std::unique_ptr<Sampler>> NewSampler(
      const std::string& table, const SamplerOptions& options);

  // True if ServerInfo, MutatePriorities and Reset reach a server of this
  // process directly (local_server.h) right now: they then never wait on
  // the network, only on a table's lock.
  bool InProcess() { return LocalShard() != nullptr; }

 private:
  friend class PendingMutation;
  Client(std::string address, std::unique_ptr<ShardSet> shards);
  // The server behind a single-shard target when it runs in this process
  // (local_server.h): calls then reach its tables directly.
  std::shared_ptr<LocalServer> LocalShard();
  // The shard of `shards` a new writer streams to.
  std::shared_ptr<ClientStub> PickWriterShard(
      const std::vector<std::shared_ptr<ClientStub>>& shards);
  // Counts what `report` skipped and sets its warning when one is due.
  void NoteSkipped(const std::string& table, MutationReport* report);

  const std::string address_;
  const std::unique_ptr<ShardSet> shards_;

  absl::Mutex report_mu_;
  int64_t skipped_since_warning_ ABSL_GUARDED_BY(report_mu_) = 0;
  int64_t keys_since_warning_ ABSL_GUARDED_BY(report_mu_) = 0;
  absl::Time last_warning_ ABSL_GUARDED_BY(report_mu_) = absl::InfinitePast();
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_CLIENT_CLIENT_H_
