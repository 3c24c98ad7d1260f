// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/spill_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_acle.h>
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "reverb_tf/cc/platform/out_of_memory.h"
#include "reverb_tf/cc/platform/status_macros.h"

namespace reverb_tf {

namespace {

// The records' checksum, computed on every read back: zlib's CRC-32 took a
// third of a sampling process's CPU (7.2 us per 28 KB frame); CRC-32C with
// the SSE4.2 instruction took 2.9 us one word after another, and a quarter
// of a process sampling spilled frames. The instruction's latency is three
// times its throughput, so three independent runs over consecutive blocks
// keep it busy; their registers are joined by shifting over a block's
// zeros (linear in the register: four table lookups). ARMv8's CRC32
// extension (every Graviton, Grace and Apple core has it) has the same
// instruction. Checkpoints keep the checksum, so a machine without either
// computes it from a table.

// The byte-at-a-time table of the reflected polynomial 0x82F63B78.
const uint32_t* Crc32cByteTable() {
  static const auto* const table = [] {
    auto* t = new uint32_t[256];
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t crc = i;
      for (int bit = 0; bit < 8; ++bit) {
        crc = (crc >> 1) ^ ((crc & 1) != 0 ? 0x82F63B78u : 0u);
      }
      t[i] = crc;
    }
    return t;
  }();
  return table;
}

uint32_t Crc32cTable(const char* data, size_t size) {
  const uint32_t* table = Crc32cByteTable();
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < size; ++i) {
    crc = (crc >> 8) ^ table[(crc ^ static_cast<uint8_t>(data[i])) & 0xff];
  }
  return ~crc;
}

#if defined(__x86_64__) || defined(__aarch64__)
// Bytes each of the three runs takes per round.
constexpr size_t kCrcBlock = 512;

// A register advanced over kCrcBlock zero bytes, byte by byte of the
// register: table[k][b] is the shift of b << 8k.
struct CrcBlockShift {
  uint32_t table[4][256];

  uint32_t operator()(uint64_t crc) const {
    return table[0][crc & 0xff] ^ table[1][(crc >> 8) & 0xff] ^
           table[2][(crc >> 16) & 0xff] ^ table[3][(crc >> 24) & 0xff];
  }
};

const CrcBlockShift& ShiftOverBlock() {
  static const CrcBlockShift* const shift = [] {
    const uint32_t* bytes = Crc32cByteTable();
    uint32_t basis[32];
    for (int bit = 0; bit < 32; ++bit) {
      uint32_t crc = 1u << bit;
      for (size_t i = 0; i < kCrcBlock; ++i)
        crc = (crc >> 8) ^ bytes[crc & 0xff];
      basis[bit] = crc;
    }
    auto* s = new CrcBlockShift;
    for (int k = 0; k < 4; ++k) {
      for (int b = 0; b < 256; ++b) {
        uint32_t v = 0;
        for (int j = 0; j < 8; ++j) {
          if (((b >> j) & 1) != 0) v ^= basis[8 * k + j];
        }
        s->table[k][b] = v;
      }
    }
    return s;
  }();
  return *shift;
}

#if defined(__x86_64__)
#define REVERB_TF_CRC_TARGET __attribute__((target("sse4.2")))
REVERB_TF_CRC_TARGET inline uint64_t CrcWord(uint64_t crc, const char* at) {
  uint64_t word;
  std::memcpy(&word, at, 8);
  return _mm_crc32_u64(crc, word);
}
REVERB_TF_CRC_TARGET inline uint32_t CrcByte(uint32_t crc, char byte) {
  return _mm_crc32_u8(crc, static_cast<uint8_t>(byte));
}
#else
#define REVERB_TF_CRC_TARGET __attribute__((target("+crc")))
REVERB_TF_CRC_TARGET inline uint64_t CrcWord(uint64_t crc, const char* at) {
  uint64_t word;
  std::memcpy(&word, at, 8);
  return __crc32cd(static_cast<uint32_t>(crc), word);
}
REVERB_TF_CRC_TARGET inline uint32_t CrcByte(uint32_t crc, char byte) {
  return __crc32cb(crc, static_cast<uint8_t>(byte));
}
#endif

