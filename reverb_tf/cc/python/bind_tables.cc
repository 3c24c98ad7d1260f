// SPDX-License-Identifier: Apache-2.0
// The table-side classes of reverb_tf._core: selector and rate-limiter
// options, table options and infos, live tables, checkpoint inspection.
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
                              const nb::bytes& nested_structure) {
  TableOptions options;
  options.name = name;
  options.sampler = sampler;
  options.remover = remover;
  options.max_size = max_size;
  options.max_times_sampled = max_times_sampled;
  options.rate_limiter = limiter;
  if (signature.has_value()) {
    options.signature = MakeTableSignature(*signature);
    options.signature->nested_structure =
        std::string(static_cast<const char*>(nested_structure.data()),
                    nested_structure.size());
  }
  CheckArgument(options.CheckNew());
  return options;
}

// Selector kinds under the names Python's reverb_tf.item_selectors uses.
void BindSelectorKind(nb::module_& m) {
  nb::enum_<SelectorOptions::Kind>(m, "SelectorKind")
      .value("uniform", SelectorOptions::Kind::kUniform)
      .value("prioritized", SelectorOptions::Kind::kPrioritized)
      .value("fifo", SelectorOptions::Kind::kFifo)
      .value("lifo", SelectorOptions::Kind::kLifo)
      .value("min_heap", SelectorOptions::Kind::kMinHeap)
      .value("max_heap", SelectorOptions::Kind::kMaxHeap);
}

void BindSelectorOptions(nb::module_& m) {
  nb::class_<SelectorOptions>(m, "SelectorOptions")
      .def(nb::new_([](SelectorOptions::Kind kind, double priority_exponent) {
             SelectorOptions options{kind, priority_exponent};
             CheckArgument(options.Validate());
             return options;
           }),
           nb::arg("kind"), nb::arg("priority_exponent") = 1.0)
      .def_ro("kind", &SelectorOptions::kind)
      .def_ro("priority_exponent", &SelectorOptions::priority_exponent)
      .def("__repr__", [](const SelectorOptions& o) {
        return absl::StrCat(
            "SelectorOptions(",
            nb::cast<std::string>(nb::cast(o.kind).attr("name")),
            ", priority_exponent=", o.priority_exponent, ")");
      });
}

// The rate limiter's parameters and presets, each checked by the core
// (ValueError with its message): the one definition and the one set of
// checks Python's reverb_tf.rate_limiters builds on.
void BindRateLimiterOptions(nb::module_& m) {
  nb::class_<RateLimiterOptions>(m, "RateLimiterOptions")
      .def(nb::new_([](double samples_per_insert, int64_t min_size_to_sample,
                       double min_diff, double max_diff) {
             return ArgumentOrRaise(RateLimiterOptions::Checked(
                 samples_per_insert, min_size_to_sample, min_diff, max_diff));
           }),
           nb::arg("samples_per_insert"), nb::arg("min_size_to_sample"),
           nb::arg("min_diff"), nb::arg("max_diff"))
      .def_static(
          "min_size",
          [](int64_t min_size_to_sample) {
            return ArgumentOrRaise(
                RateLimiterOptions::CheckedMinSize(min_size_to_sample));
          },
          nb::arg("min_size_to_sample"))
      .def_static(
          "sample_to_insert_ratio",
          [](double samples_per_insert, int64_t min_size_to_sample,
             double error_buffer) {
            return ArgumentOrRaise(
                RateLimiterOptions::CheckedSampleToInsertRatio(
                    samples_per_insert, min_size_to_sample, error_buffer));
          },
          nb::arg("samples_per_insert"), nb::arg("min_size_to_sample"),
          nb::arg("error_buffer"))
      .def_static(
          "sample_to_insert_ratio_window",
          [](double samples_per_insert, int64_t min_size_to_sample,
             double min_diff, double max_diff) {
            return ArgumentOrRaise(
                RateLimiterOptions::CheckedSampleToInsertRatio(
                    samples_per_insert, min_size_to_sample, min_diff,
                    max_diff));
          },
          nb::arg("samples_per_insert"), nb::arg("min_size_to_sample"),
          nb::arg("min_diff"), nb::arg("max_diff"))
      .def_static(
          "queue",
          [](int64_t size) {
            return ArgumentOrRaise(RateLimiterOptions::CheckedQueue(size));
          },
          nb::arg("size"))
      .def_ro("samples_per_insert", &RateLimiterOptions::samples_per_insert)
      .def_ro("min_size_to_sample", &RateLimiterOptions::min_size_to_sample)
      .def_ro("min_diff", &RateLimiterOptions::min_diff)
      .def_ro("max_diff", &RateLimiterOptions::max_diff)
      // Empty, or why valid options may still surprise a program.
      .def("caveat", &RateLimiterOptions::Caveat)
      .def("__repr__", &RateLimiterOptions::DebugString);
}

