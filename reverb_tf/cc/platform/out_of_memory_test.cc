// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/platform/out_of_memory.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <new>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "reverb_tf/cc/platform/process_memory.h"
#include "reverb_tf/cc/testing/status_matchers.h"

namespace reverb_tf {
namespace {

using ::reverb_tf::testing::StatusIs;

TEST(OutOfMemoryTest, AnAllocationFailureBecomesResourceExhaustedNamingWhat) {
  absl::Status failed =
      CatchOutOfMemory("storing chunk 7 (100 bytes)",
                       []() -> absl::Status { throw std::bad_alloc(); });
  EXPECT_THAT(
      failed,
      StatusIs(
          absl::StatusCode::kResourceExhausted,
          "the server ran out of memory while storing chunk 7 (100 bytes)"));
  absl::StatusOr<std::string> read =
      CatchOutOfMemory("reading", []() -> absl::StatusOr<std::string> {
        throw std::bad_array_new_length();  // a bad_alloc too
      });
  EXPECT_EQ(read.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(OutOfMemoryTest, WhatSucceedsOrFailsOtherwiseIsPassedThrough) {
  EXPECT_OK(CatchOutOfMemory("x", [] { return absl::OkStatus(); }));
  EXPECT_THAT(CatchOutOfMemory("x", [] { return absl::NotFoundError("gone"); }),
              StatusIs(absl::StatusCode::kNotFound, "gone"));
  absl::StatusOr<int> value =
      CatchOutOfMemory("x", []() -> absl::StatusOr<int> { return 3; });
  ASSERT_OK(value);
  EXPECT_EQ(*value, 3);
}

// Under a cap, an allocation fits while it leaves the headroom; without one,
// anything fits; what the servers reserve for gRPC widens the default
// headroom. In a child process: the cap is the process's.
TEST(OutOfMemoryTest, AddressSpaceFitsLeavesTheHeadroomUnderTheCap) {
  constexpr size_t kMiB = size_t{1} << 20;
  EXPECT_TRUE(AddressSpaceFits(size_t{1} << 50));  // no cap here
  EXPECT_EQ(AddressSpaceCap(), std::nullopt);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // VmSize of this process, then a cap 256 MiB above it.
    const std::optional<ProcessMemory> memory = ReadProcessMemory();
    if (!memory.has_value()) _exit(10);
    const rlim_t cap = static_cast<rlim_t>(memory->mapped_bytes) + 256 * kMiB;
    const rlimit limit{cap, cap};
    if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(11);
    if (!AddressSpaceFits(64 * kMiB, 64 * kMiB)) _exit(12);
    if (!AddressSpaceFits(150 * kMiB, 64 * kMiB)) _exit(13);
    if (AddressSpaceFits(200 * kMiB, 64 * kMiB)) _exit(14);  // 264 > 256
    if (AddressSpaceFits(300 * kMiB, 0)) _exit(15);
    if (AddressSpaceCap() != std::optional<size_t>(cap)) _exit(16);
    // The default headroom is kGrpcHeadroomBytes plus what the servers'
    // quotas reserve: 150 + 64 fits under 256, 150 + 64 + 64 does not.
    if (!AddressSpaceFits(150 * kMiB)) _exit(17);
    ReserveForGrpc(64 * kMiB);
    if (GrpcHeadroomBytes() != kGrpcHeadroomBytes + 64 * kMiB) _exit(18);
    if (AddressSpaceFits(150 * kMiB)) _exit(19);
    ReserveForGrpc(-int64_t{64} * kMiB);
    if (!AddressSpaceFits(150 * kMiB)) _exit(20);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "failed check " << WEXITSTATUS(status);
}

}  // namespace
}  // namespace reverb_tf
