// SPDX-License-Identifier: Apache-2.0
// The status assertions pass on OK, fail otherwise, and print the status when
// they fail (gtest-spi captures the failure so its message can be checked).
#include "reverb_tf/cc/testing/status_matchers.h"

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "grpcpp/support/status.h"
#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"

namespace reverb_tf::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

absl::StatusOr<int> Seven() { return 7; }
absl::StatusOr<int> Missing() { return absl::NotFoundError("no table 'x'"); }
absl::StatusOr<std::unique_ptr<int>> Boxed() {
  return std::make_unique<int>(3);
}

TEST(StatusMatchersTest, OkPasses) {
  EXPECT_OK(absl::OkStatus());
  ASSERT_OK(absl::OkStatus());
  EXPECT_OK(Seven());
  ASSERT_OK(Seven()) << "never printed";
  EXPECT_THAT(absl::OkStatus(), IsOk());
  EXPECT_THAT(Seven(), IsOk());
}

TEST(StatusMatchersTest, ExpectOkPrintsTheExpressionAndTheStatus) {
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(absl::InvalidArgumentError("bad window")),
                          "Value of: absl::InvalidArgumentError(\"bad window\")"
                          "\nExpected: is OK\n  Actual: INVALID_ARGUMENT: "
                          "bad window");
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(Missing()), "NOT_FOUND: no table 'x'");
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(Missing()) << "while sampling",
                          "while sampling");
}

TEST(StatusMatchersTest, AssertOkStopsTheTest) {
  EXPECT_FATAL_FAILURE(
      {
        ASSERT_OK(absl::DataLossError("torn record"));
        ADD_FAILURE() << "ASSERT_OK did not return";
      },
      "DATA_LOSS: torn record");
}

TEST(StatusMatchersTest, AssertOkAndAssignMovesTheValue) {
  ASSERT_OK_AND_ASSIGN(int seven, Seven());
  EXPECT_EQ(seven, 7);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<int> boxed, Boxed());
  ASSERT_NE(boxed, nullptr);
  EXPECT_EQ(*boxed, 3);
  int existing = 0;
  ASSERT_OK_AND_ASSIGN(existing, Seven());
  EXPECT_EQ(existing, 7);
}

TEST(StatusMatchersTest, AssertOkAndAssignNamesTheExpression) {
  EXPECT_FATAL_FAILURE(
      {
        ASSERT_OK_AND_ASSIGN(int value, Missing());
        ADD_FAILURE() << "ASSERT_OK_AND_ASSIGN did not return " << value;
      },
      "Value of: Missing()\nExpected: is OK\n  Actual: NOT_FOUND: no table");
}

TEST(StatusMatchersTest, IsOkExplainsAFailure) {
  EXPECT_NONFATAL_FAILURE(EXPECT_THAT(Missing(), IsOk()),
                          "which has status NOT_FOUND: no table 'x'");
  EXPECT_THAT(Missing(), Not(IsOk()));
  EXPECT_NONFATAL_FAILURE(EXPECT_THAT(absl::OkStatus(), Not(IsOk())),
                          "is not OK");
}

TEST(StatusMatchersTest, StatusIsChecksTheCode) {
  EXPECT_THAT(Missing(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(absl::OkStatus(), StatusIs(absl::StatusCode::kOk));
  EXPECT_NONFATAL_FAILURE(
      EXPECT_THAT(Missing(), StatusIs(absl::StatusCode::kInvalidArgument)),
      "which has status NOT_FOUND: no table 'x'");
  EXPECT_NONFATAL_FAILURE(
      EXPECT_THAT(Seven(), StatusIs(absl::StatusCode::kNotFound)),
      "has status code NOT_FOUND");
}

TEST(StatusMatchersTest, StatusIsChecksTheMessage) {
  EXPECT_THAT(Missing(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("table 'x'")));
  EXPECT_THAT(Missing(), StatusIs(absl::StatusCode::kNotFound, "no table 'x'"));
  EXPECT_THAT(Missing(), Not(StatusIs(absl::StatusCode::kNotFound,
                                      HasSubstr("table 'y'"))));
  EXPECT_NONFATAL_FAILURE(
      EXPECT_THAT(Missing(),
                  StatusIs(absl::StatusCode::kNotFound, HasSubstr("'y'"))),
      "and a message that has substring \"'y'\"");
}

TEST(StatusMatchersTest, GrpcStatusKeepsItsCodeAndMessage) {
  EXPECT_OK(grpc::Status::OK);
  EXPECT_NONFATAL_FAILURE(
      EXPECT_OK(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server gone")),
      "Actual: UNAVAILABLE: server gone");
  EXPECT_THAT(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "too big"),
              StatusIs(absl::StatusCode::kResourceExhausted, "too big"));
}

}  // namespace
}  // namespace reverb_tf::testing
