// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/service/server.h"

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "reverb_tf/cc/local_server.h"
#include "reverb_tf/cc/platform/fork_guard.h"
#include "reverb_tf/cc/platform/heap_release.h"
#include "reverb_tf/cc/platform/loopback.h"
#include "reverb_tf/cc/platform/out_of_memory.h"
#include "reverb_tf/cc/platform/process_memory.h"
#include "reverb_tf/cc/platform/status_macros.h"
#include "reverb_tf/cc/service/grpc_memory_guard.h"
#include "reverb_tf/cc/service/health_service.h"
#include "reverb_tf/cc/service/local_adapter.h"
#include "reverb_tf/cc/service/metrics.h"
#include "reverb_tf/cc/service/metrics_http.h"
#include "reverb_tf/cc/service/replay_service.h"

namespace reverb_tf {

namespace {

// Capacity of dead chunks' buffers a server keeps for new chunks: a refill
// of 256 MiB of large items after a reset or a drained queue lands in mapped
// memory.
constexpr int64_t kMaxRecycledChunkBytes = int64_t{256} << 20;

// The addresses (without port) a server of `host` listens on: for
// "localhost" both loopbacks, each bound on its own (platform/loopback.h),
// since gRPC binds the addresses of a name best-effort.
std::vector<std::string> ListeningHosts(const std::string& host) {
  if (host == "localhost") {
    if (Ipv6LoopbackUsable()) return {"127.0.0.1", "[::1]"};
    return {"127.0.0.1"};
  }
  // IPv6 literals are bracketed in a gRPC address.
  return {host.find(':') != std::string::npos ? absl::StrCat("[", host, "]")
                                              : host};
}

}  // namespace

absl::Status ReplayServer::CheckStart(
    const std::vector<std::shared_ptr<Table>>& tables,
    const ServerOptions& options, const CheckpointerOptions* checkpointer) {
  if (options.checkpointer != nullptr)
    checkpointer = &options.checkpointer->options();
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid port ", options.port));
  }
  if (options.host.empty() ||
      options.host.find_first_of(" /[]") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("host must be a name or an address such as localhost, "
                     "0.0.0.0 or ::1, got '",
                     options.host, "'"));
  }
  if (options.max_message_bytes < 1024 ||
      options.max_message_bytes > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_message_bytes must be in [1 KiB, 2 GiB), got ",
                     options.max_message_bytes));
  }
  // Every name given twice, sorted; dm-reverb's words.
  absl::flat_hash_set<std::string> names;
  std::set<std::string> duplicates;
  for (const auto& table : tables) {
    if (!names.insert(table->name()).second) duplicates.insert(table->name());
  }
  if (!duplicates.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Multiple items in tables have the same name: ",
        absl::StrJoin(duplicates, ", "), " (table names must be unique)"));
  }
  if (options.max_active_streams < 1 || options.max_stream_chunk_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_active_streams and max_stream_chunk_bytes must be >= 1, got ",
        options.max_active_streams, " and ", options.max_stream_chunk_bytes));
  }
  if (options.stream_threads < 1 ||
      options.stream_threads > ServerOptions::kMaxStreamThreads) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stream_threads must be in [1, ", ServerOptions::kMaxStreamThreads,
        "], got ", options.stream_threads));
  }
  if (options.checkpoint_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("checkpoint_interval must be >= 0");
  }
  if (options.memory_limit < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory_limit must be >= 0 bytes (0: no budget), got ",
                     options.memory_limit));
  }
  if (!options.spill_dir.empty() && options.memory_limit <= 0) {
    return absl::InvalidArgumentError(
        "spill_dir needs a memory_limit: chunk bytes go to disk beyond that "
        "budget");
  }
  if (absl::Status tls = options.tls.Validate(); !tls.ok()) return tls;
  if (options.wal.has_value()) {
    RETURN_IF_ERROR(options.wal->Validate());
    // The log is truncated by checkpoints it must find again on restart.
    if (checkpointer == nullptr || checkpointer->temporary) {
      return absl::InvalidArgumentError(
          "a write-ahead log needs a checkpointer whose directory outlives "
          "the process (checkpointers.DefaultCheckpointer(path), "
          "--checkpoint_dir): its checkpoints truncate the log");
    }
  }
  // A pre-check: Start() takes the tables (Table::Host) to be sure.
  for (const auto& table : tables) {
    RETURN_IF_ERROR(table->CheckHostable(/*server=*/nullptr));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ReplayServer>> ReplayServer::Start(
    std::vector<std::shared_ptr<Table>> tables, const ServerOptions& options) {
  RETURN_IF_ERROR(CheckGrpcUsableAndNoteUse());
  RETURN_IF_ERROR(CheckStart(tables, options));
  DisableMutexDeadlockDetection();
  std::unique_ptr<ReplayServer> server(new ReplayServer());
  // From here on, a failure's return destroys `server`, whose Stop() undoes
  // what the steps before it did.
  RETURN_IF_ERROR(server->HostTables(tables));
  std::unique_ptr<SpillStore> spill;
  if (!options.spill_dir.empty()) {
    // Segments of an eighth of the budget (1 to 64 MiB): the disk's slack
    // above what is live stays small beside what is held.
    ASSIGN_OR_RETURN(
        spill, SpillStore::Open(options.spill_dir,
                                std::clamp<int64_t>(options.memory_limit / 8,
                                                    int64_t{1} << 20,
                                                    SpillStore::kSegmentBytes),
                                options.spill_mmap));
  }
  server->BuildService(std::move(tables), std::move(spill), options);
  RETURN_IF_ERROR(server->Bind(options));
  // What a server that finds a table hosted here names.
  for (const auto& table : server->tables_)
    table->SetHostPort(server.get(), server->port_);
  // The whole server ("") and the replay service by name.
  const bool loading = server->checkpointer_ != nullptr;
  server->health_->SetServingStatus("", !loading);
  server->health_->SetServingStatus(kHealthServiceName, !loading);
  if (loading) RETURN_IF_ERROR(server->LoadCheckpointAndLog(options));
  RETURN_IF_ERROR(server->StartBackgroundThreads(options));
  server->RegisterInProcess(options);
  return server;
}

absl::Status ReplayServer::HostTables(
    const std::vector<std::shared_ptr<Table>>& tables) {
  // Each table for this server alone, before anything changes it; Stop()
  // (also when Start fails later) gives them back.
  for (size_t i = 0; i < tables.size(); ++i) {
    if (absl::Status hosted = tables[i]->Host(this); !hosted.ok()) {
      for (size_t j = 0; j < i; ++j) tables[j]->Unhost(this);
      return hosted;
    }
  }
  // Tables hosted before (and closed when that server stopped) serve again.
  for (const auto& table : tables) table->Open();
  tables_ = tables;
  return absl::OkStatus();
}

void ReplayServer::BuildService(std::vector<std::shared_ptr<Table>> tables,
                                std::unique_ptr<SpillStore> spill,
                                const ServerOptions& options) {
  checkpointer_ = options.checkpointer;
  // Half the message budget for chunk bytes leaves room for the framing.
  ReplayService::Limits limits;
  limits.max_response_bytes = options.max_message_bytes / 2;
  limits.max_stream_chunk_bytes = options.max_stream_chunk_bytes;
  limits.max_active_streams = options.max_active_streams;
  limits.auth = options.auth;
  service_ = std::make_unique<ReplayService>(std::move(tables), limits);
  // Writers' chunk bytes go into buffers of chunks that died, whichever
  // thread freed them (chunk_store.h); within a budget, an eighth of it.
  service_->mutable_chunk_store()->RecycleBuffers(
      options.memory_limit > 0
          ? std::min(kMaxRecycledChunkBytes, options.memory_limit / 8)
          : kMaxRecycledChunkBytes);
  if (options.memory_limit > 0) {
    budget_ = std::make_unique<MemoryBudget>(
        options.memory_limit, &service_->chunk_store(), [this] {
          int64_t items = 0;
          for (const auto& table : tables_) items += table->approximate_size();
          return items;
        });
    for (const auto& table : tables_) table->SetMemoryBudget(budget_.get());
    service_->set_memory_budget(budget_.get());
  }
  if (spill != nullptr) {
    // Spilling starts at 90% of the budget and goes down to 80%, so that
    // writers seldom find it used up while the disk keeps up.
    const int64_t limit = options.memory_limit;
    service_->mutable_chunk_store()->EnableSpill(
        std::move(spill), [budget = budget_.get()] { return budget->used(); },
        limit / 10 * 9, limit / 10 * 8);
  }
  // A checkpoint loads with the port already open: health says NOT_SERVING
  // and the replay methods UNAVAILABLE until it is in (probes can tell a
  // server that is loading from one that is gone).
  service_->set_accepting(checkpointer_ == nullptr);
  service_->set_checkpoint_fn([this]() -> absl::StatusOr<std::string> {
    ASSIGN_OR_RETURN(CheckpointStats stats, Checkpoint());
    return stats.path;
  });
}

absl::Status ReplayServer::Bind(const ServerOptions& options) {
  // The standard health service (grpc.health.v1: grpc_health_probe,
  // Kubernetes probes) is ours (health_service.h says why not gRPC's), and
  // server reflection (grpcurl). Both settings are process-wide and apply to
  // servers built from here on.
  grpc::EnableDefaultHealthCheckService(false);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  health_ = std::make_unique<HealthService>();
  grpc_memory_ = std::make_unique<GrpcMemoryGuard>(options.max_message_bytes);
  const std::vector<std::string> hosts = ListeningHosts(options.host);
  // Port 0 on several addresses: one port free on all of them, tried again
  // if another process takes it on one address before gRPC binds it.
  const int attempts = options.port == 0 && hosts.size() > 1 ? 4 : 1;
  for (int attempt = 0; attempt < attempts && server_ == nullptr; ++attempt) {
    const int port = attempts > 1 ? PortFreeOnBothLoopbacks() : options.port;
    TryBind(hosts, port, options);
  }
  if (server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "could not start a gRPC server on ", absl::StrJoin(hosts, " and "), ":",
        options.port,
        hosts.size() > 1 ? " (the port must be free on each)" : ""));
  }
  return absl::OkStatus();
}

