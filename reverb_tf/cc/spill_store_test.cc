// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/spill_store.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reverb_tf/cc/chunk_store.h"
#include "reverb_tf/cc/platform/process_memory.h"
#include "reverb_tf/cc/testing/status_matchers.h"

namespace reverb_tf {
namespace {

namespace fs = std::filesystem;
using ::reverb_tf::testing::StatusIs;
using ::testing::HasSubstr;

std::string TempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir =
      std::string(base != nullptr ? base : "/tmp") + "/spill_XXXXXX";
  return mkdtemp(dir.data());
}

std::string Bytes(size_t n, int seed) {
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) {
    out[i] =
        static_cast<char>((i * 131 + static_cast<size_t>(seed) * 7) & 0xff);
  }
  return out;
}

TEST(SpillStoreTest, RecordsReadBackExactly) {
  const std::string dir = TempDir() + "/nested/spill";
  ASSERT_OK_AND_ASSIGN(auto store, SpillStore::Open(dir));
  std::vector<SpillLocation> where;
  for (int i = 0; i < 20; ++i) {
    ASSERT_OK_AND_ASSIGN(SpillLocation w, store->Append(Bytes(1000 + i, i)));
    where.push_back(w);
  }
  for (int i = 0; i < 20; ++i) {
    std::string out(where[i].size, '\0');
    ASSERT_OK(store->Read(where[i], out.data()));
    EXPECT_EQ(out, Bytes(1000 + i, i));
  }
  EXPECT_EQ(store->live_bytes(), 20 * 1000 + 190);
  EXPECT_EQ(store->reads(), 20);
}

TEST(SpillStoreTest, DirectoryIsExclusiveAndStaleSegmentsGo) {
  const std::string dir = TempDir();
  {
    ASSERT_OK_AND_ASSIGN(auto store, SpillStore::Open(dir));
    EXPECT_THAT(SpillStore::Open(dir),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         HasSubstr("in use by another server")));
    ASSERT_OK(store->Append(Bytes(100, 1)).status());
    EXPECT_TRUE(fs::exists(store->SegmentPath(0)));
  }
  // Deleted with the store; one left by a crash goes on the next Open().
  EXPECT_FALSE(fs::exists(dir + "/segment-00000000.spill"));
  { std::ofstream(dir + "/segment-00000007.spill") << "stale"; }
  ASSERT_OK_AND_ASSIGN(auto store, SpillStore::Open(dir));
  EXPECT_FALSE(fs::exists(dir + "/segment-00000007.spill"));
}

TEST(SpillStoreTest, SealedSegmentsWithoutLiveRecordsAreDeleted) {
  ASSERT_OK_AND_ASSIGN(auto store, SpillStore::Open(TempDir()));
  const std::string big(SpillStore::kSegmentBytes / 2 + 1, 'x');
  ASSERT_OK_AND_ASSIGN(SpillLocation a, store->Append(big));
  ASSERT_OK_AND_ASSIGN(SpillLocation b, store->Append(big));  // segment 1
  ASSERT_OK_AND_ASSIGN(SpillLocation c, store->Append(big));  // segment 2
  EXPECT_EQ(a.segment, 0u);
  EXPECT_EQ(b.segment, 1u);
  EXPECT_EQ(c.segment, 2u);
  EXPECT_EQ(store->num_segments(), 3);
  store->Free(a);
  EXPECT_FALSE(fs::exists(store->SegmentPath(0)));
  EXPECT_EQ(store->num_segments(), 2);
  store->Free(c);  // the open segment stays, emptied, for the next appends
  EXPECT_TRUE(fs::exists(store->SegmentPath(2)));
  EXPECT_EQ(fs::file_size(store->SegmentPath(2)), 0u);
  EXPECT_EQ(store->file_bytes(), static_cast<int64_t>(big.size()));
  EXPECT_EQ(store->live_bytes(), static_cast<int64_t>(big.size()));
  ASSERT_OK_AND_ASSIGN(SpillLocation d, store->Append("again"));
  EXPECT_EQ(d.segment, 2u);
  EXPECT_EQ(d.offset, 0u);
  store->Free(b);
  store->Free(d);
  EXPECT_EQ(store->file_bytes(), 0);
  EXPECT_EQ(store->num_segments(), 1);
}

