// SPDX-License-Identifier: Apache-2.0
// ReplayService::InsertSession: one insert stream's work, shared by the
// InsertStream RPC (insert_stream.cc) and in-process writers.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "reverb_tf/cc/platform/deadline.h"
#include "reverb_tf/cc/platform/out_of_memory.h"
#include "reverb_tf/cc/platform/status_macros.h"
#include "reverb_tf/cc/service/replay_service.h"
#include "reverb_tf/cc/service/service_messages.h"
#include "reverb_tf/cc/wire/conversions.h"

namespace reverb_tf {

using service_internal::WordTimeout;

ReplayService::InsertSession::InsertSession(ReplayService* service,
                                            Cancellation* cancel)
    : service_(service),
      cancel_(cancel),
      open_streams_(service->insert_streams_) {
  open_streams_->fetch_add(1, std::memory_order_relaxed);
}

ReplayService::InsertSession::~InsertSession() {
  open_streams_->fetch_sub(1, std::memory_order_relaxed);
}

absl::Status ReplayService::InsertSession::AddChunk(proto::Chunk& proto_chunk,
                                                    absl::Time deadline) {
  const Limits& limits = service_->limits_;
  if (MemoryBudget* budget = service_->budget_;
      budget != nullptr && !budget->HasRoom()) {
    // Before the chunk's bytes are copied into the store: a stream may not
    // grow the server past its budget any more than an item may.
    RETURN_IF_ERROR(budget->AwaitRoom(
        deadline, cancel_, absl::StrCat("store chunk ", proto_chunk.key())));
  }
  auto payload = PayloadFromProto(proto_chunk.mutable_tensor());
  // A stored chunk must decompress to what it declares for every client
  // that samples it, so compressed chunks are decoded once here.
  if (payload.ok()) {
    if (absl::Status verified = VerifyCompressed(*payload); !verified.ok()) {
      payload = verified;
    }
  }
  if (!payload.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk ", proto_chunk.key(), ": ", payload.status().message()));
  }
  ASSIGN_OR_RETURN(ChunkRef chunk,
                   service_->chunk_store_.Insert(
                       proto_chunk.key(), proto_chunk.episode_id(),
                       proto_chunk.episode_step(), *std::move(payload),
                       proto_chunk.lane_episode_ids()));
  ChunkRef& slot = chunks_[proto_chunk.key()];
  if (slot != nullptr) chunk_bytes_ -= slot->data_size();
  slot = std::move(chunk);
  chunk_bytes_ += slot->data_size();
  if (chunk_bytes_ > limits.max_stream_chunk_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("this stream holds ", chunk_bytes_,
                     " bytes of chunks, more than the server's limit ", "of ",
                     limits.max_stream_chunk_bytes,
                     "; release chunks no item will reference again"));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> ReplayService::InsertSession::Process(
    proto::InsertRequest& request, Ack ack) {
  Begin(&request);
  ASSIGN_OR_RETURN(Progress progress, Continue(/*may_block=*/true, ack));
  return progress == Progress::kDone;
}

void ReplayService::InsertSession::Begin(proto::InsertRequest* request) {
  End();
  request_ = request;
  timeout_ = TimeoutFromMs(request->rate_limiter_timeout_ms());
  chunk_deadline_ = DeadlineAfter(timeout_);
  ServiceMetrics& metrics = service_->metrics_;
  metrics.items_received[ServiceMetrics::kItem].fetch_add(
      request->items_size(), std::memory_order_relaxed);
  for (const proto::ItemBatch& batch : request->item_batches()) {
    metrics.items_received[ServiceMetrics::kItemBatch].fetch_add(
        batch.keys_size(), std::memory_order_relaxed);
  }
  // Every acknowledgement tells the client it may send item batches.
  response_.set_takes_item_batches(true);
}

void ReplayService::InsertSession::End() {
  request_ = nullptr;
  next_chunk_ = 0;
  decoded_ = false;
  runs_.clear();
  run_ = 0;
  next_item_ = 0;
  response_.Clear();
}

absl::StatusOr<ReplayService::InsertSession::Progress>
ReplayService::InsertSession::Continue(bool may_block, Ack ack) {
  // Whatever ends the message with an error ends the stream: its state
  // goes with it.
  absl::StatusOr<Progress> progress = [&]() -> absl::StatusOr<Progress> {
    MemoryBudget* const budget = service_->budget_;
    auto& chunks = *request_->mutable_chunks();
    for (; next_chunk_ < chunks.size(); ++next_chunk_) {
      if (!may_block && budget != nullptr && !budget->HasRoom())
        return Progress::kMustWait;
      proto::Chunk& proto_chunk = chunks[next_chunk_];
      RETURN_IF_ERROR(CatchOutOfMemory(
          [&] {
            return absl::StrCat("storing chunk ", proto_chunk.key(), " (",
                                proto_chunk.tensor().data().size(), " bytes)");
          },
          [&] { return AddChunk(proto_chunk, chunk_deadline_); }));
    }
    if (!decoded_) {
      DecodeRuns();
      decoded_ = true;
    }
    ASSIGN_OR_RETURN(Progress stored, StoreRuns(may_block, ack));
    if (stored != Progress::kDone) return stored;
    const WriteAheadLog* wal = service_->wal_;
    if (!may_block && wal != nullptr &&
        wal->options().sync == WalSync::kEveryWrite) {
      return Progress::kMustWait;
    }
    for (ChunkKey key : request_->release_chunk_keys()) {
      auto it = chunks_.find(key);
      if (it == chunks_.end()) continue;
      chunk_bytes_ -= it->second->data_size();
      chunks_.erase(it);
    }
    // Acknowledged only once logged (a no-op without a write-ahead log).
    RETURN_IF_ERROR(service_->CommitLog());
    return ack(response_) ? Progress::kDone : Progress::kClientGone;
  }();
  if (!progress.ok() || *progress != Progress::kMustWait) End();
  return progress;
}

void ReplayService::InsertSession::DecodeRuns() {
  const auto find_table = [this](const std::string& name, uint64_t key,
                                 Run* run) {
    auto table = service_->FindTable(name);
    if (!table.ok()) {
      // An item naming a table the server lacks is a bad item (dm-reverb
      // reports it as an invalid argument too), not a missing resource.
      run->then = absl::InvalidArgumentError(
          absl::StrCat("item ", key, ": ", table.status().message()));
      return false;
    }
    run->table = *std::move(table);
    return true;
  };
  // Runs of items for one table are stored with one call each; an item
  // that fails to decode ends its run (and the message, once the items
  // before it are stored). Decoding reads only the stream's chunks, so
  // doing it before storing anything is the same as doing it run by run.
  const auto& proto_items = request_->items();
  for (int first = 0; first < proto_items.size();) {
    Run& run = runs_.emplace_back();
    const std::string& name = proto_items[first].table();
    if (!find_table(name, proto_items[first].key(), &run)) return;
    int end = first;
    for (; end < proto_items.size() && proto_items[end].table() == name;
         ++end) {
      absl::StatusOr<Item> item = ItemFromProto(proto_items[end], chunks_);
      if (!item.ok()) {
        run.then = item.status();
        return;
      }
      run.items.push_back(*std::move(item));
    }
    first = end;
  }
  for (const proto::ItemBatch& batch : request_->item_batches()) {
    Run& run = runs_.emplace_back();
    if (!find_table(batch.table(), batch.keys().empty() ? 0 : batch.keys(0),
                    &run)) {
      return;
    }
    run.then = ItemsFromBatch(batch, chunks_, &run.items);
    if (!run.then.ok()) return;
  }
}

absl::StatusOr<ReplayService::InsertSession::Progress>
ReplayService::InsertSession::StoreRuns(bool may_block, Ack ack) {
  for (; run_ < runs_.size(); ++run_, next_item_ = 0) {
    Run& run = runs_[run_];
    while (next_item_ < run.items.size()) {
      Table& table = *run.table;
      const absl::Span<Item> items = absl::MakeSpan(run.items);
      int64_t stored = 0;
      const absl::Status status =
          table.InsertAvailable(items.subspan(next_item_), &stored);
      for (int64_t i = 0; i < stored; ++i) {
        response_.add_keys(items[next_item_ + i].key);  // moved from: keys stay
      }
      next_item_ += static_cast<size_t>(stored);
      if (status.ok()) break;
      if (status.code() != absl::StatusCode::kDeadlineExceeded &&
          !MemoryBudget::IsExhausted(status)) {
        return status;
      }
      // About to wait for the rate limiter or the memory budget:
      // acknowledge what is already stored, so the client's
      // flush(block_until_num_items) sees it.
      if (response_.keys_size() > 0) {
        RETURN_IF_ERROR(service_->CommitLog());
        if (!ack(response_)) return Progress::kClientGone;
        response_.clear_keys();
      }
      if (!may_block) return Progress::kMustWait;
      const Key key = items[next_item_].key;
      RETURN_IF_ERROR(WordTimeout(
          table.InsertOrAssign(std::move(items[next_item_]), timeout_, cancel_),
          timeout_, absl::StrCat("insert into table '", table.name(), "'")));
      response_.add_keys(key);
      ++next_item_;
    }
    RETURN_IF_ERROR(run.then);
  }
  return Progress::kDone;
}

}  // namespace reverb_tf
