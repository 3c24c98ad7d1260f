// SPDX-License-Identifier: Apache-2.0
// The InsertStream method and the insert session it shares with
// in-process writers (ReplayService::InsertSession).

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

using service_internal::ParsedStream;
using service_internal::StreamSlot;
using service_internal::WordTimeout;

grpc::Status ReplayService::HandleInsertStream(grpc::ServerContext* context,
                                               RawStream* raw_stream) {
  if (grpc::Status admitted = Admit(context, Role::kWriter, "InsertStream");
      !admitted.ok()) {
    return admitted;
  }
  StreamSlot slot_in_limit(&active_streams_, limits_.max_active_streams);
  if (!slot_in_limit.ok()) return TooManyStreams();
  ParsedStream<proto::InsertRequest, proto::InsertResponse> stream(
      raw_stream, &metrics_, &chunk_store_);
  LatencyHistogram& latency = metrics_.latency[ServiceMetrics::kInsertStream];
  Cancellation cancel;
  const auto watch = cancellation_watcher_.Add(
      [context] { return context->IsCancelled(); }, &cancel);
  InsertSession session(this, &cancel);
  proto::InsertRequest request;
  while (true) {
    absl::StatusOr<bool> read = stream.Read(&request);
    if (!read.ok()) return ToGrpcStatus(read.status());
    if (!*read) break;
    const absl::Time received = absl::Now();
    absl::StatusOr<bool> processed = session.Process(
        request, [&stream](const proto::InsertResponse& response) {
          return stream.Write(response);
        });
    if (!processed.ok()) return ToGrpcStatus(processed.status());
    if (!*processed) break;  // client gone
    latency.Observe(absl::Now() - received);
  }
  return grpc::Status::OK;
}

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
  if (slot != nullptr)
    chunk_bytes_ -= static_cast<int64_t>(slot->data().size());
  slot = std::move(chunk);
  chunk_bytes_ += static_cast<int64_t>(slot->data().size());
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
    proto::InsertRequest& request,
    absl::FunctionRef<bool(const proto::InsertResponse&)> ack) {
  const absl::Duration timeout =
      TimeoutFromMs(request.rate_limiter_timeout_ms());
  const absl::Time chunk_deadline = DeadlineAfter(timeout);
  ServiceMetrics& metrics = service_->metrics_;
  metrics.items_received[ServiceMetrics::kItem].fetch_add(
      request.items_size(), std::memory_order_relaxed);
  for (const proto::ItemBatch& batch : request.item_batches()) {
    metrics.items_received[ServiceMetrics::kItemBatch].fetch_add(
        batch.keys_size(), std::memory_order_relaxed);
  }
  for (proto::Chunk& proto_chunk : *request.mutable_chunks()) {
    RETURN_IF_ERROR(CatchOutOfMemory(
        [&] {
          return absl::StrCat("storing chunk ", proto_chunk.key(), " (",
                              proto_chunk.tensor().data().size(), " bytes)");
        },
        [&] { return AddChunk(proto_chunk, chunk_deadline); }));
  }
  proto::InsertResponse response;
  // Every acknowledgement tells the client it may send item batches.
  response.set_takes_item_batches(true);
  const auto find_table =
      [this](const std::string& name,
             uint64_t key) -> absl::StatusOr<std::shared_ptr<Table>> {
    auto table = service_->FindTable(name);
    if (!table.ok()) {
      // An item naming a table the server lacks is a bad item (dm-reverb
      // reports it as an invalid argument too), not a missing resource.
      return absl::InvalidArgumentError(
          absl::StrCat("item ", key, ": ", table.status().message()));
    }
    return table;
  };
  std::vector<Item> items;
  // Runs of items for one table are stored with one call each; an item
  // that fails to decode ends its run, the items before it stored first.
  const auto& proto_items = request.items();
  for (int first = 0; first < proto_items.size();) {
    const std::string& name = proto_items[first].table();
    ASSIGN_OR_RETURN(std::shared_ptr<Table> table,
                     find_table(name, proto_items[first].key()));
    items.clear();
    absl::Status decoded;
    int end = first;
    for (; end < proto_items.size() && proto_items[end].table() == name;
         ++end) {
      absl::StatusOr<Item> item = ItemFromProto(proto_items[end], chunks_);
      if (!item.ok()) {
        decoded = item.status();
        break;
      }
      items.push_back(*std::move(item));
    }
    ASSIGN_OR_RETURN(bool open, StoreItems(*table, absl::MakeSpan(items),
                                           timeout, &response, ack));
    if (!open) return false;
    RETURN_IF_ERROR(decoded);
    first = end;
  }
  for (const proto::ItemBatch& batch : request.item_batches()) {
    ASSIGN_OR_RETURN(
        std::shared_ptr<Table> table,
        find_table(batch.table(), batch.keys().empty() ? 0 : batch.keys(0)));
    items.clear();
    const absl::Status decoded = ItemsFromBatch(batch, chunks_, &items);
    ASSIGN_OR_RETURN(bool open, StoreItems(*table, absl::MakeSpan(items),
                                           timeout, &response, ack));
    if (!open) return false;
    RETURN_IF_ERROR(decoded);
  }
  for (ChunkKey key : request.release_chunk_keys()) {
    auto it = chunks_.find(key);
    if (it == chunks_.end()) continue;
    chunk_bytes_ -= static_cast<int64_t>(it->second->data().size());
    chunks_.erase(it);
  }
  // Acknowledged only once logged (a no-op without a write-ahead log).
  RETURN_IF_ERROR(service_->CommitLog());
  return ack(response);
}

absl::StatusOr<bool> ReplayService::InsertSession::StoreItems(
    Table& table, absl::Span<Item> items, absl::Duration timeout,
    proto::InsertResponse* response,
    absl::FunctionRef<bool(const proto::InsertResponse&)> ack) {
  size_t next = 0;
  while (next < items.size()) {
    int64_t stored = 0;
    const absl::Status status =
        table.InsertAvailable(items.subspan(next), &stored);
    for (int64_t i = 0; i < stored; ++i) {
      response->add_keys(items[next + i].key);  // moved from: keys stay
    }
    next += static_cast<size_t>(stored);
    if (status.ok()) break;
    if (status.code() != absl::StatusCode::kDeadlineExceeded &&
        !MemoryBudget::IsExhausted(status)) {
      return status;
    }
    // About to wait for the rate limiter or the memory budget: acknowledge
    // what is already stored, so the client's flush(block_until_num_items)
    // sees it.
    if (response->keys_size() > 0) {
      RETURN_IF_ERROR(service_->CommitLog());
      if (!ack(*response)) return false;
      response->clear_keys();
    }
    const Key key = items[next].key;
    RETURN_IF_ERROR(WordTimeout(
        table.InsertOrAssign(std::move(items[next]), timeout, cancel_), timeout,
        absl::StrCat("insert into table '", table.name(), "'")));
    response->add_keys(key);
    ++next;
  }
  return true;
}

}  // namespace reverb_tf
