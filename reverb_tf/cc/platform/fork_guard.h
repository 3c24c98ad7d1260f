// SPDX-License-Identifier: Apache-2.0
// gRPC cannot run in a fork()ed child of a process that had already started
// it (a channel or a server): its threads are not copied, and calls in the
// child hang. GRPC_ENABLE_FORK_SUPPORT does not cover the C++ API. Rather
// than hang, reverb_tf refuses to create clients and servers there, with an
// error that says what to do instead.
//
// Thread safety: thread-safe.
#ifndef REVERB_TF_CC_PLATFORM_FORK_GUARD_H_
#define REVERB_TF_CC_PLATFORM_FORK_GUARD_H_

#include "absl/status/status.h"

namespace reverb_tf {

// Call before this process first starts a gRPC channel or server. Returns
// FAILED_PRECONDITION in a fork()ed child of a process that had done so.
absl::Status CheckGrpcUsableAndNoteUse();

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_PLATFORM_FORK_GUARD_H_
