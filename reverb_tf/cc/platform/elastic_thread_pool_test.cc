// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/platform/elastic_thread_pool.h"

#include <atomic>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace reverb_tf {
namespace {

// Polls `condition` for up to 10 s.
template <typename F>
bool Eventually(F condition) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!condition()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

TEST(ElasticThreadPoolTest, BlockingTasksEachGetAThread) {
  ElasticThreadPool pool(absl::Seconds(10), 0);
  absl::Notification release;
  std::atomic<int> started{0};
  constexpr int kTasks = 32;
  for (int i = 0; i < kTasks; ++i) {
    pool.Submit([&] {
      started.fetch_add(1);
      release.WaitForNotification();
    });
  }
  // Every task runs at once although none has returned.
  EXPECT_TRUE(Eventually([&] { return started.load() == kTasks; }));
  EXPECT_EQ(pool.threads(), kTasks);
  EXPECT_EQ(pool.busy(), kTasks);
  release.Notify();
  pool.WaitIdle();
  EXPECT_EQ(pool.busy(), 0);
}

TEST(ElasticThreadPoolTest, IdleThreadsAreReusedThenEnd) {
  ElasticThreadPool pool(absl::Milliseconds(200), 1);
  std::atomic<int> ran{0};
  for (int round = 0; round < 20; ++round) {
    pool.Submit([&] { ran.fetch_add(1); });
    pool.WaitIdle();
  }
  EXPECT_EQ(ran.load(), 20);
  // One task at a time: one thread did them all.
  EXPECT_EQ(pool.threads(), 1);
  absl::Notification release;
  for (int i = 0; i < 4; ++i)
    pool.Submit([&] { release.WaitForNotification(); });
  EXPECT_TRUE(Eventually([&] { return pool.threads() == 4; }));
  release.Notify();
  pool.WaitIdle();
  // Past the idle timeout only the one kept idle is left.
  EXPECT_TRUE(Eventually([&] { return pool.threads() == 1; }));
  // And it still takes tasks, as do new threads started after others ended.
  for (int i = 0; i < 3; ++i) pool.Submit([&] { ran.fetch_add(1); });
  pool.WaitIdle();
  EXPECT_EQ(ran.load(), 23);
}

TEST(ElasticThreadPoolTest, DestructionRunsWhatWasSubmitted) {
  std::atomic<int> ran{0};
  {
    ElasticThreadPool pool(absl::Seconds(10), 0);
    for (int i = 0; i < 8; ++i) {
      pool.Submit([&] {
        absl::SleepFor(absl::Milliseconds(5));
        ran.fetch_add(1);
      });
    }
  }
  EXPECT_EQ(ran.load(), 8);
}

}  // namespace
}  // namespace reverb_tf
