// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/platform/cancellation_watcher.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace reverb_tf {
namespace {

constexpr absl::Duration kFirst = absl::Milliseconds(10);
constexpr absl::Duration kMax = absl::Milliseconds(40);

// Registers a wakeup on `cancel`, as a blocked table call does.
Cancellation::Id Block(Cancellation* cancel, absl::Notification* woken) {
  Cancellation::Id id = 0;
  EXPECT_TRUE(cancel->Register([woken] { woken->Notify(); }, &id));
  return id;
}

TEST(CancellationWatcherTest, FiresOnlyTheCancelledBlockedCalls) {
  CancellationWatcher watcher(kFirst, kMax);
  std::atomic<bool> gone_a{false}, gone_b{false};
  Cancellation a, b;
  auto watch_a = watcher.Add([&] { return gone_a.load(); }, &a);
  auto watch_b = watcher.Add([&] { return gone_b.load(); }, &b);
  absl::Notification woken_a, woken_b;
  Block(&a, &woken_a);
  Block(&b, &woken_b);
  absl::SleepFor(10 * kFirst);
  EXPECT_FALSE(a.IsCancelled());
  EXPECT_FALSE(b.IsCancelled());

  gone_a = true;
  EXPECT_TRUE(woken_a.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(a.IsCancelled());
  absl::SleepFor(5 * kMax);
  EXPECT_FALSE(b.IsCancelled());
  EXPECT_FALSE(woken_b.HasBeenNotified());
}

TEST(CancellationWatcherTest, OnlyBlockedCallsAreAskedWithABackoff) {
  CancellationWatcher watcher(kFirst, kMax);
  auto asked = std::make_shared<std::atomic<int>>(0);
  Cancellation cancel;
  auto watch = watcher.Add(
      [asked] {
        ++*asked;
        return false;
      },
      &cancel);
  absl::SleepFor(20 * kFirst);
  EXPECT_EQ(asked->load(), 0);  // not blocked: never asked

  absl::Notification woken;
  const Cancellation::Id id = Block(&cancel, &woken);
  absl::SleepFor(absl::Milliseconds(500));
  // Intervals 10, 20, 40, 40, ... ms (on a 10 ms tick): about 13 asks in
  // 500 ms, versus 50 at a fixed 10 ms.
  EXPECT_GT(asked->load(), 3);
  EXPECT_LT(asked->load(), 25);
  cancel.Unregister(id);
  absl::SleepFor(5 * kFirst);
  const int before = asked->load();
  absl::SleepFor(20 * kFirst);
  EXPECT_EQ(asked->load(), before);  // no longer blocked: no longer asked
  EXPECT_FALSE(cancel.IsCancelled());
}

TEST(CancellationWatcherTest, NothingIsAskedAfterItsWatchIsGone) {
  CancellationWatcher watcher(kFirst, kMax);
  auto asked = std::make_shared<std::atomic<int>>(0);
  Cancellation cancel;
  absl::Notification woken;
  Block(&cancel, &woken);
  {
    auto watch = watcher.Add(
        [asked] {
          ++*asked;
          return false;
        },
        &cancel);
    absl::SleepFor(20 * kFirst);
  }
  const int before = asked->load();
  EXPECT_GT(before, 0);
  absl::SleepFor(20 * kFirst);
  EXPECT_EQ(asked->load(), before);
  EXPECT_FALSE(cancel.IsCancelled());
}

TEST(CancellationWatcherTest, ManyWatchesComeAndGoConcurrently) {
  CancellationWatcher watcher(absl::Milliseconds(1), absl::Milliseconds(2));
  std::vector<std::thread> threads;
  std::atomic<int> wrongly_cancelled{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const bool gone = (i + t) % 2 == 0;
        Cancellation cancel;
        absl::Notification woken;
        auto watch = watcher.Add([gone] { return gone; }, &cancel);
        const Cancellation::Id id = Block(&cancel, &woken);
        absl::SleepFor(absl::Microseconds(500));
        cancel.UnregisterAndWait(id);
        if (cancel.IsCancelled() && !gone) ++wrongly_cancelled;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrongly_cancelled.load(), 0);
}

}  // namespace
}  // namespace reverb_tf
