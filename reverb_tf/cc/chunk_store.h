// SPDX-License-Identifier: Apache-2.0
// Chunks and the store that creates them.
//
// A Chunk is an immutable run of consecutive steps of ONE column of one
// episode: its tensor has shape [num_steps, step_shape...].
//
// A lane chunk holds the same steps of several episodes that advance together
// (the B environments of a batched writer): row t * B + b is lane b's t-th
// step, so a batch of B environments' steps is one chunk rather than B, and
// each environment's items reference their rows. Such a chunk carries one
// episode id per lane (episode_id(row)) instead of one for all. Items never own
// data; they reference slices of chunks (item.h). A chunk is shared by every
// item, in any table, that references it, and is freed the moment the last
// reference goes away: the reference count is the only ownership mechanism,
// so there is no garbage-collection pass and no way for a chunk to outlive
// its last item.
//
// Memory layout, chosen because small items are the common case and dm-reverb
// spends ~3.5 KB of server memory on each: a small chunk is ONE allocation
// holding a 40-byte header, its dimensions and its bytes, and it is
// reference-counted intrusively, so a reference (ChunkRef) is a single
// pointer. A one-step f32[4] column costs 80 bytes of heap instead of ~190
// with std::shared_ptr and a separate buffer (docs/core_design.md has the
// measurements). Above kInlineBytes the chunk adopts the payload's buffer
// instead of copying it: for large frames the copy costs more than the
// second allocation.
//
// Thread safety: a Chunk is immutable after creation; ChunkRef copies and
// destructions may race freely (atomic count). ChunkStore is thread-safe.
#ifndef REVERB_TF_CC_CHUNK_STORE_H_
#define REVERB_TF_CC_CHUNK_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "reverb_tf/cc/platform/export.h"
#include "reverb_tf/cc/spill_store.h"
#include "reverb_tf/cc/tensor_payload.h"

namespace reverb_tf {

using ChunkKey = uint64_t;

class ChunkRef;
class SpillTier;

// Where a chunk's bytes are on disk: a record of a store's spill directory.
struct ChunkOnDisk {
  SpillStore* disk = nullptr;  // lives while the chunk does
  SpillLocation where;
};

// A chunk's bytes, valid while this lives (which keeps bytes read back from
// the spill directory, or taken from RAM while a spill goes on, alive).
class ChunkBytes {
 public:
  ChunkBytes() = default;
  absl::string_view view() const { return view_; }

 private:
  friend class Chunk;
  ChunkBytes(absl::string_view view, std::shared_ptr<const char> hold)
      : view_(view), hold_(std::move(hold)) {}
  absl::string_view view_;
  std::shared_ptr<const char> hold_;
};

class REVERB_TF_EXPORT Chunk {
 public:
  Chunk(const Chunk&) = delete;
  Chunk& operator=(const Chunk&) = delete;

  ChunkKey key() const { return key_; }
  // The episode of row 0 (of every row, unless this is a lane chunk).
  uint64_t episode_id() const { return episode_id(0); }
  // The episode that row `row` (in [0, num_steps())) belongs to.
  uint64_t episode_id(int64_t row) const {
    return num_lanes() == 0 ? episode_id_ : LaneEpisodeIds()[row % num_lanes()];
  }
  // Lanes of a lane chunk (see above); 0 for a plain chunk.
  int64_t num_lanes() const {
    return (flags_ & kLanes) != 0 ? static_cast<int64_t>(episode_id_) : 0;
  }
  // Index within the episode of the chunk's first step.
  int32_t episode_step() const { return episode_step_; }
  int32_t num_steps() const { return static_cast<int32_t>(dims()[0]); }

