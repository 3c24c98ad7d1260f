// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/chunk_store.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "reverb_tf/cc/platform/status_macros.h"
#include "reverb_tf/cc/spill_store.h"

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

// The bytes of a chunk of a store with a spill tier: in RAM (`ram`), on disk
// (`on_disk`), or both (read back, or written and not yet dropped).
struct Chunk::Spillable {
  mutable absl::Mutex mu;
  std::shared_ptr<const char> ram ABSL_GUARDED_BY(mu);
  // RAM bytes counted in the store's num_bytes for `ram`.
  int64_t counted ABSL_GUARDED_BY(mu) = 0;
  bool on_disk ABSL_GUARDED_BY(mu) = false;
  SpillLocation where ABSL_GUARDED_BY(mu);
  // The tier's ReadEpoch() at the last read from disk; 0: never read.
  uint32_t last_disk_read ABSL_GUARDED_BY(mu) = 0;
  // In the tier's list of chunks in RAM, oldest first, and its index of
  // chunks on disk by segment (the tier's mutex).
  Spillable* prev = nullptr;
  Spillable* next = nullptr;
  bool listed = false;
  bool indexed = false;
  uint32_t indexed_segment = 0;
  const Chunk* owner = nullptr;
};

// A store's spill directory and the thread that moves chunk bytes there
// (ChunkStore::EnableSpill). Its mutex is a leaf: chunks die under tables'
// locks and leave its list.
class SpillTier {
 public:
  SpillTier(std::unique_ptr<SpillStore> disk, std::atomic<int64_t>* store_bytes,
            std::function<int64_t()> used, int64_t high_water,
            int64_t low_water)
      : disk_(std::move(disk)),
        store_bytes_(store_bytes),
        used_(std::move(used)),
        high_water_(high_water),
        low_water_(low_water) {}

  ~SpillTier() { Stop(); }

  void Start() {
    thread_ = std::thread([this] { Run(); });
  }

