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
#include "reverb_tf/cc/table.h"
#include "reverb_tf/cc/tensor_payload.h"

namespace reverb_tf {

class ClientStub;
namespace proto {
class SampleResponse;
}  // namespace proto

struct REVERB_TF_EXPORT SampleInfo {
  Key key = 0;
  double probability = 0;
  int64_t table_size = 0;
  double priority = 0;
  int32_t times_sampled = 0;
  bool rate_limited = false;
};

// One sampled item with its columns materialized (uncompressed).
struct REVERB_TF_EXPORT Sample {
  SampleInfo info;
  std::vector<TensorPayload> columns;
  // squeezed[i]: column i is one step returned without its time dimension.
  std::vector<bool> squeezed;
};

struct REVERB_TF_EXPORT ClientOptions {
  int64_t max_message_bytes = int64_t{256} << 20;
};

struct REVERB_TF_EXPORT SamplerOptions {
  // Samples requested ahead of consumption (flow-control credits).
  int64_t max_in_flight = 256;
  // Samples this sampler returns before Next() reports OUT_OF_RANGE; < 0: no
  // limit.
  int64_t max_samples = -1;
  absl::Duration rate_limiter_timeout = absl::InfiniteDuration();
  // Samples per response message; 0: min(max_in_flight, 1024).
  int32_t flexible_batch_size = 0;
};

struct SamplerStream;

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
REVERB_TF_EXPORT absl::Status RetryUnavailable(absl::FunctionRef<absl::Status(int)> attempt,
                                               absl::FunctionRef<bool()> may_retry);

// A long-lived sampling stream: keeps up to max_in_flight samples requested
// ahead, so a consumer (a tf.data iterator) never waits for a round trip.
// Thread safety: Next() from one thread at a time; Cancel() from any thread.
class REVERB_TF_EXPORT Sampler {
 public:
  ~Sampler();
  // Blocks for the next sample. OUT_OF_RANGE after max_samples,
  // DEADLINE_EXCEEDED when the rate limiter timeout expires, CANCELLED after
  // Cancel(); the stream is finished after any error. A server that is not
  // reachable yet (UNAVAILABLE before the first sample) is retried
  // per RetryUnavailable() (1.5 s in all).
  absl::Status Next(Sample* sample);
  // Moves out a sample already received without blocking; false if none is
  // (or max_samples were returned). Errors are left for Next() to report.
  bool TryNext(Sample* sample);
  void Cancel();

 private:
  friend class Client;
  Sampler(std::shared_ptr<ClientStub> stub, std::string table, const SamplerOptions& options);
  absl::Status Fail(absl::Status status);
  // Reads the next response into buffer_, granting credits first.
  absl::Status Refill();
  void OpenStream();

  const std::shared_ptr<ClientStub> stub_;
  const std::string table_;
  const SamplerOptions options_;
  std::unique_ptr<SamplerStream> stream_;
  std::vector<Sample> buffer_;
  size_t next_in_buffer_ = 0;
  int64_t returned_ = 0;
  int64_t granted_ = 0;
  absl::Status error_;
  std::atomic<bool> cancelled_{false};
  // Guards replacing stream_ (a retry) against Cancel() from another thread.
  absl::Mutex stream_mu_;
};

class REVERB_TF_EXPORT Client {
 public:
  // Connects lazily: creation never fails on an unreachable server.
  static absl::StatusOr<std::unique_ptr<Client>> Create(
      const std::string& server_address, const ClientOptions& options = {});
  ~Client();

  const std::string& server_address() const { return address_; }

  // With a finite `timeout`, waits for an unreachable server to come up
  // until the deadline (DEADLINE_EXCEEDED); with an infinite one, fails at
  // once with UNAVAILABLE.
  absl::StatusOr<std::vector<TableInfo>> ServerInfo(
      absl::Duration timeout, Cancellation* cancel = nullptr);

  absl::StatusOr<MutationResult> MutatePriorities(
      const std::string& table, absl::Span<const std::pair<Key, double>> updates,
      absl::Span<const Key> deletes, absl::Duration timeout,
      Cancellation* cancel = nullptr);

  absl::Status Reset(const std::string& table, absl::Duration timeout,
                     Cancellation* cancel = nullptr);

  // Path of the checkpoint the server wrote.
  absl::StatusOr<std::string> Checkpoint(absl::Duration timeout,
                                         Cancellation* cancel = nullptr);

  // Samples exactly `num_samples` items (unless an error ends the stream),
  // through a Sampler with `options` whose max_in_flight and max_samples are
  // num_samples.
  absl::StatusOr<std::vector<Sample>> SampleItems(
      const std::string& table, int64_t num_samples, SamplerOptions options,
      Cancellation* cancel = nullptr);

  absl::StatusOr<std::unique_ptr<TrajectoryWriter>> NewTrajectoryWriter(
      const TrajectoryWriterOptions& options);

  absl::StatusOr<std::unique_ptr<Sampler>> NewSampler(const std::string& table,
                                                      const SamplerOptions& options);

 private:
  Client(std::string address, std::shared_ptr<ClientStub> stub);

  const std::string address_;
  const std::shared_ptr<ClientStub> stub_;
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_CLIENT_CLIENT_H_
