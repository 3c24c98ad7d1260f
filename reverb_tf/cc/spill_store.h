// SPDX-License-Identifier: Apache-2.0
// Chunk bytes on local disk: the disk tier of a server given a spill
// directory (ServerOptions::spill_dir, docs/disk_tier.md).
//
// Bytes are appended to segment files of about kSegmentBytes each
// (`segment-NNNNNNNN.spill` in the directory), one record after another
// with nothing between: where a record is, its size and its checksum stay in
// RAM with the chunk that owns it, so a file holds only chunk bytes and a
// damaged one is told by the checksum, not by framing. A segment counts
// the bytes of its live records; once it is sealed (a newer one takes the
// appends) and none is left, its file is deleted; the newest segment is
// emptied (truncated) instead, so that a reset leaves no bytes on disk. What a
// table evicts first was written first, so FIFO tables free whole segments in
// order; other tables leave segments partly live, which the chunk store's
// compaction moves out (SparsestSealed; docs/disk_tier.md states the slack).
//
// The directory is this store's alone while it is open (an exclusive
// flock on `LOCK`), and segment files from an earlier run are deleted on
// Open(): what must survive a restart is in the checkpoints (which may hold
// hard links to sealed segments: LinkSegment, Adopt) and the write-ahead
// log.
//
// A sealed segment's file never changes again: its records are immutable,
// nothing is appended to it, and once none of its records is live its name
// is removed (unlink), never its bytes, so that a checkpoint's link to it
// stays whole. Only the newest segment, which nothing links, is truncated.
//
// Thread safety: thread-safe. Read() of a record runs beside Append() and
// other reads (pread, no lock held), as long as the record is live (not
// Free()d): its segment file stays open until its last record is freed.
#ifndef REVERB_TF_CC_SPILL_STORE_H_
#define REVERB_TF_CC_SPILL_STORE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "reverb_tf/cc/platform/export.h"

namespace reverb_tf {

// Where a record is; kept by its owner (in RAM), needed to read it back.
struct SpillLocation {
  uint64_t offset = 0;
  uint32_t segment = 0;
  uint32_t size = 0;
  // CRC-32C (Castagnoli) of the bytes, the same on every machine: it is
  // kept in checkpoints.
  uint32_t crc = 0;

  bool operator==(const SpillLocation& other) const {
    return segment == other.segment && offset == other.offset;
  }
  bool operator!=(const SpillLocation& other) const {
    return !(*this == other);
  }
};

// CRC-32C of `size` bytes: SSE4.2's instruction where there is one, a
// table otherwise.
REVERB_TF_EXPORT uint32_t Crc32c(const char* data, size_t size);

// Copies `size` bytes from `data` to `out` and returns their CRC-32C, in
// one pass where the CPU can (AVX-512 with carry-less multiplication).
REVERB_TF_EXPORT uint32_t Crc32cCopy(char* out, const char* data, size_t size);

// Reads the record at `where` (its segment ignored) from the open file `fd`
// named `path` into `out` (where.size bytes), checking its CRC-32C:
// DATA_LOSS naming the file and offset if it is short or does not match,
// UNAVAILABLE with the OS error if the read fails.
REVERB_TF_EXPORT absl::Status ReadSpillRecord(int fd, const std::string& path,
                                              const SpillLocation& where,
                                              char* out);

class REVERB_TF_EXPORT SpillStore {
 public:
  static constexpr int64_t kSegmentBytes = int64_t{64} << 20;

  // Takes `dir` (made if missing) for this store: FAILED_PRECONDITION if
  // another store (of this process or another) has it, the OS error if it
  // cannot be made or written. Segments of about `segment_bytes` (a record
  // larger than that has one of its own), read through mappings unless
  // `map_files` is false (File says why; pread then).
  static absl::StatusOr<std::unique_ptr<SpillStore>> Open(
      const std::string& dir, int64_t segment_bytes = kSegmentBytes,
      bool map_files = true);

  // Deletes the store's segment files and gives the directory up, as
  // Release() does (if it did not already). Records must not be read any
  // more.
  ~SpillStore();

