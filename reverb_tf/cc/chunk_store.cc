// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/chunk_store.h"

#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "reverb_tf/cc/platform/status_macros.h"

namespace reverb_tf {

namespace {

// Buffers of dead chunks, by capacity, for the next chunks of about that
// size. Its mutex is a leaf: chunks die under tables' locks. A thread of
// its own frees, once per period, the buffers nobody took during a whole
// period, so that a server whose data went (a reset, say) gives the memory
// back without waiting for more traffic.
class RecycledBuffers {
 public:
  explicit RecycledBuffers(int64_t max_bytes)
      : max_bytes_(max_bytes), ager_([this] { AgeEveryPeriod(); }) {}

  ~RecycledBuffers() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    ager_.join();
  }

  void Give(std::string buffer) ABSL_LOCKS_EXCLUDED(mu_) {
    const size_t capacity = buffer.capacity();
    if (capacity < ChunkStore::kMinRecycledBytes) return;
    absl::MutexLock lock(&mu_);
    // Over the bound, the buffer is freed on return, unlocked.
    if (bytes_ + static_cast<int64_t>(capacity) > max_bytes_) return;
    buffer.clear();
    bytes_ += static_cast<int64_t>(capacity);
    buffers_.emplace(capacity, Kept{std::move(buffer), period_});
  }

  std::string Take(size_t size) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto it = buffers_.lower_bound(size);
    if (it == buffers_.end() || it->first > size + size / 8 + 4096) return {};
    std::string buffer = std::move(it->second.buffer);
    bytes_ -= static_cast<int64_t>(it->first);
    taken_bytes_ += static_cast<int64_t>(it->first);
    buffers_.erase(it);
    return buffer;
  }

  int64_t bytes() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return bytes_;
  }

  void FreeAll() ABSL_LOCKS_EXCLUDED(mu_) {
    std::multimap<size_t, Kept> freed;
    {
      absl::MutexLock lock(&mu_);
      freed.swap(buffers_);
      bytes_ = 0;
    }
  }  // freed unlocked

  int64_t taken_bytes() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return taken_bytes_;
  }

 private:
  struct Kept {
    std::string buffer;
    int64_t period;  // the one it came back in
  };

  void AgeEveryPeriod() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    while (!mu_.AwaitWithTimeout(absl::Condition(&stopping_),
                                 ChunkStore::kRecycledBufferPeriod)) {
      std::vector<std::string> expired;
      for (auto it = buffers_.begin(); it != buffers_.end();) {
        if (it->second.period < period_) {
          bytes_ -= static_cast<int64_t>(it->first);
          expired.push_back(std::move(it->second.buffer));
          it = buffers_.erase(it);
        } else {
          ++it;
        }
      }
      ++period_;
      mu_.Unlock();
      expired.clear();  // freed unlocked
      mu_.Lock();
    }
  }

  const int64_t max_bytes_;
  mutable absl::Mutex mu_;
  std::multimap<size_t, Kept> buffers_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t taken_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t period_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread ager_;  // last: starts once the rest is built
};

}  // namespace

struct Chunk::Accounting {
  std::atomic<int64_t> num_chunks{0};
  std::atomic<int64_t> num_bytes{0};
  // One reference for the store plus one per live chunk.
  std::atomic<int64_t> refs{1};
  // Set while the store recycles buffers (RecycleBuffers); chunks that die
  // give theirs back. Replaced only by the store, which must not race its
  // chunks' deaths with RecycleBuffers (it is called while none die).
  std::shared_ptr<RecycledBuffers> recycled;

