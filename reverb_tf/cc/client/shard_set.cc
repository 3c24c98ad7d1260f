// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/client/shard_set.h"

#include <random>
#include <utility>

#include "absl/time/clock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace reverb_tf {

std::shared_ptr<ClientStub> NewClientStub(const std::string& address,
                                          int64_t max_message_bytes,
                                          const ClientSecurity& security) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(static_cast<int>(max_message_bytes));
  arguments.SetMaxSendMessageSize(static_cast<int>(max_message_bytes));
  // Each Client gets its own connection, so several clients in one process
  // (actors in threads) do not share one TCP stream.
  arguments.SetInt("grpc.use_local_subchannel_pool", 1);
  // Reconnect quickly to a server that is (re)starting: the default first
  // backoff of 1 s would make every bounded retry of ours fail fast.
  // GRPC_ARG_MIN_RECONNECT_BACKOFF_MS is left alone: gRPC uses it as the
  // least time a connection attempt may take (default 20 s); at 100 ms, as
  // it once was here, a loaded machine can abort handshakes ("tcp handshaker
  // shutdown") before they complete.
  arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  if (!security.server_name.empty()) {
    arguments.SetSslTargetNameOverride(security.server_name);
  }
  auto channel = grpc::CreateCustomChannel(
      address, MakeChannelCredentials(security), arguments);
  return std::make_shared<ClientStub>(address, std::move(channel),
                                      max_message_bytes, security.token);
}

absl::StatusOr<std::unique_ptr<ShardSet>> ShardSet::Create(
    const std::string& target, int64_t max_message_bytes,
    absl::Duration resolve_interval, ClientSecurity security) {
  auto parts = ParseTarget(target);
  if (!parts.ok()) return parts.status();
  return std::unique_ptr<ShardSet>(
      new ShardSet(*std::move(parts), max_message_bytes, resolve_interval,
                   std::move(security)));
}

ShardSet::ShardSet(std::vector<TargetPart> parts, int64_t max_message_bytes,
                   absl::Duration resolve_interval, ClientSecurity security)
    : parts_(std::move(parts)),
      resolves_(std::any_of(
          parts_.begin(), parts_.end(),
          [](const TargetPart& part) { return !part.resolve.empty(); })),
      max_message_bytes_(max_message_bytes),
      resolve_interval_(resolve_interval),
      security_(std::move(security)),
      next_writer_shard_(std::random_device()()) {
  if (!resolves_) {
    absl::MutexLock lock(&mu_);
    for (const TargetPart& part : parts_)
      current_.push_back(StubFor(part.target));
  }
}

std::shared_ptr<ClientStub> ShardSet::StubFor(const std::string& address) {
  std::shared_ptr<ClientStub>& stub = stubs_[address];
  if (stub == nullptr)
    stub = NewClientStub(address, max_message_bytes_, security_);
  return stub;
}

std::vector<std::shared_ptr<ClientStub>> ShardSet::Current() {
  absl::MutexLock lock(&mu_);
  if (resolves_ && absl::Now() - resolved_at_ >= resolve_interval_) {
    // Resolving blocks (getaddrinfo) under the lock: callers of one client
    // wait for one resolution instead of each running their own.
    std::vector<std::shared_ptr<ClientStub>> shards;
    absl::flat_hash_map<std::string, std::shared_ptr<ClientStub>> kept;
    for (const std::string& address : ExpandTarget(parts_)) {
      shards.push_back(StubFor(address));
      kept[address] = shards.back();
    }
    stubs_ = std::move(kept);
    current_ = std::move(shards);
    resolved_at_ = absl::Now();
  }
  return current_;
}

std::shared_ptr<ClientStub> ShardSet::InTurn(
    const std::vector<std::shared_ptr<ClientStub>>& shards, uint64_t start) {
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::shared_ptr<ClientStub>& shard =
        shards[(start + i) % shards.size()];
    const grpc_connectivity_state state =
        shard->channel()->GetState(/*try_to_connect=*/false);
    if (state == GRPC_CHANNEL_READY || state == GRPC_CHANNEL_IDLE) return shard;
  }
  return shards[start % shards.size()];
}

void ShardSet::Invalidate() {
  if (!resolves_) return;
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  if (now - invalidated_at_ < absl::Seconds(1)) return;
  invalidated_at_ = now;
  resolved_at_ = absl::InfinitePast();
}

}  // namespace reverb_tf
