// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/checkpointing/checkpointer.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "reverb_tf/cc/checkpointing/record_file.h"
#include "reverb_tf/cc/proto/checkpoint.pb.h"
#include "reverb_tf/cc/spill_store.h"
#include "reverb_tf/cc/testing/status_matchers.h"
#include "reverb_tf/cc/testing/test_util.h"

namespace reverb_tf {
namespace {

namespace fs = std::filesystem;

using ::reverb_tf::testing::Fifo;
using ::reverb_tf::testing::Lifo;
using ::reverb_tf::testing::MakeFloatChunk;
using ::reverb_tf::testing::MakeItem;
using ::reverb_tf::testing::MakeTable;
using ::reverb_tf::testing::MakeTableOptions;
using ::reverb_tf::testing::Prioritized;
using ::reverb_tf::testing::Uniform;

constexpr absl::Duration kShort = absl::Milliseconds(20);

SelectorOptions Heap(bool min_heap) {
  SelectorOptions options;
  options.kind = min_heap ? SelectorOptions::Kind::kMinHeap
                          : SelectorOptions::Kind::kMaxHeap;
  return options;
}

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const fs::path dir = fs::path(tmp != nullptr ? tmp : "/tmp") / name;
  fs::remove_all(dir);
  return dir.string();
}

std::unique_ptr<Checkpointer> MakeCheckpointer(
    const std::string& root, int keep = 3, const std::string& fallback = "",
    bool load_previous_if_damaged = false) {
  CheckpointerOptions options;
  options.root = root;
  options.keep = keep;
  options.fallback_checkpoint_path = fallback;
  options.load_previous_if_damaged = load_previous_if_damaged;
  auto checkpointer = Checkpointer::Create(options);
  EXPECT_OK(checkpointer);
  return *std::move(checkpointer);
}

std::string DataFile(const std::string& checkpoint) {
  return (fs::path(checkpoint) / "replay.rtfckpt").string();
}

// Everything a checkpoint must preserve about one item, chunk bytes included.
struct ItemState {
  double priority;
  int32_t times_sampled;
  std::vector<std::string> column_data;
  bool operator==(const ItemState& o) const {
    return priority == o.priority && times_sampled == o.times_sampled &&
           column_data == o.column_data;
  }
};

absl::flat_hash_map<Key, ItemState> Contents(const Table& table) {
  TableSnapshot snapshot = table.Snapshot();
  absl::flat_hash_map<Key, ItemState> contents;
  for (const auto& item : snapshot.items) {
    ItemState state{item.priority, item.times_sampled, {}};
    for (uint64_t c = item.first_column;
         c < item.first_column + item.num_columns; ++c) {
      std::string data;
      const auto& column = snapshot.columns[c];
      for (uint64_t s = column.first_slice;
           s < column.first_slice + column.num_slices; ++s) {
        absl::StrAppend(&data, snapshot.chunks[s]->key(), "@",
                        snapshot.slices[s].offset, "+",
                        snapshot.slices[s].length, ":",
                        snapshot.chunks[s]->Read(/*keep_in_ram=*/false)->view(),
                        column.squeeze ? "/squeezed" : "");
      }
      state.column_data.push_back(std::move(data));
    }
    contents[item.key] = std::move(state);
  }
  return contents;
}

std::vector<Key> Drain(Table& table, int n) {
  std::vector<Key> keys;
  for (int i = 0; i < n; ++i) {
    auto samples = table.Sample(1, kShort);
    if (!samples.ok()) break;
    keys.push_back((*samples)[0].key);
  }
  return keys;
}

class CheckpointerTest : public ::testing::Test {
 protected:
  // Six tables of every selector kind sharing chunks: item k of every table
  // references chunk k (and k+1 for a second, partial column), so each
  // chunk is used by several items in several tables.
  std::vector<std::shared_ptr<Table>> MakeTables(int max_times_sampled = 0) {
    const std::vector<std::pair<SelectorOptions, SelectorOptions>> kinds = {
        {Uniform(), Fifo()}, {Prioritized(0.8), Fifo()}, {Fifo(), Uniform()},
        {Lifo(), Lifo()},    {Heap(true), Heap(false)},  {Heap(false), Fifo()}};
    std::vector<std::shared_ptr<Table>> tables;
    for (size_t i = 0; i < kinds.size(); ++i) {
      tables.push_back(MakeTable(MakeTableOptions(
          absl::StrCat("table", i), kinds[i].first, kinds[i].second, 1000,
          RateLimiterOptions::MinSize(1), max_times_sampled)));
    }
    return tables;
  }