  // Ends the thread (the store is going; its chunks may live on).
  void Stop() ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    if (thread_.joinable()) thread_.join();
  }

  // `body` is in RAM as of now: newest in the list (or, `at_front`, oldest:
  // a chunk whose spill failed).
  void Link(Chunk::Spillable* body, bool at_front = false)
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (body->listed) return;
    body->listed = true;
    if (at_front) {
      body->prev = nullptr;
      body->next = head_;
      (head_ != nullptr ? head_->prev : tail_) = body;
      head_ = body;
    } else {
      body->prev = tail_;
      body->next = nullptr;
      (tail_ != nullptr ? tail_->next : head_) = body;
      tail_ = body;
    }
  }

  // `body`'s chunk is dying: it leaves the list and the index.
  void Forget(Chunk::Spillable* body) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    UnlinkLocked(body);
    UnindexLocked(body);
  }

  // `body`'s bytes are in `segment` on disk as of now.
  void Index(Chunk::Spillable* body, uint32_t segment)
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    UnindexLocked(body);
    by_segment_[segment].insert(body);
    body->indexed = true;
    body->indexed_segment = segment;
  }

  SpillStore& disk() { return *disk_; }

  // ChunkStore::AwaitSpillRoom.
  void AwaitRoom(absl::Duration max_wait) ABSL_LOCKS_EXCLUDED(mu_) {
    const absl::Time deadline = absl::Now() + max_wait;
    while (used_() > high_water_ && absl::Now() < deadline) {
      {
        absl::MutexLock lock(&mu_);
        if (stopping_ || !error_.ok() || head_ == nullptr) return;
      }
      absl::SleepFor(kPoll / 4);
    }
  }

  absl::Status error() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return error_;
  }

  // Counts from 1, one more each time about low_water bytes (80% of the
  // budget) have been read back from disk.
  uint32_t ReadEpoch() const {
    return 1 + static_cast<uint32_t>(disk_->read_bytes() /
                                     std::max<int64_t>(low_water_, 1));
  }

  void NoteRead(bool from_disk) {
    (from_disk ? disk_reads_ : ram_reads_)
        .fetch_add(1, std::memory_order_relaxed);
  }

  void Fill(ChunkStore::SpillStats* stats) const ABSL_LOCKS_EXCLUDED(mu_) {
    stats->dir = disk_->dir();
    stats->ram_bytes = ram_bytes_.load(std::memory_order_relaxed);
    stats->disk_bytes = disk_->live_bytes();
    stats->disk_file_bytes = disk_->file_bytes();
    stats->spilled_chunks = disk_->writes();
    stats->spilled_bytes = disk_->write_bytes();
    stats->ram_reads = ram_reads_.load(std::memory_order_relaxed);
    stats->disk_reads = disk_reads_.load(std::memory_order_relaxed);
    stats->disk_read_bytes = disk_->read_bytes();
    stats->disk_read_seconds = static_cast<double>(disk_->read_nanos()) * 1e-9;
    stats->compactions = compactions_.load(std::memory_order_relaxed);
    stats->compacted_bytes = disk_->moved_bytes();
    absl::MutexLock lock(&mu_);
    if (!error_.ok()) stats->last_error = std::string(error_.message());
    if (!compaction_error_.ok()) {
      stats->compaction_error = std::string(compaction_error_.message());
    }
  }

  // RAM bytes of spillable chunks: `delta` more (or fewer) in RAM.
  void CountRam(int64_t delta) {
    ram_bytes_.fetch_add(delta, std::memory_order_relaxed);
    store_bytes_->fetch_add(delta, std::memory_order_relaxed);
  }

 private:
  static constexpr absl::Duration kPoll = absl::Milliseconds(1);
  static constexpr absl::Duration kIdlePoll = absl::Milliseconds(20);
  // After a failed write, before the next try.
  static constexpr absl::Duration kRetry = absl::Milliseconds(100);

  void UnindexLocked(Chunk::Spillable* body)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!body->indexed) return;
    auto it = by_segment_.find(body->indexed_segment);
    it->second.erase(body);
    if (it->second.empty()) by_segment_.erase(it);
    body->indexed = false;
  }

  void UnlinkLocked(Chunk::Spillable* body) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!body->listed) return;
    (body->prev != nullptr ? body->prev->next : head_) = body->next;
    (body->next != nullptr ? body->next->prev : tail_) = body->prev;
    body->prev = body->next = nullptr;
    body->listed = false;
  }

  void Run() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    absl::Duration poll = kIdlePoll;
    while (!mu_.AwaitWithTimeout(absl::Condition(&stopping_), poll)) {
      const int64_t used = used_();
      // Looked at often only when close to the high-water mark.
      poll = used > low_water_ / 2 ? kPoll : kIdlePoll;
      if (used <= high_water_) {
        // Spilling comes first; compaction when there is none to do.
        if (CompactLocked()) poll = kPoll;
        continue;
      }
      while (!stopping_ && used_() > low_water_) {
        Chunk::Spillable* body = head_;
        if (body == nullptr) break;  // nothing left in RAM to move
        UnlinkLocked(body);
        // The chunk may be dying (its Unref() waits for mu_ to unlink it).
        if (!body->owner->TryRef()) continue;
        ChunkRef chunk(body->owner);
        mu_.Unlock();
        const absl::Status spilled = Spill(body);
        // Still the oldest in RAM.
        if (!spilled.ok()) Link(body, /*at_front=*/true);
        chunk.reset();  // unlocked: a last reference unlinks and frees
        mu_.Lock();
        if (!spilled.ok()) {
          error_ = spilled;
          mu_.AwaitWithTimeout(absl::Condition(&stopping_), kRetry);
          break;
        }
        error_ = absl::OkStatus();
      }
    }
  }

  // Moves the live records of the sparsest sealed segment to the newest
  // when the spill files hold more dead bytes than the slack allowed (half
  // the live bytes, or two segments, whichever is more): tables that
  // delete at random leave segments partly live that FIFO eviction would
  // have freed whole. One segment per call, between spills. Returns whether
  // it moved one.
  bool CompactLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int64_t segment_bytes = disk_->segment_bytes();
    const int64_t live = disk_->live_bytes();
    if (disk_->file_bytes() - live <= std::max(live / 2, 2 * segment_bytes)) {
      return false;
    }
    std::optional<SpillStore::Sparse> sparse =
        disk_->SparsestSealed(segment_bytes / 4, unmovable_);
    if (!sparse.has_value()) return false;
    std::vector<ChunkRef> chunks;
    if (auto it = by_segment_.find(sparse->segment); it != by_segment_.end()) {
      for (Chunk::Spillable* body : it->second) {
        if (body->owner->TryRef()) chunks.push_back(ChunkRef(body->owner));
      }
    }
    mu_.Unlock();
    absl::Status moved;
    for (const ChunkRef& chunk : chunks) {
      moved = Move(chunk->spillable_body(), sparse->segment);
      if (!moved.ok()) break;
    }
    chunks.clear();  // unlocked: a last reference unlinks and frees
    // A segment taken in from a checkpoint whose records all died.
    disk_->DropIfUnused(sparse->segment);
    mu_.Lock();
    if (!moved.ok()) {
      // Not the spill's error_: writers wait only for spills that fail.
      compaction_error_ = moved;
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), kRetry);
      return true;
    }
    compaction_error_ = absl::OkStatus();
    compactions_.fetch_add(1, std::memory_order_relaxed);
    if (disk_->SegmentLive(sparse->segment)) {
      // A damaged record stays where it is (sampling it says so): the
      // segment is not tried again.
      unmovable_.insert(sparse->segment);
    }
    return true;
  }

  // Rewrites `body`'s record in `segment` at the end of the newest segment
  // and frees the old one (whose file stays whole for readers and
  // checkpoints that hold it).
  absl::Status Move(Chunk::Spillable* body, uint32_t segment)
      ABSL_LOCKS_EXCLUDED(mu_) {
    SpillLocation from;
    std::shared_ptr<const char> ram;
    {
      absl::MutexLock lock(&body->mu);
      if (!body->on_disk || body->where.segment != segment) {
        return absl::OkStatus();
      }
      from = body->where;
      ram = body->ram;
    }
    std::unique_ptr<char[]> read;
    if (ram == nullptr) {
      read.reset(new char[from.size]);
      if (!disk_->Read(from, read.get(), SpillStore::Io::kMove).ok()) {
        return absl::OkStatus();
      }
    }
    ASSIGN_OR_RETURN(
        const SpillLocation to,
        disk_->Append(absl::string_view(ram != nullptr ? ram.get() : read.get(),
                                        from.size),
                      SpillStore::Io::kMove));
    {
      absl::MutexLock lock(&body->mu);
      body->where = to;
    }
    disk_->Free(from);
    Index(body, to.segment);
    return absl::OkStatus();
  }

  // Writes `body`'s bytes unless they are on disk already, then drops its
  // RAM copy (freed once no reader holds it).
  absl::Status Spill(Chunk::Spillable* body) ABSL_LOCKS_EXCLUDED(mu_) {
    std::shared_ptr<const char> bytes;
    bool written;
    uint32_t size;
    {
      absl::MutexLock lock(&body->mu);
      bytes = body->ram;
      written = body->on_disk;
      size = static_cast<uint32_t>(body->owner->data_size());
    }
    if (bytes == nullptr) return absl::OkStatus();
    SpillLocation where;
    if (!written) {
      ASSIGN_OR_RETURN(where,
                       disk_->Append(absl::string_view(bytes.get(), size)));
    }
    int64_t freed;
    {
      absl::MutexLock lock(&body->mu);
      if (!written) {
        body->where = where;
        body->on_disk = true;
      }
      body->ram.reset();
      freed = body->counted;
      body->counted = 0;
    }
    if (!written) Index(body, where.segment);
    CountRam(-freed);
    return absl::OkStatus();
  }

  const std::unique_ptr<SpillStore> disk_;
  std::atomic<int64_t>* const store_bytes_;
  const std::function<int64_t()> used_;
  const int64_t high_water_;
  const int64_t low_water_;
  std::atomic<int64_t> ram_bytes_{0};
  std::atomic<int64_t> ram_reads_{0};
  std::atomic<int64_t> disk_reads_{0};
  // Segments whose live records compaction moved.
  std::atomic<int64_t> compactions_{0};
  mutable absl::Mutex mu_;
  Chunk::Spillable* head_ ABSL_GUARDED_BY(mu_) = nullptr;
  Chunk::Spillable* tail_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Chunks on disk, by segment: what compaction moves.
  absl::flat_hash_map<uint32_t, absl::flat_hash_set<Chunk::Spillable*>>
      by_segment_ ABSL_GUARDED_BY(mu_);
  // Segments compaction could not empty (a damaged record).
  absl::flat_hash_set<uint32_t> unmovable_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Why the last spill failed (OK once one succeeds): what a full disk
  // refuses writers with.
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  // Why the last compaction pass failed (OK once one succeeds).
  absl::Status compaction_error_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

