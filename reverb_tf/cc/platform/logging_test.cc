// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/platform/logging.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace reverb_tf {
namespace {

TEST(LoggingTest, AHostSinkGetsEachLineOnceInOrder) {
  absl::Mutex mu;
  std::vector<std::pair<LogSeverity, std::string>> lines;
  SetLogSink([&](LogSeverity severity, absl::string_view line) {
    absl::MutexLock lock(&mu);
    lines.emplace_back(severity, std::string(line));
  });
  Log(LogSeverity::kWarning, "first");
  Log(LogSeverity::kInfo, "second");
  Log(LogSeverity::kError, "third");
  SetLogSink(nullptr);  // delivers what was queued before it returns
  absl::MutexLock lock(&mu);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            std::make_pair(LogSeverity::kWarning, std::string("first")));
  EXPECT_EQ(lines[1],
            std::make_pair(LogSeverity::kInfo, std::string("second")));
  EXPECT_EQ(lines[2],
            std::make_pair(LogSeverity::kError, std::string("third")));
}

TEST(LoggingTest, TheSinkRunsOnItsOwnThreadSoALoggerMayHoldALockTheSinkWants) {
  // A host thread that holds its own lock (Python's GIL) while the core logs
  // with a lock held must not deadlock with a sink that takes that lock.
  absl::Mutex host_lock;
  absl::Notification delivered;
  SetLogSink([&](LogSeverity, absl::string_view) {
    absl::MutexLock lock(&host_lock);
    delivered.Notify();
  });
  {
    absl::MutexLock lock(&host_lock);
    Log(LogSeverity::kWarning, "logged while the host's lock is held");
    EXPECT_FALSE(delivered.HasBeenNotified());
  }
  EXPECT_TRUE(delivered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  SetLogSink(nullptr);
}

TEST(LoggingTest, WithoutAHostSinkLinesGoToStderr) {
  testing::internal::CaptureStderr();
  Log(LogSeverity::kWarning, "to stderr");
  Log(LogSeverity::kInfo, "plain");
  const std::string written = testing::internal::GetCapturedStderr();
  EXPECT_EQ(written, "reverb_tf: WARNING: to stderr\nreverb_tf: plain\n");
}

}  // namespace
}  // namespace reverb_tf