  void Fill(const std::vector<std::shared_ptr<Table>>& tables, int n) {
    std::vector<ChunkRef> chunks;
    for (int k = 0; k <= n; ++k)
      chunks.push_back(MakeFloatChunk(store_, k, 3, 2, k * 0.5f));
    std::mt19937 rng(3);
    for (const auto& table : tables) {
      for (int k = 0; k < n; ++k) {
        Item item = MakeItem(1000 + k, (rng() % 7) * 0.5, {chunks[k]});
        SlicedColumn partial;
        partial.add_slice({chunks[k + 1], 1, 1});
        partial.set_squeeze(true);
        item.trajectory.push_back(std::move(partial));
        ASSERT_OK(table->InsertOrAssign(std::move(item), kShort));
      }
      // Sample some items so times_sampled and the limiter counts vary.
      ASSERT_OK(table->Sample(n / 3, kShort));
    }
  }

  ChunkStore store_;
};

TEST_F(CheckpointerTest, WritesItsFormatAndRefusesANewerOne) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / absl::StrCat("format_", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  // A file of a future format (its header, as a newer writer would make it).
  proto::CheckpointHeader header;
  header.set_format_version(99);
  header.set_written_by("reverb_tf 9.9");
  {
    ASSERT_OK_AND_ASSIGN(auto writer,
                         RecordWriter::Create(DataFile(dir.string())));
    ASSERT_OK(writer->Add(/*type=*/1, header.SerializeAsString()));
    ASSERT_OK(writer->Close());
  }
  auto tables = MakeTables();
  absl::Status refused = LoadCheckpoint(dir.string(), tables);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(),
                                "has format 99, newer than this reverb_tf "
                                "reads (2)"))
      << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "reverb_tf 9.9")) << refused;
  fs::remove_all(dir);
}

TEST_F(CheckpointerTest, RoundTripsEveryTableKind) {
  const std::string root = FreshDir("round_trip");
  auto tables = MakeTables();
  Fill(tables, 60);
  auto checkpointer = MakeCheckpointer(root);
  auto stats = checkpointer->Save(tables);
  ASSERT_OK(stats);
  EXPECT_EQ(stats->num_items, 6 * 60);
  // 61 chunks, each stored once although six tables reference them.
  EXPECT_EQ(stats->num_chunks, 61);
  EXPECT_TRUE(fs::exists(DataFile(stats->path)));

  auto restored = MakeTables();
  auto loaded = MakeCheckpointer(root)->LoadLatest(restored);
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->path, stats->path);
  for (size_t i = 0; i < tables.size(); ++i) {
    SCOPED_TRACE(tables[i]->name());
    EXPECT_OK(restored[i]->CheckInvariants());
    EXPECT_EQ(Contents(*restored[i]), Contents(*tables[i]));
    const auto before = tables[i]->info();
    const auto after = restored[i]->info();
    EXPECT_EQ(after.rate_limiter_info.inserts,
              before.rate_limiter_info.inserts);
    EXPECT_EQ(after.rate_limiter_info.samples,
              before.rate_limiter_info.samples);
    EXPECT_EQ(after.rate_limiter_info.deletes,
              before.rate_limiter_info.deletes);
    EXPECT_EQ(after.num_unique_samples, before.num_unique_samples);
  }
  // Restored chunks are shared again, not copied per item.
  const TableSnapshot a = restored[0]->Snapshot();
  const TableSnapshot b = restored[1]->Snapshot();
  absl::flat_hash_map<Key, const Chunk*> first_chunk;
  for (const auto& item : a.items) {
    first_chunk[item.key] = a.chunks[a.columns[item.first_column].first_slice];
  }
  for (const auto& item : b.items) {
    EXPECT_EQ(b.chunks[b.columns[item.first_column].first_slice],
              first_chunk[item.key]);
  }
  // Deterministic selectors continue exactly where the originals are.
  for (size_t i : {2, 3, 4, 5}) {
    EXPECT_EQ(Drain(*restored[i], 20), Drain(*tables[i], 20))
        << tables[i]->name();
  }
}