struct Chunk::Accounting {
  std::atomic<int64_t> num_chunks{0};
  std::atomic<int64_t> num_bytes{0};
  // One reference for the store plus one per live chunk.
  std::atomic<int64_t> refs{1};
  // Set while the store recycles buffers (RecycleBuffers); chunks that die
  // give theirs back. Replaced only by the store, which must not race its
  // chunks' deaths with RecycleBuffers (it is called while none die).
  std::shared_ptr<RecycledBuffers> recycled;
  // Set by EnableSpill() before any chunk is made; then never replaced.
  std::unique_ptr<SpillTier> spill;

  void Unref() {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
};

namespace {

// `tail`: the size of what holds the bytes, or of the bytes themselves.
size_t AllocationSize(size_t rank, bool compressed, size_t lanes, size_t tail) {
  return sizeof(Chunk) +
         (rank + (compressed ? 1 : 0) + lanes) * sizeof(int64_t) + tail;
}

static_assert(sizeof(Chunk) == 40,
              "keep a chunk's header at 40 bytes (see data layout)");

}  // namespace

absl::StatusOr<std::shared_ptr<const char>> Chunk::Fetch(
    absl::FunctionRef<char*()> out) const {
  Spillable* body = spillable_body();
  SpillTier* tier = accounting_->spill.get();
  char* to = nullptr;
  for (int attempt = 0;; ++attempt) {
    SpillLocation where;
    {
      absl::MutexLock lock(&body->mu);
      if (body->ram != nullptr) {
        tier->NoteRead(false);
        return body->ram;
      }
      where = body->where;
    }
    if (to == nullptr) to = out();
    absl::Status read = tier->disk().Read(where, to);
    if (read.ok()) break;
    // Compaction moved the record (and its old segment went) under this
    // read: read it where it is now.
    bool moved;
    {
      absl::MutexLock lock(&body->mu);
      moved = body->where != where;
    }
    if (!moved || attempt >= 3) {
      return absl::Status(read.code(),
                          absl::StrCat("chunk ", key_, ": ", read.message()));
    }
  }
  tier->NoteRead(true);
  return nullptr;
}

bool Chunk::ReadAgainSoon() const {
  // Kept in RAM only when read from disk twice within about two epochs:
  // under uniform sampling of a table many times the budget, keeping every
  // chunk read back cost a quarter of the sampling rate (the spill thread
  // dropping what readers had just brought in) for a hit rate no higher
  // than the share of the table RAM holds anyway; chunks read again soon
  // (high priorities) are the ones worth keeping.
  Spillable* body = spillable_body();
  const uint32_t epoch = accounting_->spill->ReadEpoch();
  absl::MutexLock lock(&body->mu);
  const bool again =
      body->last_disk_read != 0 && body->last_disk_read + 1 >= epoch;
  body->last_disk_read = epoch;
  return again;
}

std::shared_ptr<const char> Chunk::KeepInRam(
    std::shared_ptr<const char> bytes) const {
  // Back in RAM, as the newest there (a reader beside this one may have
  // been first: then its copy is the one kept).
  Spillable* body = spillable_body();
  std::shared_ptr<const char> kept;
  bool promoted = false;
  {
    absl::MutexLock lock(&body->mu);
    if (body->ram == nullptr) {
      body->ram = std::move(bytes);
      body->counted = data_size_;
      promoted = true;
    }
    kept = body->ram;
  }
  if (promoted) {
    SpillTier* tier = accounting_->spill.get();
    tier->CountRam(data_size_);
    tier->Link(body);
  }
  return kept;
}

absl::StatusOr<ChunkBytes> Chunk::Read(bool keep_in_ram) const {
  if (!spillable()) return ChunkBytes(data(), nullptr);
  std::shared_ptr<char> buffer;
  ASSIGN_OR_RETURN(std::shared_ptr<const char> ram, Fetch([&] {
                     buffer.reset(new char[data_size_],
                                  std::default_delete<char[]>());
                     return buffer.get();
                   }));
  if (ram == nullptr) {
    ram = ReadAgainSoon() && keep_in_ram ? KeepInRam(buffer) : buffer;
  }
  return ChunkBytes(absl::string_view(ram.get(), data_size_), ram);
}

absl::Status Chunk::CopyTo(char* out) const {
  if (!spillable()) {
    std::memcpy(out, bytes(), data_size_);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(const std::shared_ptr<const char> ram,
                   Fetch([out] { return out; }));
  if (ram != nullptr) {
    std::memcpy(out, ram.get(), data_size_);
  } else if (ReadAgainSoon()) {
    std::shared_ptr<char> copy(new char[data_size_],
                               std::default_delete<char[]>());
    std::memcpy(copy.get(), out, data_size_);
    KeepInRam(std::move(copy));
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorPayload> Chunk::ToPayload() const {
  ASSIGN_OR_RETURN(ChunkBytes bytes, Read());
  TensorPayload payload;
  payload.dtype = dtype();
  payload.shape.assign(dims(), dims() + rank_);
  payload.compression = compression();
  payload.uncompressed_size = uncompressed_size();
  payload.data.assign(bytes.view().data(), bytes.view().size());
  return payload;
}

int64_t Chunk::ByteSize() const {
  const size_t head = AllocationSize(rank_, compression_ != 0, num_lanes(),
                                     spillable()     ? sizeof(Spillable)
                                     : is_external() ? sizeof(std::string)
                                                     : data_size_);
  if (spillable()) {
    absl::MutexLock lock(&spillable_body()->mu);
    return static_cast<int64_t>(head) + spillable_body()->counted;
  }
  return static_cast<int64_t>(head) +
         (is_external() ? static_cast<int64_t>(external()->capacity()) : 0);
}

bool Chunk::TryRef() const {
  int32_t refs = refs_.load(std::memory_order_relaxed);
  while (refs > 0) {
    if (refs_.compare_exchange_weak(refs, refs + 1,
                                    std::memory_order_relaxed)) {
      return true;
    }
  }
  return false;
}

void Chunk::Unref() const {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  Accounting* accounting = accounting_;
  accounting->num_chunks.fetch_sub(1, std::memory_order_relaxed);
  if (spillable()) {
    Spillable* body = spillable_body();
    SpillTier* tier = accounting->spill.get();
    tier->Forget(body);
    {
      // Nobody else can reach the body now: no lock needed, but the
      // annotations want one.
      absl::MutexLock lock(&body->mu);
      if (body->on_disk) tier->disk().Free(body->where);
      accounting->num_bytes.fetch_sub(
          static_cast<int64_t>(AllocationSize(rank_, compression_ != 0,
                                              num_lanes(), sizeof(Spillable))),
          std::memory_order_relaxed);
      if (body->counted > 0) tier->CountRam(-body->counted);
    }
    body->~Spillable();
  } else {
    accounting->num_bytes.fetch_sub(ByteSize(), std::memory_order_relaxed);
    if (is_external()) {
      using String = std::string;
      String* buffer = const_cast<String*>(external());
      if (accounting->recycled != nullptr) {
        accounting->recycled->Give(std::move(*buffer));
      }
      buffer->~String();
    }
  }
  this->~Chunk();
  ::operator delete(const_cast<Chunk*>(this));
  accounting->Unref();
}

ChunkStore::ChunkStore() : accounting_(new Chunk::Accounting) {}

void ChunkStore::ReleaseSpill() {
  if (accounting_->spill == nullptr) return;
  accounting_->spill->Stop();
  accounting_->spill->disk().Release();
}

ChunkStore::~ChunkStore() {
  // Chunks may outlive the store (and keep the spill files until the last
  // goes), but nothing moves them any more.
  if (accounting_->spill != nullptr) accounting_->spill->Stop();
  accounting_->Unref();
}

namespace {

// What Insert() and InsertOnDisk() require of a chunk beyond a valid
// payload head.
absl::Status CheckChunk(ChunkKey key, int32_t episode_step,
                        const TensorPayload& head, size_t data_size,
                        size_t lanes) {
  if (head.shape.empty() || head.shape[0] < 1 || head.shape[0] > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk ", key,
        " must have between 1 and 2^31-1 steps along dimension 0, shape ",
        ShapeDebugString(head.shape)));
  }
  if (head.shape.size() > UINT8_MAX || data_size > UINT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", key, " is too large: rank ", head.shape.size(),
                     ", ", data_size, " bytes (limits: rank 255, 4 GiB)"));
  }
  if (episode_step < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk ", key, " has negative episode step ", episode_step));
  }
  if (lanes > 0 && head.shape[0] % static_cast<int64_t>(lanes) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", key, " has episode ids for ", lanes,
                     " lanes but its number of rows, ", head.shape[0],
                     ", is not a multiple of that"));
  }
  return absl::OkStatus();
}

}  // namespace

