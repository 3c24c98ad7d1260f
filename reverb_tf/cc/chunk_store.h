// Chunks and the store that creates them.
//
// A Chunk is an immutable run of consecutive steps of ONE column of one
// episode: its payload has shape [num_steps, step_shape...]. Items never own
// data; they reference slices of chunks (item.h). A chunk is shared through
// std::shared_ptr by every item, in any table, that references it, and is
// freed the moment the last such reference goes away: the reference count is
// the only ownership mechanism, so there is no garbage collection pass and no
// way for a chunk to outlive its last item.
//
// The ChunkStore is the single place chunks are created, so that the server
// can report how many chunks and bytes are live (server_info, memory tests).
//
// Thread safety: Chunk is immutable after construction and safe to share.
// ChunkStore is thread-safe.
#ifndef REVERB_TF_CC_CHUNK_STORE_H_
#define REVERB_TF_CC_CHUNK_STORE_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "reverb_tf/cc/platform/export.h"
#include "reverb_tf/cc/tensor_payload.h"

namespace reverb_tf {

using ChunkKey = uint64_t;

class REVERB_TF_EXPORT Chunk {
 public:
  struct Accounting {
    std::atomic<int64_t> num_chunks{0};
    std::atomic<int64_t> num_bytes{0};
  };

  // Use ChunkStore::Insert.
  Chunk(ChunkKey key, uint64_t episode_id, int32_t episode_step,
        TensorPayload payload, std::shared_ptr<Accounting> accounting);
  ~Chunk();

  Chunk(const Chunk&) = delete;
  Chunk& operator=(const Chunk&) = delete;

  ChunkKey key() const { return key_; }
  uint64_t episode_id() const { return episode_id_; }
  // Index within the episode of the chunk's first step.
  int32_t episode_step() const { return episode_step_; }
  int32_t num_steps() const { return static_cast<int32_t>(payload_.shape[0]); }
  const TensorPayload& payload() const { return payload_; }

  // Heap bytes attributable to this chunk (object + payload bytes).
  int64_t ByteSize() const;

 private:
  const ChunkKey key_;
  const uint64_t episode_id_;
  const int32_t episode_step_;
  const TensorPayload payload_;
  const std::shared_ptr<Accounting> accounting_;
};

class REVERB_TF_EXPORT ChunkStore {
 public:
  ChunkStore();

  // Wraps `payload` in a new shared chunk. The payload must be valid and have
  // rank >= 1 (dimension 0 counts steps, at least one).
  absl::StatusOr<std::shared_ptr<const Chunk>> Insert(ChunkKey key,
                                                      uint64_t episode_id,
                                                      int32_t episode_step,
                                                      TensorPayload payload);

  // Chunks created by this store that are still referenced somewhere.
  int64_t num_live_chunks() const;
  // Sum of ByteSize() over those chunks.
  int64_t num_live_bytes() const;

 private:
  // Shared with every chunk so that the counters stay valid even if a chunk
  // outlives the store (e.g. held by a client-side sample).
  std::shared_ptr<Chunk::Accounting> accounting_;
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_CHUNK_STORE_H_
