// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/client/client.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/support/async_unary_call.h"
#include "reverb_tf/cc/client/client_stub.h"
#include "reverb_tf/cc/client/in_process_sampler.h"
#include "reverb_tf/cc/client/mutation_stream.h"
#include "reverb_tf/cc/client/shard_set.h"
#include "reverb_tf/cc/client/sharded_sampler.h"
#include "reverb_tf/cc/client/stream_sampler.h"
#include "reverb_tf/cc/platform/deadline.h"
#include "reverb_tf/cc/platform/fork_guard.h"
#include "reverb_tf/cc/platform/status_macros.h"
#include "reverb_tf/cc/wire/conversions.h"

namespace reverb_tf {
absl::Status RetryUnavailable(absl::FunctionRef<absl::Status(int)> attempt,
                              absl::FunctionRef<bool()> may_retry) {
  constexpr int kMaxAttempts = 5;
  absl::Duration backoff = absl::Milliseconds(100);
  absl::Status status = attempt(0);
  for (int i = 1;
       i < kMaxAttempts && status.code() == absl::StatusCode::kUnavailable &&
       may_retry();
       ++i) {
    absl::SleepFor(backoff);
    backoff *= 2;
    status = attempt(i);
  }
  return status;
}

absl::StatusOr<std::unique_ptr<Client>> Client::Create(
    const std::string& server_address, const ClientOptions& options) {
  if (server_address.empty()) {
    return absl::InvalidArgumentError("server_address is empty");
  }
  if (options.max_message_bytes < 1024 ||
      options.max_message_bytes > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_message_bytes must be in [1 KiB, 2 GiB), got ",
                     options.max_message_bytes));
  }
  RETURN_IF_ERROR(CheckGrpcUsableAndNoteUse());
  DisableMutexDeadlockDetection();
  ClientSecurity security;
  if (options.security.has_value()) {
    RETURN_IF_ERROR(options.security->Validate());
    security = *options.security;
  } else {
    ASSIGN_OR_RETURN(security, DefaultClientSecurity());
  }
  auto shards = ShardSet::Create(server_address, options.max_message_bytes,
                                 options.resolve_interval, std::move(security));
  if (!shards.ok()) return shards.status();
  return std::unique_ptr<Client>(
      new Client(server_address, *std::move(shards)));
}

Client::Client(std::string address, std::unique_ptr<ShardSet> shards)
    : address_(std::move(address)), shards_(std::move(shards)) {}

Client::~Client() = default;

std::shared_ptr<LocalServer> Client::LocalShard() {
  const std::vector<std::shared_ptr<ClientStub>> shards = shards_->Current();
  return shards.size() == 1 ? shards[0]->Local() : nullptr;
}

std::vector<std::string> Client::ShardAddresses() {
  std::vector<std::string> addresses;
  for (const auto& shard : shards_->Current())
    addresses.push_back(shard->address());
  return addresses;
}

