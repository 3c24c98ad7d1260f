// SPDX-License-Identifier: Apache-2.0
// The queue of items, the stream to the server and its send and receive
// loops.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/client_context.h"
#include "reverb_tf/cc/client/client_stub.h"
#include "reverb_tf/cc/client/trajectory_writer.h"
#include "reverb_tf/cc/client/trajectory_writer_internal.h"
#include "reverb_tf/cc/platform/deadline.h"
#include "reverb_tf/cc/platform/status_macros.h"
#include "reverb_tf/cc/proto/service.grpc.pb.h"
#include "reverb_tf/cc/wire/conversions.h"
#include "reverb_tf/cc/wire/insert_frame.h"

namespace reverb_tf {

using writer_internal::kHoldBytes;
using writer_internal::kLinger;
using writer_internal::kMaxHold;
using writer_internal::kReleaseBatch;
using writer_internal::kSendBatch;

absl::Status TrajectoryWriter::EnqueueLocked(
    std::vector<std::unique_ptr<QueuedItem>> items, absl::Duration timeout,
    Cancellation* cancel) {
  int64_t count = 0;
  for (const auto& queued : items) count += queued->count();
  // A batch larger than the window goes in once the window is empty.
  const int64_t room = std::max<int64_t>(options_.max_in_flight_items, count);
  RETURN_IF_ERROR(AwaitLocked(
      [this, count, room]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return in_flight_ + count <= room;
      },
      timeout, cancel, count == 1 ? "queue an item" : "queue the items"));
  RETURN_IF_ERROR(EnsureStreamLocked());
  // Only now: an item that timed out above is not queued, and its chunks
  // must still go with whichever item references them next.
  const absl::Time now = absl::Now();
  for (auto& queued : items) {
    for (const auto& chunk : queued->chunks) chunk->scheduled = true;
    queued->enqueued = now;
    queued_items_ += queued->count();
    queued_bytes_ += queued->chunk_bytes();
    queue_.push_back(std::move(queued));
  }
  in_flight_ += count;
  cv_.SignalAll();
  return absl::OkStatus();
}

absl::Status TrajectoryWriter::Connect() {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(ErrorLocked());
  return EnsureStreamLocked();
}

absl::Status TrajectoryWriter::EnsureStreamLocked() {
  if (stream_ != nullptr) return absl::OkStatus();
  auto stream = std::make_unique<WriterStream>();
  // Every registered server takes insert streams (local_insert_stream.h).
  if (auto local = std::dynamic_pointer_cast<LocalInsertServer>(stub_->Local());
      local != nullptr) {
    ASSIGN_OR_RETURN(stream->local, local->OpenInsertStream());
    stream->takes_item_batches = true;  // the same build as this client
  }
  stream_ = std::move(stream);
  // In-process: nothing to read, acknowledgements come back from Write().
  if (stream_->local == nullptr) {
    stub_->Prepare(&stream_->context);
    // The generated stub only writes InsertRequest messages; this call
    // writes the bytes of InsertFrame's, to the same method.
    static const grpc::internal::RpcMethod kInsertStream(
        "/reverb_tf.proto.ReplayService/InsertStream",
        grpc::internal::RpcMethod::BIDI_STREAMING);
    stream_->rw.reset(grpc::internal::ClientReaderWriterFactory<
                      grpc::ByteBuffer,
                      proto::InsertResponse>::Create(stub_->channel(),
                                                     kInsertStream,
                                                     &stream_->context));
    receiver_ =
        std::thread([this, stream = stream_.get()] { ReceiveLoop(stream); });
  }
  sender_ = std::thread([this, stream = stream_.get()] { SendLoop(stream); });
  return absl::OkStatus();
}

namespace {

// `batch` as the single items an older server takes: item i is the batch's
// columns with each slice moved on by lanes[i] rows.
void AddBatchAsItems(const proto::ItemBatch& batch,
                     proto::InsertRequest* request) {
  for (int i = 0; i < batch.keys_size(); ++i) {
    proto::Item* item = request->add_items();
    item->set_key(batch.keys(i));
    item->set_table(batch.table());
    item->set_priority(batch.priorities(i));
    item->set_unchecked(batch.unchecked());
    *item->mutable_columns() = batch.columns();
    for (proto::Column& column : *item->mutable_columns()) {
      for (proto::Slice& slice : *column.mutable_slices()) {
        slice.set_offset(slice.offset() + batch.lanes(i));
      }
    }
  }
}

// One InsertRequest being put together. An in-process server takes the
// bytes it is given, so it gets a copy in the request; a remote one gets
// them in place, in the frame.
class InsertMessage {
 public:
  InsertMessage(bool local, bool takes_item_batches, int64_t timeout_ms)
      : local_(local), takes_item_batches_(takes_item_batches) {
    request_.set_rate_limiter_timeout_ms(timeout_ms);
  }

