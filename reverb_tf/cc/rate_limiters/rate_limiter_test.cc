// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/rate_limiters/rate_limiter.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reverb_tf/cc/testing/status_matchers.h"

namespace reverb_tf {
namespace {

using ::reverb_tf::testing::StatusIs;
using ::testing::HasSubstr;

TEST(RateLimiterOptionsTest, InvalidArgumentsAreRejected) {
  EXPECT_EQ(RateLimiterOptions::MinSize(0).Validate().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RateLimiterOptions::SampleToInsertRatio(0, 1, 1).Validate().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RateLimiterOptions::SampleToInsertRatio(-1, 1, 1).Validate().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      RateLimiterOptions::SampleToInsertRatio(NAN, 1, 1).Validate().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RateLimiterOptions::SampleToInsertRatio(1, 1, -5).Validate().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_OK(RateLimiterOptions::SampleToInsertRatio(4, 1000, 2048).Validate());
  EXPECT_OK(RateLimiterOptions::Queue(10).Validate());
  EXPECT_EQ(RateLimiterOptions::Queue(-1).Validate().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RateLimiterOptionsTest, CheckedPresetsNameTheArgument) {
  EXPECT_THAT(
      RateLimiterOptions::CheckedMinSize(0).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("min_size_to_sample (0) must be a positive integer")));
  EXPECT_THAT(RateLimiterOptions::CheckedQueue(-1).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("size (-1) must be a positive integer")));
  EXPECT_THAT(
      RateLimiterOptions::CheckedSampleToInsertRatio(0.0, 1, 5.0).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("samples_per_insert (0.0) must be finite and > 0")));
  EXPECT_THAT(RateLimiterOptions::Checked(1.0, 1, 5.0, 1.0).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("min_diff (5) must be <= max_diff (1)")));
  ASSERT_OK_AND_ASSIGN(RateLimiterOptions queue,
                       RateLimiterOptions::CheckedQueue(3));
  EXPECT_EQ(queue, RateLimiterOptions::Queue(3));
}

TEST(RateLimiterOptionsTest, SampleToInsertRatioNeedsDmReverbsWindow) {
  // 2 * max(1, spi): 2 for spi 1 and 0.5, 6 for spi 3.
  EXPECT_OK(
      RateLimiterOptions::CheckedSampleToInsertRatio(1.0, 10, 1.0).status());
  EXPECT_OK(
      RateLimiterOptions::CheckedSampleToInsertRatio(0.5, 10, 1.0).status());
  EXPECT_OK(
      RateLimiterOptions::CheckedSampleToInsertRatio(3.0, 10, 3.0).status());
  for (double buffer : {0.5, -1.0, 2.9}) {
    const auto options =
        RateLimiterOptions::CheckedSampleToInsertRatio(3.0, 10, buffer);
    EXPECT_THAT(options.status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("The size of error_buffer must be >= "
                                   "max(1.0, samples_per_insert)")))
        << buffer;
  }
  EXPECT_THAT(
      RateLimiterOptions::CheckedSampleToInsertRatio(1.0, 1, 5.0, 1.0).status(),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "window of -4.0 between min_diff (5.0) and max_diff (1.0)")));
  ASSERT_OK_AND_ASSIGN(
      RateLimiterOptions pair,
      RateLimiterOptions::CheckedSampleToInsertRatio(1.0, 1, 20.0, 40.0));
  EXPECT_EQ(pair.min_diff, 20.0);
}

TEST(RateLimiterOptionsTest, CaveatWhenInsertsBlockBeforeSamplingCanStart) {
  EXPECT_EQ(RateLimiterOptions::SampleToInsertRatio(1.0, 10, 5.0).Caveat(), "");
  const RateLimiterOptions late{1.0, 100, -10.0, 10.0};
  EXPECT_NE(late.Caveat().find("max_diff (10.0) is below min_size_to_sample * "
                               "samples_per_insert (100.0)"),
            std::string::npos);
}

// Whether a table that keeps its items can reach a diff where neither an
// insert nor a sample may proceed, by visiting every reachable diff. All
// quantities are in quarters, so the walk is exact.
bool DeadlockReachable(int64_t spi_q, int64_t min_size, int64_t min_q,
                       int64_t max_q) {
  const int64_t one = 4;
  std::set<int64_t> seen;
  std::vector<int64_t> todo = {min_size * spi_q};
  while (!todo.empty()) {
    const int64_t d = todo.back();
    todo.pop_back();
    if (!seen.insert(d).second) continue;
    const bool insert = d + spi_q <= max_q;
    const bool sample = d - one >= min_q;
    if (!insert && !sample) return true;
    if (insert) todo.push_back(d + spi_q);
    if (sample) todo.push_back(d - one);
  }
  return false;
}

TEST(RateLimiterOptionsTest, CheckLiveAgreesWithAnExhaustiveWalk) {
  int live = 0, dead = 0;
  for (int64_t spi_q : {1, 2, 3, 4, 5, 6, 8, 10, 12}) {
    for (int64_t min_size : {1, 2, 3, 5}) {
      for (int64_t min_q = -12; min_q <= 12; ++min_q) {
        for (int64_t width_q = 0; width_q <= 24; ++width_q) {
          const RateLimiterOptions options{spi_q / 4.0, min_size, min_q / 4.0,
                                           (min_q + width_q) / 4.0};
          ASSERT_OK(options.Validate());
          const bool deadlock =
              DeadlockReachable(spi_q, min_size, min_q, min_q + width_q);
          EXPECT_EQ(options.CheckLive().ok(), !deadlock)
              << options.DebugString();
          (deadlock ? dead : live)++;
        }
      }
    }
  }
  // Both outcomes are well represented, so the comparison means something.
  EXPECT_GT(live, 1000);
  EXPECT_GT(dead, 1000);
}

