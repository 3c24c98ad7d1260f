// SPDX-License-Identifier: Apache-2.0
// Internal to the client: the shards of a Client's target, one gRPC channel
// each, kept current for dns: targets (target.h).
//
// Thread safety: thread-safe.
#ifndef REVERB_TF_CC_CLIENT_SHARD_SET_H_
#define REVERB_TF_CC_CLIENT_SHARD_SET_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "reverb_tf/cc/client/client_stub.h"
#include "reverb_tf/cc/client/target.h"
#include "reverb_tf/cc/security/credentials.h"

namespace reverb_tf {

class ShardSet {
 public:
  // INVALID_ARGUMENT for a malformed `target`.
  static absl::StatusOr<std::unique_ptr<ShardSet>> Create(
      const std::string& target, int64_t max_message_bytes,
      absl::Duration resolve_interval, ClientSecurity security);

  // The shards now, in target order; never empty. A target with dns:
  // elements is resolved again once resolve_interval has passed.
  std::vector<std::shared_ptr<ClientStub>> Current();

  // Turns for writer placement: consecutive numbers from a random start, so
  // that the writers of many clients take different shards first.
  uint64_t NextTurn() { return next_writer_shard_.fetch_add(1); }

  // The shard whose turn `turn` is among `shards`, or the next one that is
  // connected or idle (not failing, not reconnecting after a failure) if
  // that one is not and another is.
  static std::shared_ptr<ClientStub> InTurn(
      const std::vector<std::shared_ptr<ClientStub>>& shards, uint64_t turn);

  // Asks for the dns: elements to be resolved again on the next Current()
  // (after a shard failed), at most once a second.
  void Invalidate();

 private:
  ShardSet(std::vector<TargetPart> parts, int64_t max_message_bytes,
           absl::Duration resolve_interval, ClientSecurity security);
  std::shared_ptr<ClientStub> StubFor(const std::string& address)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::vector<TargetPart> parts_;
  const bool resolves_;
  const int64_t max_message_bytes_;
  const absl::Duration resolve_interval_;
  const ClientSecurity security_;
  std::atomic<uint64_t> next_writer_shard_;

  absl::Mutex mu_;
  std::vector<std::shared_ptr<ClientStub>> current_ ABSL_GUARDED_BY(mu_);
  // Channels by address, kept while their shard is listed.
  absl::flat_hash_map<std::string, std::shared_ptr<ClientStub>> stubs_
      ABSL_GUARDED_BY(mu_);
  absl::Time resolved_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time invalidated_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

// A gRPC channel to `address` with the client's settings.
std::shared_ptr<ClientStub> NewClientStub(const std::string& address,
                                          int64_t max_message_bytes,
                                          const ClientSecurity& security);

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_CLIENT_SHARD_SET_H_