TEST_F(CheckpointerTest, InspectReadsEverythingBackAndNamesDamage) {
  const std::string root = FreshDir("inspect");
  auto tables = MakeTables();
  Fill(tables, 50);
  auto stats = MakeCheckpointer(root)->Save(tables);
  ASSERT_OK(stats);
  std::vector<std::pair<uint64_t, uint64_t>> progress;
  auto summary =
      InspectCheckpoint(stats->path, [&](uint64_t done, uint64_t total) {
        progress.emplace_back(done, total);
      });
  ASSERT_OK(summary);
  EXPECT_EQ(summary->num_chunks, 51);
  EXPECT_EQ(summary->file_bytes, fs::file_size(DataFile(stats->path)));
  ASSERT_EQ(summary->tables.size(), tables.size());
  for (size_t i = 0; i < tables.size(); ++i) {
    EXPECT_EQ(summary->tables[i].options.name, tables[i]->name());
    EXPECT_EQ(summary->tables[i].current_size, tables[i]->size());
    EXPECT_EQ(summary->tables[i].rate_limiter_info.inserts,
              tables[i]->info().rate_limiter_info.inserts);
  }
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(progress.back().first,
            progress.back().second);  // the last report: all read

  // A flipped byte: DATA_LOSS naming the file.
  const std::string file = DataFile(stats->path);
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x10);
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  auto damaged = InspectCheckpoint(stats->path);
  EXPECT_EQ(damaged.status().code(), absl::StatusCode::kDataLoss)
      << damaged.status();
  EXPECT_NE(damaged.status().message().find(file), std::string::npos);
  EXPECT_EQ(InspectCheckpoint(root + "/none").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(CheckpointerTest, SnapshotsKeepRemovedDataAliveUntilReleased) {
  auto table = MakeTable(
      MakeTableOptions("t", Fifo(), Fifo(), 2, RateLimiterOptions::MinSize(1)));
  ASSERT_OK(table->InsertOrAssign(
      MakeItem(1, 1, {MakeFloatChunk(store_, 1, 1, 4, 1.f)})));
  ASSERT_OK(table->InsertOrAssign(
      MakeItem(2, 1, {MakeFloatChunk(store_, 2, 1, 4, 2.f)})));
  const int64_t live = store_.num_live_chunks();
  {
    TableSnapshot snapshot = table->Snapshot();
    ASSERT_EQ(snapshot.chunks.size(), 2u);
    const std::string first(snapshot.chunks[0]->data());
    // Evict (insert into a full table), replace and reset: nothing the
    // snapshot points at may be freed while it is alive.
    ASSERT_OK(
        table->InsertOrAssign(MakeItem(3, 1, {MakeFloatChunk(store_, 3, 1)})));
    ASSERT_OK(
        table->InsertOrAssign(MakeItem(2, 5, {MakeFloatChunk(store_, 4, 1)})));
    ASSERT_OK(table->Reset());
    EXPECT_EQ(store_.num_live_chunks(), live + 2);
    EXPECT_EQ(std::string(snapshot.chunks[0]->data()), first);
    EXPECT_EQ(snapshot.items.size(), 2u);
  }
  // Released with the snapshot.
  EXPECT_EQ(store_.num_live_chunks(), 0);
}

// Checkpoints taken while writers insert (evicting), samplers sample (up to
// max_times_sampled) and priorities change must each load into a table that
// satisfies every invariant, with the item count the checkpoint recorded.
TEST_F(CheckpointerTest, CheckpointsUnderConcurrentTrafficAreConsistent) {
  const std::string root = FreshDir("concurrent");
  auto table = MakeTable(MakeTableOptions("t", Prioritized(1), Fifo(), 500,
                                          RateLimiterOptions::MinSize(1), 5));
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      ChunkStore store;
      for (Key k = 1; !stop.load(); ++k) {
        const Key key = k * 2 + w;
        ChunkRef chunk = MakeFloatChunk(store, key, 2);
        Item item = MakeItem(key, 1 + key % 5, {chunk});
        item.trajectory[0].mutable_slices()[0].length = 1 + key % 2;
        table->InsertOrAssign(std::move(item), kShort).IgnoreError();
      }
    });
  }
  threads.emplace_back([&] {
    while (!stop.load()) {
      auto samples = table->Sample(8, kShort);
      if (samples.ok() && !samples->empty()) {
        table
            ->MutatePriorities({{(*samples)[0].key, 0.5}},
                               {(*samples).back().key})
            .IgnoreError();
      }
      // Slower than the writers, so the table stays mostly full.
      absl::SleepFor(absl::Microseconds(200));
    }
  });
  auto checkpointer = MakeCheckpointer(root, /*keep=*/10);
  std::vector<CheckpointStats> saved;
  for (int i = 0; i < 6; ++i) {
    absl::SleepFor(absl::Milliseconds(30));
    auto stats = checkpointer->Save({table});
    ASSERT_OK(stats);
    saved.push_back(*stats);
  }
  stop = true;
  for (auto& thread : threads) thread.join();
  EXPECT_OK(table->CheckInvariants());

  for (const CheckpointStats& stats : saved) {
    auto restored = MakeTable(table->options());
    ASSERT_OK(LoadCheckpoint(stats.path, {restored})) << stats.path;
    EXPECT_EQ(restored->size(), stats.num_items) << stats.path;
    EXPECT_OK(restored->CheckInvariants());
  }
  int64_t most = 0;
  for (const CheckpointStats& stats : saved)
    most = std::max(most, stats.num_items);
  EXPECT_GT(most, 100);
}

