// SPDX-License-Identifier: Apache-2.0
// Internal to TrajectoryWriter (trajectory_writer.h), whose definition is
// split by concern: trajectory_writer.cc (steps, items, flushes, history),
// trajectory_writer_lanes.cc (batched writing), trajectory_writer_chunks.cc
// (chunking and the items' references) and trajectory_writer_stream.cc (the
// queue, the stream and its send and receive loops). This header holds
// what they share: the writer's private structures and tuning constants.
//
// Thread safety: the structures are guarded by the writer's mutex, as its
// header states; WriterStream's fields belong to the thread the header
// names for each.
#ifndef REVERB_TF_CC_CLIENT_TRAJECTORY_WRITER_INTERNAL_H_
#define REVERB_TF_CC_CLIENT_TRAJECTORY_WRITER_INTERNAL_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "absl/time/time.h"
#include "grpcpp/client_context.h"
#include "reverb_tf/cc/client/client_stub.h"
#include "reverb_tf/cc/client/trajectory_writer.h"
#include "reverb_tf/cc/local_server.h"
#include "reverb_tf/cc/proto/service.grpc.pb.h"
#include "reverb_tf/cc/tensor_payload.h"
#include "reverb_tf/cc/wire/local_insert_stream.h"

namespace reverb_tf {

// A closed chunk of one column. Its payload stays here while any of its cells
// is referenceable (ReadCells() serves Python's TrajectoryColumn.numpy() from
// it), and is never changed: the message that carries the chunk to a remote
// server hands gRPC its bytes in place (wire/insert_frame.h) and keeps the
// chunk alive until they are sent, so nothing is copied.
struct WriterChunk {
  uint64_t key = 0;
  uint64_t episode_id = 0;
  // A batched writer's chunks are lane chunks (chunk_store.h): one row per
  // lane and step, lane b's episode here at b.
  std::vector<uint64_t> lane_episode_ids;
  int32_t episode_step = 0;
  int32_t num_steps = 0;
  std::optional<TensorPayload> payload;
  // Attached to a queued item, so on (or on its way to) the server.
  bool scheduled = false;
  // The writer's build_round_ in which an item being built took it along:
  // the other items of that call (other lanes) must not send it again.
  uint64_t claimed_in = 0;
};

struct TrajectoryWriter::ColumnState {
  bool initialized = false;
  DType dtype = DType::kInvalid;
  Shape step_shape;
  int32_t keep_alive = 1;
  int32_t max_chunk_length = 1;
  // Payloads of the open chunk's steps (in a batched writer each has a
  // leading dimension of num_lanes: one row per lane), and the first one's
  // episode step.
  std::vector<TensorPayload> open;
  int32_t open_episode_step = 0;
  // Referenceable cells in step order; the last open.size() are open.
  std::deque<Cell> cells;
};

// One item, or (a batched writer's create_items) the items of several lanes
// as one ItemBatch.
struct TrajectoryWriter::QueuedItem {
  absl::Time enqueued;
  proto::Item item;
  // Used instead of `item` when it has keys.
  proto::ItemBatch batch;
  std::vector<std::shared_ptr<WriterChunk>> chunks;

  bool is_batch() const { return batch.keys_size() > 0; }
  int64_t count() const { return is_batch() ? batch.keys_size() : 1; }
  // The bytes of the chunks this item brings to its message.
  int64_t chunk_bytes() const {
    int64_t bytes = 0;
    for (const auto& chunk : chunks) {
      bytes += static_cast<int64_t>(chunk->payload->data.size());
    }
    return bytes;
  }
};

struct WriterStream {
  // A server of this process (local_server.h): messages go to it
  // directly, acknowledged as they are stored; no receiver thread.
  std::unique_ptr<LocalInsertStream> local;
  grpc::ClientContext context;
  // Writes serialized InsertRequests (InsertFrame), reads InsertResponses.
  std::unique_ptr<
      grpc::ClientReaderWriter<grpc::ByteBuffer, proto::InsertResponse>>
      rw;
  bool sender_done = false;
  // Read() has returned false: nothing more will be acknowledged.
  bool reads_done = false;
  bool receiver_done = false;
  // Error set from a broken write, to be replaced by Finish()'s status.
  bool provisional_error = false;
  // The server stores InsertRequest.item_batches: it said so in a response
  // (or it is this process's). Until then batches go as single items.
  bool takes_item_batches = false;
};

namespace writer_internal {

inline constexpr size_t kReleaseBatch = 64;
// The sender waits until this many items are queued, a flush asks, or the
// oldest queued item has waited kLinger: many small items then share one
// message (and one wake-up of every thread on the path) instead of one each.
inline constexpr size_t kSendBatch = 64;
inline constexpr absl::Duration kLinger = absl::Milliseconds(1);
// Past kLinger, while an earlier message is unacknowledged, the sender holds
// a small message (under kHoldBytes of chunks) until that acknowledgement
// comes, up to kMaxHold after its oldest item was queued (Nagle's rule). A
// busy server acknowledges late, so its writers' messages grow just when
// the cost it pays per message matters: a fleet of writers of small items
// costs it fewer messages, while an idle server's writers see no delay.
inline constexpr int64_t kHoldBytes = 64 << 10;
inline constexpr absl::Duration kMaxHold = absl::Milliseconds(10);
// Environments of one batched writer: far beyond any vectorised environment,
// and small enough that columns * lanes stays a modest table.
inline constexpr int32_t kMaxLanes = 65536;

}  // namespace writer_internal
}  // namespace reverb_tf

#endif  // REVERB_TF_CC_CLIENT_TRAJECTORY_WRITER_INTERNAL_H_