  DType dtype() const { return static_cast<DType>(dtype_); }
  Compression compression() const {
    return static_cast<Compression>(compression_);
  }
  // Full shape, dimension 0 counting steps.
  absl::Span<const int64_t> shape() const { return {dims(), rank_}; }
  // Raw (possibly compressed) bytes, of a chunk that cannot be spilled
  // (!spillable()); Read() gives any chunk's.
  absl::string_view data() const { return {bytes(), data_size_}; }
  // The raw bytes wherever they are: in RAM, or read back from the spill
  // directory (then DATA_LOSS naming the file and this chunk if they are
  // damaged, or the OS error). Bytes read back from disk a second time
  // soon after the first (within about two budgets' worth of disk reads)
  // stay in RAM as the most recently used there, unless `keep_in_ram` is
  // false (a checkpoint or the log reading every chunk once).
  absl::StatusOr<ChunkBytes> Read(bool keep_in_ram = true) const;
  // Copies the raw bytes wherever they are into `out` (data_size() bytes):
  // those on disk are read straight into it, without a buffer between.
  // Fails, and keeps bytes read twice soon in RAM, as Read() does.
  absl::Status CopyTo(char* out) const;
  // Size of the raw bytes.
  int64_t data_size() const { return data_size_; }
  // Where the bytes are on disk, if they were spilled (they may be in RAM
  // as well). The record stays live, and its segment file whole, while the
  // chunk lives.
  std::optional<ChunkOnDisk> OnDisk() const;
  // Made by a store with a spill tier (ChunkStore::EnableSpill): its bytes
  // may leave RAM for the spill directory.
  bool spillable() const { return (flags_ & kSpillable) != 0; }
  int64_t uncompressed_size() const {
    return compression_ == 0 ? data_size_ : *UncompressedSizeSlot();
  }

  // Payloads up to this size are copied into the chunk's own allocation.
  static constexpr size_t kInlineBytes = 1024;

  // A copy of the chunk's tensor as a payload (still compressed if it is);
  // fails as Read() does.
  absl::StatusOr<TensorPayload> ToPayload() const;

  // Heap bytes of this chunk's single allocation.
  int64_t ByteSize() const;

  // Live references; for tests and diagnostics.
  int32_t ref_count() const { return refs_.load(std::memory_order_relaxed); }

 private:
  friend class ChunkRef;
  friend class ChunkStore;
  friend class SpillTier;

  struct Accounting;
  struct Spillable;

  Chunk() = default;
  ~Chunk() = default;

  // Of a spillable chunk: its bytes in RAM, if they are there; else reads
  // them from disk into out() (called once, for where they go) and
  // returns null.
  absl::StatusOr<std::shared_ptr<const char>> Fetch(
      absl::FunctionRef<char*()> out) const;
  // After a read from disk: whether the last one was recent too (notes
  // this one), so that the bytes should stay in RAM.
  bool ReadAgainSoon() const;
  // Makes `bytes` the RAM copy, the newest there, unless another reader's
  // copy got there first; returns the copy kept.
  std::shared_ptr<const char> KeepInRam(
      std::shared_ptr<const char> bytes) const;

  const int64_t* dims() const {
    return reinterpret_cast<const int64_t*>(this + 1);
  }
  // After the dims, for compressed chunks only: the uncompressed size
  // (uncompressed chunks' is data_size_, so they do not pay 8 bytes for it).
  int64_t* UncompressedSizeSlot() const {
    return const_cast<int64_t*>(dims() + rank_);
  }
  // Then, for lane chunks, one episode id per lane.
  const uint64_t* LaneEpisodeIds() const {
    return reinterpret_cast<const uint64_t*>(dims() + rank_ +
                                             (compression_ == 0 ? 0 : 1));
  }
  // Then the bytes, or (kExternal) a std::string holding them.
  void* tail() const {
    return const_cast<uint64_t*>(LaneEpisodeIds() + num_lanes());
  }
  const std::string* external() const {
    return static_cast<const std::string*>(tail());
  }
  bool is_external() const { return (flags_ & kExternal) != 0; }
  Spillable* spillable_body() const { return static_cast<Spillable*>(tail()); }
  const char* bytes() const {
    return is_external() ? external()->data()
                         : static_cast<const char*>(tail());
  }

  static constexpr uint8_t kExternal = 1;
  static constexpr uint8_t kLanes = 2;
  // The tail holds a Spillable instead of the bytes or a std::string.
  static constexpr uint8_t kSpillable = 4;
  void Unref() const;
  // Takes a reference unless the chunk is already dying.
  bool TryRef() const;