Chunk* ChunkStore::NewChunk(ChunkKey key, uint64_t episode_id,
                            int32_t episode_step, const TensorPayload& head,
                            size_t data_size,
                            absl::Span<const uint64_t> lane_episode_ids,
                            uint8_t flags) {
  const size_t rank = head.shape.size();
  const size_t lanes = lane_episode_ids.size();
  const bool compressed = head.compression != Compression::kNone;
  void* memory = ::operator new(
      AllocationSize(rank, compressed, lanes,
                     (flags & Chunk::kSpillable) != 0 ? sizeof(Chunk::Spillable)
                     : (flags & Chunk::kExternal) != 0 ? sizeof(std::string)
                                                       : data_size));
  Chunk* chunk = new (memory) Chunk();
  chunk->episode_step_ = episode_step;
  chunk->key_ = key;
  chunk->episode_id_ = lanes > 0 ? lanes : episode_id;
  chunk->accounting_ = accounting_;
  chunk->data_size_ = static_cast<uint32_t>(data_size);
  chunk->dtype_ = static_cast<uint8_t>(head.dtype);
  chunk->compression_ = static_cast<uint8_t>(head.compression);
  chunk->rank_ = static_cast<uint8_t>(rank);
  chunk->flags_ = flags | (lanes > 0 ? Chunk::kLanes : 0);
  std::memcpy(const_cast<int64_t*>(chunk->dims()), head.shape.data(),
              rank * sizeof(int64_t));
  if (compressed) *chunk->UncompressedSizeSlot() = head.uncompressed_size;
  if (lanes > 0) {
    std::memcpy(const_cast<uint64_t*>(chunk->LaneEpisodeIds()),
                lane_episode_ids.data(), lanes * sizeof(uint64_t));
  }
  return chunk;
}