// The register `crc` (not inverted) advanced over `size` bytes with the
// CPU's instruction: three runs at a time while three blocks are left,
// then one.
REVERB_TF_CRC_TARGET uint32_t CrcRun(uint32_t register_in, const char* data,
                                     size_t size) {
  const CrcBlockShift& shift = ShiftOverBlock();
  uint64_t crc = register_in;
  for (; size >= 3 * kCrcBlock; data += 3 * kCrcBlock, size -= 3 * kCrcBlock) {
    uint64_t second = 0;
    uint64_t third = 0;
    for (size_t i = 0; i < kCrcBlock; i += 8) {
      crc = CrcWord(crc, data + i);
      second = CrcWord(second, data + kCrcBlock + i);
      third = CrcWord(third, data + 2 * kCrcBlock + i);
    }
    crc = shift(shift(crc) ^ second) ^ third;
  }
  for (; size >= 8; data += 8, size -= 8) crc = CrcWord(crc, data);
  uint32_t crc32 = static_cast<uint32_t>(crc);
  for (size_t i = 0; i < size; ++i) crc32 = CrcByte(crc32, data[i]);
  return crc32;
}

REVERB_TF_CRC_TARGET uint32_t Crc32cInstruction(const char* data, size_t size) {
  return ~CrcRun(0xffffffffu, data, size);
}
#undef REVERB_TF_CRC_TARGET
#endif

#if defined(__x86_64__)
// Copying a record out of its mapping and checking it in one pass: with
// AVX-512's carry-less multiply, four 512-bit accumulators fold the bytes
// as they are copied (each 128-bit lane X stands for its bits as a
// polynomial; moving it D bytes further on multiplies it by x^(8D), which
// its two halves do with one carry-less product each, and the sum stays
// congruent modulo the polynomial). The copy is memory-bound, so the
// folding all but disappears under it: 2.5 us per 28 KB frame where a copy
// and then the checksum took 3.4 (a copy alone: 2.25).
#define REVERB_TF_FOLD_TARGET \
  __attribute__((target("avx512f,vpclmulqdq,sse4.2")))

// x^n modulo the polynomial, with the coefficient of x^k at bit 63 - k:
// the layout in which a carry-less product of two such values (each half
// of a lane, coefficients from bit 63 down) lands as a lane whose bits
// count down from x^127, when the constant is one power short
// (FoldConstants).
uint64_t PowerModP(int n) {
  uint64_t r = 1;  // coefficient of x^k at bit k, x^32 excluded
  for (int i = 0; i < n; ++i) {
    r <<= 1;
    if ((r >> 32) != 0) r ^= 0x11EDC6F41u;
  }
  uint64_t reflected = 0;
  for (int k = 0; k < 32; ++k) {
    if (((r >> k) & 1) != 0) reflected |= uint64_t{1} << (63 - k);
  }
  return reflected;
}

// The constants that move a lane `bytes` further on: its first half (the
// higher powers) by x^(8 bytes + 64), its second by x^(8 bytes); one power
// less each, which the product's layout adds back.
struct FoldConstants {
  uint64_t first;
  uint64_t second;
  explicit FoldConstants(int bytes)
      : first(PowerModP(8 * bytes + 63)), second(PowerModP(8 * bytes - 1)) {}
};

REVERB_TF_FOLD_TARGET inline __m512i Fold(__m512i lanes, __m512i constants,
                                          __m512i add) {
  return _mm512_ternarylogic_epi64(
      _mm512_clmulepi64_epi128(lanes, constants, 0x00),
      _mm512_clmulepi64_epi128(lanes, constants, 0x11), add, 0x96);
}

REVERB_TF_FOLD_TARGET inline __m512i EveryLane(const FoldConstants& k) {
  const auto first = static_cast<int64_t>(k.first);
  const auto second = static_cast<int64_t>(k.second);
  return _mm512_set_epi64(second, first, second, first, second, first, second,
                          first);
}