  void Unref() {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
};

namespace {

size_t AllocationSize(size_t rank, bool compressed, size_t lanes,
                      size_t data_size, bool external) {
  return sizeof(Chunk) +
         (rank + (compressed ? 1 : 0) + lanes) * sizeof(int64_t) +
         (external ? sizeof(std::string) : data_size);
}

static_assert(sizeof(Chunk) == 40,
              "keep a chunk's header at 40 bytes (see data layout)");

}  // namespace

TensorPayload Chunk::ToPayload() const {
  TensorPayload payload;
  payload.dtype = dtype();
  payload.shape.assign(dims(), dims() + rank_);
  payload.compression = compression();
  payload.uncompressed_size = uncompressed_size();
  payload.data.assign(bytes(), data_size_);
  return payload;
}

int64_t Chunk::ByteSize() const {
  return static_cast<int64_t>(AllocationSize(rank_, compression_ != 0,
                                             num_lanes(), data_size_,
                                             is_external()) +
                              (is_external() ? external()->capacity() : 0));
}

void Chunk::Unref() const {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  Accounting* accounting = accounting_;
  accounting->num_chunks.fetch_sub(1, std::memory_order_relaxed);
  accounting->num_bytes.fetch_sub(ByteSize(), std::memory_order_relaxed);
  if (is_external()) {
    using String = std::string;
    String* buffer = const_cast<String*>(external());
    if (accounting->recycled != nullptr) {
      accounting->recycled->Give(std::move(*buffer));
    }
    buffer->~String();
  }
  this->~Chunk();
  ::operator delete(const_cast<Chunk*>(this));
  accounting->Unref();
}

ChunkStore::ChunkStore() : accounting_(new Chunk::Accounting) {}

ChunkStore::~ChunkStore() { accounting_->Unref(); }

absl::StatusOr<ChunkRef> ChunkStore::Insert(
    ChunkKey key, uint64_t episode_id, int32_t episode_step,
    TensorPayload payload, absl::Span<const uint64_t> lane_episode_ids) {
  RETURN_IF_ERROR(payload.Validate());
  if (payload.shape.empty() || payload.shape[0] < 1 ||
      payload.shape[0] > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk ", key,
        " must have between 1 and 2^31-1 steps along dimension 0, shape ",
        ShapeDebugString(payload.shape)));
  }
  if (payload.shape.size() > UINT8_MAX || payload.data.size() > UINT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk ", key, " is too large: rank ", payload.shape.size(), ", ",
        payload.data.size(), " bytes (limits: rank 255, 4 GiB)"));
  }
  if (episode_step < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk ", key, " has negative episode step ", episode_step));
  }
  const size_t lanes = lane_episode_ids.size();
  if (lanes > 0 && payload.shape[0] % static_cast<int64_t>(lanes) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", key, " has episode ids for ", lanes,
                     " lanes but its number of rows, ", payload.shape[0],
                     ", is not a multiple of that"));
  }
  const size_t rank = payload.shape.size();
  const bool external = payload.data.size() > Chunk::kInlineBytes;
  const bool compressed = payload.compression != Compression::kNone;
  void* memory = ::operator new(
      AllocationSize(rank, compressed, lanes, payload.data.size(), external));
  Chunk* chunk = new (memory) Chunk();
  chunk->episode_step_ = episode_step;
  chunk->key_ = key;
  chunk->episode_id_ = lanes > 0 ? lanes : episode_id;
  chunk->accounting_ = accounting_;
  chunk->data_size_ = static_cast<uint32_t>(payload.data.size());
  chunk->dtype_ = static_cast<uint8_t>(payload.dtype);
  chunk->compression_ = static_cast<uint8_t>(payload.compression);
  chunk->rank_ = static_cast<uint8_t>(rank);
  chunk->flags_ =
      (external ? Chunk::kExternal : 0) | (lanes > 0 ? Chunk::kLanes : 0);
  std::memcpy(const_cast<int64_t*>(chunk->dims()), payload.shape.data(),
              rank * sizeof(int64_t));
  if (compressed) *chunk->UncompressedSizeSlot() = payload.uncompressed_size;
  if (lanes > 0) {
    std::memcpy(const_cast<uint64_t*>(chunk->LaneEpisodeIds()),
                lane_episode_ids.data(), lanes * sizeof(uint64_t));
  }
  if (external) {
    new (chunk->tail()) std::string(std::move(payload.data));
  } else {
    std::memcpy(chunk->tail(), payload.data.data(), payload.data.size());
  }
  accounting_->refs.fetch_add(1, std::memory_order_relaxed);
  accounting_->num_chunks.fetch_add(1, std::memory_order_relaxed);
  accounting_->num_bytes.fetch_add(chunk->ByteSize(),
                                   std::memory_order_relaxed);
  return ChunkRef(chunk);
}

int64_t ChunkStore::num_live_chunks() const {
  return accounting_->num_chunks.load(std::memory_order_relaxed);
}

int64_t ChunkStore::num_live_bytes() const {
  return accounting_->num_bytes.load(std::memory_order_relaxed);
}

void ChunkStore::RecycleBuffers(int64_t max_bytes) {
  accounting_->recycled =
      max_bytes > 0 ? std::make_shared<RecycledBuffers>(max_bytes) : nullptr;
}

std::string ChunkStore::TakeBuffer(size_t size) {
  const std::shared_ptr<RecycledBuffers>& recycled = accounting_->recycled;
  return recycled != nullptr ? recycled->Take(size) : std::string();
}

void ChunkStore::FreeRecycledBuffers() {
  const std::shared_ptr<RecycledBuffers>& recycled = accounting_->recycled;
  if (recycled != nullptr) recycled->FreeAll();
}

int64_t ChunkStore::num_recycled_bytes() const {
  const std::shared_ptr<RecycledBuffers>& recycled = accounting_->recycled;
  return recycled != nullptr ? recycled->bytes() : 0;
}

int64_t ChunkStore::num_recycled_bytes_taken() const {
  const std::shared_ptr<RecycledBuffers>& recycled = accounting_->recycled;
  return recycled != nullptr ? recycled->taken_bytes() : 0;
}

}  // namespace reverb_tf