TEST(SpillStoreTest, DamagedRecordIsDataLossNamingTheFile) {
  ASSERT_OK_AND_ASSIGN(auto store, SpillStore::Open(TempDir()));
  ASSERT_OK_AND_ASSIGN(SpillLocation w, store->Append(Bytes(4096, 3)));
  {
    const int fd = open(store->SegmentPath(0).c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(pwrite(fd, "!", 1, 100), 1);
    close(fd);
  }
  std::string out(w.size, '\0');
  EXPECT_THAT(
      store->Read(w, out.data()),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr(store->SegmentPath(0))));
  ASSERT_EQ(truncate(store->SegmentPath(0).c_str(), 10), 0);
  EXPECT_THAT(store->Read(w, out.data()),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("ends at")));
}

// Whether this process maps `path` (a line of /proc/self/maps names it).
bool Mapped(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(path) != std::string::npos) return true;
  }
  return false;
}

// A store's records are read through a mapping of their segment, except in
// a process whose address space is capped, which reads them with pread; the
// bytes are the same either way.
TEST(SpillStoreTest, SegmentsAreMappedUnlessTheAddressSpaceIsCapped) {
  const std::string record = Bytes(30000, 5);
  {
    const std::string dir = TempDir();
    ASSERT_OK_AND_ASSIGN(auto store, SpillStore::Open(dir));
    ASSERT_OK_AND_ASSIGN(SpillLocation w, store->Append(record));
    std::string out(w.size, '\0');
    ASSERT_OK(store->Read(w, out.data()));
    EXPECT_EQ(out, record);
    EXPECT_TRUE(Mapped(store->SegmentPath(0)));
  }
  const std::string dir = TempDir();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Exit codes say what went wrong; gtest's output is the parent's. The
    // cap is 1 GiB above what the process maps (a sanitizer's shadow too).
    const std::optional<ProcessMemory> memory = ReadProcessMemory();
    if (!memory.has_value()) _exit(10);
    const rlim_t cap = static_cast<rlim_t>(memory->mapped_bytes) + (1 << 30);
    const rlimit limit{cap, cap};
    if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(11);
    auto store = SpillStore::Open(dir);
    if (!store.ok()) _exit(12);
    auto w = (*store)->Append(record);
    if (!w.ok()) _exit(13);
    std::string out(w->size, '\0');
    if (!(*store)->Read(*w, out.data()).ok() || out != record) _exit(14);
    _exit(Mapped((*store)->SegmentPath(0)) ? 15 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(SpillStoreTest, ChecksumsAreCrc32c) {
  // The check value of CRC-32C (RFC 3720): checkpoints keep these.
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
}

// CRC-32C bit by bit, straight from the polynomial.
uint32_t BitwiseCrc32c(const char* data, size_t size) {
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < size; ++i) {
    crc ^= static_cast<uint8_t>(data[i]);
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc >> 1) ^ ((crc & 1) != 0 ? 0x82F63B78u : 0u);
    }
  }
  return ~crc;
}

// `n` bytes from a linear congruential generator started at `seed`: no
// period a checksum's blocks could line up with.
std::string RandomBytes(size_t n, uint32_t seed) {
  std::string bytes(n, '\0');
  uint32_t state = seed;
  for (char& c : bytes) {
    state = state * 1103515245u + 12345u;
    c = static_cast<char>(state >> 24);
  }
  return bytes;
}

TEST(SpillStoreTest, ChecksumsOfEveryLengthAndAlignmentAreCrc32c) {
  // Lengths around the three-block rounds of the instruction's path (1536
  // bytes), their word and byte tails, and a frame; at every alignment.
  const std::string bytes = RandomBytes(28224 + 16, 12345);
  for (size_t size : {0, 1, 7, 8, 511, 512, 1535, 1536, 1537, 1543, 1544, 3071,
                      3072, 3079, 4608, 28224}) {
    for (size_t align = 0; align < 8; ++align) {
      EXPECT_EQ(Crc32c(bytes.data() + align, size),
                BitwiseCrc32c(bytes.data() + align, size))
          << "size " << size << " at " << align;
    }
  }
}

