// SPDX-License-Identifier: Apache-2.0
// The writers of reverb_tf._core: TrajectoryWriter (also behind the
// batched and legacy writers) and StructuredWriter.
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
#include "reverb_tf/cc/patterns/structured_writer.h"
#include "reverb_tf/cc/python/bindings.h"
#include "reverb_tf/cc/python/calls.h"
#include "reverb_tf/cc/python/conversions.h"

namespace reverb_tf::binding {

namespace {

// writer.CreateItem(), waiting (without the GIL, interruptibly) while the
// in-flight window is full.
void CreateItem(TrajectoryWriter& writer, const std::string& table,
                double priority, const std::vector<ItemColumn>& columns) {
  // Fast path: room in the in-flight window, nothing to wait for.
  const absl::Status status =
      writer.CreateItem(table, priority, columns, absl::ZeroDuration());
  if (status.code() != absl::StatusCode::kDeadlineExceeded)
    return CheckOk(status);
  WaitInSlices(absl::InfiniteDuration(), [&](absl::Duration slice) {
    return writer.CreateItem(table, priority, columns, slice);
  });
}

// TrajectoryWriter.flush: waits (without the GIL, interruptibly) until at
// most `block_until_num_items` items are unacknowledged.
void FlushWriter(TrajectoryWriter& writer, int32_t block_until_num_items,
                 std::optional<double> timeout_s) {
  absl::Status status =
      writer.Flush(block_until_num_items, absl::ZeroDuration());
  if (status.code() != absl::StatusCode::kDeadlineExceeded)
    return CheckOk(status);
  WaitInSlices(TimeoutFromSeconds(timeout_s), [&](absl::Duration slice) {
    return writer.Flush(block_until_num_items, slice);
  });
}

// TrajectoryWriter.end_episode: ends the episode at once, then waits as
// flush(0) does.
void EndWriterEpisode(TrajectoryWriter& writer, Truth clear_buffers,
                      std::optional<double> timeout_s) {
  absl::Status status = writer.EndEpisode(clear_buffers, absl::ZeroDuration());
  if (status.code() != absl::StatusCode::kDeadlineExceeded)
    return CheckOk(status);
  WaitInSlices(TimeoutFromSeconds(timeout_s),
               [&](absl::Duration slice) { return writer.Flush(0, slice); });
}

// TrajectoryWriter.history_step: IndexError and ValueError, as for a Python
// sequence.
int64_t WriterHistoryStep(const TrajectoryWriter& writer, int32_t column,
                          int64_t index) {
  absl::StatusOr<int64_t> step = writer.HistoryStep(column, index);
  if (step.ok()) return *step;
  const std::string message(step.status().message());
  if (step.status().code() == absl::StatusCode::kOutOfRange) {
    throw nb::index_error(message.c_str());
  }
  throw nb::value_error(message.c_str());
}

// TrajectoryWriter.read_cells: the cells of `column` at `steps` (of `lane`)
// as one array.
nb::object ReadWriterCells(TrajectoryWriter& writer, int32_t column,
                           const std::vector<int64_t>& steps, int32_t lane) {
  absl::StatusOr<TensorPayload> payload =
      WithoutGil([&] { return writer.ReadCells(column, steps, lane); });
  // A plain RuntimeError for expired cells, as dm-reverb raises.
  if (payload.status().code() == absl::StatusCode::kFailedPrecondition) {
    throw std::runtime_error(std::string(payload.status().message()));
  }
  return ArrayFromPayload(ValueOrRaise(std::move(payload)));
}

// TrajectoryWriter.column_type: (dtype, shape), or None before the column
// has a value.
nb::object WriterColumnType(const TrajectoryWriter& writer, int32_t column) {
  std::optional<std::pair<DType, Shape>> type = writer.ColumnType(column);
  if (!type.has_value()) return nb::none();
  nb::list dims;
  for (int64_t dim : type->second) dims.append(dim);
  return nb::make_tuple(NumpyDType(type->first),
                        nb::steal(PySequence_Tuple(dims.ptr())));
}

// TrajectoryWriter.create_items of a batched writer: an item per lane in
// `lanes`, waiting as CreateItem() does.
void CreateLaneItems(TrajectoryWriter& writer, const std::string& table,
                     nb::handle priorities_like,
                     const std::vector<ColumnRef>& refs,
                     nb::handle lanes_like) {
  const ContiguousArray priorities(priorities_like, DType::kDouble);
  const ContiguousArray lanes(lanes_like, DType::kInt32);
  const std::vector<ItemColumn> columns = ItemColumnsFrom(refs);
  const absl::Span<const double> p(priorities.data<double>(),
                                   priorities.size());
  const absl::Span<const int32_t> l(lanes.data<int32_t>(), lanes.size());
  absl::Status status =
      writer.CreateItems(table, p, columns, l, absl::ZeroDuration());
  if (status.code() != absl::StatusCode::kDeadlineExceeded)
    return CheckOk(status);
  WaitInSlices(absl::InfiniteDuration(), [&](absl::Duration slice) {
    return writer.CreateItems(table, p, columns, l, slice);
  });
}

// TrajectoryWriter.end_lane_episodes of a batched writer.
void EndLaneEpisodes(TrajectoryWriter& writer, nb::handle lanes_like,
                     Truth clear_buffers) {
  const ContiguousArray lanes(lanes_like, DType::kInt32);
  CheckOk(writer.EndLaneEpisodes(
      absl::MakeConstSpan(lanes.data<int32_t>(), lanes.size()), clear_buffers));
}

// TrajectoryWriter.lane_episode_steps of a batched writer: the steps of each
// lane's current episode.
nb::object LaneEpisodeSteps(const TrajectoryWriter& writer) {
  const std::vector<int32_t> steps = writer.LaneEpisodeSteps();
  std::string bytes(reinterpret_cast<const char*>(steps.data()),
                    steps.size() * sizeof(int32_t));
  return ArrayOwning(DType::kInt32, {static_cast<int64_t>(steps.size())},
                     std::move(bytes));
}

void BindTrajectoryWriter(nb::module_& m) {
  nb::class_<TrajectoryWriter>(m, "TrajectoryWriter")
      .def(
          "append",
          [](TrajectoryWriter& writer, const nb::list& columns,
             Truth partial_step) {
            std::vector<std::optional<TensorPayload>> step =
                StepFromColumns(columns);
            return ValueOrRaise(writer.Append(std::move(step), partial_step));
          },
          nb::arg("columns"), nb::arg("partial_step").none() = false)
      // The common cases of Python's append() and create_item() in one
      // call each. False: not the common case (conversions.h); nothing
      // happened and Python takes its general path. The GIL is kept for the
      // writer's work (about 1 us) and released only to wait: releasing it
      // for every call made 4 writer threads of one process hand it over on
      // every call, and halved their throughput (59k against 124k items/s
      // on 2 cores, in-process server).
      .def(
          "try_append",
          [](TrajectoryWriter& writer, nb::handle data, nb::handle columns,
             size_t num_columns, Truth partial_step) {
            std::optional<std::vector<std::optional<TensorPayload>>> step =
                CommonStep(data, columns, num_columns);
            if (!step.has_value()) return false;
            ValueOrRaise(writer.Append(*std::move(step), partial_step));
            return true;
          },
          nb::arg("data").none(), nb::arg("columns").none(),
          nb::arg("num_columns"), nb::arg("partial_step").none())
      .def(
          "try_create_item",
          [](TrajectoryWriter& writer, nb::handle table, nb::handle priority,
             nb::handle trajectory, nb::handle column_type,
             nb::handle generation, nb::handle signed_tables) {
            // What Python converts or does first (a str table, a plain
            // number, columns of the current history, the table's signature
            // given to the writer); the rules on the values are the native
            // writer's (CreateItem validates the item first).
            if (!PyUnicode_CheckExact(table.ptr()) ||
                !PyAnySet_CheckExact(signed_tables.ptr()) ||
                PySet_Contains(signed_tables.ptr(), table.ptr()) != 1)
              return false;
            const std::optional<double> value = PlainNumber(priority);
            if (!value.has_value()) return false;
            std::optional<std::vector<ItemColumn>> columns =
                CommonItemColumns(trajectory, column_type, generation);
            if (!columns.has_value()) return false;
            CreateItem(writer, nb::cast<std::string>(table), *value, *columns);
            return true;
          },
          nb::arg("table").none(), nb::arg("priority").none(),
          nb::arg("trajectory").none(), nb::arg("column_type").none(),
          nb::arg("generation").none(), nb::arg("signed_tables").none())
      .def("create_item",
           [](TrajectoryWriter& writer, const std::string& table,
              double priority, const std::vector<ColumnRef>& refs) {
             CreateItem(writer, table, priority, ItemColumnsFrom(refs));
           })
      .def("flush", &FlushWriter, nb::arg("block_until_num_items") = 0,
           nb::arg("timeout_s") = nb::none())
      .def("end_episode", &EndWriterEpisode,
           nb::arg("clear_buffers").none() = true,
           nb::arg("timeout_s") = nb::none())
      .def(
          "configure",
          [](TrajectoryWriter& writer, int32_t column,
             std::optional<int32_t> keep_alive,
             std::optional<int32_t> max_chunk_length) {
            CheckOk(writer.Configure(column, keep_alive.value_or(0),
                                     max_chunk_length.value_or(0)));
          },
          nb::arg("column"), nb::arg("num_keep_alive_refs") = nb::none(),
          nb::arg("max_chunk_length") = nb::none())
      .def("close",
           [](TrajectoryWriter& writer) {
             CheckOk(WithoutGil([&] { return writer.Close(); }));
           })
      .def_static(
          "validate_item",
          [](double priority, const std::vector<ColumnRef>& refs) {
            CheckOk(TrajectoryWriter::ValidateItem(priority,
                                                   ItemColumnsFrom(refs)));
          },
          nb::arg("priority"), nb::arg("columns"))
      .def_static(
          "validate_flush",
          [](int32_t block_until_num_items) {
            CheckOk(TrajectoryWriter::ValidateFlush(block_until_num_items));
          },
          nb::arg("block_until_num_items"))
      .def_static("validate_column_options",
                  [](int32_t num_keep_alive_refs,
                     std::optional<int32_t> max_chunk_length) {
                    CheckOk(TrajectoryWriter::ValidateColumnOptions(
                        num_keep_alive_refs, max_chunk_length.value_or(0)));
                  })
      .def("set_column_name", &TrajectoryWriter::SetColumnName,
           nb::arg("column"), nb::arg("name"), nb::arg("label") = "")
      .def("set_table_signature",
           [](TrajectoryWriter& writer, const std::string& table,
              std::optional<SignatureList> signature) {
             std::optional<TableSignature> table_signature;
             if (signature.has_value())
               table_signature = MakeTableSignature(*signature);
             writer.SetTableSignature(table, std::move(table_signature));
           })
      .def("history_step", &WriterHistoryStep)
      .def("is_referenceable", &TrajectoryWriter::IsReferenceable)
      .def("read_cells", &ReadWriterCells, nb::arg("column"), nb::arg("steps"),
           nb::arg("lane") = 0)
      .def("column_type", &WriterColumnType)
      .def_prop_ro("history_length", &TrajectoryWriter::history_length)
      .def_prop_ro("step_open", &TrajectoryWriter::step_open)
      .def_prop_ro("num_columns", &TrajectoryWriter::num_columns)
      .def_prop_ro("episode_steps", &TrajectoryWriter::episode_steps)
      .def_prop_ro("num_in_flight_items",
                   &TrajectoryWriter::num_in_flight_items)
      // Batched (vectorised-environment) writers: num_lanes >= 1.
      .def("append_batch",
           [](TrajectoryWriter& writer, const nb::list& columns) {
             std::vector<std::optional<TensorPayload>> step =
                 StepFromColumns(columns);
             return ValueOrRaise(writer.AppendBatch(std::move(step)));
           })
      // Priorities and lanes: any array-like, converted as numpy.asarray
      // converts it to float64 and int32.
      .def("create_items", &CreateLaneItems,
           nb::sig("def create_items(self, arg0: str, "
                   "arg1: numpy.typing.ArrayLike, "
                   "arg2: collections.abc.Sequence[tuple[int, "
                   "collections.abc.Sequence[int], bool]], "
                   "arg3: numpy.typing.ArrayLike, /) -> None"))
      .def("end_lane_episodes", &EndLaneEpisodes,
           nb::sig("def end_lane_episodes(self, arg0: numpy.typing.ArrayLike, "
                   "arg1: bool, /) -> None"))
      .def_prop_ro("lane_episode_steps", &LaneEpisodeSteps)
      .def_prop_ro("num_lanes", &TrajectoryWriter::num_lanes);
}

// The C++ side of reverb_tf.structured_writer.StructuredWriter.
void BindStructuredWriter(nb::module_& m) {
  nb::class_<StructuredWriter>(m, "StructuredWriter")
      .def(
          "append",
          [](StructuredWriter& writer, const nb::list& columns,
             Truth partial_step) {
            std::vector<std::optional<TensorPayload>> step =
                StepFromColumns(columns);
            // Fast path: the items fit in the in-flight window.
            absl::Status status = writer.Append(std::move(step), partial_step,
                                                absl::ZeroDuration());
            if (status.code() != absl::StatusCode::kDeadlineExceeded)
              return CheckOk(status);
            WaitInSlices(absl::InfiniteDuration(), [&](absl::Duration slice) {
              return writer.CreatePendingItems(slice);
            });
          },
          nb::arg("columns"), nb::arg("partial_step").none() = false)
      // Pending items are created first (they wait only on the in-flight
      // window, which is effectively unlimited); then the wait for
      // acknowledgements is sliced like the Writer's.
      .def(
          "flush",
          [](StructuredWriter& writer, int32_t block_until_num_items,
             std::optional<double> timeout_s) {
            // Before any item is created.
            CheckOk(TrajectoryWriter::ValidateFlush(block_until_num_items));
            WaitInSlices(absl::InfiniteDuration(), [&](absl::Duration slice) {
              return writer.CreatePendingItems(slice);
            });
            TrajectoryWriter& trajectory_writer = writer.trajectory_writer();
            absl::Status status = trajectory_writer.Flush(block_until_num_items,
                                                          absl::ZeroDuration());
            if (status.code() != absl::StatusCode::kDeadlineExceeded)
              return CheckOk(status);
            WaitInSlices(
                TimeoutFromSeconds(timeout_s), [&](absl::Duration slice) {
                  return trajectory_writer.Flush(block_until_num_items, slice);
                });
          },
          nb::arg("block_until_num_items") = 0,
          nb::arg("timeout_s") = nb::none())
      .def(
          "end_episode",
          [](StructuredWriter& writer, Truth clear_buffers,
             std::optional<double> timeout_s) {
            WaitInSlices(absl::InfiniteDuration(), [&](absl::Duration slice) {
              return writer.CreatePendingItems(slice);
            });
            // Ends the episode at once; DEADLINE_EXCEEDED only says that the
            // flush it starts is still running.
            absl::Status status =
                writer.EndEpisode(clear_buffers, absl::ZeroDuration());
            if (status.code() != absl::StatusCode::kDeadlineExceeded)
              return CheckOk(status);
            TrajectoryWriter& trajectory_writer = writer.trajectory_writer();
            WaitInSlices(TimeoutFromSeconds(timeout_s),
                         [&](absl::Duration slice) {
                           return trajectory_writer.Flush(0, slice);
                         });
          },
          nb::arg("clear_buffers").none() = true,
          nb::arg("timeout_s") = nb::none())
      .def("close",
           [](StructuredWriter& writer) {
             CheckOk(WithoutGil([&] { return writer.Close(); }));
           })
      .def_prop_ro("step_is_open", &StructuredWriter::step_is_open);
}

}  // namespace

void BindWriters(nb::module_& m) {
  BindTrajectoryWriter(m);
  BindStructuredWriter(m);
}

}  // namespace reverb_tf::binding
