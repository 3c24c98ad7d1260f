// SPDX-License-Identifier: Apache-2.0
// Status propagation macros for code that returns absl::Status or
// absl::StatusOr<T>.
//
//   RETURN_IF_ERROR(expr)       evaluates `expr` (an absl::Status); if it is
//                               not OK, returns it from the enclosing function.
//   ASSIGN_OR_RETURN(lhs, expr) evaluates `expr` (an absl::StatusOr<T>); if it
//                               is not OK, returns its status from the
//                               enclosing function, otherwise moves the value
//                               into `lhs` (which may be a declaration such as
//                               `auto x` or an existing variable).
//
// Both work in functions returning absl::Status or absl::StatusOr<U>, since an
// absl::Status converts implicitly to either.
#ifndef REVERB_TF_CC_PLATFORM_STATUS_MACROS_H_
#define REVERB_TF_CC_PLATFORM_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define REVERB_TF_CONCAT_INNER_(a, b) a##b
#define REVERB_TF_CONCAT_(a, b) REVERB_TF_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                              \
  do {                                                     \
    ::absl::Status reverb_tf_status_ = (expr);             \
    if (!reverb_tf_status_.ok()) return reverb_tf_status_; \
  } while (false)

#define REVERB_TF_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                     \
  if (!statusor.ok()) return std::move(statusor).status();    \
  lhs = std::move(statusor).value()

#define ASSIGN_OR_RETURN(lhs, expr) \
  REVERB_TF_ASSIGN_OR_RETURN_IMPL_( \
      REVERB_TF_CONCAT_(reverb_tf_statusor_, __LINE__), lhs, expr)

#endif  // REVERB_TF_CC_PLATFORM_STATUS_MACROS_H_