  mutable std::atomic<int32_t> refs_{1};
  int32_t episode_step_ = 0;
  ChunkKey key_ = 0;
  // A lane chunk's (kLanes) lane count instead: its episodes are per lane.
  uint64_t episode_id_ = 0;
  Accounting* accounting_ = nullptr;
  uint32_t data_size_ = 0;
  uint8_t dtype_ = 0;
  uint8_t compression_ = 0;
  uint8_t rank_ = 0;
  uint8_t flags_ = 0;
  // Followed in the same allocation by int64_t dims[rank_], the uncompressed
  // size if compressed, a lane chunk's episode ids, and the bytes (or a
  // std::string owning them, or a Spillable). 40
  // bytes: a small item's three chunks each fit a smaller malloc size class.
};

// A counted reference to a Chunk: what std::shared_ptr<const Chunk> would be,
// in 8 bytes.
class REVERB_TF_EXPORT ChunkRef {
 public:
  ChunkRef() = default;
  ChunkRef(std::nullptr_t) {}  // NOLINT: mirrors smart-pointer conversions.
  ChunkRef(const ChunkRef& other) : chunk_(other.chunk_) { Ref(); }
  ChunkRef(ChunkRef&& other) noexcept
      : chunk_(std::exchange(other.chunk_, nullptr)) {}
  ChunkRef& operator=(ChunkRef other) noexcept {
    std::swap(chunk_, other.chunk_);
    return *this;
  }
  ~ChunkRef() {
    if (chunk_ != nullptr) chunk_->Unref();
  }

  const Chunk* get() const { return chunk_; }
  const Chunk* operator->() const { return chunk_; }
  const Chunk& operator*() const { return *chunk_; }
  explicit operator bool() const { return chunk_ != nullptr; }
  bool operator==(std::nullptr_t) const { return chunk_ == nullptr; }
  bool operator!=(std::nullptr_t) const { return chunk_ != nullptr; }
  void reset() { *this = ChunkRef(); }

 private:
  friend class ChunkStore;
  friend class SpillTier;
  // Adopts the creation reference of a new chunk.
  explicit ChunkRef(const Chunk* adopted) : chunk_(adopted) {}
  void Ref() const {
    if (chunk_ != nullptr)
      chunk_->refs_.fetch_add(1, std::memory_order_relaxed);
  }

  const Chunk* chunk_ = nullptr;
};

class REVERB_TF_EXPORT ChunkStore {
 public:
  ChunkStore();
  ~ChunkStore();
  ChunkStore(const ChunkStore&) = delete;
  ChunkStore& operator=(const ChunkStore&) = delete;

  // Makes a new chunk of `payload` (small payloads are copied, large ones
  // moved in). The payload must be valid, have rank >= 1 with at least one
  // step along dimension 0, and hold < 4 GiB. A non-empty
  // `lane_episode_ids` makes a lane chunk of that many lanes (episode_id is
  // then ignored); dimension 0 must be a multiple of their number.
  absl::StatusOr<ChunkRef> Insert(
      ChunkKey key, uint64_t episode_id, int32_t episode_step,
      TensorPayload payload, absl::Span<const uint64_t> lane_episode_ids = {});

  // Makes a chunk whose raw bytes are the record `where` of this store's
  // spill directory, in a segment taken in with SpillStore::Adopt() (a
  // checkpoint's): the record is claimed (live until the chunk dies) and
  // read only when the chunk is. `head` is Insert()'s payload without its
  // bytes; they were validated when they first arrived, and the record's
  // checksum guards them since. FAILED_PRECONDITION without a spill tier;
  // INVALID_ARGUMENT for what Insert() refuses, or a record no larger than
  // kInlineBytes (never spilled); OUT_OF_RANGE for a record outside its
  // file.
  absl::StatusOr<ChunkRef> InsertOnDisk(
      ChunkKey key, uint64_t episode_id, int32_t episode_step,
      const TensorPayload& head, const SpillLocation& where,
      absl::Span<const uint64_t> lane_episode_ids = {});

  // The spill directory's store (EnableSpill), or null.
  SpillStore* spill_store() const;

  // For bulk loads (a checkpoint's chunks, the log's replay), after each
  // chunk: waits while the budget's count is above the spill's high-water
  // mark and the spill thread has chunks in RAM to write out, so that a
  // load keeps RAM near the budget instead of outrunning the spill thread.
  // Returns at once without a spill tier, once spilling fails, or after
  // `max_wait`.
  void AwaitSpillRoom(absl::Duration max_wait = absl::Seconds(10)) const;

  // Chunks created by this store that are still referenced somewhere.
  int64_t num_live_chunks() const;
  // Sum of ByteSize() over those chunks.
  int64_t num_live_bytes() const;