// Copies `size` (at least 256) bytes to `out` and returns their CRC-32C.
REVERB_TF_FOLD_TARGET uint32_t Crc32cCopyFolding(char* out, const char* data,
                                                 size_t size) {
  static const FoldConstants k256(256), k192(192), k128(128), k64(64), k48(48),
      k32(32), k16(16);
  const __m512i by256 = EveryLane(k256);
  __m512i a[4];
  for (int j = 0; j < 4; ++j) {
    a[j] = _mm512_loadu_si512(data + 64 * j);
    _mm512_storeu_si512(out + 64 * j, a[j]);
  }
  // The initial register goes into the first four bytes.
  a[0] = _mm512_xor_si512(a[0],
                          _mm512_set_epi64(0, 0, 0, 0, 0, 0, 0, 0xffffffffu));
  size_t i = 256;
  for (; i + 256 <= size; i += 256) {
    for (int j = 0; j < 4; ++j) {
      const __m512i next = _mm512_loadu_si512(data + i + 64 * j);
      _mm512_storeu_si512(out + i + 64 * j, next);
      a[j] = Fold(a[j], by256, next);
    }
  }
  // Everything onto the last 64 bytes, then onto their last lane.
  __m512i last = Fold(a[0], EveryLane(k192), a[3]);
  last = Fold(a[1], EveryLane(k128), last);
  last = Fold(a[2], EveryLane(k64), last);
  const __m512i to_last_lane = _mm512_set_epi64(
      0, 0, static_cast<int64_t>(k16.second), static_cast<int64_t>(k16.first),
      static_cast<int64_t>(k32.second), static_cast<int64_t>(k32.first),
      static_cast<int64_t>(k48.second), static_cast<int64_t>(k48.first));
  alignas(64) uint64_t folded[8];
  alignas(64) uint64_t unmoved[8];
  _mm512_store_si512(folded, Fold(last, to_last_lane, _mm512_setzero_si512()));
  _mm512_store_si512(unmoved, last);
  // The lane's 16 bytes, as a message after a zero register, give the
  // register after everything folded.
  const uint64_t crc = _mm_crc32_u64(
      _mm_crc32_u64(0, folded[0] ^ folded[2] ^ folded[4] ^ unmoved[6]),
      folded[1] ^ folded[3] ^ folded[5] ^ unmoved[7]);
  std::memcpy(out + i, data + i, size - i);
  return ~CrcRun(static_cast<uint32_t>(crc), out + i, size - i);
}
#undef REVERB_TF_FOLD_TARGET
#endif

absl::Status OsError(absl::string_view what, const std::string& path,
                     int error) {
  const std::string message =
      absl::StrCat(what, " ", path, ": ", std::strerror(error));
  if (error == ENOSPC || error == EDQUOT) {
    return absl::ResourceExhaustedError(message);
  }
  return absl::UnavailableError(message);
}

// DATA_LOSS for a record cut short by the end of its file at `end`.
absl::Status RecordCutShort(const std::string& path, const SpillLocation& where,
                            uint64_t end) {
  return absl::DataLossError(
      absl::StrCat("spill file ", path, " is damaged: it ends at ", end,
                   " bytes, inside the record of ", where.size,
                   " bytes at offset ", where.offset));
}

absl::Status ChecksumMismatch(const std::string& path,
                              const SpillLocation& where) {
  return absl::DataLossError(absl::StrCat(
      "spill file ", path, " is damaged: the record of ", where.size,
      " bytes at offset ", where.offset, " does not match its checksum"));
}

// Makes `dir` and its missing parents.
absl::Status MakeDirs(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i < dir.size() && dir[i] != '/') continue;
    const std::string prefix = dir.substr(0, i);
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return OsError("cannot make the spill directory", prefix, errno);
    }
  }
  return absl::OkStatus();
}

}  // namespace

uint32_t Crc32c(const char* data, size_t size) {
#if defined(__x86_64__)
  static const bool instruction = __builtin_cpu_supports("sse4.2");
#elif defined(__aarch64__)
  static const bool instruction = (getauxval(AT_HWCAP) & HWCAP_CRC32) != 0;
#endif
#if defined(__x86_64__) || defined(__aarch64__)
  if (instruction) return Crc32cInstruction(data, size);
#endif
  return Crc32cTable(data, size);
}

uint32_t Crc32cCopy(char* out, const char* data, size_t size) {
#if defined(__x86_64__)
  static const bool folding = __builtin_cpu_supports("avx512f") &&
                              __builtin_cpu_supports("vpclmulqdq") &&
                              __builtin_cpu_supports("sse4.2");
  if (folding && size >= 256) return Crc32cCopyFolding(out, data, size);
#endif
  if (size > 0) std::memcpy(out, data, size);
  return Crc32c(out, size);
}

