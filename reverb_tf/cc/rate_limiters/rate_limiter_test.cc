// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/rate_limiters/rate_limiter.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "reverb_tf/cc/testing/status_matchers.h"

namespace reverb_tf {
namespace {

TEST(RateLimiterOptionsTest, InvalidArgumentsAreRejected) {
  EXPECT_EQ(RateLimiterOptions::MinSize(0).Validate().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RateLimiterOptions::SampleToInsertRatio(0, 1, 1).Validate().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RateLimiterOptions::SampleToInsertRatio(-1, 1, 1).Validate().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RateLimiterOptions::SampleToInsertRatio(NAN, 1, 1).Validate().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RateLimiterOptions::SampleToInsertRatio(1, 1, -5).Validate().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_OK(RateLimiterOptions::SampleToInsertRatio(4, 1000, 2048).Validate());
  EXPECT_OK(RateLimiterOptions::Queue(10).Validate());
  EXPECT_EQ(RateLimiterOptions::Queue(-1).Validate().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RateLimiterOptionsTest, SampleToInsertRatioCentresTheWindowWithoutClamping) {
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
