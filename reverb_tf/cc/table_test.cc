// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/table.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "reverb_tf/cc/testing/status_matchers.h"
#include "reverb_tf/cc/testing/test_util.h"

namespace reverb_tf {
namespace {

using ::reverb_tf::testing::Fifo;
using ::reverb_tf::testing::Lifo;
using ::reverb_tf::testing::MakeFloatChunk;
using ::reverb_tf::testing::MakeItem;
using ::reverb_tf::testing::MakeTable;
using ::reverb_tf::testing::MakeTableOptions;
using ::reverb_tf::testing::MinHeap;
using ::reverb_tf::testing::Prioritized;
using ::reverb_tf::testing::Uniform;

constexpr absl::Duration kShort = absl::Milliseconds(50);
// Upper bound for calls expected to succeed, so a failure cannot hang.
constexpr absl::Duration kLong = absl::Seconds(20);

class TableTest : public ::testing::Test {
 protected:
  Item NewItem(Key key, double priority = 1.0) {
    return MakeItem(key, priority, {MakeFloatChunk(store_, key, 1)});
  }

  // Blocks until `n` calls wait in the limiter of `table` (bounded).
  static void AwaitPending(const Table& table, bool sample, int n) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      const auto info = table.info().rate_limiter_info;
      if ((sample ? info.sample_stats.pending : info.insert_stats.pending) == n)
        return;
      absl::SleepFor(absl::Milliseconds(1));
    }
    FAIL() << "no call became pending";
  }

  ChunkStore store_;
};

