// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/platform/out_of_memory.h"

#include <new>
#include <string>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
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

}  // namespace
}  // namespace reverb_tf
