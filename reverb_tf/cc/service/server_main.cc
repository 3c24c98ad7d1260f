// SPDX-License-Identifier: Apache-2.0
// reverb_tf_server: serves replay tables described by a textproto config,
// in the shape Reverb's reverb_server reads:
//
//   reverb_tf_server --config='port: 8000 tables { table_name: "replay"
//       sampler { uniform: true } remover { fifo: true } max_size: 100000
//       rate_limiter { samples_per_insert: 1 min_size_to_sample: 1
//                      min_diff: -1e300 max_diff: 1e300 } }'
//   reverb_tf_server --config_file=server.textproto --bind=0.0.0.0
//       --checkpoint_dir=/data/replay --checkpoint_interval=15m
//
// It listens on loopback only unless --bind names another interface (or
// 0.0.0.0 / :: for all of them).
//
// With a checkpoint directory the newest checkpoint in it is loaded before
// the port opens, Client.checkpoint() writes there, and --checkpoint_interval
// adds periodic checkpoints. Prints one line when ready and exits with
// status 2 and a message naming the problem on a bad config.
//
// SIGTERM/SIGINT: health turns NOT_SERVING, calls waiting on a table fail
// with CANCELLED naming it, the rest get up to 2 s to finish before gRPC
// cancels them; then --checkpoint_on_exit writes a final checkpoint, and
// the process exits without freeing its tables item by item (which took
// over 10 s for 10M items), so a restart does not wait on it.
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "reverb_tf/cc/platform/heap_release.h"
#include "reverb_tf/cc/platform/status_macros.h"
#include "reverb_tf/cc/proto/schema.pb.h"
#include "reverb_tf/cc/service/server.h"
#include "reverb_tf/cc/wire/conversions.h"

ABSL_FLAG(
    std::string, config, "",
    "ReverbServerConfig (schema.proto, dm-reverb's message) as a textproto "
    "string.");
ABSL_FLAG(std::string, config_file, "",
          "Path of a file holding the ReverbServerConfig textproto.");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "Checkpoint root directory (overrides the config's checkpoint_dir).");
ABSL_FLAG(std::string, fallback_checkpoint_path, "",
          "Checkpoint loaded when the checkpoint directory holds none.");
ABSL_FLAG(absl::Duration, checkpoint_interval, absl::ZeroDuration(),
          "Time between periodic checkpoints, e.g. 30m (0: only on request).");
ABSL_FLAG(std::string, bind, reverb_tf::ServerOptions().host,
          "Interface to listen on: localhost (loopback only, the default), an "
          "address, or 0.0.0.0 / :: for every interface.");
ABSL_FLAG(int64_t, max_active_streams,
          reverb_tf::ServerOptions().max_active_streams,
          "Most writer and sampler streams served at once; more fail with "
          "RESOURCE_EXHAUSTED.");
ABSL_FLAG(int, stream_threads, reverb_tf::ServerOptions().stream_threads,
          "Most threads that serve the writers' streams and read and write "
          "every connection (1 to 16); all but the first poll only while the "
          "first is busy.");
ABSL_FLAG(
    std::string, on_damaged_checkpoint, "fail",
    "What to do when the newest checkpoint is damaged: 'fail' (exit with a "
    "message naming it) or 'previous' (load the newest intact one, with a "
    "warning; needs --checkpoint_keep > 1 to have one).");
ABSL_FLAG(int, checkpoint_keep, 0,
          "Checkpoints to keep (0: the config's, else 1).");
ABSL_FLAG(
    int, metrics_port, reverb_tf::ServerOptions().metrics_port,
    "Serve Prometheus metrics at http://BIND:PORT/metrics (0: a free port, "
    "printed on stderr; -1: none). Same interface as the service (--bind).");
ABSL_FLAG(bool, checkpoint_on_exit, false,
          "On SIGTERM/SIGINT, write a final checkpoint after the last call has "
          "ended (needs a checkpoint directory).");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM certificate chain: serve TLS (with --tls_key_file).");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file.");