TEST(SpillStoreTest, CopiesWithTheirChecksumAreExactAndCrc32c) {
  // Around the folding path's 256-byte rounds and 64-byte tails (and below
  // its 256-byte minimum), at every alignment of source and copy.
  const std::string bytes = RandomBytes(28224 + 64, 777);
  std::string out(bytes.size(), '\0');
  for (size_t size :
       {0, 5, 255, 256, 257, 319, 320, 511, 512, 513, 767, 1000, 4096, 28224}) {
    for (size_t align = 0; align < 8; ++align) {
      std::fill(out.begin(), out.end(), '\0');
      const char* from = bytes.data() + align;
      EXPECT_EQ(Crc32cCopy(out.data() + 7 - align, from, size),
                BitwiseCrc32c(from, size))
          << "size " << size << " at " << align;
      EXPECT_EQ(out.substr(7 - align, size), std::string(from, size))
          << "size " << size << " at " << align;
    }
  }
}

// A stopping server gives its directory up while its tables' chunks (and
// so its records) may live on: the next store opens the directory at once,
// the old records stay readable, and nothing the old store does afterwards
// touches the new one's files of the same names.
TEST(SpillStoreTest, AReleasedDirectoryServesTheNextStoreAndOldRecordsStay) {
  const std::string dir = TempDir();
  ASSERT_OK_AND_ASSIGN(auto old_store, SpillStore::Open(dir, 4096));
  ASSERT_OK_AND_ASSIGN(SpillLocation a, old_store->Append(Bytes(3000, 1)));
  ASSERT_OK_AND_ASSIGN(SpillLocation b, old_store->Append(Bytes(3000, 2)));
  EXPECT_EQ(b.segment, 1u);
  EXPECT_THAT(SpillStore::Open(dir).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  old_store->Release();
  ASSERT_OK_AND_ASSIGN(auto new_store, SpillStore::Open(dir, 4096));
  ASSERT_OK_AND_ASSIGN(SpillLocation c, new_store->Append(Bytes(3000, 3)));
  ASSERT_OK_AND_ASSIGN(SpillLocation d, new_store->Append(Bytes(3000, 4)));
  std::string out(3000, '\0');
  ASSERT_OK(old_store->Read(a, out.data()));
  EXPECT_EQ(out, Bytes(3000, 1));
  ASSERT_OK(old_store->Read(b, out.data()));
  EXPECT_EQ(out, Bytes(3000, 2));
  EXPECT_THAT(
      old_store->Append(Bytes(10, 5)).status(),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("given up")));
  EXPECT_THAT(old_store->LinkSegment(0, TempDir() + "/linked.spill"),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  old_store->Free(a);
  old_store->Free(b);
  old_store.reset();
  EXPECT_TRUE(fs::exists(new_store->SegmentPath(0)));
  EXPECT_TRUE(fs::exists(new_store->SegmentPath(1)));
  ASSERT_OK(new_store->Read(c, out.data()));
  EXPECT_EQ(out, Bytes(3000, 3));
  ASSERT_OK(new_store->Read(d, out.data()));
  EXPECT_EQ(out, Bytes(3000, 4));
}

std::string ReadFile(const std::string& path, const SpillLocation& where) {
  const int fd = open(path.c_str(), O_RDONLY);
  std::string out(where.size, '\0');
  absl::Status read = ReadSpillRecord(fd, path, where, out.data());
  close(fd);
  return read.ok() ? out : std::string(read.message());
}

TEST(SpillStoreTest, ALinkedSegmentStaysWholeWhenItsRecordsGo) {
  const std::string dir = TempDir();
  const std::string link = TempDir() + "/linked.spill";
  ASSERT_OK_AND_ASSIGN(auto store, SpillStore::Open(dir));
  ASSERT_OK_AND_ASSIGN(SpillLocation a, store->Append(Bytes(5000, 1)));
  ASSERT_OK_AND_ASSIGN(SpillLocation b, store->Append(Bytes(3000, 2)));
  EXPECT_EQ(store->Seal(), 1u);
  ASSERT_OK(store->LinkSegment(0, link));
  // Sealed: the next record starts a segment of its own.
  ASSERT_OK_AND_ASSIGN(SpillLocation c, store->Append(Bytes(100, 3)));
  EXPECT_EQ(c.segment, 1u);
  store->Free(a);
  store->Free(b);
  EXPECT_FALSE(fs::exists(store->SegmentPath(0)));
  EXPECT_EQ(fs::file_size(link), 8000u);
  EXPECT_EQ(ReadFile(link, b), Bytes(3000, 2));
  // The newest segment, sealed and linked, loses its name, not its bytes.
  EXPECT_EQ(store->Seal(), 2u);
  ASSERT_OK(store->LinkSegment(1, link + "2"));
  store->Free(c);
  EXPECT_FALSE(fs::exists(store->SegmentPath(1)));
  EXPECT_EQ(ReadFile(link + "2", c), Bytes(100, 3));
  ASSERT_OK_AND_ASSIGN(SpillLocation d, store->Append(Bytes(10, 4)));
  EXPECT_EQ(d.segment, 2u);
  EXPECT_THAT(store->LinkSegment(0, link + "3"),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(SpillStoreTest, AdoptedSegmentsServeTheRecordsClaimed) {
  const std::string link = TempDir() + "/checkpointed.spill";
  SpillLocation a, b;
  {
    ASSERT_OK_AND_ASSIGN(auto first, SpillStore::Open(TempDir()));
    ASSERT_OK_AND_ASSIGN(a, first->Append(Bytes(2000, 5)));
    ASSERT_OK_AND_ASSIGN(b, first->Append(Bytes(4000, 6)));
    first->Seal();
    ASSERT_OK(first->LinkSegment(0, link));
  }  // the first store deletes its own files
  const std::string dir = TempDir();
  ASSERT_OK_AND_ASSIGN(auto store, SpillStore::Open(dir));
  ASSERT_OK_AND_ASSIGN(SpillLocation fresh, store->Append(Bytes(50, 7)));
  ASSERT_OK_AND_ASSIGN(const uint32_t segment, store->Adopt(link));
  EXPECT_EQ(segment, 1u);
  EXPECT_EQ(store->file_bytes(), 6050);
  b.segment = segment;
  ASSERT_OK(store->Claim(b));
  EXPECT_EQ(store->live_bytes(), 4050);
  std::string out(b.size, '\0');
  ASSERT_OK(store->Read(b, out.data()));
  EXPECT_EQ(out, Bytes(4000, 6));
  SpillLocation outside = b;
  outside.offset = 5000;
  EXPECT_THAT(store->Claim(outside),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("not inside")));
  // Appends go on in a new segment, never into the adopted file.
  ASSERT_OK_AND_ASSIGN(SpillLocation next, store->Append(Bytes(50, 8)));
  EXPECT_EQ(next.segment, 2u);
  store->Free(b);
  EXPECT_FALSE(fs::exists(store->SegmentPath(1)));
  EXPECT_EQ(fs::file_size(link), 6000u);
  // One that nothing claims can be dropped; a missing one is NOT_FOUND.
  ASSERT_OK_AND_ASSIGN(const uint32_t unused, store->Adopt(link));
  store->DropIfUnused(unused);
  EXPECT_FALSE(fs::exists(store->SegmentPath(unused)));
  EXPECT_THAT(store->Adopt(link + ".gone"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing")));
  store->Free(fresh);
  store->Free(next);
}

TensorPayload Frame(int seed, int64_t rows = 2, int64_t row_bytes = 8192) {
  TensorPayload payload;
  payload.dtype = DType::kUint8;
  payload.shape = {rows, row_bytes};
  payload.data = Bytes(static_cast<size_t>(rows * row_bytes), seed);
  payload.uncompressed_size = static_cast<int64_t>(payload.data.size());
  return payload;
}

// A store whose tier keeps its RAM bytes near `limit`.
void EnableSpill(ChunkStore* store, const std::string& dir, int64_t limit,
                 int64_t segment_bytes = SpillStore::kSegmentBytes) {
  auto disk = SpillStore::Open(dir, segment_bytes);
  ASSERT_OK(disk.status());
  store->EnableSpill(
      *std::move(disk), [store] { return store->num_live_bytes(); },
      limit * 9 / 10, limit * 7 / 10);
}

bool Eventually(const std::function<bool()>& done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return true;
}

TEST(SpillTierTest, ChunksBeyondTheBudgetGoToDiskAndReadBackExactly) {
  ChunkStore store;
  const int64_t limit = 256 << 10;
  EnableSpill(&store, TempDir(), limit);
  std::vector<ChunkRef> chunks;
  for (int i = 0; i < 100; ++i) {  // 1.6 MB, six times the budget
    ASSERT_OK_AND_ASSIGN(ChunkRef chunk, store.Insert(i, 1, 2 * i, Frame(i)));
    EXPECT_TRUE(chunk->spillable());
    chunks.push_back(std::move(chunk));
    ASSERT_TRUE(Eventually([&] { return store.num_live_bytes() < limit; }));
  }
  ChunkStore::SpillStats stats = store.spill_stats();
  EXPECT_GT(stats.spilled_chunks, 80);
  EXPECT_EQ(stats.disk_bytes, stats.spilled_bytes);
  for (int i = 0; i < 100; ++i) {
    ASSERT_OK_AND_ASSIGN(ChunkBytes bytes, chunks[i]->Read());
    EXPECT_EQ(bytes.view(), Frame(i).data) << i;
    ASSERT_OK_AND_ASSIGN(TensorPayload payload, chunks[i]->ToPayload());
    EXPECT_EQ(payload.data, Frame(i).data);
  }
  stats = store.spill_stats();
  // A first read back keeps nothing in RAM: ToPayload() reads again.
  EXPECT_GT(stats.disk_reads, 160);
  // Dropping the chunks frees their records, and their RAM.
  chunks.clear();
  // The spill thread may hold a last reference for a moment.
  ASSERT_TRUE(Eventually([&] { return store.num_live_chunks() == 0; }));
  EXPECT_EQ(store.spill_stats().disk_bytes, 0);
  EXPECT_EQ(store.spill_stats().ram_bytes, 0);
  EXPECT_EQ(store.num_live_bytes(), 0);
  EXPECT_EQ(store.num_live_chunks(), 0);
}

// 20 chunks of 16 KB under a 64 KiB budget; returns once half are on disk.
void FillPastBudget(ChunkStore* store, std::vector<ChunkRef>* chunks) {
  EnableSpill(store, TempDir(), 64 << 10);
  for (int i = 0; i < 20; ++i) {
    ASSERT_OK_AND_ASSIGN(ChunkRef chunk, store->Insert(i, 1, 0, Frame(i)));
    chunks->push_back(std::move(chunk));
  }
  ASSERT_TRUE(
      Eventually([&] { return store->spill_stats().spilled_chunks >= 10; }));
}

TEST(SpillTierTest, AReadThatKeepsNothingLeavesRamAsItWas) {
  ChunkStore store;
  std::vector<ChunkRef> chunks;
  ASSERT_NO_FATAL_FAILURE(FillPastBudget(&store, &chunks));
  const int64_t ram = store.spill_stats().ram_bytes;
  ASSERT_OK_AND_ASSIGN(ChunkBytes bytes, chunks[0]->Read(false));
  EXPECT_EQ(bytes.view(), Frame(0).data);
  EXPECT_EQ(store.spill_stats().disk_reads, 1);
  EXPECT_LE(store.spill_stats().ram_bytes, ram);
  // Not kept: the next read goes to disk again.
  ASSERT_OK(chunks[0]->Read(false).status());
  EXPECT_EQ(store.spill_stats().disk_reads, 2);
}

TEST(SpillTierTest, AChunkReadBackTwiceSoonStaysInRam) {
  ChunkStore store;
  std::vector<ChunkRef> chunks;
  ASSERT_NO_FATAL_FAILURE(FillPastBudget(&store, &chunks));
  ASSERT_OK(chunks[0]->Read().status());  // once: not kept
  ASSERT_OK(chunks[0]->Read().status());  // again, soon: kept
  EXPECT_EQ(store.spill_stats().disk_reads, 2);
  ASSERT_OK_AND_ASSIGN(ChunkBytes bytes, chunks[0]->Read());
  EXPECT_EQ(bytes.view(), Frame(0).data);
  EXPECT_EQ(store.spill_stats().disk_reads, 2);
  EXPECT_EQ(store.spill_stats().ram_reads, 1);
}

TEST(SpillTierTest, ReadersRaceTheSpillerAndEachOther) {
  ChunkStore store;
  EnableSpill(&store, TempDir(), 128 << 10);
  std::vector<ChunkRef> chunks;
  for (int i = 0; i < 64; ++i) {
    ASSERT_OK_AND_ASSIGN(ChunkRef chunk,
                         store.Insert(i, 1, 0, Frame(i, 1, 4096)));
    chunks.push_back(std::move(chunk));
  }
  ASSERT_TRUE(
      Eventually([&] { return store.spill_stats().spilled_chunks >= 32; }));
  std::atomic<int> wrong{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&, t] {
      for (int n = 0; n < 2000; ++n) {
        const int i = (n * 7 + t * 13) % 64;
        absl::StatusOr<ChunkBytes> bytes = chunks[i]->Read();
        if (!bytes.ok() || bytes->view() != Frame(i, 1, 4096).data) ++wrong;
      }
    });
  }
  for (auto& reader : readers) reader.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(store.spill_stats().disk_reads, 0);
}

TEST(SpillTierTest, ChunksThatOutliveTheStoreStayReadable) {
  ChunkRef kept;
  std::string dir = TempDir();
  {
    ChunkStore store;
    EnableSpill(&store, dir, 64 << 10);
    std::vector<ChunkRef> chunks;
    for (int i = 0; i < 20; ++i) {
      ASSERT_OK_AND_ASSIGN(ChunkRef chunk, store.Insert(i, 1, 0, Frame(i)));
      chunks.push_back(std::move(chunk));
    }
    // The oldest goes first.
    ASSERT_TRUE(
        Eventually([&] { return store.spill_stats().spilled_chunks > 0; }));
    kept = chunks[0];
  }
  ASSERT_OK_AND_ASSIGN(ChunkBytes bytes, kept->Read());
  EXPECT_EQ(bytes.view(), Frame(0).data);
  kept.reset();
  EXPECT_FALSE(fs::exists(dir + "/segment-00000000.spill"));
}

TEST(SpillStoreTest, TheSparsestSealedSegmentIsCompactedFirst) {
  ASSERT_OK_AND_ASSIGN(auto store, SpillStore::Open(TempDir(), 4000));
  std::vector<SpillLocation> where;
  for (int i = 0; i < 8; ++i) {  // two 2000-byte records per segment
    ASSERT_OK_AND_ASSIGN(SpillLocation w, store->Append(Bytes(2000, i)));
    where.push_back(w);
  }
  EXPECT_EQ(where[7].segment, 3u);
  EXPECT_FALSE(store->SparsestSealed(1, {}).has_value());  // none dead
  store->Free(where[2]);  // segment 1 half dead
  store->Free(where[6]);  // segment 3, the newest: not a candidate
  std::optional<SpillStore::Sparse> sparse = store->SparsestSealed(1, {});
  ASSERT_TRUE(sparse.has_value());
  EXPECT_EQ(sparse->segment, 1u);
  EXPECT_EQ(sparse->live, 2000);
  EXPECT_FALSE(store->SparsestSealed(2001, {}).has_value());
  EXPECT_FALSE(store->SparsestSealed(1, {1}).has_value());
  store->Seal();  // the newest is sealed now: a candidate too
  sparse = store->SparsestSealed(1, {1});
  ASSERT_TRUE(sparse.has_value());
  EXPECT_EQ(sparse->segment, 3u);
  EXPECT_TRUE(store->SegmentLive(1));
  store->Free(where[3]);
  EXPECT_FALSE(store->SegmentLive(1));
}

TEST(SpillTierTest, CompactionBoundsTheFilesAndReadersNeverSeeAMove) {
  ChunkStore store;
  // Segments of four 16 KB chunks; almost nothing stays in RAM.
  EnableSpill(&store, TempDir(), 48 << 10, /*segment_bytes=*/64 << 10);
  std::vector<ChunkRef> chunks;
  for (int i = 0; i < 200; ++i) {
    ASSERT_OK_AND_ASSIGN(ChunkRef chunk, store.Insert(i, 1, 0, Frame(i)));
    chunks.push_back(std::move(chunk));
  }
  ASSERT_TRUE(
      Eventually([&] { return store.spill_stats().spilled_chunks >= 195; }));
  // A table deleting at random: every segment keeps one chunk in four.
  for (int i = 0; i < 200; ++i) {
    if (i % 4 != 1) chunks[i].reset();
  }
  std::atomic<bool> done{false};
  std::atomic<int> wrong{0};
  std::atomic<int> reads{0};
  std::thread reader([&] {
    while (!done.load()) {
      for (int i = 1; i < 200; i += 4) {
        absl::StatusOr<ChunkBytes> bytes = chunks[i]->Read(false);
        if (!bytes.ok() || bytes->view() != Frame(i).data) ++wrong;
        ++reads;
      }
    }
  });
  // The slack allowed: half the live bytes (above two segments here). The
  // newest chunks may never have left RAM.
  const bool compacted = Eventually([&] {
    const ChunkStore::SpillStats stats = store.spill_stats();
    return stats.disk_bytes >= 48 * 16384 &&
           stats.disk_file_bytes <=
               stats.disk_bytes + stats.disk_bytes / 2 + (64 << 10);
  });
  done = true;
  reader.join();
  EXPECT_TRUE(compacted) << store.spill_stats().disk_file_bytes;
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(reads.load(), 0);
  // The moves are counted apart: what was read was read for the reader,
  // what was written was spilled, 16 KB each.
  const ChunkStore::SpillStats stats = store.spill_stats();
  EXPECT_GE(stats.compactions, 1);
  EXPECT_GE(stats.compacted_bytes, 16384);
  EXPECT_EQ(stats.disk_read_bytes, stats.disk_reads * 16384);
  EXPECT_EQ(stats.spilled_bytes, stats.spilled_chunks * 16384);
  for (int i = 1; i < 200; i += 4) {
    ASSERT_OK_AND_ASSIGN(ChunkBytes bytes, chunks[i]->Read(false));
    EXPECT_EQ(bytes.view(), Frame(i).data) << i;
  }
  chunks.clear();
  ASSERT_TRUE(Eventually([&] { return store.num_live_chunks() == 0; }));
  EXPECT_EQ(store.spill_stats().disk_bytes, 0);
}

TEST(SpillTierTest, ChunksOnDiskAreMadeFromAdoptedRecords) {
  const std::string link = TempDir() + "/linked.spill";
  SpillLocation where;
  {
    ChunkStore first;
    std::vector<ChunkRef> chunks;
    ASSERT_NO_FATAL_FAILURE(FillPastBudget(&first, &chunks));
    std::optional<ChunkOnDisk> on_disk = chunks[0]->OnDisk();
    ASSERT_TRUE(on_disk.has_value());
    on_disk->disk->Seal();
    ASSERT_OK(on_disk->disk->LinkSegment(on_disk->where.segment, link));
    where = on_disk->where;
    EXPECT_FALSE(chunks[19]->OnDisk().has_value());  // the newest, in RAM
  }
  ChunkStore store;
  EnableSpill(&store, TempDir(), 64 << 10);
  ASSERT_OK_AND_ASSIGN(where.segment, store.spill_store()->Adopt(link));
  TensorPayload head = Frame(0);
  head.data.clear();
  ASSERT_OK_AND_ASSIGN(ChunkRef chunk,
                       store.InsertOnDisk(0, 1, 0, head, where));
  EXPECT_EQ(store.spill_stats().disk_bytes, 16384);
  EXPECT_EQ(store.spill_stats().ram_bytes, 0);
  EXPECT_EQ(store.spill_stats().disk_reads, 0);
  ASSERT_OK_AND_ASSIGN(ChunkBytes bytes, chunk->Read());
  EXPECT_EQ(bytes.view(), Frame(0).data);
  EXPECT_EQ(chunk->shape(), absl::Span<const int64_t>(Frame(0).shape));
  // What Insert refuses, and records never spilled.
  TensorPayload wrong = head;
  wrong.shape = {3, 8192};
  EXPECT_THAT(store.InsertOnDisk(1, 1, 0, wrong, where),
              StatusIs(absl::StatusCode::kInvalidArgument));
  SpillLocation small = where;
  small.size = 1000;
  EXPECT_THAT(store.InsertOnDisk(1, 1, 0, head, small),
              StatusIs(absl::StatusCode::kInvalidArgument));
  ChunkStore plain;
  EXPECT_THAT(plain.InsertOnDisk(1, 1, 0, head, where),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  chunk.reset();
  EXPECT_EQ(store.spill_stats().disk_bytes, 0);
}

}  // namespace
}  // namespace reverb_tf