namespace {

// What a MutateStream answer says of its request: OK, or the request's own
// failure (error_code, error_message).
absl::Status StatusOfAnswer(const proto::MutatePrioritiesResponse& answer) {
  if (answer.error_code() == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(answer.error_code()),
                      answer.error_message());
}

// Starts one call of `shard` on `cq` (gRPC's completion-queue API; the
// caller posts its Finish).
//
// Not gRPC's callback API: with Debian's gRPC 1.51 and its epoll1 poller, a
// channel's first callback call starts a pair of polling threads that live
// as long as the channel and take turns at the process's epoll set with the
// threads waiting on this client's streams, which then often need a wake-up
// from them for every message.
template <typename Response>
using StartCall =
    std::function<std::unique_ptr<grpc::ClientAsyncResponseReader<Response>>(
        ClientStub& shard, grpc::ClientContext* context,
        grpc::CompletionQueue* cq)>;

// The same call to every shard at once, each with `timeout` and `cancel`
// applied; returns when all have finished, with each shard's status (and
// its response in `responses`). The calling thread polls for the answers.
template <typename Response>
std::vector<absl::Status> CallEveryShard(
    const std::vector<std::shared_ptr<ClientStub>>& shards,
    absl::Duration timeout, Cancellation* cancel, bool wait_for_ready,
    std::vector<Response>* responses, const StartCall<Response>& start) {
  const size_t n = shards.size();
  responses->assign(n, Response());
  std::vector<grpc::Status> rpc_statuses(n);
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<ScopedRpcCancellation>> scoped;
  std::vector<std::unique_ptr<grpc::ClientAsyncResponseReader<Response>>> calls;
  for (size_t i = 0; i < n; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    shards[i]->Prepare(contexts[i].get());
    SetTimeout(contexts[i].get(), timeout);
    contexts[i]->set_wait_for_ready(wait_for_ready);
    scoped.push_back(
        std::make_unique<ScopedRpcCancellation>(cancel, contexts[i].get()));
    calls.push_back(start(*shards[i], contexts[i].get(), &cq));
    calls[i]->Finish(&(*responses)[i], &rpc_statuses[i],
                     reinterpret_cast<void*>(i));
  }
  // Each call's Finish comes back exactly once, whatever happened to it.
  for (size_t finished = 0; finished < n; ++finished) {
    void* tag;
    bool ok;
    if (!cq.Next(&tag, &ok))
      break;  // not reached: the queue is not shut down yet
  }
  scoped.clear();
  calls.clear();
  cq.Shutdown();
  void* tag;
  bool ok;
  while (cq.Next(&tag, &ok)) {
  }
  std::vector<absl::Status> statuses(n);
  for (size_t i = 0; i < n; ++i)
    statuses[i] = shards[i]->RpcStatus(rpc_statuses[i]);
  return statuses;
}

// "shard ADDRESS: message" for each failed shard.
std::string DescribeFailures(
    const std::vector<std::shared_ptr<ClientStub>>& shards,
    const std::vector<absl::Status>& statuses) {
  std::vector<std::string> failures;
  for (size_t i = 0; i < shards.size(); ++i) {
    if (!statuses[i].ok()) {
      failures.push_back(absl::StrCat("shard ", shards[i]->address(), ": ",
                                      statuses[i].message()));
    }
  }
  return absl::StrJoin(failures, "; ");
}

// The first failure, worded for all the failed shards; OK if none failed.
absl::Status FirstFailure(
    const std::vector<std::shared_ptr<ClientStub>>& shards,
    const std::vector<absl::Status>& statuses, absl::string_view what) {
  for (const absl::Status& status : statuses) {
    if (!status.ok()) {
      if (shards.size() == 1) return status;
      return absl::Status(status.code(),
                          absl::StrCat(what, " failed on ",
                                       DescribeFailures(shards, statuses)));
    }
  }
  return absl::OkStatus();
}

void AddCallStats(const RateLimiterCallStats& from, RateLimiterCallStats* to) {
  to->completed += from.completed;
  to->limited += from.limited;
  to->pending += from.pending;
  to->completed_wait_time += from.completed_wait_time;
}

// Adds `shard`'s view of a table to `total`, the view of all shards: sizes
// and counters add up; options are the first shard's, but for the capacity.
void AddTableInfo(const TableInfo& shard, TableInfo* total) {
  total->options.max_size += shard.options.max_size;
  TableCounters& c = total->counters;
  c.inserted += shard.counters.inserted;
  c.sampled += shard.counters.sampled;
  c.priority_updates += shard.counters.priority_updates;
  c.deleted += shard.counters.deleted;
  c.evicted += shard.counters.evicted;
  c.sampled_out += shard.counters.sampled_out;
  c.resets += shard.counters.resets;
  c.off_signature += shard.counters.off_signature;
  for (int i = 0; i < PriorityHistogram::kNumBuckets; ++i) {
    total->priorities.counts[i] += shard.priorities.counts[i];
  }
  total->current_size += shard.current_size;
  total->sampler_total_weight += shard.sampler_total_weight;
  total->sampler_min_item_weight = SmallerItemWeight(
      total->sampler_min_item_weight, shard.sampler_min_item_weight);
  total->num_unique_samples += shard.num_unique_samples;
  total->num_episodes += shard.num_episodes;
  total->num_deleted_episodes += shard.num_deleted_episodes;
  RateLimiterInfo& limiter = total->rate_limiter_info;
  limiter.inserts += shard.rate_limiter_info.inserts;
  limiter.samples += shard.rate_limiter_info.samples;
  limiter.deletes += shard.rate_limiter_info.deletes;
  AddCallStats(shard.rate_limiter_info.insert_stats, &limiter.insert_stats);
  AddCallStats(shard.rate_limiter_info.sample_stats, &limiter.sample_stats);
}

}  // namespace

