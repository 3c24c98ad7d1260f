// SPDX-License-Identifier: Apache-2.0
// reverb_tf._core.Client and what it hands out besides writers: samplers,
// client security and the in-process switch.
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
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "reverb_tf/cc/client/shared_clients.h"
#include "reverb_tf/cc/local_server.h"
#include "reverb_tf/cc/patterns/structured_writer.h"
#include "reverb_tf/cc/python/bindings.h"
#include "reverb_tf/cc/python/calls.h"
#include "reverb_tf/cc/python/conversions.h"
#include "reverb_tf/cc/security/credentials.h"

namespace reverb_tf::binding {

namespace {

// (updated, deleted, missing, unreachable, warning), as Python reads a
// MutationReport.
using MutationTuple = std::tuple<int64_t, int64_t, int64_t,
                                 std::vector<std::string>, std::string>;

// One priority mutation as the bindings make it (the main thread waiting for
// the streams' answers itself where it can).
MutationTuple MutateAndReport(
    Client& client, const std::string& table,
    const std::vector<std::pair<Key, double>>& updates,
    const std::vector<Key>& deletes, std::optional<double> timeout_s) {
  MutationReport r;
  if (!timeout_s.has_value() &&
      PyThread_get_thread_ident() == main_thread_ident && !client.InProcess()) {
    // The main thread waits for the streams' answers itself, in
    // slices, checking for Ctrl-C between them: no hand-over to a
    // worker thread and back (two wake-ups, ~40 us of a ~250 us
    // call). Ctrl-C abandons the request (its destructor), so
    // the streams need no cancellation.
    std::unique_ptr<PendingMutation> pending = ValueOrRaise(WithoutGil([&] {
      return client.StartMutatePriorities(table, updates, deletes, nullptr);
    }));
    WaitInSlices(absl::InfiniteDuration(), [&](absl::Duration slice) {
      return pending->AwaitStreams(absl::Now() + slice);
    });
    r = ValueOrRaise(pending->NeedsCalls()
                         ? RunCancellable([&](Cancellation* cancel) {
                             return pending->Finish(cancel);
                           })
                         : pending->Finish(nullptr));
  } else {
    r = ValueOrRaise(RunClientCall(client, [&](Cancellation* cancel) {
      return client.MutatePriorities(table, updates, deletes,
                                     TimeoutFromSeconds(timeout_s), cancel);
    }));
  }
  return {r.updated, r.deleted, r.missing, std::move(r.unreachable),
          std::move(r.warning)};
}

void BindSampler(nb::module_& m) {
  nb::class_<Sampler>(m, "Sampler")
      .def(
          "next_batch",
          [](Sampler& sampler, int64_t max_items) {
            // Blocks for the first sample only; returns what followed it up
            // to max_items. An empty list: the stream ended (max_samples).
            std::vector<Sample> batch;
            const absl::Status status =
                RunCancellable([&](Cancellation* cancel) {
                  Cancellation::Id id = 0;
                  if (!cancel->Register([&sampler] { sampler.Cancel(); },
                                        &id)) {
                    return absl::CancelledError("sampling was cancelled");
                  }
                  Sample sample;
                  absl::Status result = sampler.Next(&sample);
                  if (result.ok()) {
                    batch.push_back(std::move(sample));
                    while (static_cast<int64_t>(batch.size()) < max_items &&
                           sampler.TryNext(&sample)) {
                      batch.push_back(std::move(sample));
                    }
                  }
                  cancel->UnregisterAndWait(id);
                  return absl::IsOutOfRange(result) ? absl::OkStatus() : result;
                });
            CheckOk(status);
            nb::list out;
            for (Sample& sample : batch) {
              nb::list columns;
              for (TensorPayload& column : sample.columns) {
                columns.append(ArrayFromPayload(std::move(column)));
              }
              nb::list squeezed;
              for (bool flag : sample.squeezed)
                squeezed.append(nb::bool_(flag));
              out.append(nb::make_tuple(SampleInfoTuple(sample.info), columns,
                                        squeezed));
            }
            return out;
          },
          nb::arg("max_items"))
      .def(
          "next_stacked",
          [](Sampler& sampler, int64_t batch_size) -> nb::object {
            // Blocks for a full batch, stacked in C++ without the GIL.
            // Returns (batch, None); (short batch, error) when the sampler
            // failed after some samples came (the caller raises the error
            // after handing the samples on); (None, None) once it ended
            // (max_samples) with nothing left. Raises when it failed with
            // nothing to hand on.
            StackedBatch batch;
            absl::Status status = RunCancellable([&](Cancellation* cancel) {
              Cancellation::Id id = 0;
              if (!cancel->Register([&sampler] { sampler.Cancel(); }, &id)) {
                return absl::CancelledError("sampling was cancelled");
              }
              absl::Status result =
                  NextStackedBatch(&sampler, batch_size, &batch);
              cancel->UnregisterAndWait(id);
              return result;
            });
            if (absl::IsOutOfRange(status)) status = absl::OkStatus();
            if (!status.ok() &&
                (batch.size() == 0 || absl::IsInvalidArgument(status))) {
              RaiseStatus(status);
            }
            nb::object error = nb::none();
            if (!status.ok()) {
              error = nb::module_::import_("reverb_tf.errors")
                          .attr("from_status")(static_cast<int>(status.code()),
                                               std::string(status.message()));
            }
            if (batch.size() == 0) return nb::make_tuple(nb::none(), error);
            return nb::make_tuple(StackedBatchTuple(std::move(batch)), error);
          },
          nb::arg("batch_size"))
      .def("cancel", &Sampler::Cancel,
           "Ends a blocked or later next_batch()/next_stacked() with "
           "CANCELLED; any thread.");
}

void BindClientSecurity(nb::module_& m) {
  nb::class_<ClientSecurity>(
      m, "ClientSecurity",
      "TLS and bearer token of clients (security/credentials.h).")
      .def(nb::init<>(), "Plaintext, no token.")
      .def_static("from_environment",
                  [] { return ValueOrRaise(SecurityFromEnvironment()); })
      .def(
          "derived",
          [](const ClientSecurity& base, std::optional<std::string> ca_file,
             std::optional<std::string> cert_file,
             std::optional<std::string> key_file,
             std::optional<std::string> server_name,
             std::optional<std::string> token) {
            // The given parts replace the base's; files are read now.
            ClientSecurity derived = ValueOrRaise(ClientSecurityFromFiles(
                ca_file.value_or(""), cert_file.value_or(""),
                key_file.value_or(""), server_name.value_or(""),
                token.value_or("")));
            if (!ca_file.has_value()) {
              derived.root_certs = base.root_certs;
              derived.cert_chain = base.cert_chain;
              derived.private_key = base.private_key;
              derived.server_name = base.server_name;
            } else if (!server_name.has_value()) {
              derived.server_name = "";
            }
            if (!token.has_value()) derived.token = base.token;
            CheckOk(derived.Validate());
            return derived;
          },
          nb::arg("ca_file") = nb::none(), nb::arg("cert_file") = nb::none(),
          nb::arg("key_file") = nb::none(), nb::arg("server_name") = nb::none(),
          nb::arg("token") = nb::none())
      .def_prop_ro("tls", &ClientSecurity::tls)
      .def_prop_ro(
          "mutual_tls",
          [](const ClientSecurity& s) { return !s.cert_chain.empty(); })
      .def_prop_ro("has_token",
                   [](const ClientSecurity& s) { return !s.token.empty(); })
      .def("__repr__", [](const ClientSecurity& s) {
        // Never the token or the key.
        return absl::StrCat(
            "ClientSecurity(tls=", s.tls() ? "True" : "False",
            ", mutual_tls=", s.cert_chain.empty() ? "False" : "True",
            ", server_name='", s.server_name,
            "', token=", s.token.empty() ? "None" : "'***'", ")");
      });
}

// The in-process switch and the clients' default security.
void BindClientSettings(nb::module_& m) {
  m.def(
      "set_in_process_enabled",
      [](Truth enabled) { SetInProcessEnabled(enabled); },
      "Clients of a server of this process reach its tables directly "
      "(default: on "
      "unless REVERB_TF_IN_PROCESS=0); off, every call goes over gRPC.",
      nb::arg("enabled").none());
  m.def("in_process_enabled", &InProcessEnabled);
  m.def("default_client_security",
        [] { return ValueOrRaise(DefaultClientSecurity()); });
  m.def("set_default_client_security", [](const ClientSecurity& security) {
    CheckOk(SetDefaultClientSecurity(security));
  });
}

// TFClient.update_priorities when executing eagerly: the op kernel's work
// (through the shared Client of the address, as the ops reach it) without
// TensorFlow's eager dispatch, which runs each op as a function and cost
// about 50 us of client CPU per call here, a quarter of a remote update.
// Python makes the op instead after any error, so that errors keep the
// op's classes and words (updates are idempotent).
void BindTfUpdatePriorities(nb::module_& m) {
  m.def(
      "tf_update_priorities",
      [](const std::string& address, const std::string& table,
         nb::handle keys_like, nb::handle priorities_like) {
        const ContiguousArray keys(keys_like, DType::kUint64);
        const ContiguousArray priorities(priorities_like, DType::kDouble);
        if (keys.ndim() != 1 || priorities.ndim() != 1 ||
            keys.shape(0) != priorities.shape(0)) {
          RaiseStatus(absl::InvalidArgumentError(
              "keys and priorities must be vectors of the same length"));
        }
        std::shared_ptr<Client> client = ValueOrRaise(SharedClient(address));
        std::vector<std::pair<Key, double>> updates(keys.shape(0));
        const Key* k = keys.data<Key>();
        const double* p = priorities.data<double>();
        for (size_t i = 0; i < updates.size(); ++i) updates[i] = {k[i], p[i]};
        return MutateAndReport(*client, table, updates, {}, std::nullopt);
      },
      // Any array-like, converted as numpy.asarray(keys, numpy.uint64)
      // converts it.
      nb::sig("def tf_update_priorities(server_address: str, table: str, "
              "keys: numpy.typing.ArrayLike, "
              "priorities: numpy.typing.ArrayLike) "
              "-> tuple[int, int, int, list[str], str]"),
      "(updated, deleted, missing, unreachable, warning) of a priority "
      "update made as TFClient's op makes it.",
      nb::arg("server_address"), nb::arg("table"), nb::arg("keys"),
      nb::arg("priorities"));
}

// Client.server_info_by_shard: [(address, {name: TableInfo} or None,
// (code, message) or None, spill dict or None)] per shard.
nb::list ServerInfoByShard(Client& client, std::optional<double> timeout_s) {
  std::vector<ShardInfo> shards;
  CheckOk(RunCancellable([&](Cancellation* cancel) {
    shards = client.ServerInfoByShard(TimeoutFromSeconds(timeout_s), cancel);
    return absl::OkStatus();
  }));
  nb::list out;
  for (ShardInfo& shard : shards) {
    if (shard.tables.ok()) {
      out.append(nb::make_tuple(shard.address,
                                TablesDict(*std::move(shard.tables)),
                                nb::none(), SpillDict(shard.spill)));
    } else {
      const absl::Status& status = shard.tables.status();
      out.append(nb::make_tuple(shard.address, nb::none(),
                                nb::make_tuple(static_cast<int>(status.code()),
                                               std::string(status.message())),
                                nb::none()));
    }
  }
  return out;
}

// Client.mutate_priorities: updates as two lists.
MutationTuple MutatePrioritiesFromLists(Client& client,
                                        const std::string& table,
                                        const std::vector<Key>& keys,
                                        const std::vector<double>& priorities,
                                        const std::vector<Key>& deletes,
                                        std::optional<double> timeout_s) {
  if (keys.size() != priorities.size()) {
    RaiseStatus(absl::InvalidArgumentError(absl::StrCat(
        keys.size(), " keys but ", priorities.size(), " priorities")));
  }
  std::vector<std::pair<Key, double>> updates(keys.size());
  for (size_t i = 0; i < keys.size(); ++i)
    updates[i] = {keys[i], priorities[i]};
  return MutateAndReport(client, table, updates, deletes, timeout_s);
}

// Client.mutate_priorities_dict: the common case of Python's
// mutate_priorities, a dict of int keys to float (or int) priorities, read
// straight from it rather than through two lists. None: not that case;
// nothing was sent and Python takes the general path (which also reports
// what is wrong).
std::optional<MutationTuple> MutatePrioritiesFromDict(
    Client& client, const std::string& table, nb::handle updates,
    const std::vector<Key>& deletes, std::optional<double> timeout_s) {
  if (!PyDict_CheckExact(updates.ptr())) return std::nullopt;
  std::vector<std::pair<Key, double>> pairs;
  pairs.reserve(PyDict_Size(updates.ptr()));
  PyObject* key;
  PyObject* priority;
  Py_ssize_t pos = 0;
  while (PyDict_Next(updates.ptr(), &pos, &key, &priority)) {
    const std::optional<double> p = PlainNumber(priority);
    if (!PyLong_CheckExact(key) || !p.has_value()) return std::nullopt;
    const unsigned long long k =  // NOLINT(runtime/int)
        PyLong_AsUnsignedLongLong(key);
    if (PyErr_Occurred()) {
      PyErr_Clear();  // negative or too large: the general path's
      return std::nullopt;
    }
    pairs.emplace_back(static_cast<Key>(k), *p);
  }
  return MutateAndReport(client, table, pairs, deletes, timeout_s);
}

void BindClientClass(nb::module_& m) {
  nb::class_<Client>(m, "Client")
      .def(nb::new_([](const std::string& address, int64_t max_message_bytes,
                       std::optional<ClientSecurity> security) {
             ClientOptions options;
             options.max_message_bytes = max_message_bytes;
             options.security = std::move(security);
             return ValueOrRaise(Client::Create(address, options));
           }),
           nb::arg("server_address"),
           nb::arg("max_message_bytes") = ClientOptions().max_message_bytes,
           nb::arg("security") = nb::none())
      .def_prop_ro("server_address", &Client::server_address)
      .def(
          "server_info",
          [](Client& client, std::optional<double> timeout_s) {
            auto tables = RunClientCall(client, [&](Cancellation* cancel) {
              return client.ServerInfo(TimeoutFromSeconds(timeout_s), cancel);
            });
            return TablesDict(ValueOrRaise(std::move(tables)));
          },
          nb::arg("timeout_s") = nb::none())
      .def(
          "server_info_of_any_shard",
          [](Client& client, std::optional<double> timeout_s) {
            auto tables = RunCancellable([&](Cancellation* cancel) {
              return client.ServerInfoOfAnyShard(TimeoutFromSeconds(timeout_s),
                                                 cancel);
            });
            return TablesDict(ValueOrRaise(std::move(tables)));
          },
          "The tables of the first shard that answers (options and "
          "signatures).",
          nb::arg("timeout_s") = nb::none())
      .def("server_info_by_shard", &ServerInfoByShard,
           "[(address, {name: TableInfo} or None, (code, message) or None)] "
           "per shard.",
           nb::arg("timeout_s") = nb::none())
      .def_prop_ro("shard_addresses", &Client::ShardAddresses)
      .def("mutate_priorities", &MutatePrioritiesFromLists, nb::arg("table"),
           nb::arg("keys"), nb::arg("priorities"), nb::arg("deletes"),
           nb::arg("timeout_s") = nb::none())
      .def("mutate_priorities_dict", &MutatePrioritiesFromDict,
           nb::arg("table"), nb::arg("updates").none(), nb::arg("deletes"),
           nb::arg("timeout_s") = nb::none())
      .def(
          "reset",
          [](Client& client, const std::string& table,
             std::optional<double> timeout_s) {
            CheckOk(RunClientCall(client, [&](Cancellation* cancel) {
              return client.Reset(table, TimeoutFromSeconds(timeout_s), cancel);
            }));
          },
          nb::arg("table"), nb::arg("timeout_s") = nb::none())
      .def(
          "checkpoint",
          [](Client& client, std::optional<double> timeout_s) {
            return ValueOrRaise(RunCancellable([&](Cancellation* cancel) {
              return client.Checkpoint(TimeoutFromSeconds(timeout_s), cancel);
            }));
          },
          nb::arg("timeout_s") = nb::none())
      .def(
          "new_sampler",
          [](Client& client, const std::string& table, int64_t max_samples,
             int64_t max_in_flight, std::optional<double> timeout_s,
             int32_t num_streams, int64_t max_samples_per_stream) {
            SamplerOptions options;
            options.max_samples = max_samples;
            options.max_in_flight = max_in_flight;
            options.rate_limiter_timeout = TimeoutFromSeconds(timeout_s);
            options.num_streams = num_streams;
            options.max_samples_per_stream = max_samples_per_stream;
            return ValueOrRaise(client.NewSampler(table, options));
          },
          "A sampler (one stream per shard unless num_streams says more): at "
          "most "
          "max_in_flight samples per stream are requested ahead of "
          "next_batch(), so "
          "memory stays bounded for any max_samples.",
          nb::arg("table"), nb::arg("max_samples"), nb::arg("max_in_flight"),
          nb::arg("timeout_s") = nb::none(), nb::arg("num_streams") = -1,
          nb::arg("max_samples_per_stream") = -1)
      .def(
          "new_writer",
          [](Client& client, int32_t num_keep_alive_refs,
             std::optional<int32_t> max_chunk_length,
             int32_t max_in_flight_items, Truth legacy_items, int32_t num_lanes,
             Truth validate_items,
             std::optional<double> rate_limiter_timeout_s) {
            TrajectoryWriterOptions options;
            options.rate_limiter_timeout =
                TimeoutFromSeconds(rate_limiter_timeout_s);
            options.legacy_items = legacy_items;
            options.validate_items = validate_items;
            options.num_lanes = num_lanes;
            options.num_keep_alive_refs = num_keep_alive_refs;
            options.max_chunk_length = max_chunk_length.value_or(0);
            options.max_in_flight_items = max_in_flight_items;
            return ValueOrRaise(client.NewTrajectoryWriter(options));
          },
          nb::arg("num_keep_alive_refs") = 1,
          nb::arg("max_chunk_length") = nb::none(),
          nb::arg("max_in_flight_items") = 128,
          nb::arg("legacy_items").none() = false, nb::arg("num_lanes") = 0,
          nb::arg("validate_items").none() = true,
          nb::arg("rate_limiter_timeout_s") = nb::none())
      .def(
          "new_structured_writer",
          [](Client& client, const std::vector<nb::bytes>& configs) {
            std::vector<std::string> serialized;
            serialized.reserve(configs.size());
            for (const nb::bytes& config : configs) {
              serialized.emplace_back(static_cast<const char*>(config.data()),
                                      config.size());
            }
            return ValueOrRaise(StructuredWriter::Create(client, serialized));
          },
          nb::arg("serialized_configs"));
}

}  // namespace

void BindClient(nb::module_& m) {
  // Sampler first: Client's methods return one, and nanobind names a type
  // in a signature only once it is bound.
  BindSampler(m);
  BindClientSecurity(m);
  BindClientSettings(m);
  BindTfUpdatePriorities(m);
  BindClientClass(m);
}

}  // namespace reverb_tf::binding