ABSL_FLAG(std::string, tls_client_ca_file, "",
          "PEM CA: mutual TLS, clients must present a certificate it signed.");
ABSL_FLAG(std::string, wal_dir, "",
          "Write-ahead log directory: a change is acknowledged only once "
          "logged, and a "
          "restart replays the log after the newest checkpoint (needs "
          "--checkpoint_dir).");
ABSL_FLAG(
    std::string, wal_sync,
    std::string(reverb_tf::WalSyncName(reverb_tf::WalOptions().sync)),
    "When the log is synced to disk: every_write (before each "
    "acknowledgement), "
    "every_n_ms (every --wal_sync_interval; a killed process loses nothing, a "
    "crashed machine up to that long) or none (the kernel decides).");
ABSL_FLAG(absl::Duration, wal_sync_interval, reverb_tf::WalOptions().interval,
          "How often --wal_sync=every_n_ms syncs.");
ABSL_FLAG(std::string, memory_limit, "",
          "A memory budget for the data the server holds (chunk bytes plus a "
          "fixed cost "
          "per item), in bytes or with a K, M, G or T suffix (powers of 1024), "
          "e.g. 8G: "
          "inserts wait while it is used up and fail with RESOURCE_EXHAUSTED "
          "at their "
          "timeout. Empty: no budget.");
ABSL_FLAG(std::string, spill_dir, "",
          "With --memory_limit: chunk bytes beyond the budget go to files in "
          "this directory on local disk instead of making writers wait; RAM "
          "keeps items, selectors and the chunks most recently written or "
          "read. The directory is this server's alone, and what an earlier "
          "run left in it is deleted (checkpoints and --wal_dir keep what "
          "must survive a restart).");
ABSL_FLAG(bool, spill_mmap, true,
          "With --spill_dir: read spilled chunks through mappings of their "
          "files (about twice as fast as pread; the pages read count in the "
          "server's RSS as the page cache they are). --nospill_mmap reads "
          "them with pread, and RSS stays near --memory_limit while sampling "
          "too.");
ABSL_FLAG(
    absl::Duration, wal_retry_interval, reverb_tf::WalOptions().retry_interval,
    "While the write-ahead log cannot be written (a full disk), how often the "
    "server tries the checkpoint that lets it accept writes again.");
ABSL_FLAG(std::string, auth_tokens_file, "",
          "Lines 'ROLE TOKEN' (roles reader, writer, admin; TOKEN may be "
          "sha256:<hex>): every call needs a bearer token of a role that may "
          "make it.");

namespace reverb_tf {
namespace {

// "1048576", "512M", "8G": bytes, with an optional K/M/G/T suffix (1024^n).
absl::StatusOr<int64_t> ParseByteSize(absl::string_view text) {
  int shift = 0;
  if (!text.empty()) {
    switch (absl::ascii_toupper(text.back())) {
      case 'K':
        shift = 10;
        break;
      case 'M':
        shift = 20;
        break;
      case 'G':
        shift = 30;
        break;
      case 'T':
        shift = 40;
        break;
      default:
        break;
    }
    if (shift != 0) text.remove_suffix(1);
  }
  int64_t value;
  if (!absl::SimpleAtoi(text, &value) || value < 1 ||
      value > (std::numeric_limits<int64_t>::max() >> shift)) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a positive number of bytes, optionally with a "
                     "K, M, G or T suffix, got '",
                     text.substr(0, 32), "'"));
  }
  return value << shift;
}

// Collects protobuf's parse errors instead of letting it log them.
class ErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (errors_.empty())
      errors_ = absl::StrCat("line ", line + 1, ", column ", column + 1, ": ",
                             message);
  }
  const std::string& errors() const { return errors_; }

 private:
  std::string errors_;
};