  // Gives the directory up for another store while this one's live records
  // stay readable: their files lose their names (their descriptors and
  // mappings keep them) and the lock goes. From then on this store writes,
  // names and links nothing in the directory: Append(), Adopt() and
  // LinkSegment() fail with FAILED_PRECONDITION, and Free() only forgets.
  // A stopping server calls it, since the chunks of its tables may outlive
  // it (in-process, the tables can be hosted again).
  void Release() ABSL_LOCKS_EXCLUDED(append_mu_, mu_);

  SpillStore(const SpillStore&) = delete;
  SpillStore& operator=(const SpillStore&) = delete;

  const std::string& dir() const { return dir_; }

  // On whose behalf a record is written or read. The counters below count
  // what the store's users cause (spills, reads for samples); compaction's
  // moves are counted apart, so that they neither inflate the read figures
  // nor advance the read epoch that decides which chunks stay in RAM.
  enum class Io { kServe, kMove };

  // Writes `bytes` (at least one) as a new live record. A full or failing
  // disk gives RESOURCE_EXHAUSTED (no space) or UNAVAILABLE (another
  // error), naming the directory; nothing is kept of the failed write.
  absl::StatusOr<SpillLocation> Append(absl::string_view bytes,
                                       Io io = Io::kServe)
      ABSL_LOCKS_EXCLUDED(append_mu_, mu_);

  // Reads the live record at `where` into `out` (where.size bytes).
  // DATA_LOSS naming the file and offset if it is short or its checksum
  // does not match; the OS error (UNAVAILABLE) if the read fails.
  absl::Status Read(const SpillLocation& where, char* out,
                    Io io = Io::kServe) const ABSL_LOCKS_EXCLUDED(mu_);

  // The record at `where` is no longer needed.
  void Free(const SpillLocation& where) ABSL_LOCKS_EXCLUDED(mu_);