void ReplayServer::TryBind(const std::vector<std::string>& hosts, int port,
                           const ServerOptions& options) {
  grpc::ServerBuilder builder;
  std::vector<int> bound(hosts.size(), 0);
  for (size_t i = 0; i < hosts.size(); ++i) {
    builder.AddListeningPort(absl::StrCat(hosts[i], ":", port),
                             MakeServerCredentials(options.tls), &bound[i]);
  }
  // No SO_REUSEPORT (gRPC's default is on): with it a second server of the
  // same user can bind the same port, or be handed it for port 0, and the
  // kernel then splits connections between the two; clients met "Method
  // not found" from another process's server. A port is one server's.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  builder.SetResourceQuota(grpc_memory_->quota());
  builder.RegisterService(service_.get());
  builder.RegisterService(health_.get());
  // The async streams' one queue (replay_service.h says why they are served
  // there, and why by one queue).
  std::unique_ptr<grpc::ServerCompletionQueue> stream_queue =
      builder.AddCompletionQueue();
  server_ = builder.BuildAndStart();
  if (server_ != nullptr && std::all_of(bound.begin(), bound.end(), [&](int p) {
        return p == bound[0] && p != 0;
      })) {
    port_ = bound[0];
    service_->StartAsyncStreams(std::move(stream_queue),
                                options.stream_threads);
  } else {
    if (server_ != nullptr) {
      server_->Shutdown();
      server_.reset();
    }
    ReplayService::DiscardQueue(std::move(stream_queue));
  }
}

