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
// Threading: the synchronous gRPC API, one handler thread per active stream
// (replay setups have tens of streams, not thousands). That API has no
// cancellation callback, so blocking table calls run in slices of
// kCancellationPoll and check the RPC between slices: a cancelled or
// abandoned call frees its thread within that interval, and Close() on the
// tables frees every thread at once when the server stops.
//
// Thread safety: all handlers may run concurrently; the service itself holds
// only immutable state (the table map) and thread-safe objects.
#ifndef REVERB_TF_CC_SERVICE_REPLAY_SERVICE_H_
#define REVERB_TF_CC_SERVICE_REPLAY_SERVICE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "reverb_tf/cc/chunk_store.h"
#include "reverb_tf/cc/proto/reverb_tf.grpc.pb.h"
#include "reverb_tf/cc/table.h"

namespace reverb_tf {

class ReplayService final : public proto::ReplayService::Service {
 public:
  static constexpr absl::Duration kCancellationPoll = absl::Milliseconds(100);

  // Most samples one table call takes (under the table's lock), whatever
  // flexible_batch_size a client asks for.
  static constexpr int32_t kMaxSamplesPerCall = 1024;
  // Most credits a SampleStream may hold at once (a bound on the counter,
  // not on memory: samples are only taken kMaxSamplesPerCall at a time).
  static constexpr int64_t kMaxCredits = int64_t{1} << 50;

  // `max_response_bytes` bounds the chunk bytes packed into one response;
  // `max_stream_chunk_bytes` the chunk bytes one InsertStream may hold
  // (sent and not yet released): beyond it the stream fails with
  // RESOURCE_EXHAUSTED.
  ReplayService(std::vector<std::shared_ptr<Table>> tables,
                int64_t max_response_bytes, int64_t max_stream_chunk_bytes);

  // Writes a checkpoint and returns its path; unset, the Checkpoint RPC
  // fails with FAILED_PRECONDITION.
  void set_checkpoint_fn(std::function<absl::StatusOr<std::string>()> fn) {
    checkpoint_fn_ = std::move(fn);
  }

  grpc::Status InsertStream(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<proto::InsertResponse, proto::InsertRequest>* stream)
      override;
  grpc::Status SampleStream(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<proto::SampleResponse, proto::SampleRequest>* stream)
      override;
  grpc::Status MutatePriorities(grpc::ServerContext* context,
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
  absl::StatusOr<std::shared_ptr<Table>> FindTable(const std::string& name) const;

  absl::flat_hash_map<std::string, std::shared_ptr<Table>> tables_;
  const int64_t max_response_bytes_;
  const int64_t max_stream_chunk_bytes_;
  ChunkStore chunk_store_;
  std::function<absl::StatusOr<std::string>()> checkpoint_fn_;
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_SERVICE_REPLAY_SERVICE_H_