  void AddChunk(const std::shared_ptr<WriterChunk>& chunk) {
    proto::Chunk* out = local_ ? request_.add_chunks() : &chunk_fields_;
    out->set_key(chunk->key);
    out->set_episode_id(chunk->episode_id);
    out->set_episode_step(chunk->episode_step);
    out->mutable_lane_episode_ids()->Assign(chunk->lane_episode_ids.begin(),
                                            chunk->lane_episode_ids.end());
    if (local_) {
      PayloadToProto(*chunk->payload, out->mutable_tensor());
      return;
    }
    tensor_fields_.Clear();
    PayloadMetadataToProto(*chunk->payload, &tensor_fields_);
    frame_.AddChunk(chunk_fields_, tensor_fields_, chunk->payload->data, chunk);
  }

  void AddItem(proto::Item item) { *request_.add_items() = std::move(item); }

  // As an item batch if the server takes them, else as single items.
  void AddItemBatch(proto::ItemBatch batch) {
    if (takes_item_batches_) {
      *request_.add_item_batches() = std::move(batch);
    } else {
      AddBatchAsItems(batch, &request_);
    }
  }

  void AddReleases(const std::vector<uint64_t>& releases) {
    request_.mutable_release_chunk_keys()->Add(releases.begin(),
                                               releases.end());
  }

  // The request, for an in-process server (which takes its bytes).
  proto::InsertRequest& mutable_request() { return request_; }

  // The message, for a remote server.
  grpc::ByteBuffer Finish() { return frame_.Finish(request_); }

 private:
  const bool local_;
  const bool takes_item_batches_;
  proto::InsertRequest request_;
  InsertFrame frame_;
  // A remote chunk's fields, reused from chunk to chunk.
  proto::Chunk chunk_fields_;
  proto::Tensor tensor_fields_;
};

}  // namespace

void TrajectoryWriter::SendLoop(WriterStream* stream) {
  const int64_t byte_budget = stub_->max_message_bytes() / 2;
  const int64_t timeout_ms = TimeoutToMs(options_.rate_limiter_timeout);
  absl::MutexLock lock(&mu_);
  while (AwaitSendLocked(*stream)) {
    // Only the taking is done under the lock: the message is built outside
    // it, so that the writer's thread never waits for the lock (and this
    // thread never has to wake it) while a message is put together. Queued
    // items and their closed chunks are no longer changed by anyone.
    const bool takes_item_batches = stream->takes_item_batches;
    std::vector<std::unique_ptr<QueuedItem>> batch =
        TakeBatchLocked(takes_item_batches, byte_budget);
    // Releases only once every queued item is in a message: a release applies
    // after the items of its message, and queued items may use the chunk.
    std::vector<uint64_t> releases;
    if (queue_.empty()) releases.swap(release_queue_);
    mu_.Unlock();
    const absl::Status sent = SendBatch(stream, std::move(batch), releases,
                                        takes_item_batches, timeout_ms);
    mu_.Lock();
    if (!sent.ok()) {
      // A broken remote stream: Finish() (in the receiver) will tell why;
      // until then, a placeholder.
      if (stream->local == nullptr && error_.ok()) {
        stream->provisional_error = true;
      }
      FailLocked(sent);
      break;
    }
  }
  EndSendingLocked(stream);
}