absl::StatusOr<schema::ReverbServerConfig> LoadConfig() {
  std::string text = absl::GetFlag(FLAGS_config);
  const std::string path = absl::GetFlag(FLAGS_config_file);
  if (text.empty() == path.empty()) {
    return absl::InvalidArgumentError(
        "pass exactly one of --config and --config_file");
  }
  if (!path.empty()) {
    std::ifstream file(path);
    if (!file)
      return absl::NotFoundError(
          absl::StrCat("cannot read --config_file ", path));
    std::stringstream buffer;
    buffer << file.rdbuf();
    text = buffer.str();
  }
  schema::ReverbServerConfig config;
  google::protobuf::TextFormat::Parser parser;
  ErrorCollector errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &config)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad config: ", errors.errors()));
  }
  return config;
}

// Flags win over the config's fields. Null when no checkpoint directory is
// given (then the Checkpoint RPC reports FAILED_PRECONDITION).
absl::StatusOr<std::shared_ptr<Checkpointer>> MakeCheckpointer(
    const schema::ReverbServerConfig& config, absl::Duration* interval) {
  CheckpointerOptions options;
  options.root = absl::GetFlag(FLAGS_checkpoint_dir);
  if (options.root.empty()) options.root = config.checkpoint_dir();
  options.fallback_checkpoint_path =
      absl::GetFlag(FLAGS_fallback_checkpoint_path);
  if (options.fallback_checkpoint_path.empty()) {
    options.fallback_checkpoint_path = config.fallback_checkpoint_path();
  }
  if (absl::GetFlag(FLAGS_checkpoint_keep) > 0) {
    options.keep = absl::GetFlag(FLAGS_checkpoint_keep);
  } else if (config.checkpoint_keep() > 0) {
    options.keep = config.checkpoint_keep();
  }
  const std::string on_damaged = absl::GetFlag(FLAGS_on_damaged_checkpoint);
  if (on_damaged != "fail" && on_damaged != "previous") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--on_damaged_checkpoint must be 'fail' or 'previous', got '",
        on_damaged, "'"));
  }
  options.load_previous_if_damaged = on_damaged == "previous";
  *interval = absl::GetFlag(FLAGS_checkpoint_interval);
  if (*interval == absl::ZeroDuration() && config.checkpoint_interval_s() > 0) {
    *interval = absl::Seconds(config.checkpoint_interval_s());
  }
  if (options.root.empty()) {
    if (*interval > absl::ZeroDuration() ||
        !options.fallback_checkpoint_path.empty() ||
        absl::GetFlag(FLAGS_checkpoint_on_exit)) {
      return absl::InvalidArgumentError(
          "checkpoint_interval, fallback_checkpoint_path and "
          "checkpoint_on_exit need a "
          "checkpoint_dir");
    }
    return std::shared_ptr<Checkpointer>();
  }
  if (*interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("checkpoint_interval must be >= 0");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Checkpointer> checkpointer,
                   Checkpointer::Create(std::move(options)));
  return std::shared_ptr<Checkpointer>(std::move(checkpointer));
}

// Prints why the server cannot start; returns the exit status of a bad
// config or flag (2).
int ReportBadStart(const absl::Status& status) {
  std::fprintf(stderr, "reverb_tf_server: %s\n",
               std::string(status.message()).c_str());
  return 2;
}

// The config's tables, each checked as a new table is; warns on stderr of
// a rate limiter's caveat.
absl::StatusOr<std::vector<TableOptions>> TablesFromConfig(
    const schema::ReverbServerConfig& config) {
  std::vector<TableOptions> tables;
  for (const schema::PriorityTableCheckpoint& table : config.tables()) {
    auto options = TableOptionsFromConfig(table);
    absl::Status valid = options.ok() ? options->CheckNew() : options.status();
    if (!valid.ok()) {
      return absl::Status(valid.code(),
                          absl::StrCat("bad config: ", valid.message()));
    }
    if (const std::string caveat = options->rate_limiter.Caveat();
        !caveat.empty()) {
      std::fprintf(stderr, "reverb_tf_server: warning: table '%s': %s\n",
                   options->name.c_str(), caveat.c_str());
    }
    tables.push_back(*std::move(options));
  }
  if (tables.empty()) {
    return absl::InvalidArgumentError("bad config: no tables");
  }
  return tables;
}