std::vector<ShardInfo> Client::ServerInfoByShard(absl::Duration timeout,
                                                 Cancellation* cancel,
                                                 bool wait_for_ready) {
  const std::vector<std::shared_ptr<ClientStub>> shards = shards_->Current();
  std::vector<proto::ServerInfoResponse> responses;
  const proto::ServerInfoRequest request;
  // With a deadline, a server that is not up yet (a learner started before
  // its replay server) is waited for until the deadline, as dm-reverb does;
  // without one, an unreachable server fails at once instead of hanging.
  std::vector<absl::Status> statuses =
      CallEveryShard<proto::ServerInfoResponse>(
          shards, timeout, cancel,
          wait_for_ready && timeout != absl::InfiniteDuration(), &responses,
          [&request](ClientStub& shard, grpc::ClientContext* context,
                     grpc::CompletionQueue* cq) {
            return shard.stub()->AsyncServerInfo(context, request, cq);
          });
  std::vector<ShardInfo> infos;
  for (size_t i = 0; i < shards.size(); ++i) {
    infos.push_back(ShardInfo{shards[i]->address(), std::vector<TableInfo>()});
    if (!statuses[i].ok()) {
      infos.back().tables = statuses[i];
      continue;
    }
    infos.back().spill = SpillStatsFromProto(responses[i].spill());
    for (const schema::TableInfo& table : responses[i].tables()) {
      auto converted = TableInfoFromProto(table);
      if (!converted.ok()) {
        infos.back().tables = converted.status();
        break;
      }
      infos.back().tables->push_back(*std::move(converted));
    }
  }
  return infos;
}

absl::StatusOr<std::vector<TableInfo>> Client::ServerInfoOfAnyShard(
    absl::Duration timeout, Cancellation* cancel) {
  if (shards_->Current().size() > 1) {
    for (ShardInfo& shard :
         ServerInfoByShard(timeout, cancel, /*wait_for_ready=*/false)) {
      if (shard.tables.ok()) return std::move(shard.tables);
    }
  }
  return ServerInfo(timeout, cancel);
}

absl::StatusOr<std::vector<TableInfo>> Client::ServerInfo(
    absl::Duration timeout, Cancellation* cancel) {
  if (std::shared_ptr<LocalServer> local = LocalShard()) {
    return local->TableInfos();
  }
  std::vector<ShardInfo> shards = ServerInfoByShard(timeout, cancel);
  if (shards.size() == 1) return std::move(shards[0].tables);
  std::vector<std::string> failures;
  absl::StatusCode code = absl::StatusCode::kOk;
  for (const ShardInfo& shard : shards) {
    if (shard.tables.ok()) continue;
    if (code == absl::StatusCode::kOk) code = shard.tables.status().code();
    failures.push_back(absl::StrCat("shard ", shard.address, ": ",
                                    shard.tables.status().message()));
  }
  if (!failures.empty()) {
    return absl::Status(code,
                        absl::StrCat("server info of ", address_, " failed on ",
                                     absl::StrJoin(failures, "; ")));
  }
  std::vector<TableInfo> total = *std::move(shards[0].tables);
  for (size_t i = 1; i < shards.size(); ++i) {
    for (TableInfo& table : total) {
      const std::vector<TableInfo>& tables = *shards[i].tables;
      auto it =
          std::find_if(tables.begin(), tables.end(), [&](const TableInfo& t) {
            return t.options.name == table.options.name;
          });
      if (it == tables.end()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "shard ", shards[i].address, " has no table '", table.options.name,
            "': every shard must hold the same tables"));
      }
      AddTableInfo(*it, &table);
    }
  }
  return total;
}