TEST_F(CheckpointerTest, KeepsTimesSampledAgainstMaxTimesSampled) {
  const std::string root = FreshDir("max_times");
  auto table = MakeTable(MakeTableOptions("t", Fifo(), Fifo(), 10,
                                          RateLimiterOptions::MinSize(1), 3));
  ASSERT_OK(
      table->InsertOrAssign(MakeItem(1, 1, {MakeFloatChunk(store_, 1, 1)})));
  ASSERT_OK(table->Sample(1, kShort));
  ASSERT_OK(table->Sample(1, kShort));
  auto checkpointer = MakeCheckpointer(root);
  ASSERT_OK(checkpointer->Save({table}));

  auto restored = MakeTable(table->options());
  ASSERT_OK(checkpointer->LoadLatest({restored}));
  auto third = restored->Sample(1, kShort);
  ASSERT_OK(third);
  EXPECT_EQ((*third)[0].times_sampled, 3);
  EXPECT_TRUE((*third)[0].removed);
  EXPECT_EQ(restored->size(), 0);
}

TEST_F(CheckpointerTest, NewSizeOptionsApplyOnRestore) {
  const std::string root = FreshDir("new_size");
  auto table = MakeTable(MakeTableOptions("t", Fifo(), Fifo(), 100,
                                          RateLimiterOptions::MinSize(1), 0));
  for (Key k = 1; k <= 50; ++k) {
    ASSERT_OK(
        table->InsertOrAssign(MakeItem(k, 1, {MakeFloatChunk(store_, k, 1)})));
  }
  for (int i = 0; i < 5; ++i) ASSERT_OK(table->Sample(1, kShort));  // key 1 x5
  auto checkpointer = MakeCheckpointer(root);
  ASSERT_OK(checkpointer->Save({table}));

  // Smaller max_size: the remover (Fifo) evicts the oldest; a smaller
  // max_times_sampled drops the item already sampled that often.
  auto smaller = MakeTable(MakeTableOptions("t", Fifo(), Fifo(), 20,
                                            RateLimiterOptions::MinSize(1), 4));
  ASSERT_OK(checkpointer->LoadLatest({smaller}));
  EXPECT_OK(smaller->CheckInvariants());
  EXPECT_EQ(smaller->size(), 20);
  auto first = smaller->Sample(1, kShort);
  ASSERT_OK(first);
  EXPECT_EQ((*first)[0].key, 31u);
}

TEST_F(CheckpointerTest, ChangedRateLimiterNeverBlocksForGood) {
  const std::string root = FreshDir("limiter");
  auto table = MakeTable(MakeTableOptions("t", Uniform(), Fifo(), 10000,
                                          RateLimiterOptions::MinSize(1), 0));
  for (Key k = 1; k <= 1000; ++k) {
    ASSERT_OK(
        table->InsertOrAssign(MakeItem(k, 1, {MakeFloatChunk(store_, k, 1)})));
  }
  auto checkpointer = MakeCheckpointer(root);
  ASSERT_OK(checkpointer->Save({table}));

  // 1000 inserts at 4 samples per insert would be a debt of 4000 samples
  // against a window of +-50: restored as is, inserts would wait for ~4000
  // samples. The new limiter starts at the edge of its window instead.
  const auto limiter = RateLimiterOptions::SampleToInsertRatio(4, 10, 50);
  auto restored =
      MakeTable(MakeTableOptions("t", Uniform(), Fifo(), 10000, limiter, 0));
  ASSERT_OK(checkpointer->LoadLatest({restored}));
  EXPECT_EQ(restored->size(), 1000);
  EXPECT_OK(restored->CheckInvariants());
  EXPECT_EQ(restored->info().rate_limiter_info.options, limiter);
  // A few samples open the window for an insert.
  ASSERT_OK(restored->Sample(4, kShort));
  EXPECT_OK(restored->InsertOrAssign(
      MakeItem(5000, 1, {MakeFloatChunk(store_, 5000, 1)}), kShort));
  // And sampling was never blocked.
  EXPECT_OK(restored->Sample(1, kShort));
}

TEST_F(CheckpointerTest, SameRateLimiterKeepsItsExactState) {
  const std::string root = FreshDir("same_limiter");
  const auto limiter = RateLimiterOptions::SampleToInsertRatio(2, 5, 10);
  auto table =
      MakeTable(MakeTableOptions("t", Uniform(), Fifo(), 1000, limiter, 0));
  for (Key k = 1; k <= 10; ++k) {
    ASSERT_OK(table->InsertOrAssign(
        MakeItem(k, 1, {MakeFloatChunk(store_, k, 1)}), kShort));
  }
  ASSERT_OK(table->Sample(7, kShort));
  auto checkpointer = MakeCheckpointer(root);
  ASSERT_OK(checkpointer->Save({table}));
  auto restored = MakeTable(table->options());
  ASSERT_OK(checkpointer->LoadLatest({restored}));
  const auto before = table->info().rate_limiter_info;
  const auto after = restored->info().rate_limiter_info;
  EXPECT_EQ(after.inserts, before.inserts);
  EXPECT_EQ(after.samples, before.samples);
  // Both agree on what may happen next.
  EXPECT_EQ(restored->Sample(100, kShort).ok(),
            table->Sample(100, kShort).ok());
}

