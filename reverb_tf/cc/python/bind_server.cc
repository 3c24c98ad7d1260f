// SPDX-License-Identifier: Apache-2.0
// reverb_tf._core.Server: a replay server hosting live tables.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "reverb_tf/cc/checkpointing/checkpointer.h"
#include "reverb_tf/cc/platform/logging.h"
#include "reverb_tf/cc/python/bindings.h"
#include "reverb_tf/cc/python/calls.h"
#include "reverb_tf/cc/python/conversions.h"
#include "reverb_tf/cc/security/auth.h"
#include "reverb_tf/cc/security/credentials.h"
#include "reverb_tf/cc/service/server.h"

namespace reverb_tf::binding {

void BindServer(nb::module_& m) {
  nb::class_<ReplayServer>(m, "Server")
      .def(nb::new_([](std::vector<std::shared_ptr<Table>> tables, int port,
                       int64_t max_message_bytes,
                       const std::string& checkpoint_root,
                       const std::string& fallback_checkpoint_path,
                       int checkpoint_keep, const std::string& checkpoint_group,
                       double checkpoint_interval_s,
                       Truth checkpoint_load_previous_if_damaged,
                       Truth checkpoint_temporary, int64_t max_active_streams,
                       const std::string& host, int metrics_port,
                       const std::string& tls_cert_file,
                       const std::string& tls_key_file,
                       const std::string& tls_client_ca_file,
                       const std::string& auth_tokens_file,
                       const std::string& wal_dir, const std::string& wal_sync,
                       double wal_sync_interval_s, double wal_retry_interval_s,
                       int64_t memory_limit, const std::string& spill_dir,
                       int stream_threads, bool spill_mmap) {
             ServerOptions options;
             if (!wal_dir.empty()) {
               WalOptions wal;
               wal.dir = wal_dir;
               wal.sync = ValueOrRaise(ParseWalSync(wal_sync));
               wal.interval = absl::Seconds(wal_sync_interval_s);
               wal.retry_interval = absl::Seconds(wal_retry_interval_s);
               options.wal = wal;
             }
             options.tls = ValueOrRaise(ServerTlsFromFiles(
                 tls_cert_file, tls_key_file, tls_client_ca_file));
             if (!auth_tokens_file.empty()) {
               const std::string tokens =
                   ValueOrRaise(ReadPemFile(auth_tokens_file, "auth tokens"));
               options.auth = ValueOrRaise(TokenAuthenticator::Create(tokens));
             }
             options.metrics_port = metrics_port;
             options.memory_limit = memory_limit;
             options.spill_dir = spill_dir;
             options.spill_mmap = spill_mmap;
             options.port = port;
             options.host = host;
             options.max_message_bytes = max_message_bytes;
             options.max_active_streams = max_active_streams;
             options.stream_threads = stream_threads;
             options.checkpoint_interval = absl::Seconds(checkpoint_interval_s);
             std::optional<CheckpointerOptions> checkpointer;
             if (!checkpoint_root.empty()) {
               checkpointer.emplace();
               checkpointer->root = checkpoint_root;
               checkpointer->fallback_checkpoint_path =
                   fallback_checkpoint_path;
               checkpointer->keep = checkpoint_keep;
               checkpointer->group = checkpoint_group;
               checkpointer->load_previous_if_damaged =
                   checkpoint_load_previous_if_damaged;
               checkpointer->temporary = checkpoint_temporary;
             }
             // Before the checkpointer makes its directory.
             CheckOk(ReplayServer::CheckStart(
                 tables, options,
                 checkpointer.has_value() ? &*checkpointer : nullptr));
             if (checkpointer.has_value()) {
               options.checkpointer = ValueOrRaise(WithoutGil([&] {
                 return Checkpointer::Create(*std::move(checkpointer));
               }));
             }
             // Loading a checkpoint can take a while: other Python threads run.
             return ValueOrRaise(WithoutGil(
                 [&] { return ReplayServer::Start(tables, options); }));
           }),
           // Every default is the native options' own.
           nb::arg("tables"), nb::arg("port") = ServerOptions().port,
           nb::arg("max_message_bytes") = ServerOptions().max_message_bytes,
           nb::arg("checkpoint_root") = CheckpointerOptions().root,
           nb::arg("fallback_checkpoint_path") =
               CheckpointerOptions().fallback_checkpoint_path,
           nb::arg("checkpoint_keep") = CheckpointerOptions().keep,
           nb::arg("checkpoint_group") = CheckpointerOptions().group,
           nb::arg("checkpoint_interval_s") =
               absl::ToDoubleSeconds(ServerOptions().checkpoint_interval),
           nb::arg("checkpoint_load_previous_if_damaged").none() =
               CheckpointerOptions().load_previous_if_damaged,
           nb::arg("checkpoint_temporary").none() =
               CheckpointerOptions().temporary,
           nb::arg("max_active_streams") = ServerOptions().max_active_streams,
           nb::arg("host") = ServerOptions().host,
           nb::arg("metrics_port") = ServerOptions().metrics_port,
           nb::arg("tls_cert_file") = "", nb::arg("tls_key_file") = "",
           nb::arg("tls_client_ca_file") = "", nb::arg("auth_tokens_file") = "",
           nb::arg("wal_dir") = "",
           nb::arg("wal_sync") = std::string(WalSyncName(WalOptions().sync)),
           nb::arg("wal_sync_interval_s") =
               absl::ToDoubleSeconds(WalOptions().interval),
           nb::arg("wal_retry_interval_s") =
               absl::ToDoubleSeconds(WalOptions().retry_interval),
           nb::arg("memory_limit") = ServerOptions().memory_limit,
           nb::arg("spill_dir") = ServerOptions().spill_dir,
           nb::arg("stream_threads") = ServerOptions().stream_threads,
           nb::arg("spill_mmap") = ServerOptions().spill_mmap)
      .def("spill_stats",
           [](const ReplayServer& server) {
             return SpillDict(server.spill_stats());
           })
      .def_prop_ro("wal_replay",
                   [](const ReplayServer& server) {
                     const WalReplay& r = server.wal_replay();
                     nb::dict out;
                     out["entries"] = r.entries;
                     out["files"] = r.files;
                     out["last_position"] = r.last_position;
                     out["damage"] = r.damage;
                     return out;
                   })
      .def_prop_ro("port", &ReplayServer::port)
      .def_prop_ro("metrics_port", &ReplayServer::metrics_port)
      .def("metrics_text", &ReplayServer::MetricsText)
      .def_prop_ro("loaded_checkpoint", &ReplayServer::loaded_checkpoint)
      .def_prop_ro("skipped_checkpoints", &ReplayServer::skipped_checkpoints)
      .def(
          "checkpoint",
          [](ReplayServer& server) {
            auto stats = WithoutGil([&] { return server.Checkpoint(); });
            CheckOk(stats.status());
            nb::dict out;
            out["path"] = stats->path;
            out["max_table_pause_s"] =
                absl::ToDoubleSeconds(stats->max_table_pause);
            out["total_s"] = absl::ToDoubleSeconds(stats->total);
            out["num_items"] = stats->num_items;
            out["num_chunks"] = stats->num_chunks;
            out["bytes"] = stats->bytes;
            out["bytes_on_disk"] = stats->bytes_on_disk;
            out["spill_files"] = stats->spill_files;
            return out;
          },
          "Saves a checkpoint; returns its path and timings (for benchmarks).")
      .def("stop",
           [](ReplayServer& server) { WithoutGil([&] { server.Stop(); }); })
      .def("wait", [](ReplayServer& server) {
        // Sliced so that Ctrl-C reaches Python; Stop() from another thread ends
        // it.
        WaitInSlices(absl::InfiniteDuration(), [&](absl::Duration slice) {
          return server.WaitFor(slice) ? absl::OkStatus()
                                       : absl::DeadlineExceededError("waiting");
        });
      });
}

void BindLogging(nb::module_& m) {
  m.def(
      "set_log_sink",
      [](nb::object sink) {
        LogSink native;
        if (!sink.is_none()) {
          // The callable is released with the GIL held, on whichever thread
          // drops the last copy of the sink.
          std::shared_ptr<nb::object> callable(new nb::object(std::move(sink)),
                                               [](nb::object* object) {
                                                 nb::gil_scoped_acquire gil;
                                                 delete object;
                                               });
          native = [callable](LogSeverity severity, absl::string_view line) {
            nb::gil_scoped_acquire gil;
            try {
              (*callable)(static_cast<int>(severity), std::string(line));
            } catch (nb::python_error& error) {
              error.discard_as_unraisable("reverb_tf's log sink");
            }
          };
        }
        // SetLogSink waits for the delivery thread, which may be waiting for
        // the GIL.
        nb::gil_scoped_release release;
        SetLogSink(std::move(native));
      },
      nb::arg("sink").none(),
      "Sends the core's log lines to sink(severity, line) (severity 0 info, "
      "1 warning, 2 error) on a thread of the core's; None: to stderr.");
}

}  // namespace reverb_tf::binding