  // From now on, keeps the buffers of this store's chunks that die (those
  // over kInlineBytes and at least kMinRecycledBytes) for TakeBuffer(), up
  // to `max_bytes` of capacity at once; a buffer nobody took for a whole
  // kRecycledBufferPeriod (one to two periods after it came back) is freed
  // by a thread the store starts for this. A server's chunk bytes then land in
  // memory that is already mapped and was freed by any thread, instead of fresh
  // pages of the parsing thread's malloc arena (wire/insert_request_reader.h
  // has the measurements). 0 stops keeping them. Kept buffers live at most
  // until the store and its last chunk are gone. Call it before any of the
  // store's chunks can die on another thread (a server: before it serves).
  void RecycleBuffers(int64_t max_bytes);
  // An empty string whose capacity is between `size` and about 1/8 more, if
  // a recycled one fits; else a new empty string.
  std::string TakeBuffer(size_t size);
  // Frees the buffers kept for reuse now (memory is short).
  void FreeRecycledBuffers();
  // Capacity of the buffers kept for reuse now, and of all TakeBuffer()
  // has handed out.
  int64_t num_recycled_bytes() const;
  int64_t num_recycled_bytes_taken() const;

  // From now on, chunks over kInlineBytes may leave RAM for `disk`: a
  // thread of the store's writes the chunks in RAM longest (written or read
  // back earliest) to `disk` and drops their RAM copy whenever `used()`
  // (the memory budget's count, which holds this store's
  // num_live_bytes()) is above `high_water`, until it is at most
  // `low_water`. Reading a spilled chunk again soon (Chunk::Read) brings its
  // bytes back into RAM as the newest there. When it has nothing to spill,
  // the same thread compacts: it moves the live records of the sparsest
  // sealed segments to the newest while the files hold more dead bytes
  // than half the live ones (or two segments). num_live_bytes() counts
  // bytes in RAM only. Call it once, before the store makes any chunk.
  void EnableSpill(std::unique_ptr<SpillStore> disk,
                   std::function<int64_t()> used, int64_t high_water,
                   int64_t low_water);

  struct SpillStats {
    std::string dir;
    int64_t ram_bytes = 0;        // spillable chunks' bytes in RAM
    int64_t disk_bytes = 0;       // of live chunks, on disk
    int64_t disk_file_bytes = 0;  // the spill files' size
    int64_t spilled_chunks = 0;   // written to disk so far
    int64_t spilled_bytes = 0;
    int64_t ram_reads = 0;   // Read()s of spillable chunks served from RAM
    int64_t disk_reads = 0;  // ... and from disk
    int64_t disk_read_bytes = 0;
    double disk_read_seconds = 0;  // summed over disk reads
    // Compaction: segments emptied, and the bytes of the live records it
    // moved out of them (neither counted in the figures above).
    int64_t compactions = 0;
    int64_t compacted_bytes = 0;
    std::string last_error;  // of the last failed spill, if any
    // Of the last compaction pass, if it failed (a full disk): compaction
    // retries while it fails, and spilling and writers go on without it.
    std::string compaction_error;
  };
  // Stops moving chunks to and within the spill directory and gives it up
  // for another store (SpillStore::Release): chunks on disk stay readable,
  // chunks in RAM stay there. For a stopping server, whose tables (and
  // their chunks) may outlive it. No-op without a spill tier.
  void ReleaseSpill();

  // Empty `dir` unless EnableSpill() was called.
  SpillStats spill_stats() const;
  // Why spilling fails now (a full disk, say); OK when it does not.
  absl::Status spill_error() const;

  static constexpr size_t kMinRecycledBytes = 4096;
  static constexpr absl::Duration kRecycledBufferPeriod = absl::Seconds(1);

 private:
  // A new chunk of `head`'s dtype, shape and compression with `data_size`
  // bytes, whose tail (`flags`: what it holds) the caller fills.
  Chunk* NewChunk(ChunkKey key, uint64_t episode_id, int32_t episode_step,
                  const TensorPayload& head, size_t data_size,
                  absl::Span<const uint64_t> lane_episode_ids, uint8_t flags);
  // Counts `chunk` (made by NewChunk and filled) as live, holding
  // `ram_bytes` of spillable bytes in RAM.
  ChunkRef Publish(Chunk* chunk, int64_t ram_bytes);

  // Shared by the store and its chunks (intrusively counted), so the
  // counters stay valid when a chunk outlives the store.
  Chunk::Accounting* accounting_;
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_CHUNK_STORE_H_