TEST_F(CheckpointerTest, MismatchedTablesAreNamed) {
  const std::string root = FreshDir("mismatch");
  auto tables = MakeTables();
  Fill(tables, 5);
  auto checkpointer = MakeCheckpointer(root);
  ASSERT_OK(checkpointer->Save(tables));

  auto renamed = MakeTables();
  renamed[3] = MakeTable(MakeTableOptions("other", Uniform(), Fifo(), 10,
                                          RateLimiterOptions::MinSize(1)));
  auto status = checkpointer->LoadLatest(renamed).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("'table3'"), std::string::npos) << status;
  for (const auto& table : renamed)
    EXPECT_EQ(table->size(), 0) << table->name();

  auto options = tables[2]->options();
  options.signature =
      TableSignature{{ColumnSpec{"obs", DType::kFloat, {-1, 2}}}, ""};
  auto resigned = MakeTables();
  resigned[2] = MakeTable(options);
  status = checkpointer->LoadLatest(resigned).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("table 'table2'"), std::string::npos)
      << status;
  EXPECT_NE(status.message().find("signature"), std::string::npos) << status;
}

TEST_F(CheckpointerTest, DamagedFilesFailCleanlyAndLoadNothing) {
  const std::string root = FreshDir("damaged");
  auto tables = MakeTables();
  Fill(tables, 400);
  auto stats = MakeCheckpointer(root)->Save(tables);
  ASSERT_OK(stats);
  const std::string file = DataFile(stats->path);
  std::ifstream in(file, std::ios::binary);
  const std::string bytes(std::istreambuf_iterator<char>(in), {});
  ASSERT_GT(bytes.size(), 1000u);

  auto expect_clean_failure = [&](const std::string& damaged,
                                  const std::string& what) {
    {
      std::ofstream out(file, std::ios::binary | std::ios::trunc);
      out << damaged;
    }
    auto restored = MakeTables();
    auto status = MakeCheckpointer(root)->LoadLatest(restored).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss)
        << what << ": " << status;
    EXPECT_NE(status.message().find(file), std::string::npos) << status;
    for (const auto& table : restored) EXPECT_EQ(table->size(), 0) << what;
  };
  for (size_t size : {size_t{0}, size_t{10}, size_t{100}, bytes.size() / 3,
                      bytes.size() / 2, bytes.size() - 5, bytes.size() - 1}) {
    expect_clean_failure(bytes.substr(0, size),
                         absl::StrCat("truncated to ", size));
  }
  for (size_t at : {size_t{3}, size_t{20}, size_t{40}, bytes.size() / 2,
                    bytes.size() - 2}) {
    std::string flipped = bytes;
    flipped[at] = static_cast<char>(flipped[at] ^ 0x10);
    expect_clean_failure(flipped, absl::StrCat("bit flipped at ", at));
  }
}

TEST_F(CheckpointerTest, KeepsTheNewestAndLoadsTheLatest) {
  const std::string root = FreshDir("keep");
  auto table = MakeTable(MakeTableOptions("t", Fifo(), Fifo(), 100,
                                          RateLimiterOptions::MinSize(1)));
  auto checkpointer = MakeCheckpointer(root, /*keep=*/2);
  std::vector<std::string> paths;
  for (Key k = 1; k <= 5; ++k) {
    ASSERT_OK(
        table->InsertOrAssign(MakeItem(k, 1, {MakeFloatChunk(store_, k, 1)})));
    auto stats = checkpointer->Save({table});
    ASSERT_OK(stats);
    paths.push_back(stats->path);
  }
  auto listed = checkpointer->List();
  ASSERT_OK(listed);
  EXPECT_EQ(*listed, (std::vector<std::string>{paths[3], paths[4]}));
  EXPECT_FALSE(fs::exists(paths[0]));

  auto restored = MakeTable(table->options());
  auto loaded = MakeCheckpointer(root)->LoadLatest({restored});
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->path, paths[4]);
  EXPECT_EQ(restored->size(), 5);
}