namespace {

proto::MutatePrioritiesRequest MutationRequest(
    const std::string& table, absl::Span<const std::pair<Key, double>> updates,
    absl::Span<const Key> deletes) {
  proto::MutatePrioritiesRequest request;
  request.set_table(table);
  request.mutable_keys()->Reserve(updates.size());
  request.mutable_priorities()->Reserve(updates.size());
  for (const auto& [key, priority] : updates) {
    request.add_keys(key);
    request.add_priorities(priority);
  }
  request.mutable_deletes()->Add(deletes.begin(), deletes.end());
  return request;
}

}  // namespace

// Every shard gets every key: the one that holds it applies it (keys are
// random 64-bit numbers, so no two shards hold the same one). Without a
// deadline, on each shard's mutation stream, all sent before any answer is
// awaited; shards whose stream cannot take it get unary calls, in parallel.
struct PendingMutation::State {
  Client* client;
  std::string table;
  proto::MutatePrioritiesRequest request;
  int64_t num_keys;  // updates and deletes
  std::vector<std::shared_ptr<ClientStub>> shards;
  absl::Duration timeout;  // of the unary calls
  // Per shard: its request on the stream (null once answered or given up),
  // whether it was answered there, and the answer.
  std::vector<std::unique_ptr<MutationStream::Ticket>> tickets;
  std::vector<bool> answered;
  std::vector<proto::MutatePrioritiesResponse> responses;
  std::vector<absl::Status> statuses;
};

PendingMutation::PendingMutation(std::unique_ptr<State> state)
    : state_(std::move(state)) {}

PendingMutation::~PendingMutation() = default;

absl::Status PendingMutation::AwaitStreams(absl::Time deadline) {
  State& s = *state_;
  for (size_t i = 0; i < s.shards.size(); ++i) {
    if (s.tickets[i] == nullptr) continue;
    absl::StatusOr<std::optional<proto::MutatePrioritiesResponse>> streamed =
        s.tickets[i]->Await(deadline);
    if (absl::IsDeadlineExceeded(streamed.status())) return streamed.status();
    s.tickets[i].reset();
    if (!streamed.ok()) return streamed.status();  // cancelled
    if (streamed->has_value()) {
      s.answered[i] = true;
      s.statuses[i] = StatusOfAnswer(**streamed);
      s.responses[i] = **std::move(streamed);
    }
  }
  return absl::OkStatus();
}

bool PendingMutation::NeedsCalls() const {
  return std::find(state_->answered.begin(), state_->answered.end(), false) !=
         state_->answered.end();
}

absl::StatusOr<MutationReport> PendingMutation::Finish(Cancellation* cancel) {
  State& s = *state_;
  std::vector<std::shared_ptr<ClientStub>> rest;
  std::vector<size_t> rest_index;
  for (size_t i = 0; i < s.shards.size(); ++i) {
    if (s.answered[i]) continue;
    rest.push_back(s.shards[i]);
    rest_index.push_back(i);
  }
  if (!rest.empty()) {
    std::vector<proto::MutatePrioritiesResponse> rest_responses;
    const proto::MutatePrioritiesRequest& request = s.request;
    std::vector<absl::Status> rest_statuses =
        CallEveryShard<proto::MutatePrioritiesResponse>(
            rest, s.timeout, cancel, /*wait_for_ready=*/false, &rest_responses,
            [&request](ClientStub& shard, grpc::ClientContext* context,
                       grpc::CompletionQueue* cq) {
              return shard.stub()->AsyncMutatePriorities(context, request, cq);
            });
    for (size_t j = 0; j < rest.size(); ++j) {
      s.statuses[rest_index[j]] = std::move(rest_statuses[j]);
      s.responses[rest_index[j]] = std::move(rest_responses[j]);
      s.answered[rest_index[j]] = true;
    }
  }
  MutationReport report;
  if (s.shards.size() == 1) {
    // One server: its failure, whatever it is, is the call's.
    RETURN_IF_ERROR(s.statuses[0]);
    report.updated = s.responses[0].updated();
    report.deleted = s.responses[0].deleted();
    report.missing = s.responses[0].missing();
    s.client->NoteSkipped(s.table, &report);
    return report;
  }
  int reached = 0;
  for (size_t i = 0; i < s.shards.size(); ++i) {
    if (absl::IsUnavailable(s.statuses[i])) {
      report.unreachable.push_back(
          absl::StrCat(s.shards[i]->address(), ": ", s.statuses[i].message()));
      continue;
    }
    if (!s.statuses[i].ok()) {
      // Any other failure (a NaN priority, an unknown table) is the caller's.
      return absl::Status(
          s.statuses[i].code(),
          absl::StrCat("mutate_priorities failed on shard ",
                       s.shards[i]->address(), ": ", s.statuses[i].message()));
    }
    ++reached;
    report.updated += s.responses[i].updated();
    report.deleted += s.responses[i].deleted();
  }
  if (reached == 0) {
    s.client->shards_->Invalidate();
    return FirstFailure(s.shards, s.statuses, "mutate_priorities");
  }
  if (!report.unreachable.empty()) s.client->shards_->Invalidate();
  report.missing = s.num_keys - report.updated - report.deleted;
  s.client->NoteSkipped(s.table, &report);
  return report;
}