ChunkRef ChunkStore::Publish(Chunk* chunk, int64_t ram_bytes) {
  accounting_->refs.fetch_add(1, std::memory_order_relaxed);
  accounting_->num_chunks.fetch_add(1, std::memory_order_relaxed);
  if (chunk->spillable()) {
    SpillTier* const tier = accounting_->spill.get();
    accounting_->num_bytes.fetch_add(chunk->ByteSize() - ram_bytes,
                                     std::memory_order_relaxed);
    if (ram_bytes > 0) {
      tier->CountRam(ram_bytes);
      tier->Link(chunk->spillable_body());
    }
  } else {
    accounting_->num_bytes.fetch_add(chunk->ByteSize(),
                                     std::memory_order_relaxed);
  }
  return ChunkRef(chunk);
}

absl::StatusOr<ChunkRef> ChunkStore::Insert(
    ChunkKey key, uint64_t episode_id, int32_t episode_step,
    TensorPayload payload, absl::Span<const uint64_t> lane_episode_ids) {
  RETURN_IF_ERROR(payload.Validate());
  RETURN_IF_ERROR(CheckChunk(key, episode_step, payload, payload.data.size(),
                             lane_episode_ids.size()));
  const bool external = payload.data.size() > Chunk::kInlineBytes;
  const bool spillable = external && accounting_->spill != nullptr;
  Chunk* chunk = NewChunk(key, episode_id, episode_step, payload,
                          payload.data.size(), lane_episode_ids,
                          spillable  ? Chunk::kSpillable
                          : external ? Chunk::kExternal
                                     : 0);
  int64_t ram_bytes = 0;
  if (spillable) {
    auto* body = new (chunk->tail()) Chunk::Spillable();
    body->owner = chunk;
    auto owned = std::make_shared<std::string>(std::move(payload.data));
    const char* bytes = owned->data();
    ram_bytes = static_cast<int64_t>(owned->capacity());
    absl::MutexLock lock(&body->mu);
    body->ram = std::shared_ptr<const char>(std::move(owned), bytes);
    body->counted = ram_bytes;
  } else if (external) {
    new (chunk->tail()) std::string(std::move(payload.data));
  } else {
    std::memcpy(chunk->tail(), payload.data.data(), payload.data.size());
  }
  return Publish(chunk, ram_bytes);
}