TEST_F(CheckpointerTest, DamagedNewestCheckpointsFailOrFallBackOnlyWhenAsked) {
  const std::string root = FreshDir("previous");
  auto table = MakeTable(MakeTableOptions("t", Fifo(), Fifo(), 100,
                                          RateLimiterOptions::MinSize(1)));
  auto checkpointer = MakeCheckpointer(root, /*keep=*/3);
  std::vector<std::string> paths;
  for (Key k = 1; k <= 3; ++k) {
    ASSERT_OK(
        table->InsertOrAssign(MakeItem(k, 1, {MakeFloatChunk(store_, k, 1)})));
    auto stats = checkpointer->Save({table});
    ASSERT_OK(stats);
    paths.push_back(stats->path);
  }
  // The newest loses its data file, the middle one gets a flipped bit.
  fs::remove(DataFile(paths[2]));
  {
    std::fstream file(DataFile(paths[1]),
                      std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(30);
    char byte;
    file.read(&byte, 1);
    file.seekp(30);
    byte = static_cast<char>(byte ^ 0x01);
    file.write(&byte, 1);
  }

  auto refused = MakeTable(table->options());
  auto status = MakeCheckpointer(root)->LoadLatest({refused}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NE(status.message().find(paths[2]), std::string::npos) << status;
  EXPECT_NE(status.message().find("load_previous_if_damaged"),
            std::string::npos)
      << status;
  EXPECT_EQ(refused->size(), 0);

  auto restored = MakeTable(table->options());
  auto loaded = MakeCheckpointer(root, 3, "", /*load_previous_if_damaged=*/true)
                    ->LoadLatest({restored});
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->path, paths[0]);
  ASSERT_EQ(loaded->skipped.size(), 2u);
  EXPECT_EQ(loaded->skipped[0].rfind(paths[2], 0), 0u) << loaded->skipped[0];
  EXPECT_EQ(loaded->skipped[1].rfind(paths[1], 0), 0u) << loaded->skipped[1];
  EXPECT_EQ(restored->size(),
            1);  // what the oldest checkpoint held, nothing of the others
  EXPECT_OK(restored->CheckInvariants());

  fs::remove(DataFile(paths[0]));
  auto none = MakeTable(table->options());
  status = MakeCheckpointer(root, 3, "", true)->LoadLatest({none}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NE(status.message().find("every checkpoint"), std::string::npos)
      << status;
  EXPECT_EQ(none->size(), 0);
}

TEST_F(CheckpointerTest, IgnoresAndCleansUpUnfinishedCheckpoints) {
  const std::string root = FreshDir("unfinished");
  auto table = MakeTable(MakeTableOptions("t", Fifo(), Fifo(), 100,
                                          RateLimiterOptions::MinSize(1)));
  ASSERT_OK(
      table->InsertOrAssign(MakeItem(1, 1, {MakeFloatChunk(store_, 1, 1)})));
  auto checkpointer = MakeCheckpointer(root);
  auto stats = checkpointer->Save({table});
  ASSERT_OK(stats);

  // What a writer killed mid-checkpoint leaves: a temporary directory (its
  // pid long gone) with a partial file, named to sort after the real one.
  const fs::path dead =
      fs::path(root) / ".tmp-2999-01-01T00:00:00.000000-999999999";
  fs::create_directories(dead);
  std::ofstream(dead / "replay.rtfckpt") << "partial";
  // A live writer's temporary directory is left alone.
  const fs::path live =
      fs::path(root) / absl::StrCat(".tmp-2999-live-", ::getppid());
  fs::create_directories(live);

  auto restored = MakeTable(table->options());
  auto loaded = MakeCheckpointer(root)->LoadLatest({restored});
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->path, stats->path);
  EXPECT_EQ(restored->size(), 1);
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live));
}

TEST_F(CheckpointerTest, FallsBackWhenTheRootIsEmpty) {
  const std::string other = FreshDir("fallback_source");
  auto table = MakeTable(MakeTableOptions("t", Fifo(), Fifo(), 100,
                                          RateLimiterOptions::MinSize(1)));
  ASSERT_OK(
      table->InsertOrAssign(MakeItem(1, 1, {MakeFloatChunk(store_, 1, 1)})));
  auto stats = MakeCheckpointer(other)->Save({table});
  ASSERT_OK(stats);

  auto restored = MakeTable(table->options());
  auto loaded = MakeCheckpointer(FreshDir("fallback_root"), 3, stats->path)
                    ->LoadLatest({restored});
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->path, stats->path);
  EXPECT_EQ(restored->size(), 1);

  auto nothing = MakeTable(table->options());
  loaded = MakeCheckpointer(FreshDir("empty_root"))->LoadLatest({nothing});
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->path, "");

  auto status = MakeCheckpointer(FreshDir("bad_fallback"), 3, other)
                    ->LoadLatest({nothing})
                    .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_NE(status.message().find("is not a reverb_tf checkpoint"),
            std::string::npos);
}

