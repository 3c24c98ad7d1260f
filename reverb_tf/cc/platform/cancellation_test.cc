// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/platform/cancellation.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace reverb_tf {
namespace {

TEST(CancellationTest, CancelRunsRegisteredWakeupsOnce) {
  Cancellation cancel;
  std::atomic<int> calls{0};
  Cancellation::Id id;
  ASSERT_TRUE(cancel.Register([&] { ++calls; }, &id));
  EXPECT_FALSE(cancel.IsCancelled());
  cancel.Cancel();
  cancel.Cancel();
  EXPECT_TRUE(cancel.IsCancelled());
  EXPECT_EQ(calls.load(), 1);
}

TEST(CancellationTest, UnregisteredWakeupDoesNotRun) {
  Cancellation cancel;
  bool ran = false;
  Cancellation::Id id;
  ASSERT_TRUE(cancel.Register([&] { ran = true; }, &id));
  cancel.Unregister(id);
  cancel.Cancel();
  EXPECT_FALSE(ran);
}

TEST(CancellationTest, RegisterAfterCancelRefusesAndDoesNotRun) {
  Cancellation cancel;
  cancel.Cancel();
  bool ran = false;
  Cancellation::Id id;
  EXPECT_FALSE(cancel.Register([&] { ran = true; }, &id));
  EXPECT_FALSE(ran);
}

TEST(CancellationTest, UnregisterAndWaitWaitsForARunningWakeup) {
  Cancellation cancel;
  absl::Notification wakeup_started, release_wakeup;
  std::atomic<bool> wakeup_done{false};
  Cancellation::Id id;
  ASSERT_TRUE(cancel.Register(
      [&] {
        wakeup_started.Notify();
        release_wakeup.WaitForNotification();
        wakeup_done = true;
      },
      &id));
  std::thread canceller([&] { cancel.Cancel(); });
  wakeup_started.WaitForNotification();
  std::thread releaser([&] {
    absl::SleepFor(absl::Milliseconds(20));
    release_wakeup.Notify();
  });
  cancel.UnregisterAndWait(id);
  EXPECT_TRUE(wakeup_done.load());
  canceller.join();
  releaser.join();
}

}  // namespace
}  // namespace reverb_tf