  // Seals the newest segment: later appends go to a new one. Returns the
  // number of the first segment not sealed; every record appended before
  // the call is in a segment below it.
  uint32_t Seal() ABSL_LOCKS_EXCLUDED(append_mu_, mu_);
  // Makes `path` a hard link to sealed `segment`, which holds a live
  // record (its file stays whole while the link exists: see above). The
  // OS error otherwise (EXDEV across file systems).
  absl::Status LinkSegment(uint32_t segment, const std::string& path) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Takes the file `path` (a checkpoint's link to a segment) in as a new
  // sealed segment, linked into the directory, and returns its number. It
  // holds no live record until Claim()ed; one whose records are all freed
  // goes as any sealed segment does. The OS error if it cannot be linked
  // or opened (EXDEV across file systems, NOT_FOUND if it is missing).
  absl::StatusOr<uint32_t> Adopt(const std::string& path)
      ABSL_LOCKS_EXCLUDED(append_mu_, mu_);
  // Drops adopted `segment` if no record in it is live (its chunks failed
  // to load).
  void DropIfUnused(uint32_t segment) ABSL_LOCKS_EXCLUDED(mu_);
  // `where` (in an adopted segment) is a live record from now on:
  // OUT_OF_RANGE if it does not lie inside its segment's file.
  absl::Status Claim(const SpillLocation& where) ABSL_LOCKS_EXCLUDED(mu_);

  std::string SegmentPath(uint32_t segment) const;

  // Bytes in the segment files now (live or not yet reclaimed), and of
  // live records.
  int64_t file_bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t live_bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t num_segments() const ABSL_LOCKS_EXCLUDED(mu_);

  // Io::kServe reads so far: how many, their bytes, the time they took.
  int64_t reads() const { return reads_.load(std::memory_order_relaxed); }
  int64_t read_bytes() const {
    return read_bytes_.load(std::memory_order_relaxed);
  }
  int64_t read_nanos() const {
    return read_nanos_.load(std::memory_order_relaxed);
  }
  // Io::kServe writes so far (spills): how many, their bytes.
  int64_t writes() const { return writes_.load(std::memory_order_relaxed); }
  int64_t write_bytes() const {
    return write_bytes_.load(std::memory_order_relaxed);
  }
  // Bytes of the records Io::kMove wrote (compaction's moves).
  int64_t moved_bytes() const {
    return moved_bytes_.load(std::memory_order_relaxed);
  }

  // The sealed segment not in `skip` with the smallest share of live bytes
  // among those with at least `min_dead_bytes` dead: what compaction moves
  // out next.
  struct Sparse {
    uint32_t segment = 0;
    int64_t live = 0;
    int64_t size = 0;
  };
  std::optional<Sparse> SparsestSealed(
      int64_t min_dead_bytes, const absl::flat_hash_set<uint32_t>& skip) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Whether `segment` is still there with a live record.
  bool SegmentLive(uint32_t segment) const ABSL_LOCKS_EXCLUDED(mu_);

  int64_t segment_bytes() const { return segment_bytes_; }

 private:
  // An open segment file, closed once its last holder lets go: a reader
  // that took it may still read a segment dropped meanwhile (its records
  // moved by compaction), whose bytes never change.
  //
  // Records are read through a shared read-only mapping of the file's first
  // `map_bytes` (what a segment can hold), unless the process's address
  // space is capped (RLIMIT_AS) or the mapping fails (then pread):
  // a copy from the mapping costs 4.7-5.2 us per 28 KB frame (checksum
  // included) where pread costs 7.6, whose kernel copy was 37% of a process
  // sampling spilled frames (bench/native_bench.cc --spill_reads).
  // Mapped pages count in the process's RSS as shared file pages; they are
  // the page cache, which reclaims them as it would pread's.
  struct File {
    File(int fd, std::string path, int64_t map_bytes);
    ~File();
    File(const File&) = delete;
    File& operator=(const File&) = delete;
    // Reads and checks the record at `where` (as ReadSpillRecord).
    absl::Status Read(const SpillLocation& where, char* out) const;
    const int fd;
    const std::string path;
    const char* map = nullptr;
    size_t map_size = 0;
  };
  struct Segment {
    std::shared_ptr<const File> file;  // null once dropped
    int64_t size = 0;                  // bytes appended
    int64_t live = 0;                  // bytes of live records
  };

  SpillStore(std::string dir, int lock_fd, int64_t segment_bytes,
             bool map_files);
  // The file of `segment`; null if it was dropped.
  std::shared_ptr<const File> FileOf(uint32_t segment) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The File of a new segment that can hold `can_hold` bytes, mapped if
  // this store maps its files.
  std::shared_ptr<const File> MakeFile(int fd, std::string path,
                                       int64_t can_hold) const;
  // Closes and deletes a sealed segment without live records.
  void DropLocked(uint32_t segment) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FAILED_PRECONDITION: what this store may no longer do after Release().
  absl::Status ReleasedError() const;

  const std::string dir_;
  const int lock_fd_;
  const int64_t segment_bytes_;
  const bool map_files_;
  // Held through a whole Append(), before mu_.
  absl::Mutex append_mu_;
  mutable absl::Mutex mu_;
  // Indexed by segment number; dropped ones have fd -1.
  std::vector<Segment> segments_ ABSL_GUARDED_BY(mu_);
  int64_t file_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t live_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t open_segments_ ABSL_GUARDED_BY(mu_) = 0;
  // The next Append() starts a new segment (Seal(), Adopt()).
  bool sealed_ ABSL_GUARDED_BY(mu_) = false;
  // An Append() is writing to the newest segment (which Free() then must
  // not truncate).
  bool appending_ ABSL_GUARDED_BY(mu_) = false;
  // Release() gave the directory up.
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  mutable std::atomic<int64_t> reads_{0};
  mutable std::atomic<int64_t> read_bytes_{0};
  mutable std::atomic<int64_t> read_nanos_{0};
  std::atomic<int64_t> writes_{0};
  std::atomic<int64_t> write_bytes_{0};
  std::atomic<int64_t> moved_bytes_{0};
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_SPILL_STORE_H_