absl::Status ReplayServer::StartBackgroundThreads(
    const ServerOptions& options) {
  if (options.metrics_port >= 0) {
    ASSIGN_OR_RETURN(metrics_http_, MetricsHttpServer::Start(
                                        options.host, options.metrics_port,
                                        [this] { return MetricsText(); }));
  }
  if (checkpointer_ != nullptr &&
      (options.checkpoint_interval > absl::ZeroDuration() || wal_ != nullptr)) {
    const absl::Duration interval = options.checkpoint_interval;
    const absl::Duration retry = options.wal.has_value()
                                     ? options.wal->retry_interval
                                     : absl::InfiniteDuration();
    checkpoint_thread_ = std::thread(
        [this, interval, retry] { CheckpointPeriodically(interval, retry); });
  }
  // Memory the tables let go of goes back to the kernel (heap_release.h).
  // The buffers a reset leaves for recycling are held too: when the store
  // frees them unused, a second or two later, that drop trims again.
  heap_releaser_ = std::make_unique<HeapReleaser>(
      [this] {
        return num_live_chunk_bytes() +
               service_->chunk_store().num_recycled_bytes();
      },
      absl::Milliseconds(500), options.trim_idle_heap);
  return absl::OkStatus();
}

void ReplayServer::RegisterInProcess(const ServerOptions& options) {
  // Clients in this process reach the tables directly, unless the server is
  // secured: tokens and certificates ride on the RPC, and a client that
  // could not connect over the wire must not get in through the back door.
  if (options.auth == nullptr && !options.tls.enabled()) {
    local_ = std::make_shared<Local>(this, options.max_message_bytes);
    RegisterLocalServer(port_, options.host, local_);
  }
}

int ReplayServer::metrics_port() const {
  return metrics_http_ != nullptr ? metrics_http_->port() : -1;
}