TEST(RateLimiterOptionsTest, CheckLiveOnThePresets) {
  EXPECT_OK(RateLimiterOptions::MinSize(10).CheckLive());
  EXPECT_OK(RateLimiterOptions::Queue(1).CheckLive());
  EXPECT_OK(RateLimiterOptions::SampleToInsertRatio(1.0, 1, 1.0).CheckLive());
  EXPECT_OK(RateLimiterOptions::SampleToInsertRatio(0.1, 1, 5.0).CheckLive());
  // An irrational-looking ratio with a window below one insert and one
  // sample: the diffs come arbitrarily close to every point, so some land
  // where both calls block.
  const RateLimiterOptions dense{0.3, 1, 0.0, 1.0};
  EXPECT_THAT(dense.CheckLive(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("can block inserts and samples for good")));
}

TEST(RateLimiterOptionsTest,
     SampleToInsertRatioCentresTheWindowWithoutClamping) {
  // offset = min_size_to_sample * samples_per_insert, also below 1 (what
  // dm-reverb computes; the Python layer uses this preset).
  const auto small = RateLimiterOptions::SampleToInsertRatio(0.1, 1, 5.0);
  EXPECT_DOUBLE_EQ(small.min_diff, 0.1 - 5.0);
  EXPECT_DOUBLE_EQ(small.max_diff, 0.1 + 5.0);
  const auto large = RateLimiterOptions::SampleToInsertRatio(2.0, 3, 10.0);
  EXPECT_DOUBLE_EQ(large.min_diff, -4.0);
  EXPECT_DOUBLE_EQ(large.max_diff, 16.0);
}

TEST(RateLimiterTest, MinSizeBlocksSamplingUntilFilled) {
  RateLimiter limiter(RateLimiterOptions::MinSize(3));
  for (int size = 0; size < 3; ++size) {
    EXPECT_FALSE(limiter.CanSample(size));
    EXPECT_TRUE(limiter.CanInsert(size));
    limiter.RecordInsert();
  }
  EXPECT_TRUE(limiter.CanSample(3));
  for (int i = 0; i < 1000; ++i) limiter.RecordSample();
  EXPECT_TRUE(limiter.CanSample(3));  // no ratio to keep
  EXPECT_TRUE(limiter.CanInsert(3));
}

TEST(RateLimiterTest, QueueAlternatesAndBoundsOutstandingItems) {
  RateLimiter limiter(RateLimiterOptions::Queue(2));
  EXPECT_FALSE(limiter.CanSample(0));
  limiter.RecordInsert();
  EXPECT_TRUE(limiter.CanInsert(1));
  limiter.RecordInsert();
  EXPECT_FALSE(limiter.CanInsert(2));  // full: the reader must catch up
  EXPECT_TRUE(limiter.CanSample(2));
  limiter.RecordSample();
  limiter.RecordDelete();
  EXPECT_TRUE(limiter.CanInsert(1));
  limiter.RecordSample();
  limiter.RecordDelete();
  EXPECT_FALSE(limiter.CanSample(0));
}

TEST(RateLimiterTest, SampleToInsertRatioKeepsTheRatioWithinTheBuffer) {
  const double spi = 2.0;
  RateLimiter limiter(RateLimiterOptions::SampleToInsertRatio(spi, 10, 6.0));
  int64_t size = 0;
  while (size < 10) {
    ASSERT_TRUE(limiter.CanInsert(size));
    limiter.RecordInsert();
    ++size;
  }
  // Greedy writer and greedy sampler taking turns: whichever is allowed.
  int64_t inserts = 10, samples = 0;
  for (int step = 0; step < 10000; ++step) {
    const bool can_insert = limiter.CanInsert(size);
    const bool can_sample = limiter.CanSample(size);
    ASSERT_TRUE(can_insert || can_sample) << "deadlock at step " << step;
    if (can_sample && (step % 3 != 0 || !can_insert)) {
      limiter.RecordSample();
      ++samples;
    } else {
      limiter.RecordInsert();
      ++inserts;
      ++size;
    }
    const double diff = inserts * spi - samples;
    const double offset = 10 * spi;
    ASSERT_LE(diff, offset + 6.0);
    ASSERT_GE(diff, offset - 6.0);
  }
  EXPECT_NEAR(static_cast<double>(samples) / inserts, spi, 0.05);
  EXPECT_EQ(limiter.info().inserts, inserts);
  EXPECT_EQ(limiter.info().samples, samples);
}

TEST(RateLimiterTest, ResetForgetsCountsButKeepsOptions) {
  RateLimiter limiter(RateLimiterOptions::Queue(1));
  limiter.RecordInsert();
  limiter.insert_stats().completed = 5;
  limiter.Reset();
  EXPECT_EQ(limiter.info().inserts, 0);
  EXPECT_EQ(limiter.info().insert_stats.completed, 0);
  EXPECT_EQ(limiter.options(), RateLimiterOptions::Queue(1));
}

}  // namespace
}  // namespace reverb_tf