namespace {

// A PendingMutation to every shard of `shards`, with nothing sent yet.
std::unique_ptr<PendingMutation::State> NewMutationState(
    Client* client, const std::string& table,
    absl::Span<const std::pair<Key, double>> updates,
    absl::Span<const Key> deletes,
    std::vector<std::shared_ptr<ClientStub>> shards, absl::Duration timeout) {
  auto state = std::make_unique<PendingMutation::State>();
  state->client = client;
  state->table = table;
  state->request = MutationRequest(table, updates, deletes);
  state->num_keys = static_cast<int64_t>(updates.size() + deletes.size());
  const size_t n = shards.size();
  state->shards = std::move(shards);
  state->timeout = timeout;
  state->tickets.resize(n);
  state->answered.assign(n, false);
  state->responses.resize(n);
  state->statuses.resize(n);
  return state;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PendingMutation>> Client::StartMutatePriorities(
    const std::string& table, absl::Span<const std::pair<Key, double>> updates,
    absl::Span<const Key> deletes, Cancellation* cancel) {
  std::unique_ptr<PendingMutation::State> state =
      NewMutationState(this, table, updates, deletes, shards_->Current(),
                       absl::InfiniteDuration());
  for (size_t i = 0; i < state->shards.size(); ++i) {
    state->tickets[i] =
        state->shards[i]->mutations().Send(state->request, cancel);
  }
  return std::unique_ptr<PendingMutation>(
      new PendingMutation(std::move(state)));
}

absl::StatusOr<MutationReport> Client::MutatePriorities(
    const std::string& table, absl::Span<const std::pair<Key, double>> updates,
    absl::Span<const Key> deletes, absl::Duration timeout,
    Cancellation* cancel) {
  if (std::shared_ptr<LocalServer> local = LocalShard()) {
    ASSIGN_OR_RETURN(std::shared_ptr<Table> found, local->FindTable(table));
    ASSIGN_OR_RETURN(MutationResult result,
                     found->MutatePriorities(updates, deletes));
    RETURN_IF_ERROR(local->Commit());
    MutationReport report;
    report.updated = result.updated;
    report.deleted = result.deleted;
    report.missing = result.missing;
    NoteSkipped(table, &report);
    return report;
  }
  if (timeout == absl::InfiniteDuration()) {
    ASSIGN_OR_RETURN(std::unique_ptr<PendingMutation> pending,
                     StartMutatePriorities(table, updates, deletes, cancel));
    RETURN_IF_ERROR(pending->AwaitStreams(absl::InfiniteFuture()));
    return pending->Finish(cancel);
  }
  // A deadline: unary calls, which carry it.
  PendingMutation pending(NewMutationState(this, table, updates, deletes,
                                           shards_->Current(), timeout));
  return pending.Finish(cancel);
}

void Client::NoteSkipped(const std::string& table, MutationReport* report) {
  absl::MutexLock lock(&report_mu_);
  skipped_since_warning_ += report->missing;
  keys_since_warning_ += report->updated + report->deleted + report->missing;
  const absl::Time now = absl::Now();
  if ((skipped_since_warning_ == 0 && report->unreachable.empty()) ||
      now - last_warning_ < absl::Minutes(1)) {
    return;
  }
  report->warning = absl::StrCat(
      skipped_since_warning_, " of ", keys_since_warning_,
      " priority updates and deletes",
      last_warning_ == absl::InfinitePast() ? "" : " since the last warning",
      " named keys that no server of ", address_, " holds (table '", table,
      "'; evicted, deleted or never inserted) and were skipped");
  if (!report->unreachable.empty()) {
    absl::StrAppend(&report->warning,
                    "; unreachable, so their keys were skipped too: ",
                    absl::StrJoin(report->unreachable, "; "));
  }
  skipped_since_warning_ = 0;
  keys_since_warning_ = 0;
  last_warning_ = now;
}

absl::Status Client::Reset(const std::string& table, absl::Duration timeout,
                           Cancellation* cancel) {
  if (std::shared_ptr<LocalServer> local = LocalShard()) {
    ASSIGN_OR_RETURN(std::shared_ptr<Table> found, local->FindTable(table));
    RETURN_IF_ERROR(found->Reset());
    return local->Commit();
  }
  proto::ResetRequest request;
  request.set_table(table);
  const std::vector<std::shared_ptr<ClientStub>> shards = shards_->Current();
  std::vector<proto::ResetResponse> responses;
  std::vector<absl::Status> statuses = CallEveryShard<proto::ResetResponse>(
      shards, timeout, cancel, /*wait_for_ready=*/false, &responses,
      [&request](ClientStub& shard, grpc::ClientContext* context,
                 grpc::CompletionQueue* cq) {
        return shard.stub()->AsyncReset(context, request, cq);
      });
  return FirstFailure(shards, statuses,
                      absl::StrCat("reset of table '", table, "'"));
}

absl::StatusOr<std::vector<std::string>> Client::Checkpoint(
    absl::Duration timeout, Cancellation* cancel) {
  if (std::shared_ptr<LocalServer> local = LocalShard()) {
    ASSIGN_OR_RETURN(std::string path, local->Checkpoint());
    return std::vector<std::string>{std::move(path)};
  }
  const std::vector<std::shared_ptr<ClientStub>> shards = shards_->Current();
  std::vector<proto::CheckpointResponse> responses;
  const proto::CheckpointRequest request;
  std::vector<absl::Status> statuses =
      CallEveryShard<proto::CheckpointResponse>(
          shards, timeout, cancel, /*wait_for_ready=*/false, &responses,
          [&request](ClientStub& shard, grpc::ClientContext* context,
                     grpc::CompletionQueue* cq) {
            return shard.stub()->AsyncCheckpoint(context, request, cq);
          });
  std::vector<std::string> paths;
  for (size_t i = 0; i < shards.size(); ++i) {
    if (statuses[i].ok()) paths.push_back(responses[i].path());
  }
  if (absl::Status failed = FirstFailure(shards, statuses, "checkpoint");
      !failed.ok()) {
    if (paths.empty() || shards.size() == 1) return failed;
    return absl::Status(failed.code(),
                        absl::StrCat(failed.message(), " (written: ",
                                     absl::StrJoin(paths, ", "), ")"));
  }
  return paths;
}

absl::StatusOr<std::unique_ptr<Sampler>> Client::NewSampler(
    const std::string& table, const SamplerOptions& options) {
  if (options.max_in_flight < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_in_flight_samples_per_worker must be >= 1, got ",
                     options.max_in_flight));
  }
  std::vector<std::shared_ptr<ClientStub>> shards = shards_->Current();
  if (shards.size() == 1 && options.num_streams <= 1) {
    if (shards[0]->Local() != nullptr) {
      return std::unique_ptr<Sampler>(
          new InProcessSampler(shards[0], table, options));
    }
    return std::unique_ptr<Sampler>(
        new StreamSampler(shards[0], table, options));
  }
  std::vector<ShardedSampler::ShardTable> tables;
  if (shards.size() > 1) {
    // The shards' tables now: to split max_samples by, and what the merged
    // infos count for a shard until it delivers. A shard that does not
    // answer at once (down, restarting) gets no share and counts for
    // nothing until then.
    std::vector<proto::ServerInfoResponse> responses;
    const proto::ServerInfoRequest request;
    CallEveryShard<proto::ServerInfoResponse>(
        shards, absl::Seconds(10), /*cancel=*/nullptr, /*wait_for_ready=*/false,
        &responses,
        [&request](ClientStub& shard, grpc::ClientContext* context,
                   grpc::CompletionQueue* cq) {
          return shard.stub()->AsyncServerInfo(context, request, cq);
        });
    for (const proto::ServerInfoResponse& response : responses) {
      ShardedSampler::ShardTable& found = tables.emplace_back();
      for (const schema::TableInfo& info : response.tables()) {
        if (info.name() == table) {
          found.weight = info.sampler_total_weight();
          found.size = info.current_size();
          found.min_item_weight = info.sampler_min_item_weight();
        }
      }
    }
  }
  return std::unique_ptr<Sampler>(
      new ShardedSampler(std::move(shards), table, options, tables));
}