// --memory_limit, if given.
absl::Status ApplyMemoryLimitFlag(ServerOptions* options) {
  if (const std::string limit = absl::GetFlag(FLAGS_memory_limit);
      !limit.empty()) {
    auto bytes = ParseByteSize(limit);
    if (!bytes.ok()) {
      return absl::Status(
          bytes.status().code(),
          absl::StrCat("--memory_limit: ", bytes.status().message()));
    }
    options->memory_limit = *bytes;
  }
  options->spill_dir = absl::GetFlag(FLAGS_spill_dir);
  options->spill_mmap = absl::GetFlag(FLAGS_spill_mmap);
  return absl::OkStatus();
}

// The write-ahead log, if --wal_dir names one.
absl::Status ApplyWalFlags(ServerOptions* options) {
  if (const std::string dir = absl::GetFlag(FLAGS_wal_dir); !dir.empty()) {
    ASSIGN_OR_RETURN(const WalSync sync,
                     ParseWalSync(absl::GetFlag(FLAGS_wal_sync)));
    WalOptions wal;
    wal.dir = dir;
    wal.sync = sync;
    wal.interval = absl::GetFlag(FLAGS_wal_sync_interval);
    wal.retry_interval = absl::GetFlag(FLAGS_wal_retry_interval);
    options->wal = wal;
  }
  return absl::OkStatus();
}

// The bearer tokens of --auth_tokens_file, if given; an error names the
// file.
absl::Status ApplyAuthTokensFlag(ServerOptions* options) {
  if (const std::string path = absl::GetFlag(FLAGS_auth_tokens_file);
      !path.empty()) {
    auto tokens = ReadPemFile(path, "auth tokens");
    auto auth = tokens.ok()
                    ? TokenAuthenticator::Create(*tokens)
                    : absl::StatusOr<std::unique_ptr<TokenAuthenticator>>(
                          tokens.status());
    if (!auth.ok()) {
      return absl::Status(auth.status().code(),
                          absl::StrCat(path, ": ", auth.status().message()));
    }
    options->auth = *std::move(auth);
  }
  return absl::OkStatus();
}

// The flags that may fail: the memory budget, checkpoints (flags win over
// the config's fields), TLS, the write-ahead log and the auth tokens.
absl::Status ApplyFlags(const schema::ReverbServerConfig& config,
                        ServerOptions* options) {
  RETURN_IF_ERROR(ApplyMemoryLimitFlag(options));
  ASSIGN_OR_RETURN(options->checkpointer,
                   MakeCheckpointer(config, &options->checkpoint_interval));
  ASSIGN_OR_RETURN(options->tls,
                   ServerTlsFromFiles(absl::GetFlag(FLAGS_tls_cert_file),
                                      absl::GetFlag(FLAGS_tls_key_file),
                                      absl::GetFlag(FLAGS_tls_client_ca_file)));
  RETURN_IF_ERROR(ApplyWalFlags(options));
  return ApplyAuthTokensFlag(options);
}

// Blocks the stop signals in every thread started after (gRPC's included),
// so that WaitForStopSignal takes them here and shutdown runs on this
// thread, not in a signal handler.
sigset_t BlockStopSignals() {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  return stop_signals;
}

// Tells what the server loaded and where it serves.
void ReportServing(const ReplayServer& server, const std::string& host,
                   size_t num_tables) {
  if (!server.loaded_checkpoint().empty()) {
    // stderr: stdout carries exactly one readiness line.
    std::fprintf(stderr, "reverb_tf_server: loaded checkpoint %s\n",
                 server.loaded_checkpoint().c_str());
  }
  if (server.metrics_port() >= 0) {
    std::fprintf(stderr, "reverb_tf_server: metrics on http://%s:%d/metrics\n",
                 host.c_str(), server.metrics_port());
  }
  std::printf("reverb_tf_server: serving %zu table(s) on port %d\n", num_tables,
              server.port());
  std::fflush(stdout);
}

