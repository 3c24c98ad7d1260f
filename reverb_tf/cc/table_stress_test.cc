// SPDX-License-Identifier: Apache-2.0
// Many writers, samplers and priority updaters on one table for a bounded
// time; afterwards the table's invariants and the chunk accounting must hold.
#include <atomic>
#include <random>
#include <thread>
#include <vector>

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
using ::reverb_tf::testing::Prioritized;
using ::reverb_tf::testing::Uniform;

struct StressConfig {
  SelectorOptions sampler;
  RateLimiterOptions limiter;
  int32_t max_times_sampled;
};

class TableStressTest : public ::testing::TestWithParam<StressConfig> {};

TEST_P(TableStressTest, InvariantsHoldUnderConcurrentLoad) {
  const StressConfig config = GetParam();
  ChunkStore store;
  auto table =
      MakeTable(MakeTableOptions("stress", config.sampler, Fifo(), 300,
                                 config.limiter, config.max_times_sampled));
  constexpr int kWriters = 4, kSamplers = 2;
  const absl::Duration kPoll = absl::Milliseconds(5);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> inserted{0}, sampled{0}, too_often{0}, errors{0};
  std::atomic<Key> next_key{1};
  std::vector<std::thread> threads;

  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937_64 rng(w);
      while (!stop.load()) {
        // Both columns of an item share one chunk.
        const Key key = next_key.fetch_add(1);
        auto chunk = MakeFloatChunk(store, key, 1 + rng() % 3);
        absl::Status status = table->InsertOrAssign(
            MakeItem(key, 0.1 + (rng() % 100), {chunk, chunk}), kPoll);
        if (status.ok()) {
          ++inserted;
        } else if (status.code() != absl::StatusCode::kDeadlineExceeded) {
          ++errors;
        }
      }
    });
  }
  for (int s = 0; s < kSamplers; ++s) {
    threads.emplace_back([&] {
      while (!stop.load()) {
        auto samples = table->Sample(8, kPoll);
        if (!samples.ok()) {
          if (samples.status().code() != absl::StatusCode::kDeadlineExceeded)
            ++errors;
          continue;
        }
        for (const SampledItem& sample : *samples) {
          ++sampled;
          if (config.max_times_sampled > 0 &&
              sample.times_sampled > config.max_times_sampled) {
            ++too_often;
          }
          if (sample.probability <= 0 || sample.probability > 1) ++errors;
        }
      }
    });
  }
  threads.emplace_back([&] {
    std::mt19937_64 rng(99);
    while (!stop.load()) {
      std::vector<std::pair<Key, double>> updates;
      std::vector<Key> deletes;
      const Key newest = next_key.load();
      for (int i = 0; i < 16; ++i) {
        updates.push_back(
            {1 + rng() % newest, static_cast<double>(rng() % 50)});
      }
      deletes.push_back(1 + rng() % newest);
      if (!table->MutatePriorities(updates, deletes).ok()) ++errors;
    }
  });

  absl::SleepFor(absl::Milliseconds(1500));
  stop.store(true);
  for (auto& t : threads) t.join();

  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(too_often.load(), 0);
  EXPECT_GT(inserted.load(), 100);
  EXPECT_GT(sampled.load(), 100);
  ASSERT_OK(table->CheckInvariants());
  const TableInfo info = table->info();
  EXPECT_EQ(info.rate_limiter_info.inserts, inserted.load());
  EXPECT_EQ(info.rate_limiter_info.samples, sampled.load());
  EXPECT_EQ(info.rate_limiter_info.insert_stats.pending, 0);
  EXPECT_EQ(info.rate_limiter_info.sample_stats.pending, 0);
  // Each item owns exactly one chunk (used by both its columns).
  EXPECT_EQ(store.num_live_chunks(), table->size());
  ASSERT_OK(table->Reset());
  EXPECT_EQ(store.num_live_chunks(), 0);
  EXPECT_EQ(store.num_live_bytes(), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Configs, TableStressTest,
    ::testing::Values(
        StressConfig{Uniform(), RateLimiterOptions::MinSize(10), 0},
        StressConfig{Prioritized(0.8), RateLimiterOptions::MinSize(1), 3},
        StressConfig{Prioritized(1.0),
                     RateLimiterOptions::SampleToInsertRatio(2.0, 20, 40.0), 0},
        StressConfig{Fifo(), RateLimiterOptions::Queue(50), 1}));

}  // namespace
}  // namespace reverb_tf