absl::StatusOr<std::vector<Sample>> Client::SampleItems(
    const std::string& table, int64_t num_samples, SamplerOptions options,
    Cancellation* cancel) {
  if (num_samples < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_samples must be >= 1, got ", num_samples));
  }
  options.max_in_flight = std::min(options.max_in_flight, num_samples);
  options.max_samples = num_samples;
  ASSIGN_OR_RETURN(std::unique_ptr<Sampler> sampler,
                   NewSampler(table, options));
  Cancellation::Id id = 0;
  Sampler* raw = sampler.get();
  if (cancel != nullptr && !cancel->Register([raw] { raw->Cancel(); }, &id)) {
    return absl::CancelledError("sampling was cancelled before it started");
  }
  // Grown as samples arrive: a huge num_samples must not allocate up front.
  std::vector<Sample> samples;
  samples.reserve(static_cast<size_t>(std::min<int64_t>(num_samples, 1024)));
  absl::Status status;
  for (int64_t i = 0; i < num_samples && status.ok(); ++i) {
    status = sampler->Next(&samples.emplace_back());
  }
  if (!status.ok() && !samples.empty()) samples.pop_back();
  if (cancel != nullptr) cancel->UnregisterAndWait(id);
  RETURN_IF_ERROR(status);
  return samples;
}

