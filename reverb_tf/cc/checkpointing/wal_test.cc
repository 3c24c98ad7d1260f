// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/checkpointing/wal.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "reverb_tf/cc/checkpointing/checkpointer.h"
#include "reverb_tf/cc/testing/status_matchers.h"
#include "reverb_tf/cc/testing/test_util.h"

namespace reverb_tf {
namespace {

namespace fs = std::filesystem;
using ::reverb_tf::testing::Fifo;
using ::reverb_tf::testing::MakeFloatChunk;
using ::reverb_tf::testing::MakeItem;
using ::reverb_tf::testing::MakeTable;
using ::reverb_tf::testing::MakeTableOptions;
using ::reverb_tf::testing::Prioritized;
using ::reverb_tf::testing::Uniform;

class WalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           absl::StrCat(
               "wal_test_", ::getpid(), "_",
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    options_.dir = (dir_ / "wal").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Fresh, empty tables "p" (prioritized), "q" (a queue) and "u" (uniform).
  static std::vector<std::shared_ptr<Table>> Tables() {
    return {MakeTable(MakeTableOptions("p", Prioritized(1.0), Fifo(), 1000,
                                       RateLimiterOptions::MinSize(1))),
            MakeTable(MakeTableOptions("q", Fifo(), Fifo(), 1000,
                                       RateLimiterOptions::MinSize(1),
                                       /*max_times_sampled=*/1)),
            MakeTable(MakeTableOptions("u", Uniform(), Fifo(), 1000,
                                       RateLimiterOptions::MinSize(1)))};
  }

  std::unique_ptr<WriteAheadLog> Attach(
      const std::vector<std::shared_ptr<Table>>& tables, uint64_t after = 0,
      WalReplay* replayed = nullptr) {
    WalReplay ignored;
    auto log = WriteAheadLog::Open(options_, after, tables,
                                   replayed ? replayed : &ignored);
    EXPECT_OK(log);
    for (const auto& table : tables) table->SetJournal(log->get());
    return *std::move(log);
  }

  // The log's files, oldest first.
  std::vector<fs::path> LogFiles() const {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(options_.dir))
      files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    return files;
  }

  static void Detach(const std::vector<std::shared_ptr<Table>>& tables) {
    for (const auto& table : tables) table->SetJournal(nullptr);
  }

  // key -> priority of every item of every table.
  static std::map<std::string, std::map<Key, double>> Contents(
      const std::vector<std::shared_ptr<Table>>& tables) {
    std::map<std::string, std::map<Key, double>> contents;
    for (const auto& table : tables) {
      TableSnapshot snapshot = table->Snapshot();
      auto& items = contents[table->name()];
      for (const auto& item : snapshot.items) items[item.key] = item.priority;
    }
    return contents;
  }

  // Changes of every kind: inserts sharing chunks, replacements, updates,
  // deletes, an item sampled out of the queue, and a reset.
  void MakeChanges(const std::vector<std::shared_ptr<Table>>& tables,
                   Key first_key) {
    ChunkStore store;
    ChunkRef shared = MakeFloatChunk(store, first_key, 3);
    for (Key k = first_key; k < first_key + 20; ++k) {
      ChunkRef own =
          MakeFloatChunk(store, k + 100000, 1, 2, static_cast<float>(k));
      ASSERT_OK(
          tables[0]->InsertOrAssign(MakeItem(k, 1.0 + k % 7, {shared, own})));
      ASSERT_OK(tables[1]->InsertOrAssign(MakeItem(k, 1.0, {own})));
      ASSERT_OK(tables[2]->InsertOrAssign(MakeItem(k, 1.0, {own})));
    }
    // Replace one, update some, delete some.
    ASSERT_OK(tables[0]->InsertOrAssign(MakeItem(first_key, 42.0, {shared})));
    ASSERT_OK(tables[0]->MutatePriorities(
        {{first_key + 1, 9.5}, {first_key + 2, 0.25}, {777, 1.0}},
        {first_key + 3}));
    ASSERT_OK(tables[1]->Sample(2));  // the queue's two oldest leave it
    ASSERT_OK(tables[2]->Reset());
    ChunkRef after_reset = MakeFloatChunk(store, first_key + 200000, 1);
    ASSERT_OK(tables[2]->InsertOrAssign(
        MakeItem(first_key + 50, 3.0, {after_reset})));
  }

