// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/memory_budget.h"

#include <atomic>
#include <thread>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "reverb_tf/cc/table.h"
#include "reverb_tf/cc/testing/status_matchers.h"
#include "reverb_tf/cc/testing/test_util.h"

namespace reverb_tf {
namespace {

using ::reverb_tf::testing::Fifo;
using ::reverb_tf::testing::MakeFloatChunk;
using ::reverb_tf::testing::MakeItem;
using ::reverb_tf::testing::MakeTable;
using ::reverb_tf::testing::MakeTableOptions;
using ::reverb_tf::testing::Uniform;

// Items of one chunk of 256 floats (1 KiB of data each).
class MemoryBudgetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    table_ =
        MakeTable(MakeTableOptions("t", Uniform(), Fifo(), /*max_size=*/100,
                                   RateLimiterOptions::MinSize(1)));
    budget_ = std::make_unique<MemoryBudget>(
        kLimit, &store_, [this] { return table_->approximate_size(); });
    table_->SetMemoryBudget(budget_.get());
  }
  void TearDown() override { table_->SetMemoryBudget(nullptr); }

  // Inserts items until one is refused: the budget is used up. Returns the
  // next free key.
  Key Fill() {
    for (Key key = 1;; ++key) {
      absl::Status status = Insert(key, absl::ZeroDuration());
      if (MemoryBudget::IsExhausted(status)) return key + 1;
      EXPECT_OK(status);
      if (!status.ok()) return key + 1;
    }
  }

  absl::Status Insert(Key key, absl::Duration timeout) {
    return table_->InsertOrAssign(
        MakeItem(key, 1.0, {MakeFloatChunk(store_, key, 1, 256)}), timeout);
  }

  // About 10 items' worth.
  static constexpr int64_t kLimit = 10 * (1024 + 64 + MemoryBudget::kItemBytes);
  ChunkStore store_;
  std::shared_ptr<Table> table_;
  std::unique_ptr<MemoryBudget> budget_;
};

TEST_F(MemoryBudgetTest, CountsChunksAndItems) {
  EXPECT_EQ(budget_->used(), 0);
  ASSERT_OK(Insert(1, absl::ZeroDuration()));
  EXPECT_EQ(budget_->used(),
            store_.num_live_bytes() + MemoryBudget::kItemBytes);
  EXPECT_GT(store_.num_live_bytes(), 1024);
  ASSERT_OK(table_->Reset());
  EXPECT_EQ(budget_->used(), 0);
}

TEST_F(MemoryBudgetTest, InsertsWaitForRoomThenFailNamingTheBudget) {
  Fill();
  EXPECT_EQ(budget_->refused(), 0);  // a zero timeout is a probe, not a refusal
  const int64_t stored = table_->size();
  EXPECT_GE(stored, 5);
  EXPECT_LT(stored, 100);  // the budget stopped it, not max_size

  const absl::Time start = absl::Now();
  absl::Status refused = Insert(1000, absl::Milliseconds(100));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "memory budget is used up"))
      << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "insert into table 't'"))
      << refused;
  EXPECT_TRUE(MemoryBudget::IsExhausted(refused));
  EXPECT_EQ(budget_->refused(), 1);
  EXPECT_EQ(table_->size(), stored);

  // Replacing a stored key, sampling and priority updates do not wait.
  ASSERT_OK(Insert(1, absl::ZeroDuration()));
  ASSERT_OK(table_->Sample(1));
  ASSERT_OK(table_->MutatePriorities({{2, 5.0}}, {}));

  // A waiting insert goes in once a delete makes room.
  std::atomic<bool> inserted{false};
  std::thread waiter([&] {
    EXPECT_OK(Insert(2000, absl::Seconds(30)));
    inserted = true;
  });
  while (budget_->waiting() == 0) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_FALSE(inserted);
  ASSERT_OK(table_->MutatePriorities({}, {1, 2}));
  waiter.join();
  EXPECT_TRUE(inserted);
  EXPECT_EQ(budget_->waiting(), 0);
}

TEST_F(MemoryBudgetTest, AFullTableEvictsAsItInsertsAndNeedsNoRoom) {
  table_->SetMemoryBudget(nullptr);
  table_ = MakeTable(MakeTableOptions("t", Uniform(), Fifo(), /*max_size=*/3,
                                      RateLimiterOptions::MinSize(1)));
  budget_ = std::make_unique<MemoryBudget>(
      1, &store_, [this] { return table_->approximate_size(); });
  table_->SetMemoryBudget(budget_.get());
  // A budget of one byte: no room for a growing table.
  EXPECT_EQ(Insert(1, absl::Milliseconds(10)).code(),
            absl::StatusCode::kResourceExhausted);
  table_->SetMemoryBudget(nullptr);
  for (Key key = 1; key <= 3; ++key)
    ASSERT_OK(Insert(key, absl::ZeroDuration()));
  table_->SetMemoryBudget(budget_.get());
  EXPECT_FALSE(budget_->HasRoom());
  // Full: each insert evicts the oldest, so memory does not grow.
  for (Key key = 4; key < 10; ++key)
    ASSERT_OK(Insert(key, absl::ZeroDuration()));
  EXPECT_EQ(table_->size(), 3);
}

TEST_F(MemoryBudgetTest, AwaitRoomEndsOnCancelCloseOrDeadline) {
  Fill();
  // Chunks a writer stream holds count too.
  const ChunkRef held = MakeFloatChunk(store_, 9999, 1, 256);
  ASSERT_FALSE(budget_->HasRoom());
  absl::Status late = budget_->AwaitRoom(absl::Now() + absl::Milliseconds(20),
                                         nullptr, "store chunk 7");
  EXPECT_TRUE(MemoryBudget::IsExhausted(late)) << late;
  EXPECT_TRUE(absl::StrContains(late.message(), "could not store chunk 7"))
      << late;
  Cancellation cancel;
  cancel.Cancel();
  EXPECT_EQ(budget_->AwaitRoom(absl::InfiniteFuture(), &cancel, "x").code(),
            absl::StatusCode::kCancelled);
  std::thread closer([&] {
    absl::SleepFor(absl::Milliseconds(20));
    budget_->Close();
  });
  EXPECT_EQ(budget_->AwaitRoom(absl::InfiniteFuture(), nullptr, "x").code(),
            absl::StatusCode::kCancelled);
  closer.join();
  ASSERT_OK(table_->MutatePriorities({}, {1, 2, 3}));
  ASSERT_OK(budget_->AwaitRoom(absl::InfiniteFuture(), nullptr, "x"));
}

}  // namespace
}  // namespace reverb_tf