absl::StatusOr<ChunkRef> ChunkStore::InsertOnDisk(
    ChunkKey key, uint64_t episode_id, int32_t episode_step,
    const TensorPayload& head, const SpillLocation& where,
    absl::Span<const uint64_t> lane_episode_ids) {
  SpillTier* const tier = accounting_->spill.get();
  if (tier == nullptr) {
    return absl::FailedPreconditionError(
        "chunks on disk need a store with a spill directory");
  }
  if (where.size <= Chunk::kInlineBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", key, " of ", where.size,
                     " bytes cannot be on disk (only chunks over ",
                     Chunk::kInlineBytes, " bytes are spilled)"));
  }
  RETURN_IF_ERROR(head.ValidateHead(where.size));
  RETURN_IF_ERROR(
      CheckChunk(key, episode_step, head, where.size, lane_episode_ids.size()));
  RETURN_IF_ERROR(tier->disk().Claim(where));
  Chunk* chunk = NewChunk(key, episode_id, episode_step, head, where.size,
                          lane_episode_ids, Chunk::kSpillable);
  auto* body = new (chunk->tail()) Chunk::Spillable();
  body->owner = chunk;
  {
    absl::MutexLock lock(&body->mu);
    body->on_disk = true;
    body->where = where;
  }
  tier->Index(body, where.segment);
  return Publish(chunk, /*ram_bytes=*/0);
}