  fs::path dir_;
  WalOptions options_;
};

TEST_F(WalTest, ReplayRebuildsEveryKindOfChange) {
  auto tables = Tables();
  {
    auto log = Attach(tables);
    MakeChanges(tables, 1);
    ASSERT_OK(log->Commit());
    EXPECT_GT(log->stats().entries, 60);
    Detach(tables);
  }
  auto replayed_tables = Tables();
  WalReplay replayed;
  auto log = Attach(replayed_tables, 0, &replayed);
  EXPECT_TRUE(replayed.damage.empty()) << replayed.damage;
  EXPECT_EQ(replayed.files, 1);
  EXPECT_EQ(Contents(replayed_tables), Contents(tables));
  EXPECT_EQ(Contents(tables)["p"][1], 42.0);
  EXPECT_EQ(Contents(tables)["p"].count(4), 0);
  EXPECT_EQ(Contents(tables)["q"].size(), 18);
  EXPECT_EQ(Contents(tables)["u"].size(), 1);
  for (const auto& table : replayed_tables) EXPECT_OK(table->CheckInvariants());
  // The replayed items' data is back, chunks included.
  auto sample = replayed_tables[2]->Sample(1);
  ASSERT_OK(sample);
  EXPECT_EQ((*sample)[0].trajectory[0].slices()[0].chunk->key(), 200001);
  Detach(replayed_tables);
}

TEST_F(WalTest, UncheckedItemsOffTheSignatureAreReplayed) {
  // A table whose signature wants int32[4] rows; the writer's items are
  // float32 rows, which only an unchecked item (validate_items=False) gets in.
  auto make = [] {
    TableOptions options = MakeTableOptions("s", Uniform(), Fifo(), 10,
                                            RateLimiterOptions::MinSize(1));
    options.signature =
        TableSignature{{ColumnSpec{"x", DType::kInt32, {-1, 4}}}, ""};
    return std::vector<std::shared_ptr<Table>>{MakeTable(options)};
  };
  auto tables = make();
  ChunkStore store;
  {
    auto log = Attach(tables);
    Item refused = MakeItem(1, 1.0, {MakeFloatChunk(store, 1, 1)});
    EXPECT_EQ(tables[0]->InsertOrAssign(std::move(refused)).code(),
              absl::StatusCode::kInvalidArgument);
    Item unchecked = MakeItem(2, 1.0, {MakeFloatChunk(store, 2, 1)});
    unchecked.unchecked = true;
    ASSERT_OK(tables[0]->InsertOrAssign(std::move(unchecked)));
    EXPECT_EQ(tables[0]->info().counters.off_signature, 1);
    ASSERT_OK(log->Commit());
    Detach(tables);
  }
  auto replayed_tables = make();
  WalReplay replayed;
  auto log = Attach(replayed_tables, 0, &replayed);
  EXPECT_TRUE(replayed.damage.empty()) << replayed.damage;
  EXPECT_EQ(Contents(replayed_tables), Contents(tables));
  EXPECT_EQ(Contents(replayed_tables)["s"].count(2), 1);
  Detach(replayed_tables);
}

TEST_F(WalTest, CheckpointsHoldWhatTheyCoverAndTheLogKeepsTheRest) {
  auto tables = Tables();
  CheckpointerOptions checkpointer_options;
  checkpointer_options.root = (dir_ / "checkpoints").string();
  auto checkpointer = *Checkpointer::Create(checkpointer_options);
  options_.segment_bytes = 1 << 10;  // many small files
  {
    auto log = Attach(tables);
    MakeChanges(tables, 1);
    ASSERT_OK(log->Commit());
    const uint64_t position = *log->Rotate();
    ASSERT_OK(checkpointer->Save(tables, position));
    const uint64_t files_before = log->stats().files;
    MakeChanges(tables, 1000);  // after the checkpoint: only in the log
    ASSERT_OK(log->Commit());
    ASSERT_OK(log->DropThrough(position));
    EXPECT_LT(log->stats().files, files_before + 100);
    EXPECT_GT(log->stats().files, 1);
    Detach(tables);
  }
  auto restored = Tables();
  auto loaded = checkpointer->LoadLatest(restored);
  ASSERT_OK(loaded);
  EXPECT_GT(loaded->wal_position, 0);
  WalReplay replayed;
  auto log = Attach(restored, loaded->wal_position, &replayed);
  EXPECT_TRUE(replayed.damage.empty()) << replayed.damage;
  EXPECT_GT(replayed.entries, 0);
  EXPECT_EQ(Contents(restored), Contents(tables));
  Detach(restored);
}

TEST_F(WalTest, AFailedLogRefusesChangesUntilACheckpointLetsItResume) {
  auto tables = Tables();
  CheckpointerOptions checkpointer_options;
  checkpointer_options.root = (dir_ / "checkpoints").string();
  auto checkpointer = *Checkpointer::Create(checkpointer_options);
  {
    auto log = Attach(tables);
    MakeChanges(tables, 1);
    ASSERT_OK(log->Commit());
    ASSERT_OK(log->Resume(log->last_position()));  // not failed: nothing to do
    log->Fail(absl::ResourceExhaustedError("No space left on device"));
    const auto refused = [](const absl::Status& status) {
      EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
      EXPECT_TRUE(absl::StrContains(
          status.message(),
          "the write-ahead log cannot be written: No space left"))
          << status;
    };
    refused(log->Commit());
    refused(log->Writable());
    const auto before = Contents(tables);
    ChunkStore store;
    refused(tables[0]->InsertOrAssign(
        MakeItem(5000, 1.0, {MakeFloatChunk(store, 5000, 1)})));
    refused(tables[0]->InsertOrAssign(
        MakeItem(2, 3.0, {MakeFloatChunk(store, 5001, 1)})));
    refused(tables[0]->MutatePriorities({{2, 5.0}}, {}).status());
    refused(tables[2]->MutatePriorities({}, {4}).status());
    refused(tables[2]->Reset());
    EXPECT_EQ(Contents(tables), before);
    // Reads go on.
    ASSERT_OK_AND_ASSIGN(auto sampled, tables[0]->Sample(3));
    EXPECT_FALSE(sampled.empty());

    // A checkpoint of the tables as they are lets the log start afresh.
    const uint64_t position = log->last_position();
    ASSERT_OK(checkpointer->Save(tables, position));
    ASSERT_OK(log->Resume(position));
    ASSERT_OK(log->Writable());
    EXPECT_EQ(LogFiles().size(), 1u);
    MakeChanges(tables, 1000);  // after the checkpoint: only in the log
    ASSERT_OK(log->Commit());
    Detach(tables);
  }
  auto restored = Tables();
  ASSERT_OK_AND_ASSIGN(LoadedCheckpoint loaded,
                       checkpointer->LoadLatest(restored));
  WalReplay replayed;
  auto log = Attach(restored, loaded.wal_position, &replayed);
  EXPECT_TRUE(replayed.damage.empty()) << replayed.damage;
  EXPECT_GT(replayed.entries, 0);
  EXPECT_EQ(Contents(restored), Contents(tables));
  Detach(restored);
}

TEST_F(WalTest, ATornTailIsReplayedUpToTheLastGoodRecord) {
  auto tables = Tables();
  std::map<std::string, std::map<Key, double>> committed;
  {
    auto log = Attach(tables);
    MakeChanges(tables, 1);
    ASSERT_OK(log->Commit());
    committed = Contents(tables);
    ChunkStore store;
    ASSERT_OK(tables[0]->InsertOrAssign(
        MakeItem(5555, 1.0, {MakeFloatChunk(store, 5555, 1)})));
    ASSERT_OK(log->Commit());  // its own record, the last one
    Detach(tables);
  }
  // Cut the last record short, as a crash in the middle of a write would.
  const fs::path file = *fs::directory_iterator(options_.dir);
  fs::resize_file(file, fs::file_size(file) - 5);
  auto restored = Tables();
  WalReplay replayed;
  auto log = Attach(restored, 0, &replayed);
  EXPECT_NE(replayed.damage.find("entry"), std::string::npos)
      << replayed.damage;
  EXPECT_EQ(Contents(restored), committed);  // everything but the torn record
  Detach(restored);
}

TEST_F(WalTest, DamageInTheMiddleStopsTheReplayAndSetsLaterFilesAside) {
  auto tables = Tables();
  options_.segment_bytes = 1 << 10;
  {
    auto log = Attach(tables);
    MakeChanges(tables, 1);
    ASSERT_OK(log->Commit());
    MakeChanges(tables, 1000);
    ASSERT_OK(log->Commit());
    Detach(tables);
  }
  const std::vector<fs::path> files = LogFiles();
  ASSERT_GT(files.size(), 3);
  {
    std::fstream f(files[1], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\xff');
  }
  auto restored = Tables();
  WalReplay replayed;
  auto log = Attach(restored, 0, &replayed);
  EXPECT_NE(replayed.damage.find(files[1].string()), std::string::npos)
      << replayed.damage;
  EXPECT_NE(replayed.damage.find(".unreplayed"), std::string::npos)
      << replayed.damage;
  EXPECT_TRUE(fs::exists(files.back().string() + ".unreplayed"));
  EXPECT_LT(Contents(restored)["p"].size(), Contents(tables)["p"].size());
  Detach(restored);
}

TEST_F(WalTest, MissingEntriesAfterTheCheckpointAreDataLoss) {
  auto tables = Tables();
  options_.segment_bytes = 1 << 10;
  {
    auto log = Attach(tables);
    MakeChanges(tables, 1);
    ASSERT_OK(log->Commit());
    Detach(tables);
  }
  const std::vector<fs::path> files = LogFiles();
  fs::remove(files[0]);
  WalReplay replayed;
  auto log = WriteAheadLog::Open(options_, 0, Tables(), &replayed);
  EXPECT_EQ(log.status().code(), absl::StatusCode::kDataLoss) << log.status();
}

TEST_F(WalTest, ConcurrentCommitsShareWritesAndSyncs) {
  auto tables = Tables();
  auto log = Attach(tables);
  std::atomic<int> calls{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      ChunkStore store;
      for (int i = 0; i < 100; ++i) {
        const Key key = t * 1000 + i + 1;
        ASSERT_OK(tables[2]->InsertOrAssign(
            MakeItem(key, 1.0, {MakeFloatChunk(store, key, 1)})));
        ASSERT_OK(log->Commit());
        ++calls;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  const WalStats stats = log->stats();
  EXPECT_EQ(calls.load(), 800);
  EXPECT_EQ(stats.syncs, stats.commits);  // every_write syncs each write
  EXPECT_LE(stats.commits, 800);
  EXPECT_GT(stats.bytes, 800 * 16);
  Detach(tables);
}

TEST_F(WalTest, IntervalAndNoneWriteBeforeCommitReturns) {
  for (WalSync sync : {WalSync::kInterval, WalSync::kNone}) {
    fs::remove_all(options_.dir);
    options_.sync = sync;
    auto tables = Tables();
    {
      auto log = Attach(tables);
      MakeChanges(tables, 1);
      ASSERT_OK(log->Commit());
      // Written (not only queued) when Commit returns: a copy of the file
      // now, as a killed process would leave it, replays everything.
      fs::copy(
          options_.dir, (dir_ / "copy").string(),
          fs::copy_options::recursive | fs::copy_options::overwrite_existing);
      Detach(tables);
    }
    options_.dir = (dir_ / "copy").string();
    auto restored = Tables();
    WalReplay replayed;
    auto log = Attach(restored, 0, &replayed);
    EXPECT_TRUE(replayed.damage.empty()) << replayed.damage;
    EXPECT_EQ(Contents(restored), Contents(tables));
    Detach(restored);
    log.reset();
    fs::remove_all(options_.dir);
    options_.dir = (dir_ / "wal").string();
  }
  EXPECT_EQ(*ParseWalSync("every_n_ms"), WalSync::kInterval);
  EXPECT_FALSE(ParseWalSync("sometimes").ok());
  for (const WalSync sync :
       {WalSync::kEveryWrite, WalSync::kInterval, WalSync::kNone}) {
    EXPECT_EQ(*ParseWalSync(WalSyncName(sync)), sync);
  }
  EXPECT_EQ(WalSyncName(WalOptions().sync), "every_write");
}

}  // namespace
}  // namespace reverb_tf
