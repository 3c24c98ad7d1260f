// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/platform/fork_guard.h"

#include <pthread.h>

#include <atomic>

namespace reverb_tf {
namespace {

std::atomic<bool> grpc_in_use{false};
std::atomic<bool> forked_after_use{false};

void InChild() {
  // Only atomics: nothing else is safe between fork() and exec().
  if (grpc_in_use.load(std::memory_order_relaxed)) {
    forked_after_use.store(true, std::memory_order_relaxed);
  }
}

}  // namespace

absl::Status CheckGrpcUsableAndNoteUse() {
  static const bool registered = [] {
    pthread_atfork(nullptr, nullptr, &InChild);
    return true;
  }();
  (void)registered;
  if (forked_after_use.load(std::memory_order_relaxed)) {
    return absl::FailedPreconditionError(
        "this process was fork()ed from one that had already started a "
        "reverb_tf server or "
        "client, and gRPC cannot run in such a child (its calls would hang); "
        "start child "
        "processes with multiprocessing's 'spawn' or 'forkserver' method, or "
        "fork before the "
        "parent creates any server or client");
  }
  grpc_in_use.store(true, std::memory_order_relaxed);
  return absl::OkStatus();
}

}  // namespace reverb_tf