absl::Status ReadSpillRecord(int fd, const std::string& path,
                             const SpillLocation& where, char* out) {
  size_t done = 0;
  while (done < where.size) {
    const ssize_t n = pread(fd, out + done, where.size - done,
                            static_cast<off_t>(where.offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return OsError("cannot read spill file", path, errno);
    if (n == 0) return RecordCutShort(path, where, where.offset + done);
    done += static_cast<size_t>(n);
  }
  if (Crc32c(out, where.size) != where.crc)
    return ChecksumMismatch(path, where);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SpillStore>> SpillStore::Open(
    const std::string& dir, int64_t segment_bytes, bool map_files) {
  if (dir.empty()) {
    return absl::InvalidArgumentError("the spill directory must be named");
  }
  if (absl::Status made = MakeDirs(dir); !made.ok()) return made;
  const std::string lock_path = absl::StrCat(dir, "/LOCK");
  const int lock_fd =
      open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0) return OsError("cannot open", lock_path, errno);
  if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    close(lock_fd);
    if (error == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the spill directory ", dir, " is in use by another server"));
    }
    return OsError("cannot lock", lock_path, error);
  }
  // An earlier run's segments: their records' locations died with it.
  if (DIR* listing = opendir(dir.c_str()); listing != nullptr) {
    std::vector<std::string> stale;
    while (const dirent* entry = readdir(listing)) {
      const absl::string_view name = entry->d_name;
      if (absl::StartsWith(name, "segment-") &&
          absl::EndsWith(name, ".spill")) {
        stale.push_back(absl::StrCat(dir, "/", name));
      }
    }
    closedir(listing);
    for (const std::string& path : stale) unlink(path.c_str());
  }
  return std::unique_ptr<SpillStore>(new SpillStore(
      dir, lock_fd, std::max<int64_t>(segment_bytes, 1), map_files));
}

SpillStore::SpillStore(std::string dir, int lock_fd, int64_t segment_bytes,
                       bool map_files)
    : dir_(std::move(dir)),
      lock_fd_(lock_fd),
      segment_bytes_(segment_bytes),
      map_files_(map_files) {}

SpillStore::File::File(int fd, std::string path, int64_t map_bytes)
    : fd(fd), path(std::move(path)) {
  // A process whose address space is capped keeps it for what must not
  // fail (gRPC's buffers: platform/out_of_memory.h), not for mappings of
  // 64 MiB a segment.
  if (map_bytes <= 0 || AddressSpaceCap().has_value()) return;
  void* mapped = mmap(nullptr, static_cast<size_t>(map_bytes), PROT_READ,
                      MAP_SHARED, fd, 0);
  // Without a mapping (no address space left), reads take pread.
  if (mapped == MAP_FAILED) return;
  map = static_cast<const char*>(mapped);
  map_size = static_cast<size_t>(map_bytes);
}

SpillStore::File::~File() {
  if (map != nullptr) munmap(const_cast<char*>(map), map_size);
  close(fd);
}

absl::Status SpillStore::File::Read(const SpillLocation& where,
                                    char* out) const {
  if (map == nullptr || where.offset + where.size > map_size) {
    return ReadSpillRecord(fd, path, where, out);
  }
  // A page past the file's end would raise SIGBUS: only a file damaged
  // from outside (truncated) is shorter than its live records. Its size
  // from lseek, the cheapest call that tells it (0.17 us here against
  // fstat's 0.37; nothing reads or writes at the descriptor's offset).
  const off_t end = lseek(fd, 0, SEEK_END);
  if (end < 0) return OsError("cannot read spill file", path, errno);
  if (where.offset + where.size > static_cast<uint64_t>(end)) {
    return RecordCutShort(path, where, static_cast<uint64_t>(end));
  }
  if (Crc32cCopy(out, map + where.offset, where.size) != where.crc) {
    return ChecksumMismatch(path, where);
  }
  return absl::OkStatus();
}

// The files themselves close as their last readers let go.
SpillStore::~SpillStore() { Release(); }

void SpillStore::Release() {
  absl::MutexLock append(&append_mu_);
  absl::MutexLock lock(&mu_);
  if (released_) return;
  released_ = true;
  for (uint32_t i = 0; i < segments_.size(); ++i) {
    if (segments_[i].file != nullptr) unlink(SegmentPath(i).c_str());
  }
  close(lock_fd_);  // releases the flock
}

std::shared_ptr<const SpillStore::File> SpillStore::MakeFile(
    int fd, std::string path, int64_t can_hold) const {
  return std::make_shared<File>(fd, std::move(path), map_files_ ? can_hold : 0);
}

absl::Status SpillStore::ReleasedError() const {
  return absl::FailedPreconditionError(absl::StrCat(
      "the spill directory ", dir_, " was given up: its server stopped"));
}

std::string SpillStore::SegmentPath(uint32_t segment) const {
  return absl::StrFormat("%s/segment-%08u.spill", dir_, segment);
}

absl::StatusOr<SpillLocation> SpillStore::Append(absl::string_view bytes,
                                                 Io io) {
  // One append at a time, so that a record's offset is settled before the
  // write and a failed write leaves no gap behind a later record.
  absl::MutexLock append(&append_mu_);
  uint32_t segment;
  std::shared_ptr<const File> file;
  int64_t offset;
  {
    absl::MutexLock lock(&mu_);
    if (released_) return ReleasedError();
    if (segments_.empty() || sealed_ || segments_.back().file == nullptr ||
        (segments_.back().size + static_cast<int64_t>(bytes.size()) >
             segment_bytes_ &&
         segments_.back().size > 0)) {
      const uint32_t next = static_cast<uint32_t>(segments_.size());
      const std::string path = SegmentPath(next);
      const int new_fd =
          open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (new_fd < 0) return OsError("cannot create", path, errno);
      segments_.push_back(Segment{
          MakeFile(new_fd, path,
                   std::max<int64_t>(segment_bytes_,
                                     static_cast<int64_t>(bytes.size()))),
          0, 0});
      // The one it seals goes once nothing in it is live.
      if (next > 0 && segments_[next - 1].live == 0) DropLocked(next - 1);
      ++open_segments_;
      sealed_ = false;
    }
    segment = static_cast<uint32_t>(segments_.size() - 1);
    file = segments_.back().file;
    offset = segments_.back().size;
    appending_ = true;
  }
  const int fd = file->fd;
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = pwrite(fd, bytes.data() + done, bytes.size() - done,
                             static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : ENOSPC;
      // Nothing past `offset` is a record: the next append overwrites it.
      if (ftruncate(fd, static_cast<off_t>(offset)) != 0) {
        // The bytes stay allocated until the segment goes; harmless.
      }
      absl::MutexLock lock(&mu_);
      appending_ = false;
      return OsError("cannot write to the spill directory", dir_, error);
    }
    done += static_cast<size_t>(n);
  }
  SpillLocation where;
  where.segment = segment;
  where.offset = static_cast<uint64_t>(offset);
  where.size = static_cast<uint32_t>(bytes.size());
  where.crc = Crc32c(bytes.data(), bytes.size());
  {
    absl::MutexLock lock(&mu_);
    Segment& s = segments_[segment];
    s.size = offset + static_cast<int64_t>(bytes.size());
    s.live += where.size;
    appending_ = false;
    file_bytes_ += where.size;
    live_bytes_ += where.size;
  }
  if (io == Io::kMove) {
    moved_bytes_.fetch_add(where.size, std::memory_order_relaxed);
  } else {
    writes_.fetch_add(1, std::memory_order_relaxed);
    write_bytes_.fetch_add(where.size, std::memory_order_relaxed);
  }
  return where;
}