TEST_F(CheckpointerTest, RejectsBadOptions) {
  CheckpointerOptions options;
  EXPECT_EQ(Checkpointer::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.root = FreshDir("bad_options");
  options.keep = 0;
  EXPECT_EQ(Checkpointer::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.keep = 1;
  options.group = "no-such-group-reverb-tf";
  EXPECT_EQ(Checkpointer::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// 40 distinct 16 KB frames under a 64 KiB budget, 3-step overlapping items
// of them in a FIFO table.
class SpilledCheckpointTest : public ::testing::Test {
 protected:
  static constexpr int kFrames = 40;
  static constexpr int64_t kBudget = 64 << 10;

  static TensorPayload Frame(int seed) {
    TensorPayload payload;
    payload.dtype = DType::kUint8;
    payload.shape = {2, 8192};
    payload.data.resize(16384);
    for (size_t i = 0; i < payload.data.size(); ++i) {
      payload.data[i] = static_cast<char>((i * 131 + seed * 7) & 0xff);
    }
    payload.uncompressed_size = 16384;
    return payload;
  }

  // `max_used`, if set, keeps the highest count the spill tier saw.
  static std::unique_ptr<ChunkStore> SpillingStore(
      const std::string& dir, std::atomic<int64_t>* max_used = nullptr) {
    auto store = std::make_unique<ChunkStore>();
    auto disk = SpillStore::Open(dir);
    EXPECT_OK(disk);
    ChunkStore* raw = store.get();
    store->EnableSpill(
        *std::move(disk),
        [raw, max_used] {
          const int64_t used = raw->num_live_bytes();
          if (max_used != nullptr) {
            int64_t seen = max_used->load();
            while (used > seen &&
                   !max_used->compare_exchange_weak(seen, used)) {
            }
          }
          return used;
        },
        kBudget * 9 / 10, kBudget * 7 / 10);
    return store;
  }

  static std::vector<std::shared_ptr<Table>> Tables() {
    return {MakeTable(MakeTableOptions("frames", Uniform(), Fifo(), 1000,
                                       RateLimiterOptions::MinSize(1)))};
  }

  void SetUp() override {
    root_ = FreshDir("spilled_ckpt");
    store_ = SpillingStore(root_ + "/spill_a");
    tables_ = Tables();
    std::vector<ChunkRef> chunks;
    for (int k = 0; k < kFrames; ++k) {
      ASSERT_OK_AND_ASSIGN(ChunkRef chunk,
                           store_->Insert(k, 1, 2 * k, Frame(k)));
      chunks.push_back(std::move(chunk));
    }
    for (int k = 0; k + 2 < kFrames; ++k) {
      ASSERT_OK(tables_[0]->InsertOrAssign(
          MakeItem(k, 1.0, {chunks[k], chunks[k + 1], chunks[k + 2]}), kShort));
    }
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (store_->spill_stats().spilled_chunks < kFrames - 8) {
      ASSERT_LT(absl::Now(), deadline);
      absl::SleepFor(absl::Milliseconds(2));
    }
    expected_ = Contents(*tables_[0]);
  }

  // The spill thread may hold a chunk's last reference for a moment.
  static bool DiskEmptied(const ChunkStore& store) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (store.spill_stats().disk_bytes != 0) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(2));
    }
    return true;
  }

  std::string root_;
  std::unique_ptr<ChunkStore> store_;
  std::vector<std::shared_ptr<Table>> tables_;
  absl::flat_hash_map<Key, ItemState> expected_;
};

TEST_F(SpilledCheckpointTest, LinksChunksOnDiskInsteadOfRewritingThem) {
  auto checkpointer = MakeCheckpointer(root_ + "/ckpt", /*keep=*/1);
  ASSERT_OK_AND_ASSIGN(CheckpointStats stats, checkpointer->Save(tables_));
  EXPECT_GE(stats.bytes_on_disk, uint64_t{16384} * (kFrames - 8));
  EXPECT_GE(stats.spill_files, 1);
  // The data file holds heads and items, plus the few chunks in RAM.
  EXPECT_LT(stats.bytes, uint64_t{16384} * 9);
  EXPECT_TRUE(fs::exists(fs::path(stats.path) / "spill"));

  // The server goes on: its table empties, so every record the checkpoint
  // holds dies in the spill directory, whose segment files go.
  ASSERT_OK(tables_[0]->Reset());
  EXPECT_TRUE(DiskEmptied(*store_));

  // A restart with a spill directory takes the files in, reading nothing.
  auto restarted = SpillingStore(root_ + "/spill_b");
  auto tables = Tables();
  ASSERT_OK(checkpointer->LoadLatest(tables, restarted.get()).status());
  EXPECT_EQ(restarted->spill_stats().disk_reads, 0);
  EXPECT_GE(restarted->spill_stats().disk_bytes,
            static_cast<int64_t>(stats.bytes_on_disk));
  EXPECT_EQ(Contents(*tables[0]), expected_);
  // One without reads them into RAM.
  ChunkStore plain;
  auto in_ram = Tables();
  ASSERT_OK(LoadCheckpoint(stats.path, in_ram, nullptr, &plain));
  EXPECT_EQ(Contents(*in_ram[0]), expected_);
  // Inspect reads every record and checks it.
  ASSERT_OK_AND_ASSIGN(CheckpointSummary summary,
                       InspectCheckpoint(stats.path));
  EXPECT_EQ(summary.tables[0].current_size, kFrames - 2);

  // The restarted server's own checkpoint links the same files again.
  auto next = MakeCheckpointer(root_ + "/ckpt2", 1);
  ASSERT_OK_AND_ASSIGN(CheckpointStats again, next->Save(tables));
  EXPECT_GE(again.bytes_on_disk, stats.bytes_on_disk);
  // Freeing the restarted table frees the spill directory, not the files
  // either checkpoint holds.
  tables.clear();
  EXPECT_TRUE(DiskEmptied(*restarted));
  auto from_second = Tables();
  ChunkStore plain2;
  ASSERT_OK(LoadCheckpoint(again.path, from_second, nullptr, &plain2));
  EXPECT_EQ(Contents(*from_second[0]), expected_);
}

TEST_F(SpilledCheckpointTest, LoadingWrittenOutChunksKeepsRamNearTheBudget) {
  // A checkpoint with every chunk written out: that of a server holding
  // the same table in RAM.
  auto linked = MakeCheckpointer(root_ + "/ckpt", 1);
  ASSERT_OK_AND_ASSIGN(CheckpointStats first, linked->Save(tables_));
  ChunkStore plain;
  auto in_ram = Tables();
  ASSERT_OK(LoadCheckpoint(first.path, in_ram, nullptr, &plain));
  auto written = MakeCheckpointer(root_ + "/written", 1);
  ASSERT_OK_AND_ASSIGN(CheckpointStats stats, written->Save(in_ram));
  EXPECT_EQ(stats.bytes_on_disk, 0u);
  // Loaded into a server with a spill directory, the chunks go to disk
  // as they come instead of all landing in RAM first.
  std::atomic<int64_t> max_used{0};
  auto restarted = SpillingStore(root_ + "/spill_b", &max_used);
  auto tables = Tables();
  ASSERT_OK(written->LoadLatest(tables, restarted.get()).status());
  // Unpaced, the whole 640 KB is in RAM when the load returns.
  EXPECT_LE(restarted->num_live_bytes(), kBudget + 2 * 16384);
  EXPECT_LE(max_used.load(), kBudget + 2 * 16384);
  EXPECT_EQ(Contents(*tables[0]), expected_);
}

TEST_F(SpilledCheckpointTest, DamagedOrMissingSpillFilesAreDataLoss) {
  auto checkpointer = MakeCheckpointer(root_ + "/ckpt", /*keep=*/1);
  ASSERT_OK_AND_ASSIGN(CheckpointStats stats, checkpointer->Save(tables_));
  const std::string file =
      (fs::path(stats.path) / "spill" / "segment-00000000.spill").string();
  ASSERT_TRUE(fs::exists(file));
  tables_.clear();  // the server's own records go: the checkpoint's stay
  store_.reset();
  {
    std::fstream damaged(file, std::ios::in | std::ios::out | std::ios::binary);
    damaged.seekp(100);
    damaged.put('!');
  }
  // Read into RAM, every record is checked: the load fails and names it.
  ChunkStore plain;
  auto tables = Tables();
  absl::Status status = LoadCheckpoint(stats.path, tables, nullptr, &plain);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), file)) << status;
  EXPECT_EQ(tables[0]->size(), 0);
  // Taken in, a record is checked when it is read: the chunk holding the
  // damage fails, the others read back.
  auto restarted = SpillingStore(root_ + "/spill_b");
  tables = Tables();
  ASSERT_OK(LoadCheckpoint(stats.path, tables, nullptr, restarted.get()));
  TableSnapshot snapshot = tables[0]->Snapshot();
  int damaged = 0;
  for (const Chunk* chunk : snapshot.chunks) {
    absl::StatusOr<ChunkBytes> bytes = chunk->Read(false);
    if (!bytes.ok()) {
      ++damaged;
      EXPECT_EQ(bytes.status().code(), absl::StatusCode::kDataLoss);
      EXPECT_TRUE(absl::StrContains(bytes.status().message(), "checksum"));
    }
  }
  EXPECT_GE(damaged, 1);
  snapshot = TableSnapshot();
  tables.clear();
  // A missing file fails either load, naming it.
  fs::remove(file);
  for (ChunkStore* store : {&plain, restarted.get()}) {
    auto fresh = Tables();
    status = LoadCheckpoint(stats.path, fresh, nullptr, store);
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "missing")) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), file)) << status;
  }
  // Nothing of the failed loads stays in the spill directory.
  EXPECT_TRUE(DiskEmptied(*restarted));
}

}  // namespace
}  // namespace reverb_tf