absl::StatusOr<std::unique_ptr<TrajectoryWriter>> Client::NewTrajectoryWriter(
    const TrajectoryWriterOptions& options) {
  RETURN_IF_ERROR(options.Validate());
  std::vector<std::shared_ptr<ClientStub>> shards = shards_->Current();
  auto writer = std::unique_ptr<TrajectoryWriter>(
      new TrajectoryWriter(PickWriterShard(shards), options));
  // Among shards, the writer is counted by its shard from now on, so that
  // the next writer (of any client) sees it.
  if (shards.size() > 1) RETURN_IF_ERROR(writer->Connect());
  return writer;
}

std::shared_ptr<ClientStub> Client::PickWriterShard(
    const std::vector<std::shared_ptr<ClientStub>>& shards) {
  const uint64_t turn = shards_->NextTurn();
  if (shards.size() == 1) return shards[0];
  // The fewest writers now, as the shards count them (one round trip to all
  // at once; a writer lives long). Shards that do not answer at once are
  // passed over.
  std::vector<proto::ServerInfoResponse> responses;
  const proto::ServerInfoRequest request;
  const std::vector<absl::Status> statuses =
      CallEveryShard<proto::ServerInfoResponse>(
          shards, absl::Seconds(2), /*cancel=*/nullptr,
          /*wait_for_ready=*/false, &responses,
          [&request](ClientStub& shard, grpc::ClientContext* context,
                     grpc::CompletionQueue* cq) {
            return shard.stub()->AsyncServerInfo(context, request, cq);
          });
  int best = -1;
  for (size_t i = 0; i < shards.size(); ++i) {
    const size_t j = (turn + i) % shards.size();
    if (!statuses[j].ok()) continue;
    if (best < 0 || responses[j].active_insert_streams() <
                        responses[best].active_insert_streams()) {
      best = static_cast<int>(j);
    }
  }
  if (best >= 0) return shards[best];
  return ShardSet::InTurn(shards,
                          turn);  // none answered: the writer will say why
}

}  // namespace reverb_tf