std::shared_ptr<const SpillStore::File> SpillStore::FileOf(
    uint32_t segment) const {
  absl::ReaderMutexLock lock(&mu_);
  return segment < segments_.size() ? segments_[segment].file : nullptr;
}

absl::Status SpillStore::Read(const SpillLocation& where, char* out,
                              Io io) const {
  const absl::Time start = absl::Now();
  const std::shared_ptr<const File> file = FileOf(where.segment);
  if (file == nullptr) {
    return absl::DataLossError(
        absl::StrCat("spill file ", SegmentPath(where.segment),
                     " is gone while a record in it is live"));
  }
  RETURN_IF_ERROR(file->Read(where, out));
  if (io == Io::kMove) return absl::OkStatus();
  reads_.fetch_add(1, std::memory_order_relaxed);
  read_bytes_.fetch_add(where.size, std::memory_order_relaxed);
  read_nanos_.fetch_add(absl::ToInt64Nanoseconds(absl::Now() - start),
                        std::memory_order_relaxed);
  return absl::OkStatus();
}

void SpillStore::Free(const SpillLocation& where) {
  absl::MutexLock lock(&mu_);
  Segment& s = segments_[where.segment];
  s.live -= where.size;
  live_bytes_ -= where.size;
  if (s.live > 0) return;
  // Sealed (a checkpoint may link it): its name goes, never its bytes.
  if (where.segment + 1 < segments_.size() || sealed_) {
    DropLocked(where.segment);
  } else if (!appending_ && s.size > 0 && ftruncate(s.file->fd, 0) == 0) {
    file_bytes_ -= s.size;
    s.size = 0;
  }
}

