// SPDX-License-Identifier: Apache-2.0
// googletest assertions and matchers for absl::Status and absl::StatusOr<T>
// that print the status when they fail. `ASSERT_TRUE(s.ok())` reports only
// "false"; these report the code and the message, which usually says what
// went wrong. Debian's absl 20220623 ships no status matchers, so these are
// small ones in the same shape as absl's later `absl/status/status_matchers.h`.
//
//   EXPECT_OK(expr) / ASSERT_OK(expr)
//       `expr` is an absl::Status, an absl::StatusOr<T> or a grpc::Status;
//       fails unless it is OK, printing the expression and its status. Streams
//       like any gtest assertion: `ASSERT_OK(table.Insert(item)) << "key " <<
//       key;`.
//   ASSERT_OK_AND_ASSIGN(lhs, expr)
//       `expr` is an absl::StatusOr<T>; asserts it is OK, then moves its value
//       into `lhs` (a declaration such as `auto x` or an existing variable).
//       Only in functions returning void, like every ASSERT_*.
//   EXPECT_THAT(expr, IsOk())
//   EXPECT_THAT(expr, StatusIs(absl::StatusCode::kNotFound))
//   EXPECT_THAT(expr, StatusIs(absl::StatusCode::kNotFound, HasSubstr("t")))
//       Matchers for any of those types; StatusIs checks the code and,
//       optionally, the message with any string matcher. They compose:
//       Not(IsOk()).
//
// Test-only; link //reverb_tf/cc/testing:status_matchers.
#ifndef REVERB_TF_CC_TESTING_STATUS_MATCHERS_H_
#define REVERB_TF_CC_TESTING_STATUS_MATCHERS_H_

#include <ostream>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace reverb_tf::testing {
namespace status_internal {

inline const absl::Status& GetStatus(const absl::Status& status) {
  return status;
}

template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

// grpc::Status, recognised by its accessors so that this header needs no
// gRPC: its codes are the canonical ones absl::StatusCode numbers alike.
template <
    typename GrpcStatus,
    typename = decltype(std::declval<const GrpcStatus&>().error_code()),
    typename = decltype(std::declval<const GrpcStatus&>().error_message())>
absl::Status GetStatus(const GrpcStatus& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

// The predicate-formatter behind EXPECT_OK and ASSERT_OK. Its message has the
// layout of a failed EXPECT_THAT, so both kinds of failure read alike.
template <typename T>
::testing::AssertionResult AssertOk(const char* expression, const T& value) {
  const absl::Status& status = GetStatus(value);
  if (status.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "Value of: " << expression
         << "\nExpected: is OK\n  Actual: " << status;
}

class IsOkMatcher {
 public:
  template <typename T>
  bool MatchAndExplain(const T& value,
                       ::testing::MatchResultListener* listener) const {
    const absl::Status& status = GetStatus(value);
    *listener << "which has status " << status;
    return status.ok();
  }
  void DescribeTo(std::ostream* os) const { *os << "is OK"; }
  void DescribeNegationTo(std::ostream* os) const { *os << "is not OK"; }
};

class StatusIsMatcher {
 public:
  StatusIsMatcher(absl::StatusCode code,
                  ::testing::Matcher<const std::string&> message)
      : code_(code), message_(std::move(message)) {}

  template <typename T>
  bool MatchAndExplain(const T& value,
                       ::testing::MatchResultListener* listener) const {
    const absl::Status& status = GetStatus(value);
    *listener << "which has status " << status;
    if (status.code() != code_) return false;
    ::testing::StringMatchResultListener message_listener;
    if (!message_.MatchAndExplain(std::string(status.message()),
                                  &message_listener)) {
      if (!message_listener.str().empty()) {
        *listener << ", whose message " << message_listener.str();
      }
      return false;
    }
    return true;
  }
  void DescribeTo(std::ostream* os) const {
    *os << "has status code " << code_ << " and a message that ";
    message_.DescribeTo(os);
  }
  void DescribeNegationTo(std::ostream* os) const {
    *os << "does not have status code " << code_ << " or has a message that ";
    message_.DescribeNegationTo(os);
  }

 private:
  absl::StatusCode code_;
  ::testing::Matcher<const std::string&> message_;
};

}  // namespace status_internal

// Matches an OK absl::Status or absl::StatusOr<T>.
inline ::testing::PolymorphicMatcher<status_internal::IsOkMatcher> IsOk() {
  return ::testing::MakePolymorphicMatcher(status_internal::IsOkMatcher());
}

// Matches an absl::Status or absl::StatusOr<T> whose code is `code` and
// whose message matches `message` (a string, or a matcher such as HasSubstr).
template <typename MessageMatcher>
::testing::PolymorphicMatcher<status_internal::StatusIsMatcher> StatusIs(
    absl::StatusCode code, MessageMatcher&& message) {
  return ::testing::MakePolymorphicMatcher(status_internal::StatusIsMatcher(
      code, ::testing::MatcherCast<const std::string&>(
                std::forward<MessageMatcher>(message))));
}

// Matches an absl::Status or absl::StatusOr<T> whose code is `code`, whatever
// its message.
inline ::testing::PolymorphicMatcher<status_internal::StatusIsMatcher> StatusIs(
    absl::StatusCode code) {
  return StatusIs(code, ::testing::_);
}

}  // namespace reverb_tf::testing

#define EXPECT_OK(expr) \
  EXPECT_PRED_FORMAT1(::reverb_tf::testing::status_internal::AssertOk, expr)
#define ASSERT_OK(expr) \
  ASSERT_PRED_FORMAT1(::reverb_tf::testing::status_internal::AssertOk, expr)

#define REVERB_TF_TESTING_CONCAT_INNER_(a, b) a##b
#define REVERB_TF_TESTING_CONCAT_(a, b) REVERB_TF_TESTING_CONCAT_INNER_(a, b)

// The failure names `expr` as written, not the temporary that holds it.
#define REVERB_TF_ASSERT_OK_AND_ASSIGN_IMPL_(statusor, lhs, expr)       \
  auto statusor = (expr);                                               \
  GTEST_ASSERT_(                                                        \
      ::reverb_tf::testing::status_internal::AssertOk(#expr, statusor), \
      GTEST_FATAL_FAILURE_);                                            \
  lhs = *std::move(statusor)

#define ASSERT_OK_AND_ASSIGN(lhs, expr)                                      \
  REVERB_TF_ASSERT_OK_AND_ASSIGN_IMPL_(                                      \
      REVERB_TF_TESTING_CONCAT_(reverb_tf_testing_statusor_, __LINE__), lhs, \
      expr)

#endif  // REVERB_TF_CC_TESTING_STATUS_MATCHERS_H_