void ChunkStore::AwaitSpillRoom(absl::Duration max_wait) const {
  if (accounting_->spill != nullptr) accounting_->spill->AwaitRoom(max_wait);
}

SpillStore* ChunkStore::spill_store() const {
  return accounting_->spill != nullptr ? &accounting_->spill->disk() : nullptr;
}

std::optional<ChunkOnDisk> Chunk::OnDisk() const {
  if (!spillable()) return std::nullopt;
  Spillable* body = spillable_body();
  absl::MutexLock lock(&body->mu);
  if (!body->on_disk) return std::nullopt;
  return ChunkOnDisk{&accounting_->spill->disk(), body->where};
}

void ChunkStore::EnableSpill(std::unique_ptr<SpillStore> disk,
                             std::function<int64_t()> used, int64_t high_water,
                             int64_t low_water) {
  accounting_->spill =
      std::make_unique<SpillTier>(std::move(disk), &accounting_->num_bytes,
                                  std::move(used), high_water, low_water);
  accounting_->spill->Start();
}

ChunkStore::SpillStats ChunkStore::spill_stats() const {
  SpillStats stats;
  if (accounting_->spill != nullptr) accounting_->spill->Fill(&stats);
  return stats;
}

absl::Status ChunkStore::spill_error() const {
  return accounting_->spill != nullptr ? accounting_->spill->error()
                                       : absl::OkStatus();
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