bool TrajectoryWriter::AwaitSendLocked(const WriterStream& stream) {
  static constexpr auto must_send =
      +[](TrajectoryWriter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) {
        return w->queued_items_ >= static_cast<int64_t>(kSendBatch) ||
               w->flush_requested_ ||
               w->in_flight_ >= w->options_.max_in_flight_items ||
               w->release_queue_.size() >= kReleaseBatch || w->closing_ ||
               !w->error_.ok() || w->stream_->reads_done;
      };
  // Nagle's rule (kMaxHold): what is queued may go once nothing sent is
  // waiting for its acknowledgement, or once it is no longer small.
  static constexpr auto may_send =
      +[](TrajectoryWriter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) {
        return w->in_flight_ == w->queued_items_ ||
               w->queued_bytes_ >= kHoldBytes || must_send(w);
      };
  mu_.Await(absl::Condition(
      +[](TrajectoryWriter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) {
        return !w->queue_.empty() ||
               w->release_queue_.size() >= kReleaseBatch || w->closing_ ||
               !w->error_.ok() || w->stream_->reads_done;
      },
      this));
  if (!queue_.empty()) {
    mu_.AwaitWithDeadline(absl::Condition(must_send, this),
                          queue_.front()->enqueued + kLinger);
  }
  if (!queue_.empty()) {
    mu_.AwaitWithDeadline(absl::Condition(may_send, this),
                          queue_.front()->enqueued + kMaxHold);
  }
  flush_requested_ = false;
  if (!error_.ok() || stream.reads_done) return false;
  return !(closing_ && queue_.empty());
}

std::vector<std::unique_ptr<TrajectoryWriter::QueuedItem>>
TrajectoryWriter::TakeBatchLocked(bool takes_item_batches,
                                  int64_t byte_budget) {
  std::vector<std::unique_ptr<QueuedItem>> batch;
  int64_t bytes = 0;
  bool has_item_batch = false;
  while (!queue_.empty() && (batch.empty() || bytes < byte_budget)) {
    QueuedItem& next = *queue_.front();
    // A request stores its items before its item batches: an item queued
    // after a batch waits for the next request.
    if (has_item_batch && !next.is_batch()) break;
    has_item_batch |= next.is_batch() && takes_item_batches;
    const int64_t item_bytes = next.chunk_bytes();
    bytes += item_bytes;
    queued_bytes_ -= item_bytes;
    queued_items_ -= next.count();
    batch.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  return batch;
}

absl::Status TrajectoryWriter::SendBatch(
    WriterStream* stream, std::vector<std::unique_ptr<QueuedItem>> batch,
    const std::vector<uint64_t>& releases, bool takes_item_batches,
    int64_t timeout_ms) {
  const bool local = stream->local != nullptr;
  InsertMessage message(local, takes_item_batches, timeout_ms);
  for (std::unique_ptr<QueuedItem>& queued : batch) {
    for (const auto& chunk : queued->chunks) message.AddChunk(chunk);
    if (queued->is_batch()) {
      message.AddItemBatch(std::move(queued->batch));
    } else {
      message.AddItem(std::move(queued->item));
    }
  }
  message.AddReleases(releases);
  batch.clear();  // the chunks the frame does not hold die here, unlocked
  if (local) {
    const auto acknowledged = [this](const proto::InsertResponse& response) {
      absl::MutexLock lock(&mu_);
      in_flight_ -= response.keys_size();
      cv_.SignalAll();
    };
    return stream->local->Write(message.mutable_request(), acknowledged);
  }
  grpc::ByteBuffer bytes = message.Finish();
  if (!stream->rw->Write(bytes)) {
    return absl::UnavailableError("the insert stream to the server broke");
  }
  return absl::OkStatus();
}

void TrajectoryWriter::EndSendingLocked(WriterStream* stream) {
  if (error_.ok() && !stream->reads_done && stream->local == nullptr) {
    mu_.Unlock();
    stream->rw->WritesDone();
    mu_.Lock();
  }
  stream->sender_done = true;
  cv_.SignalAll();
}

void TrajectoryWriter::ReceiveLoop(WriterStream* stream) {
  proto::InsertResponse response;
  while (stream->rw->Read(&response)) {
    absl::MutexLock lock(&mu_);
    if (response.takes_item_batches()) stream->takes_item_batches = true;
    in_flight_ -= response.keys_size();
    cv_.SignalAll();
  }
  absl::MutexLock lock(&mu_);
  stream->reads_done = true;
  cv_.SignalAll();
  // Finish() must not race the sender's Write()/WritesDone().
  mu_.Await(absl::Condition(&stream->sender_done));
  mu_.Unlock();
  const absl::Status status = stub_->RpcStatus(stream->rw->Finish());
  mu_.Lock();
  if (closing_) {
    // Close() ended the stream; nothing is waiting for the outcome.
  } else if (!status.ok()) {
    if (error_.ok() || stream->provisional_error) error_ = status;
  } else {
    FailLocked(absl::UnavailableError("the server ended the insert stream"));
  }
  stream->provisional_error = false;
  stream->receiver_done = true;
  cv_.SignalAll();
}

}  // namespace reverb_tf
