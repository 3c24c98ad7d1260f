#include "reverb_tf/cc/chunk_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "reverb_tf/cc/platform/status_macros.h"

namespace reverb_tf {

Chunk::Chunk(ChunkKey key, uint64_t episode_id, int32_t episode_step,
             TensorPayload payload, std::shared_ptr<Accounting> accounting)
    : key_(key),
      episode_id_(episode_id),
      episode_step_(episode_step),
      payload_(std::move(payload)),
      accounting_(std::move(accounting)) {
  accounting_->num_chunks.fetch_add(1, std::memory_order_relaxed);
  accounting_->num_bytes.fetch_add(ByteSize(), std::memory_order_relaxed);
}

Chunk::~Chunk() {
  accounting_->num_chunks.fetch_sub(1, std::memory_order_relaxed);
  accounting_->num_bytes.fetch_sub(ByteSize(), std::memory_order_relaxed);
}

int64_t Chunk::ByteSize() const {
  // Strings of up to 15 bytes live inside std::string (SSO).
  const int64_t heap_data = payload_.data.capacity() > 15 ? payload_.data.capacity() : 0;
  return static_cast<int64_t>(sizeof(Chunk)) + heap_data;
}

ChunkStore::ChunkStore() : accounting_(std::make_shared<Chunk::Accounting>()) {}

absl::StatusOr<std::shared_ptr<const Chunk>> ChunkStore::Insert(
    ChunkKey key, uint64_t episode_id, int32_t episode_step,
    TensorPayload payload) {
  RETURN_IF_ERROR(payload.Validate());
  if (payload.shape.empty() || payload.shape[0] < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk ", key, " must have at least one step along dimension 0, shape ",
        ShapeDebugString(payload.shape)));
  }
  if (payload.shape[0] > INT32_MAX || episode_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", key, " has an out-of-range step range"));
  }
  return std::shared_ptr<const Chunk>(std::make_shared<Chunk>(
      key, episode_id, episode_step, std::move(payload), accounting_));
}

int64_t ChunkStore::num_live_chunks() const {
  return accounting_->num_chunks.load(std::memory_order_relaxed);
}

int64_t ChunkStore::num_live_bytes() const {
  return accounting_->num_bytes.load(std::memory_order_relaxed);
}

}  // namespace reverb_tf
