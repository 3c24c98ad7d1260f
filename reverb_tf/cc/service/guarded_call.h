// SPDX-License-Identifier: Apache-2.0
// GuardedCall: runs a gRPC handler's work so that an allocation failure
// nothing nearer caught ends the call with RESOURCE_EXHAUSTED naming the
// method, instead of escaping into gRPC (platform/out_of_memory.h). Used by
// every service of the server (replay, health).
//
// Thread safety: stateless.
#ifndef REVERB_TF_CC_SERVICE_GUARDED_CALL_H_
#define REVERB_TF_CC_SERVICE_GUARDED_CALL_H_

#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/support/status.h"
#include "reverb_tf/cc/platform/out_of_memory.h"
#include "reverb_tf/cc/wire/conversions.h"

namespace reverb_tf {

// fn() (returning grpc::Status), or RESOURCE_EXHAUSTED "the server ran out
// of memory while serving a <method> call" if it throws std::bad_alloc.
template <typename Fn>
grpc::Status GuardedCall(const char* method, Fn&& fn) {
  try {
    return std::forward<Fn>(fn)();
  } catch (const std::bad_alloc&) {
    return ToGrpcStatus(
        OutOfMemoryError(absl::StrCat("serving a ", method, " call")));
  }
}

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_SERVICE_GUARDED_CALL_H_