std::string ReplayServer::MetricsText() const {
  MetricsSnapshot snapshot;
  snapshot.tables.reserve(tables_.size());
  for (const auto& table : tables_) snapshot.tables.push_back(table->info());
  if (wal_ != nullptr) {
    snapshot.wal =
        MetricsSnapshot::Wal{wal_->stats(), wal_->Writable().ok(), 0};
  }
  if (budget_ != nullptr) {
    snapshot.budget =
        MetricsSnapshot::Budget{budget_->limit(), budget_->used(),
                                budget_->waiting(), budget_->refused()};
  }
  if (ChunkStore::SpillStats spill = service_->chunk_store().spill_stats();
      !spill.dir.empty()) {
    snapshot.spill = std::move(spill);
  }
  snapshot.chunks = num_live_chunks();
  snapshot.chunk_bytes = num_live_chunk_bytes();
  snapshot.recycled_chunk_bytes = service_->chunk_store().num_recycled_bytes();
  snapshot.recycled_chunk_bytes_taken =
      service_->chunk_store().num_recycled_bytes_taken();
  snapshot.service = &service_->metrics();
  snapshot.active_streams = service_->active_streams();
  snapshot.grpc_quota_bytes = static_cast<int64_t>(grpc_memory_->quota_bytes());
  {
    absl::MutexLock lock(&mu_);
    if (snapshot.wal.has_value()) snapshot.wal->recoveries = wal_recoveries_;
    snapshot.checkpoints_ok = checkpoints_;
    snapshot.checkpoints_failed = failed_checkpoints_;
    snapshot.last_checkpoint = last_checkpoint_;
    snapshot.last_checkpoint_time = last_checkpoint_time_;
  }
  if (const std::optional<ProcessMemory> memory = ReadProcessMemory()) {
    snapshot.resident_bytes = memory->resident_bytes;
  }
  return RenderMetricsPage(snapshot);
}

absl::StatusOr<std::unique_ptr<ReplayServer>> ReplayServer::StartFromOptions(
    const std::vector<TableOptions>& tables, const ServerOptions& options) {
  std::vector<std::shared_ptr<Table>> built;
  std::random_device seed_source;
  for (const TableOptions& table_options : tables) {
    const uint64_t seed = (uint64_t{seed_source()} << 32) | seed_source();
    ASSIGN_OR_RETURN(auto table, Table::Create(table_options, seed));
    built.push_back(std::move(table));
  }
  return Start(std::move(built), options);
}

ReplayServer::~ReplayServer() {
  // Stop() detaches the tables from the log, which goes last.
  Stop();
  wal_.reset();
}

int64_t ReplayServer::num_live_chunks() const {
  return service_->chunk_store().num_live_chunks();
}

ChunkStore::SpillStats ReplayServer::spill_stats() const {
  return service_->chunk_store().spill_stats();
}

int64_t ReplayServer::num_live_chunk_bytes() const {
  return service_->chunk_store().num_live_bytes();
}

absl::StatusOr<std::shared_ptr<Table>> ReplayServer::FindTable(
    const std::string& name) const {
  return service_->FindTable(name);
}

void ReplayServer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  // In-process clients fail from now on as remote ones will.
  if (local_ != nullptr) {
    UnregisterLocalServer(port_, local_.get());
    local_->Detach();
  }
  // Probes see NOT_SERVING from now on (watchers are told at once), before
  // any call starts failing.
  if (health_ != nullptr) health_->Shutdown();
  // Calls waiting for memory end (tables' waits end with Close() below).
  if (budget_ != nullptr) budget_->Close();
  // A periodic checkpoint in progress finishes (a half-written one would be
  // discarded anyway); none starts after this.
  if (checkpoint_thread_.joinable()) checkpoint_thread_.join();
  for (const auto& table : tables_) table->Close();
  // In-process insert streams blocked on a table have just been woken.
  if (local_ != nullptr) local_->AwaitIdle();
  // Closed tables have woken every blocked handler; the deadline cancels
  // whatever is still running after that.
  // Null when Start() failed before gRPC was up.
  if (server_ != nullptr) {
    // Idle between requests, nothing above wakes them.
    service_->EndAsyncStreams();
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(2));
    server_->Wait();
    // After the server's shutdown, as gRPC requires of its queues.
    service_->StopAsyncStreams();
  }
  // Nothing of this server changes the tables any more: they go back, for
  // another server to host (which sets its own log and budget, or none).
  for (const auto& table : tables_) {
    table->SetJournal(nullptr);
    table->SetMemoryBudget(nullptr);
    table->Unhost(this);
  }
  // The spill directory is free for the next server at once, though the
  // tables' chunks (in this process, the tables themselves) may live on:
  // their files stay open, without names.
  if (service_ != nullptr) service_->mutable_chunk_store()->ReleaseSpill();
  // Scrapes are answered until the service has stopped.
  metrics_http_.reset();
  heap_releaser_.reset();
  absl::MutexLock lock(&mu_);
  shut_down_ = true;
}

void ReplayServer::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&shut_down_));
}

bool ReplayServer::WaitFor(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&shut_down_), timeout);
}

}  // namespace reverb_tf