// Returns once SIGINT or SIGTERM arrived.
void WaitForStopSignal(const sigset_t& stop_signals) {
  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  std::printf("reverb_tf_server: received signal %d, stopping\n",
              signal_number);
  std::fflush(stdout);
}

// --checkpoint_on_exit's checkpoint of a stopped server; returns the exit
// status (1 if it failed).
int WriteFinalCheckpoint(ReplayServer& server) {
  const absl::Time started = absl::Now();
  absl::StatusOr<CheckpointStats> saved = server.Checkpoint();
  if (!saved.ok()) {
    std::fprintf(stderr, "reverb_tf_server: final checkpoint failed: %s\n",
                 saved.status().ToString().c_str());
    return 1;
  }
  std::printf("reverb_tf_server: final checkpoint %s in %.3f s\n",
              saved->path.c_str(),
              absl::ToDoubleSeconds(absl::Now() - started));
  return 0;
}

// Stops the server, then writes the final checkpoint if asked to; returns
// the exit status.
int StopAndCheckpoint(ReplayServer& server) {
  const absl::Time stopping = absl::Now();
  server.Stop();
  int status = 0;
  if (absl::GetFlag(FLAGS_checkpoint_on_exit)) {
    status = WriteFinalCheckpoint(server);
  }
  std::printf("reverb_tf_server: stopped in %.3f s\n",
              absl::ToDoubleSeconds(absl::Now() - stopping));
  return status;
}

int Run() {
  auto config = LoadConfig();
  if (!config.ok()) return ReportBadStart(config.status());
  auto tables = TablesFromConfig(*config);
  if (!tables.ok()) return ReportBadStart(tables.status());
  ServerOptions options;
  // The process is the server's own: its free heap goes back when idle too.
  options.trim_idle_heap = true;
  options.port = config->port();
  if (config->max_message_bytes() > 0)
    options.max_message_bytes = config->max_message_bytes();
  options.max_active_streams = absl::GetFlag(FLAGS_max_active_streams);
  options.stream_threads = absl::GetFlag(FLAGS_stream_threads);
  options.host = absl::GetFlag(FLAGS_bind);
  options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  if (absl::Status applied = ApplyFlags(*config, &options); !applied.ok()) {
    return ReportBadStart(applied);
  }

  const sigset_t stop_signals = BlockStopSignals();
  auto server = ReplayServer::StartFromOptions(*tables, options);
  if (!server.ok()) {
    std::fprintf(stderr, "reverb_tf_server: %s\n",
                 server.status().ToString().c_str());
    return server.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  ReportServing(**server, options.host, tables->size());
  WaitForStopSignal(stop_signals);
  const int status = StopAndCheckpoint(**server);
  std::fflush(stdout);
  std::fflush(stderr);
  // Everything that must outlive the process is on disk (checkpoint files
  // are closed by Save()); freeing millions of items one by one would only
  // delay the exit.
  std::_Exit(status);
}

}  // namespace
}  // namespace reverb_tf

int main(int argc, char** argv) {
  // Before any thread exists, so that none gets an arena past the cap.
  reverb_tf::LimitMallocArenas();
  // Debian's absl is a shared library, and its test for a bool flag compares
  // type ids that our hidden-visibility build instantiates separately, so the
  // bare `--checkpoint_on_exit` would be refused for lacking a value: spell
  // the value out (`--nocheckpoint_on_exit` likewise).
  std::vector<char*> args(argv, argv + argc);
  static char kOn[] = "--checkpoint_on_exit=true";
  static char kOff[] = "--checkpoint_on_exit=false";
  for (size_t i = 1; i < args.size(); ++i) {
    const absl::string_view arg = args[i];
    if (arg == "--") break;
    if (arg == "--checkpoint_on_exit" || arg == "-checkpoint_on_exit")
      args[i] = kOn;
    if (arg == "--nocheckpoint_on_exit" || arg == "-nocheckpoint_on_exit")
      args[i] = kOff;
  }
  absl::ParseCommandLine(static_cast<int>(args.size()), args.data());
  return reverb_tf::Run();
}
