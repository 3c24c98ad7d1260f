// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/spill_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reverb_tf/cc/chunk_store.h"
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

TensorPayload Frame(int seed, int64_t rows = 2, int64_t row_bytes = 8192) {
  TensorPayload payload;
  payload.dtype = DType::kUint8;
  payload.shape = {rows, row_bytes};
  payload.data = Bytes(static_cast<size_t>(rows * row_bytes), seed);
  payload.uncompressed_size = static_cast<int64_t>(payload.data.size());
  return payload;
}

// A store whose tier keeps its RAM bytes near `limit`.
void EnableSpill(ChunkStore* store, const std::string& dir, int64_t limit) {
  auto disk = SpillStore::Open(dir);
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

}  // namespace
}  // namespace reverb_tf
