// SPDX-License-Identifier: Apache-2.0
// The table-side classes of reverb_tf._core: selector and rate-limiter
// options, table options and infos, live tables, checkpoint inspection.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

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
#include "reverb_tf/cc/python/bindings.h"
#include "reverb_tf/cc/python/calls.h"
#include "reverb_tf/cc/python/conversions.h"
#include "reverb_tf/cc/table.h"
#include "reverb_tf/cc/wire/serialized_table_info.h"

namespace reverb_tf::binding {
namespace {

TableOptions MakeTableOptions(const std::string& name,
                              const SelectorOptions& sampler,
                              const SelectorOptions& remover, int64_t max_size,
                              int32_t max_times_sampled,
                              const RateLimiterOptions& limiter,
                              std::optional<SignatureList> signature,
                              const py::bytes& nested_structure) {
  TableOptions options;
  options.name = name;
  options.sampler = sampler;
  options.remover = remover;
  options.max_size = max_size;
  options.max_times_sampled = max_times_sampled;
  options.rate_limiter = limiter;
  if (signature.has_value()) {
    options.signature = MakeTableSignature(*signature);
    options.signature->nested_structure = nested_structure;
  }
  CheckArgument(options.CheckNew());
  return options;
}

// Selector kinds under the names Python's reverb_tf.item_selectors uses.
void BindSelectorKind(py::module_& m) {
  py::enum_<SelectorOptions::Kind>(m, "SelectorKind")
      .value("uniform", SelectorOptions::Kind::kUniform)
      .value("prioritized", SelectorOptions::Kind::kPrioritized)
      .value("fifo", SelectorOptions::Kind::kFifo)
      .value("lifo", SelectorOptions::Kind::kLifo)
      .value("min_heap", SelectorOptions::Kind::kMinHeap)
      .value("max_heap", SelectorOptions::Kind::kMaxHeap);
}

void BindSelectorOptions(py::module_& m) {
  py::class_<SelectorOptions>(m, "SelectorOptions")
      .def(py::init([](SelectorOptions::Kind kind, double priority_exponent) {
             SelectorOptions options{kind, priority_exponent};
             CheckArgument(options.Validate());
             return options;
           }),
           py::arg("kind"), py::arg("priority_exponent") = 1.0)
      .def_readonly("kind", &SelectorOptions::kind)
      .def_readonly("priority_exponent", &SelectorOptions::priority_exponent)
      .def("__repr__", [](const SelectorOptions& o) {
        return absl::StrCat(
            "SelectorOptions(",
            py::str(py::cast(o.kind).attr("name")).cast<std::string>(),
            ", priority_exponent=", o.priority_exponent, ")");
      });
}

// The rate limiter's parameters and presets, each checked by the core
// (ValueError with its message): the one definition and the one set of
// checks Python's reverb_tf.rate_limiters builds on.
void BindRateLimiterOptions(py::module_& m) {
  py::class_<RateLimiterOptions>(m, "RateLimiterOptions")
      .def(py::init([](double samples_per_insert, int64_t min_size_to_sample,
                       double min_diff, double max_diff) {
             return ArgumentOrRaise(RateLimiterOptions::Checked(
                 samples_per_insert, min_size_to_sample, min_diff, max_diff));
           }),
           py::arg("samples_per_insert"), py::arg("min_size_to_sample"),
           py::arg("min_diff"), py::arg("max_diff"))
      .def_static(
          "min_size",
          [](int64_t min_size_to_sample) {
            return ArgumentOrRaise(
                RateLimiterOptions::CheckedMinSize(min_size_to_sample));
          },
          py::arg("min_size_to_sample"))
      .def_static(
          "sample_to_insert_ratio",
          [](double samples_per_insert, int64_t min_size_to_sample,
             double error_buffer) {
            return ArgumentOrRaise(
                RateLimiterOptions::CheckedSampleToInsertRatio(
                    samples_per_insert, min_size_to_sample, error_buffer));
          },
          py::arg("samples_per_insert"), py::arg("min_size_to_sample"),
          py::arg("error_buffer"))
      .def_static(
          "sample_to_insert_ratio_window",
          [](double samples_per_insert, int64_t min_size_to_sample,
             double min_diff, double max_diff) {
            return ArgumentOrRaise(
                RateLimiterOptions::CheckedSampleToInsertRatio(
                    samples_per_insert, min_size_to_sample, min_diff,
                    max_diff));
          },
          py::arg("samples_per_insert"), py::arg("min_size_to_sample"),
          py::arg("min_diff"), py::arg("max_diff"))
      .def_static(
          "queue",
          [](int64_t size) {
            return ArgumentOrRaise(RateLimiterOptions::CheckedQueue(size));
          },
          py::arg("size"))
      .def_readonly("samples_per_insert",
                    &RateLimiterOptions::samples_per_insert)
      .def_readonly("min_size_to_sample",
                    &RateLimiterOptions::min_size_to_sample)
      .def_readonly("min_diff", &RateLimiterOptions::min_diff)
      .def_readonly("max_diff", &RateLimiterOptions::max_diff)
      // Empty, or why valid options may still surprise a program.
      .def("caveat", &RateLimiterOptions::Caveat)
      .def("__repr__", &RateLimiterOptions::DebugString);
}

void BindTableOptions(py::module_& m) {
  py::class_<TableOptions>(m, "TableOptions")
      .def(py::init(&MakeTableOptions), py::arg("name"), py::arg("sampler"),
           py::arg("remover"), py::arg("max_size"),
           py::arg("max_times_sampled"), py::arg("rate_limiter"),
           py::arg("signature"), py::arg("nested_structure") = py::bytes(""))
      .def_property_readonly("name",
                             [](const TableOptions& o) { return o.name; });
}

// What Python reads of a table's info is the serialized schema::TableInfo
// (reverb_types.TableInfo.from_serialized_proto), the message a remote
// client gets; the accessors are what Python needs before decoding it.
void BindTableInfo(py::module_& m) {
  py::class_<TableInfo>(m, "TableInfo")
      .def_property_readonly("name",
                             [](const TableInfo& i) { return i.options.name; })
      .def(
          "serialized_proto",
          [](const TableInfo& i) { return py::bytes(SerializeTableInfo(i)); },
          "The info as a serialized reverb_tf.schema.TableInfo.")
      .def_property_readonly(
          "signature",
          [](const TableInfo& i) -> py::object {
            if (!i.options.signature.has_value()) return py::none();
            py::list columns;
            for (const ColumnSpec& c : i.options.signature->columns) {
              columns.append(
                  py::make_tuple(c.name, NumpyDType(c.dtype), c.shape));
            }
            return columns;
          })
      .def_property_readonly("nested_structure", [](const TableInfo& i) {
        return py::bytes(i.options.signature.has_value()
                             ? i.options.signature->nested_structure
                             : "");
      });
}

void BindInspectCheckpoint(py::module_& m) {
  m.def(
      "inspect_checkpoint",
      [](const std::string& path, std::optional<py::function> progress) {
        // Python errors in the callback (Ctrl-C) end the reporting; the
        // first is raised once the native call returns.
        std::optional<py::error_already_set> callback_error;
        std::function<void(uint64_t, uint64_t)> report;
        if (progress.has_value()) {
          report = [&](uint64_t done, uint64_t total) {
            py::gil_scoped_acquire gil;
            if (callback_error.has_value()) return;
            try {
              (*progress)(done, total);
            } catch (py::error_already_set& error) {
              callback_error = std::move(error);
            }
          };
        }
        absl::StatusOr<CheckpointSummary> summary =
            WithoutGil([&] { return InspectCheckpoint(path, report); });
        if (callback_error.has_value()) throw *callback_error;
        CheckOk(summary.status());
        py::dict out;
        out["path"] = summary->path;
        out["written_by"] = summary->written_by;
        out["file_bytes"] = summary->file_bytes;
        out["num_chunks"] = summary->num_chunks;
        out["tables"] = py::cast(summary->tables);
        return out;
      },
      py::arg("path"), py::arg("progress") = py::none(),
      "Reads and verifies a checkpoint directory (see checkpointer.h).");
}

// A live table (table.h), owned by Python's reverb_tf.Table from its
// construction and shared with the servers that host it.
void BindTable(py::module_& m) {
  py::class_<Table, std::shared_ptr<Table>>(m, "Table")
      .def(py::init([](const TableOptions& options) {
             std::random_device seed_source;
             const uint64_t seed =
                 (uint64_t{seed_source()} << 32) | seed_source();
             return ValueOrRaise(Table::Create(options, seed));
           }),
           py::arg("options"))
      .def_property_readonly("name", &Table::name)
      .def("info", &Table::info,
           "The table's info, read in this process (no RPC).")
      .def("can_insert",
           [](const Table& table, int64_t n) {
             return ValueOrRaise(table.CanInsert(n));
           })
      .def("can_sample", [](const Table& table, int64_t n) {
        return ValueOrRaise(table.CanSample(n));
      });
}

}  // namespace

void BindTables(py::module_& m) {
  // In this order: pybind11 names a type in a signature only once it is
  // bound (SelectorKind in SelectorOptions', both in TableOptions', ...).
  BindSelectorKind(m);
  BindSelectorOptions(m);
  BindRateLimiterOptions(m);
  BindTableOptions(m);
  BindTableInfo(m);
  BindInspectCheckpoint(m);
  BindTable(m);
}

}  // namespace reverb_tf::binding