uint32_t SpillStore::Seal() {
  absl::MutexLock append(&append_mu_);
  absl::MutexLock lock(&mu_);
  sealed_ = true;
  return static_cast<uint32_t>(segments_.size());
}

absl::Status SpillStore::LinkSegment(uint32_t segment,
                                     const std::string& path) const {
  absl::ReaderMutexLock lock(&mu_);
  if (released_) return ReleasedError();
  if (segment >= segments_.size() || segments_[segment].file == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "spill segment ", segment, " of ", dir_, " holds no live record"));
  }
  const std::string from = SegmentPath(segment);
  if (link(from.c_str(), path.c_str()) != 0) {
    return OsError(absl::StrCat("cannot link ", from, " as"), path, errno);
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> SpillStore::Adopt(const std::string& path) {
  absl::MutexLock append(&append_mu_);
  absl::MutexLock lock(&mu_);
  if (released_) return ReleasedError();
  const uint32_t segment = static_cast<uint32_t>(segments_.size());
  const std::string to = SegmentPath(segment);
  if (link(path.c_str(), to.c_str()) != 0) {
    const int error = errno;
    if (error == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("spill file ", path, " is missing"));
    }
    return OsError(absl::StrCat("cannot link ", path, " as"), to, error);
  }
  const int fd = open(to.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat info;
  if (fd < 0 || fstat(fd, &info) != 0) {
    const int error = errno;
    if (fd >= 0) close(fd);
    unlink(to.c_str());
    return OsError("cannot open", to, error);
  }
  segments_.push_back(
      Segment{MakeFile(fd, to, static_cast<int64_t>(info.st_size)),
              static_cast<int64_t>(info.st_size), 0});
  ++open_segments_;
  file_bytes_ += info.st_size;
  sealed_ = true;
  return segment;
}

absl::Status SpillStore::Claim(const SpillLocation& where) {
  absl::MutexLock lock(&mu_);
  if (where.segment >= segments_.size() ||
      segments_[where.segment].file == nullptr ||
      where.offset + where.size >
          static_cast<uint64_t>(segments_[where.segment].size)) {
    return absl::OutOfRangeError(absl::StrCat(
        "the record of ", where.size, " bytes at offset ", where.offset,
        " is not inside spill file ", SegmentPath(where.segment)));
  }
  segments_[where.segment].live += where.size;
  live_bytes_ += where.size;
  return absl::OkStatus();
}

void SpillStore::DropIfUnused(uint32_t segment) {
  absl::MutexLock lock(&mu_);
  if (segment < segments_.size() && segments_[segment].live == 0) {
    DropLocked(segment);
  }
}

void SpillStore::DropLocked(uint32_t segment) {
  Segment& s = segments_[segment];
  if (s.file == nullptr) return;
  if (!released_) unlink(SegmentPath(segment).c_str());
  s.file.reset();  // closed once no reader holds it
  file_bytes_ -= s.size;
  --open_segments_;
}

std::optional<SpillStore::Sparse> SpillStore::SparsestSealed(
    int64_t min_dead_bytes, const absl::flat_hash_set<uint32_t>& skip) const {
  absl::MutexLock lock(&mu_);
  std::optional<Sparse> best;
  // The newest takes appends unless sealed.
  const size_t sealed =
      sealed_ || segments_.empty() ? segments_.size() : segments_.size() - 1;
  for (uint32_t i = 0; i < sealed; ++i) {
    const Segment& s = segments_[i];
    if (s.file == nullptr || s.size - s.live < min_dead_bytes ||
        skip.contains(i)) {
      continue;
    }
    // The smallest live / size, compared without dividing.
    if (!best.has_value() || s.live * best->size < best->live * s.size) {
      best = Sparse{i, s.live, s.size};
    }
  }
  return best;
}

bool SpillStore::SegmentLive(uint32_t segment) const {
  absl::MutexLock lock(&mu_);
  return segment < segments_.size() && segments_[segment].file != nullptr &&
         segments_[segment].live > 0;
}

int64_t SpillStore::file_bytes() const {
  absl::MutexLock lock(&mu_);
  return file_bytes_;
}

int64_t SpillStore::live_bytes() const {
  absl::MutexLock lock(&mu_);
  return live_bytes_;
}

int64_t SpillStore::num_segments() const {
  absl::MutexLock lock(&mu_);
  return open_segments_;
}

}  // namespace reverb_tf