void BindTableOptions(nb::module_& m) {
  nb::class_<TableOptions>(m, "TableOptions")
      .def(nb::new_(&MakeTableOptions), nb::arg("name"), nb::arg("sampler"),
           nb::arg("remover"), nb::arg("max_size"),
           nb::arg("max_times_sampled"), nb::arg("rate_limiter"),
           nb::arg("signature"), nb::arg("nested_structure") = nb::bytes(""))
      .def_prop_ro("name", [](const TableOptions& o) { return o.name; });
}

// What Python reads of a table's info is the serialized schema::TableInfo
// (reverb_types.TableInfo.from_serialized_proto), the message a remote
// client gets; the accessors are what Python needs before decoding it.
void BindTableInfo(nb::module_& m) {
  nb::class_<TableInfo>(m, "TableInfo")
      .def_prop_ro("name", [](const TableInfo& i) { return i.options.name; })
      .def(
          "serialized_proto",
          [](const TableInfo& i) {
            const std::string serialized = SerializeTableInfo(i);
            return nb::bytes(serialized.data(), serialized.size());
          },
          "The info as a serialized reverb_tf.schema.TableInfo.")
      .def_prop_ro("signature",
                   [](const TableInfo& i) -> nb::object {
                     if (!i.options.signature.has_value()) return nb::none();
                     nb::list columns;
                     for (const ColumnSpec& c : i.options.signature->columns) {
                       columns.append(nb::make_tuple(
                           c.name, NumpyDType(c.dtype), c.shape));
                     }
                     return columns;
                   })
      .def_prop_ro("nested_structure", [](const TableInfo& i) {
        const std::string structure =
            i.options.signature.has_value()
                ? i.options.signature->nested_structure
                : "";
        return nb::bytes(structure.data(), structure.size());
      });
}

void BindInspectCheckpoint(nb::module_& m) {
  m.def(
      "inspect_checkpoint",
      [](const std::string& path, std::optional<nb::callable> progress) {
        // Python errors in the callback (Ctrl-C) end the reporting; the
        // first is raised once the native call returns.
        std::optional<nb::python_error> callback_error;
        std::function<void(uint64_t, uint64_t)> report;
        if (progress.has_value()) {
          report = [&](uint64_t done, uint64_t total) {
            nb::gil_scoped_acquire gil;
            if (callback_error.has_value()) return;
            try {
              (*progress)(done, total);
            } catch (nb::python_error& error) {
              callback_error.emplace(std::move(error));
            }
          };
        }
        absl::StatusOr<CheckpointSummary> summary =
            WithoutGil([&] { return InspectCheckpoint(path, report); });
        if (callback_error.has_value()) throw *callback_error;
        CheckOk(summary.status());
        nb::dict out;
        out["path"] = summary->path;
        out["written_by"] = summary->written_by;
        out["file_bytes"] = summary->file_bytes;
        out["num_chunks"] = summary->num_chunks;
        out["tables"] = nb::cast(std::move(summary->tables));
        return out;
      },
      nb::arg("path"), nb::arg("progress") = nb::none(),
      "Reads and verifies a checkpoint directory (see checkpointer.h).");
}

// A live table (table.h), owned by Python's reverb_tf.Table from its
// construction and shared with the servers that host it.
void BindTable(nb::module_& m) {
  nb::class_<Table>(m, "Table")
      .def(nb::new_([](const TableOptions& options) {
             std::random_device seed_source;
             const uint64_t seed =
                 (uint64_t{seed_source()} << 32) | seed_source();
             return ValueOrRaise(Table::Create(options, seed));
           }),
           nb::arg("options"))
      .def_prop_ro("name", &Table::name)
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

void BindTables(nb::module_& m) {
  // In this order: nanobind names a type in a signature only once it is
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