TEST_F(TableTest, CreateRejectsInvalidOptions) {
  auto options = MakeTableOptions("t", Uniform(), Fifo(), 10,
                                  RateLimiterOptions::MinSize(1));
  EXPECT_OK(Table::Create(options, 1));
  auto bad = options;
  bad.max_size = 0;
  EXPECT_EQ(Table::Create(bad, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Every max_times_sampled < 1 means no limit, as in dm-reverb, which
  // reports the value as given.
  auto unlimited = options;
  unlimited.max_times_sampled = -1;
  EXPECT_OK(Table::Create(unlimited, 1));
  bad = options;
  bad.name = "";
  EXPECT_EQ(Table::Create(bad, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad = options;
  bad.rate_limiter.min_size_to_sample = 0;
  auto status = Table::Create(bad, 1).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("min_size_to_sample"), std::string::npos);
  bad = options;
  bad.sampler = Prioritized(NAN);
  EXPECT_EQ(Table::Create(bad, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad = options;
  bad.signature = TableSignature{{ColumnSpec{"x", DType::kFloat, {-2}}}, ""};
  EXPECT_EQ(Table::Create(bad, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(TableTest, LifetimeCountersOnlyGrowAndSayWhyItemsLeft) {
  TableOptions options =
      MakeTableOptions("t", Fifo(), Fifo(), 3, RateLimiterOptions::MinSize(1));
  options.max_times_sampled = 2;
  auto table = MakeTable(options);
  for (Key key = 1; key <= 5; ++key)
    ASSERT_OK(table->InsertOrAssign(NewItem(key)));
  ASSERT_OK(table->InsertOrAssign(NewItem(5, 2.0)));  // a replacement
  ASSERT_OK(table->Sample(2, kLong));  // key 3 twice: sampled out
  ASSERT_OK(table->MutatePriorities({{4, 3.0}, {99, 1.0}}, {5}));
  TableCounters counters = table->info().counters;
  EXPECT_EQ(counters.inserted, 5);
  EXPECT_EQ(counters.evicted, 2);
  EXPECT_EQ(counters.sampled, 2);
  EXPECT_EQ(counters.sampled_out, 1);
  EXPECT_EQ(counters.priority_updates, 1);
  EXPECT_EQ(counters.deleted, 1);
  ASSERT_OK(table->Reset());
  counters = table->info().counters;
  EXPECT_EQ(counters.resets, 1);
  EXPECT_EQ(counters.inserted, 5);  // unlike the rate limiter's, not reset
  EXPECT_EQ(table->info().rate_limiter_info.inserts, 0);
}

TEST(PriorityHistogramTest, BucketsArePowersOfTwoWithOpenEnds) {
  EXPECT_EQ(PriorityHistogram::BucketOf(-3.0), 0);
  EXPECT_EQ(PriorityHistogram::BucketOf(0.0), 0);
  EXPECT_EQ(PriorityHistogram::BucketOf(1e-9), 1);        // (0, 2^-10]
  EXPECT_EQ(PriorityHistogram::BucketOf(1.0), 11);        // (0.5, 1]
  EXPECT_EQ(PriorityHistogram::BucketOf(1.0000001), 12);  // (1, 2]
  EXPECT_EQ(PriorityHistogram::BucketOf(1024.0), 21);     // (512, 1024]
  EXPECT_EQ(PriorityHistogram::BucketOf(1025.0), 22);     // above 2^10
  EXPECT_EQ(PriorityHistogram::BucketOf(INFINITY), 22);
  for (double p : {0.3, 1.0, 7.0, 1e-5, 600.0}) {
    const int b = PriorityHistogram::BucketOf(p);
    EXPECT_LE(p, PriorityHistogram::UpperBound(b)) << p;
    EXPECT_GT(p, PriorityHistogram::UpperBound(b - 1)) << p;
  }
}

TEST_F(TableTest, PriorityHistogramFollowsInsertsUpdatesAndRemovals) {
  auto table = MakeTable(MakeTableOptions("t", Prioritized(1.0), Fifo(), 3,
                                          RateLimiterOptions::MinSize(1)));
  ASSERT_OK(table->InsertOrAssign(NewItem(1, 1.0)));
  ASSERT_OK(table->InsertOrAssign(NewItem(2, 1.0)));
  ASSERT_OK(table->InsertOrAssign(NewItem(3, 3.0)));
  ASSERT_OK(table->InsertOrAssign(NewItem(4, 0.25)));   // evicts 1
  ASSERT_OK(table->InsertOrAssign(NewItem(2, 100.0)));  // replaces 2
  ASSERT_OK(table->MutatePriorities({{3, 0.25}}, {}));
  PriorityHistogram histogram = table->info().priorities;
  EXPECT_EQ(histogram.counts[PriorityHistogram::BucketOf(0.25)], 2);
  EXPECT_EQ(histogram.counts[PriorityHistogram::BucketOf(100.0)], 1);
  EXPECT_EQ(histogram.counts[PriorityHistogram::BucketOf(1.0)], 0);
  EXPECT_OK(table->CheckInvariants());
  ASSERT_OK(table->Reset());
  histogram = table->info().priorities;
  for (int64_t count : histogram.counts) EXPECT_EQ(count, 0);
}

TEST_F(TableTest, InsertAndSampleReportSampleInfo) {
  auto table = MakeTable(MakeTableOptions("t", Prioritized(1.0), Fifo(), 10,
                                          RateLimiterOptions::MinSize(1)));
  ASSERT_OK(table->InsertOrAssign(NewItem(1, 1.0)));
  ASSERT_OK(table->InsertOrAssign(NewItem(2, 3.0)));
  EXPECT_EQ(table->size(), 2);
  auto samples = table->Sample(1, kLong);
  ASSERT_OK(samples);
  ASSERT_EQ(samples->size(), 1u);
  const SampledItem& s = samples->front();
  EXPECT_EQ(s.table_size, 2);
  EXPECT_EQ(s.times_sampled, 1);
  EXPECT_DOUBLE_EQ(s.probability, s.key == 1 ? 0.25 : 0.75);
  EXPECT_DOUBLE_EQ(s.priority, s.key == 1 ? 1.0 : 3.0);
  EXPECT_FALSE(s.rate_limited);
  ASSERT_EQ(s.trajectory.size(), 1u);
  EXPECT_EQ(s.trajectory[0].slices()[0].chunk->key(), s.key);
}

TEST_F(TableTest, PrioritiesAreWeightsOnlyWhereASelectorIsPrioritized) {
  auto heap = MakeTable(MakeTableOptions("h", MinHeap(), Fifo(), 10,
                                         RateLimiterOptions::MinSize(1)));
  EXPECT_OK(heap->InsertOrAssign(NewItem(1, -1.0)));
  EXPECT_OK(heap->InsertOrAssign(NewItem(2, INFINITY)));
  EXPECT_EQ(heap->InsertOrAssign(NewItem(3, NAN)).code(),
            absl::StatusCode::kInvalidArgument);
  auto prioritized = MakeTable(MakeTableOptions(
      "p", Prioritized(1.0), Fifo(), 10, RateLimiterOptions::MinSize(1)));
  EXPECT_EQ(prioritized->InsertOrAssign(NewItem(1, -1.0)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(prioritized->InsertOrAssign(NewItem(2, INFINITY)).code(),
            absl::StatusCode::kInvalidArgument);
  auto removed_by_priority = MakeTable(MakeTableOptions(
      "r", Fifo(), Prioritized(1.0), 10, RateLimiterOptions::MinSize(1)));
  EXPECT_EQ(removed_by_priority->InsertOrAssign(NewItem(1, -1.0)).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(TableTest, BadItemsAreRejectedWithoutSideEffects) {
  auto table = MakeTable(MakeTableOptions("t", Uniform(), Fifo(), 10,
                                          RateLimiterOptions::MinSize(1)));
  EXPECT_EQ(table->InsertOrAssign(NewItem(1, -NAN)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table->InsertOrAssign(NewItem(2, NAN)).code(),
            absl::StatusCode::kInvalidArgument);
  Item empty;
  empty.key = 3;
  EXPECT_EQ(table->InsertOrAssign(empty).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table->size(), 0);
  EXPECT_EQ(table->info().rate_limiter_info.inserts, 0);
  EXPECT_EQ(table->Sample(0, kLong).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(TableTest, SignatureMismatchIsRejectedNamingTheColumn) {
  auto options = MakeTableOptions("t", Uniform(), Fifo(), 10,
                                  RateLimiterOptions::MinSize(1));
  options.signature =
      TableSignature{{ColumnSpec{"obs", DType::kFloat, {-1, 4}}}, ""};
  auto table = MakeTable(options);
  EXPECT_OK(table->InsertOrAssign(NewItem(1)));
  Item wrong = MakeItem(2, 1.0, {MakeFloatChunk(store_, 2, 1, /*width=*/5)});
  absl::Status status = table->InsertOrAssign(wrong);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("'obs'"), std::string::npos) << status;
  EXPECT_NE(status.message().find("float32[1, 5]"), std::string::npos)
      << status;
  EXPECT_EQ(table->size(), 1);
}

TEST_F(TableTest, AssignReplacesPriorityAndTrajectoryWithoutCountingAnInsert) {
  auto table = MakeTable(MakeTableOptions("t", Prioritized(1.0), Fifo(), 10,
                                          RateLimiterOptions::Queue(1)));
  Item original = NewItem(1, 1.0);
  ASSERT_OK(table->InsertOrAssign(std::move(original)));
  // The queue is full, so a new key would wait; assigning does not.
  EXPECT_EQ(table->InsertOrAssign(NewItem(2), absl::ZeroDuration()).code(),
            absl::StatusCode::kDeadlineExceeded);
  Item replacement = MakeItem(1, 5.0, {MakeFloatChunk(store_, 99, 2)});
  ASSERT_OK(table->InsertOrAssign(replacement, absl::ZeroDuration()));
  EXPECT_EQ(table->size(), 1);
  EXPECT_EQ(table->info().rate_limiter_info.inserts, 1);
  EXPECT_EQ(store_.num_live_chunks(), 1);  // the old chunk is gone
  auto sample = table->Sample(1, kLong).value()[0];
  EXPECT_EQ(sample.priority, 5.0);
  EXPECT_EQ(sample.trajectory[0].slices()[0].chunk->key(), 99u);
  EXPECT_EQ(sample.trajectory[0].num_steps(), 2);
}

TEST_F(TableTest, FullTableEvictsTheRemoversChoice) {
  struct Case {
    SelectorOptions remover;
    std::vector<Key> survivors;
  };
  const std::vector<Case> cases = {
      {Fifo(), {3, 4, 5}},
      // The remover weighs the new item too: a Lifo remover drops it.
      {Lifo(), {1, 2, 3}},
      {SelectorOptions{SelectorOptions::Kind::kMinHeap, 1}, {1, 3, 5}},
      {SelectorOptions{SelectorOptions::Kind::kMaxHeap, 1}, {2, 4, 5}},
  };
  // Priorities: key 1 -> 10, 2 -> 1, 3 -> 9, 4 -> 2, 5 -> 5.
  const double priority[] = {0, 10, 1, 9, 2, 5};
  for (const Case& c : cases) {
    auto table = MakeTable(MakeTableOptions("t", Uniform(), c.remover, 3,
                                            RateLimiterOptions::MinSize(1)));
    for (Key key = 1; key <= 5; ++key) {
      ASSERT_OK(table->InsertOrAssign(NewItem(key, priority[key])));
    }
    EXPECT_EQ(table->size(), 3);
    std::vector<std::pair<Key, double>> probe;
    for (Key key = 1; key <= 5; ++key) probe.push_back({key, 1.0});
    auto result = table->MutatePriorities(probe, {});
    ASSERT_OK(result);
    EXPECT_EQ(result->updated, 3);
    EXPECT_EQ(result->missing, 2);
    for (Key key : c.survivors) {
      auto one = table->MutatePriorities({{key, priority[key]}}, {});
      EXPECT_EQ(one->updated, 1)
          << c.remover.DebugString() << " lost key " << key;
    }
    EXPECT_EQ(table->info().rate_limiter_info.deletes, 2);
  }
}

TEST_F(TableTest, MaxTimesSampledRemovesTheItemAndFreesItsChunk) {
  auto table = MakeTable(MakeTableOptions("t", Uniform(), Fifo(), 10,
                                          RateLimiterOptions::MinSize(1), 3));
  ASSERT_OK(table->InsertOrAssign(NewItem(1)));
  EXPECT_EQ(store_.num_live_chunks(), 1);
  for (int i = 1; i <= 3; ++i) {
    auto samples = table->Sample(1, kLong);
    ASSERT_OK(samples);
    EXPECT_EQ(samples->front().times_sampled, i);
    EXPECT_EQ(samples->front().removed, i == 3);
  }
  EXPECT_EQ(table->size(), 0);
  EXPECT_EQ(store_.num_live_chunks(), 0);
  EXPECT_EQ(table->Sample(1, kShort).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST_F(TableTest, SampleTimesOutWithDeadlineExceeded) {
  auto table = MakeTable(MakeTableOptions("t", Uniform(), Fifo(), 10,
                                          RateLimiterOptions::MinSize(2)));
  ASSERT_OK(table->InsertOrAssign(NewItem(1)));
  const absl::Time start = absl::Now();
  auto status = table->Sample(1, kShort).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(absl::Now() - start, kShort);
  EXPECT_NE(status.message().find("rate limiter timeout"), std::string::npos);
}

TEST_F(TableTest, BlockedSampleWakesWhenInsertAllowsIt) {
  auto table = MakeTable(MakeTableOptions("t", Uniform(), Fifo(), 10,
                                          RateLimiterOptions::MinSize(2)));
  ASSERT_OK(table->InsertOrAssign(NewItem(1)));
  absl::StatusOr<std::vector<SampledItem>> result;
  std::thread sampler([&] { result = table->Sample(1, kLong); });
  AwaitPending(*table, /*sample=*/true, 1);
  ASSERT_OK(table->InsertOrAssign(NewItem(2)));
  sampler.join();
  ASSERT_OK(result);
  EXPECT_TRUE(result->front().rate_limited);
  const auto stats = table->info().rate_limiter_info.sample_stats;
  EXPECT_EQ(stats.limited, 1);
  EXPECT_EQ(stats.pending, 0);
  EXPECT_GT(stats.completed_wait_time, absl::ZeroDuration());
}

TEST_F(TableTest, QueueBlocksInsertsUntilTheReaderCatchesUp) {
  auto table = MakeTable(MakeTableOptions("q", Fifo(), Fifo(), 2,
                                          RateLimiterOptions::Queue(2), 1));
  ASSERT_OK(table->InsertOrAssign(NewItem(1)));
  ASSERT_OK(table->InsertOrAssign(NewItem(2)));
  EXPECT_EQ(table->InsertOrAssign(NewItem(3), kShort).code(),
            absl::StatusCode::kDeadlineExceeded);
  absl::Status blocked_insert;
  std::thread writer(
      [&] { blocked_insert = table->InsertOrAssign(NewItem(3), kLong); });
  AwaitPending(*table, /*sample=*/false, 1);
  auto first = table->Sample(1, kLong);
  ASSERT_OK(first);
  EXPECT_EQ(first->front().key, 1u);
  writer.join();
  EXPECT_OK(blocked_insert);
  EXPECT_EQ(table->Sample(1, kLong)->front().key, 2u);
  EXPECT_EQ(table->Sample(1, kLong)->front().key, 3u);
  EXPECT_EQ(table->size(), 0);
}

TEST_F(TableTest, InsertAvailableStoresARunUntilTheLimiterOrABadItem) {
  auto table = MakeTable(MakeTableOptions("q", Fifo(), Fifo(), 3,
                                          RateLimiterOptions::Queue(3), 1));
  ASSERT_OK(table->InsertOrAssign(NewItem(1)));
  std::vector<Item> items;
  for (Key key : {2, 3, 4, 5}) items.push_back(NewItem(key));
  int64_t stored = -1;
  // Room for two more: the rest is left as it was, to wait elsewhere.
  EXPECT_EQ(table->InsertAvailable(absl::MakeSpan(items), &stored).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(stored, 2);
  EXPECT_EQ(table->size(), 3);
  EXPECT_EQ(items[2].key, 4u);
  ASSERT_EQ(items[2].trajectory.size(), 1u);
  EXPECT_EQ(table->info().rate_limiter_info.insert_stats.pending, 0);
  // An assignment of a stored key needs no room.
  items[3] = NewItem(2, 5.0);
  EXPECT_OK(table->InsertAvailable(absl::MakeSpan(items).subspan(3), &stored));
  EXPECT_EQ(stored, 1);
  // A bad item ends the run after the ones before it.
  ASSERT_OK(table->Sample(3, kLong));
  std::vector<Item> mixed;
  mixed.push_back(NewItem(6));
  mixed.push_back(NewItem(7, std::nan("")));
  mixed.push_back(NewItem(8));
  EXPECT_EQ(table->InsertAvailable(absl::MakeSpan(mixed), &stored).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(stored, 1);
  EXPECT_EQ(table->size(), 1);
  EXPECT_EQ(table->Sample(1, kLong)->front().key, 6u);
}

TEST_F(TableTest, StackReturnsNewestFirst) {
  auto table = MakeTable(MakeTableOptions("s", Lifo(), Lifo(), 3,
                                          RateLimiterOptions::Stack(3), 1));
  for (Key key = 1; key <= 3; ++key)
    ASSERT_OK(table->InsertOrAssign(NewItem(key)));
  for (Key expected = 3; expected >= 1; --expected) {
    EXPECT_EQ(table->Sample(1, kLong)->front().key, expected);
  }
}

TEST_F(TableTest, SampleBatchTakesWhatTheLimiterAllows) {
  auto table = MakeTable(MakeTableOptions("q", Fifo(), Fifo(), 10,
                                          RateLimiterOptions::Queue(10), 1));
  for (Key key = 1; key <= 3; ++key)
    ASSERT_OK(table->InsertOrAssign(NewItem(key)));
  auto batch = table->Sample(10, kLong);
  ASSERT_OK(batch);
  ASSERT_EQ(batch->size(), 3u);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ((*batch)[i].key, static_cast<Key>(i + 1));
  EXPECT_EQ(table->info().rate_limiter_info.sample_stats.completed, 3);

  auto uniform = MakeTable(MakeTableOptions("u", Uniform(), Fifo(), 10,
                                            RateLimiterOptions::MinSize(1)));
  ASSERT_OK(uniform->InsertOrAssign(NewItem(1)));
  EXPECT_EQ(uniform->Sample(64, kLong)->size(),
            64u);  // sampling with replacement
}

TEST_F(TableTest, CancellationWakesABlockedCall) {
  auto table = MakeTable(MakeTableOptions("t", Uniform(), Fifo(), 10,
                                          RateLimiterOptions::MinSize(1)));
  Cancellation cancel;
  absl::Status status;
  std::thread sampler([&] {
    status = table->Sample(1, absl::InfiniteDuration(), &cancel).status();
  });
  AwaitPending(*table, /*sample=*/true, 1);
  const absl::Time start = absl::Now();
  cancel.Cancel();
  sampler.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  // An already cancelled token fails at once, even when the call could wait.
  EXPECT_EQ(table->Sample(1, kLong, &cancel).status().code(),
            absl::StatusCode::kCancelled);
}

TEST_F(TableTest, CloseFailsBlockedAndFutureCalls) {
  auto table = MakeTable(MakeTableOptions("t", Uniform(), Fifo(), 10,
                                          RateLimiterOptions::MinSize(1)));
  absl::Status status;
  std::thread sampler([&] { status = table->Sample(1, kLong).status(); });
  AwaitPending(*table, /*sample=*/true, 1);
  table->Close();
  sampler.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(table->InsertOrAssign(NewItem(1)).code(),
            absl::StatusCode::kCancelled);
}

TEST_F(TableTest, OpenServesAgainWithTheItemsKept) {
  auto table = MakeTable(MakeTableOptions("t", Uniform(), Fifo(), 10,
                                          RateLimiterOptions::MinSize(1)));
  ASSERT_OK(table->InsertOrAssign(NewItem(1)));
  table->Close();
  EXPECT_EQ(table->InsertOrAssign(NewItem(2)).code(),
            absl::StatusCode::kCancelled);
  EXPECT_EQ(table->size(), 1);
  table->Open();
  EXPECT_OK(table->InsertOrAssign(NewItem(2)));
  auto sampled = table->Sample(1, kLong);
  ASSERT_OK(sampled);
  EXPECT_EQ(table->size(), 2);
}

TEST_F(TableTest, MutatePrioritiesIsAllOrNothingOnBadPriorities) {
  auto table = MakeTable(MakeTableOptions("t", Prioritized(1.0), Fifo(), 10,
                                          RateLimiterOptions::MinSize(1)));
  ASSERT_OK(table->InsertOrAssign(NewItem(1, 1.0)));
  ASSERT_OK(table->InsertOrAssign(NewItem(2, 1.0)));
  auto bad = table->MutatePriorities({{1, 100.0}, {2, NAN}}, {});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table->MutatePriorities({{1, -3}}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Key 1 kept priority 1: both keys still equally likely.
  EXPECT_DOUBLE_EQ(table->Sample(1, kLong)->front().probability, 0.5);

  auto result = table->MutatePriorities({{1, 3.0}, {7, 1.0}}, {2, 8});
  ASSERT_OK(result);
  EXPECT_EQ(result->updated, 1);
  EXPECT_EQ(result->deleted, 1);
  EXPECT_EQ(result->missing, 2);
  EXPECT_EQ(table->size(), 1);
  auto only = table->Sample(1, kLong)->front();
  EXPECT_EQ(only.key, 1u);
  EXPECT_EQ(only.priority, 3.0);
}

// The sampler takes a batch of updates at once; an update it refuses (a
// total weight that would overflow) leaves the ones before it applied
// everywhere (priority, remover, counters) and the ones after it not.
// Records the priority updates and deletes a table reports.
class UpdateJournal : public TableJournal {
 public:
  void Inserted(const Table&, const Item&) override {}
  void Mutated(const Table&, absl::Span<const std::pair<Key, double>> updates,
               absl::Span<const Key> deletes) override {
    this->updates.insert(this->updates.end(), updates.begin(), updates.end());
    this->deletes.insert(this->deletes.end(), deletes.begin(), deletes.end());
  }
  void SampledOut(const Table&, Key) override {}
  void WasReset(const Table&) override {}

  std::vector<std::pair<Key, double>> updates;
  std::vector<Key> deletes;
};

TEST_F(TableTest, MutatePrioritiesStopsAtAnUpdateTheSamplerRefuses) {
  constexpr double kHuge = std::numeric_limits<double>::max() / 2;
  auto table = MakeTable(
      MakeTableOptions("t", Prioritized(1.0),
                       SelectorOptions{SelectorOptions::Kind::kMaxHeap, 1}, 10,
                       RateLimiterOptions::MinSize(1)));
  UpdateJournal journal;
  table->SetJournal(&journal);
  ASSERT_OK(table->InsertOrAssign(NewItem(1, kHuge)));
  ASSERT_OK(table->InsertOrAssign(NewItem(2, 2.0)));
  ASSERT_OK(table->InsertOrAssign(NewItem(3, 1.0)));
  auto refused =
      table->MutatePriorities({{2, 0.25}, {3, 2 * kHuge}, {1, 7.0}}, {});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("overflow"), std::string::npos);
  const TableInfo info = table->info();
  EXPECT_EQ(info.counters.priority_updates, 1);
  EXPECT_EQ(info.priorities.counts[PriorityHistogram::BucketOf(0.25)], 1);
  EXPECT_EQ(info.priorities.counts[PriorityHistogram::BucketOf(2.0)], 0);
  EXPECT_EQ(info.priorities.counts[PriorityHistogram::BucketOf(1.0)], 1);
  EXPECT_EQ(info.priorities.counts[PriorityHistogram::BucketOf(kHuge)], 1);
  // The journal (a write-ahead log) hears of the applied update only.
  EXPECT_EQ(journal.updates, (std::vector<std::pair<Key, double>>{{2, 0.25}}));
  EXPECT_TRUE(journal.deletes.empty());
  // The max-heap remover saw key 2 go from 2 to 0.25: once key 1 is gone,
  // the eviction an eleventh item causes takes key 3 (1.0), not key 2.
  ASSERT_OK(table->MutatePriorities({}, {1}));
  for (Key key = 4; key <= 12; ++key)
    ASSERT_OK(table->InsertOrAssign(NewItem(key, 0.5)));
  auto probe = table->MutatePriorities({{2, 0.25}, {3, 1.0}}, {});
  ASSERT_OK(probe);
  EXPECT_EQ(probe->updated, 1);
  EXPECT_EQ(probe->missing, 1);
  EXPECT_EQ(table->size(), 10);
  auto kept = table->MutatePriorities({{2, 0.25}}, {});
  ASSERT_OK(kept);
  EXPECT_EQ(kept->updated, 1) << "the remover evicted key 2";
  table->SetJournal(nullptr);
}

TEST_F(TableTest, ResetEmptiesTheTableAndTheLimiter) {
  auto table = MakeTable(MakeTableOptions("t", Uniform(), Fifo(), 10,
                                          RateLimiterOptions::MinSize(1)));
  for (Key key = 1; key <= 5; ++key)
    ASSERT_OK(table->InsertOrAssign(NewItem(key)));
  ASSERT_OK(table->Sample(3, kLong));
  EXPECT_EQ(store_.num_live_chunks(), 5);
  ASSERT_OK(table->Reset());
  EXPECT_EQ(table->size(), 0);
  EXPECT_EQ(store_.num_live_chunks(), 0);
  const TableInfo info = table->info();
  EXPECT_EQ(info.rate_limiter_info.inserts, 0);
  EXPECT_EQ(info.rate_limiter_info.samples, 0);
  EXPECT_EQ(info.num_unique_samples, 0);
  ASSERT_OK(table->InsertOrAssign(NewItem(1)));
  EXPECT_EQ(table->Sample(1, kLong)->front().key, 1u);
}

TEST_F(TableTest, ChunksSharedAcrossTablesLiveUntilTheLastItemGoes) {
  auto a = MakeTable(MakeTableOptions("a", Uniform(), Fifo(), 10,
                                      RateLimiterOptions::MinSize(1)));
  auto b = MakeTable(MakeTableOptions("b", Uniform(), Fifo(), 10,
                                      RateLimiterOptions::MinSize(1)));
  auto shared = MakeFloatChunk(store_, 1, 4);
  ASSERT_OK(a->InsertOrAssign(MakeItem(1, 1, {shared})));
  ASSERT_OK(b->InsertOrAssign(MakeItem(2, 1, {shared})));
  ASSERT_OK(a->InsertOrAssign(MakeItem(3, 1, {shared})));
  shared.reset();
  EXPECT_EQ(store_.num_live_chunks(), 1);
  ASSERT_OK(a->Reset());
  EXPECT_EQ(store_.num_live_chunks(), 1);
  ASSERT_OK(b->MutatePriorities({}, {2}));
  EXPECT_EQ(store_.num_live_chunks(), 0);
}

TEST_F(TableTest, InfoReportsOptionsAndCounters) {
  auto options =
      MakeTableOptions("info", Prioritized(0.6), Fifo(), 100,
                       RateLimiterOptions::SampleToInsertRatio(2, 1, 10), 7);
  auto table = MakeTable(options);
  for (Key key = 1; key <= 4; ++key)
    ASSERT_OK(table->InsertOrAssign(NewItem(key)));
  ASSERT_OK(table->Sample(3, kLong));
  const TableInfo info = table->info();
  EXPECT_EQ(info.options.name, "info");
  EXPECT_EQ(info.options.sampler, Prioritized(0.6));
  EXPECT_EQ(info.options.max_times_sampled, 7);
  EXPECT_EQ(info.current_size, 4);
  EXPECT_EQ(info.rate_limiter_info.inserts, 4);
  EXPECT_EQ(info.rate_limiter_info.samples, 3);
  EXPECT_EQ(info.rate_limiter_info.insert_stats.completed, 4);
  EXPECT_EQ(info.rate_limiter_info.sample_stats.completed, 3);
  EXPECT_GE(info.num_unique_samples, 1);
  EXPECT_LE(info.num_unique_samples, 3);
}

}  // namespace
}  // namespace reverb_tf
