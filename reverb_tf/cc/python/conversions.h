// SPDX-License-Identifier: Apache-2.0
// Conversions between Python objects and the core's values for the bindings
// of reverb_tf._core: numpy dtypes and arrays <-> TensorPayloads (arrays
// handed back own their bytes, without a copy where the layout allows),
// writers' steps and item columns, sample infos and stacked batches.
//
// Arrays are read and made without numpy's C API, which cannot be used on
// the stable ABI (its headers need CPython's full object layouts): bytes
// are read through the buffer protocol (in the limited API since 3.11) and
// arrays made by numpy's Python functions over a buffer the array then
// owns. numpy is only ever imported from Python.
//
// Thread safety: call with the GIL held.
#ifndef REVERB_TF_CC_PYTHON_CONVERSIONS_H_
#define REVERB_TF_CC_PYTHON_CONVERSIONS_H_

#include <nanobind/nanobind.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/types/span.h"
#include "reverb_tf/cc/client/client.h"
#include "reverb_tf/cc/client/sample_batch.h"
#include "reverb_tf/cc/dtype.h"
#include "reverb_tf/cc/table.h"
#include "reverb_tf/cc/tensor_payload.h"

namespace reverb_tf::binding {

namespace nb = ::nanobind;

// The core dtype of a numpy dtype (bytes and str arrays: kString);
// raises InvalidArgumentError for one the core does not have.
DType DTypeFromNumpy(nb::handle dtype);

// The numpy dtype of a core dtype (kString: object; kBfloat16: ml_dtypes).
nb::object NumpyDType(DType dtype);

// A copy of an array-like's data, converted as numpy.asarray converts it
// (string arrays: each element as bytes, str as UTF-8; another element type
// is a TypeError).
TensorPayload PayloadFromArray(nb::handle value);

// A Python buffer (the buffer protocol), released when this is destroyed.
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (held_) PyBuffer_Release(&view_);
  }

  // Asks `object` for a buffer with `flags`; false (no Python error left
  // set) if it has none of that kind.
  bool Get(PyObject* object, int flags);
  const Py_buffer& view() const { return view_; }

 private:
  Py_buffer view_;
  bool held_ = false;
};

// An array-like as a C-contiguous array of `dtype`, converted as
// numpy.asarray(value, dtype, order="C") converts it (casting if need be),
// readable while this lives.
class ContiguousArray {
 public:
  ContiguousArray(nb::handle value, DType dtype);

  template <typename T>
  const T* data() const {
    return static_cast<const T*>(buffer_.view().buf);
  }
  int ndim() const { return buffer_.view().ndim; }
  int64_t shape(int i) const { return buffer_.view().shape[i]; }
  // The number of elements.
  int64_t size() const { return buffer_.view().len / buffer_.view().itemsize; }

 private:
  nb::object array_;
  Buffer buffer_;
};

// A step as Python's writers pass it: one array-like per flat column, None
// where the column is missing.
std::vector<std::optional<TensorPayload>> StepFromColumns(
    const nb::list& columns);

// An item's reference to one column as Python passes it: (column, steps,
// squeeze), a TrajectoryColumn's _entry.
using ColumnRef = std::tuple<int32_t, std::vector<int64_t>, bool>;

std::vector<ItemColumn> ItemColumnsFrom(const std::vector<ColumnRef>& refs);

// A Python float or int (exactly those types: not a bool or a numpy
// scalar) as a double; nullopt for anything else or an int out of range,
// with no Python error left set.
std::optional<double> PlainNumber(nb::handle value);

// The writers' common cases, read straight from the Python objects (the hot
// path of every actor: about 1 us instead of 4 per append and create_item).
// nullopt means "not the common case": nothing was converted and the caller
// takes Python's general path, which handles (or reports) everything else.
//
// A step given as a dict whose keys are all known columns (`columns`: key ->
// column index, the writer's flat structure) and whose values are plain
// leaves (arrays, numpy scalars, Python numbers, str, bytes) or None
// (missing in this step); `num_columns` entries.
std::optional<std::vector<std::optional<TensorPayload>>> CommonStep(
    nb::handle data, nb::handle columns, size_t num_columns);

// The item columns of a trajectory that is one `column_type` (the Python
// TrajectoryColumn) or a dict with str keys of them, each cut from the
// writer's current history (its `_generation` is `generation`), in
// dm-tree's order (sorted keys). Only a conversion: an empty dict or a
// column without steps is the writer's to refuse
// (TrajectoryWriter::ValidateItem).
std::optional<std::vector<ItemColumn>> CommonItemColumns(nb::handle trajectory,
                                                         nb::handle column_type,
                                                         nb::handle generation);

// An object array of `shape` holding `elements` (row-major) as bytes.
nb::object BytesArray(absl::Span<const int64_t> shape,
                      const std::vector<std::string>& elements);

// Registers the private type that owns the bytes of ArrayOwning's arrays.
// Called once, at import, before any array is made.
void BindConversions(nb::module_& m);

// Zero-copy: the array views `bytes`, which it owns from now on.
nb::object ArrayOwning(DType dtype, absl::Span<const int64_t> shape,
                       std::string bytes);
// The same for a batch's column (its first size() bytes).
nb::object ArrayOwning(DType dtype, absl::Span<const int64_t> shape,
                       BatchBytes bytes);

// The payload as an array that owns its bytes (strings: an object array).
nb::object ArrayFromPayload(TensorPayload payload);

// A table signature as Python passes it: (column name, numpy dtype, shape)
// per flat column.
using SignatureList =
    std::vector<std::tuple<std::string, nb::object, std::vector<int64_t>>>;

TableSignature MakeTableSignature(const SignatureList& columns);

// Table name -> TableInfo, as server_info returns them.
nb::dict TablesDict(std::vector<TableInfo> tables);

// A disk tier's figures (Server.spill_stats(); `dir` empty without one).
nb::dict SpillDict(const ChunkStore::SpillStats& stats);

// In the order of reverb_tf.replay_sample.SampleInfo's fields (dm-reverb's),
// which Python builds with SampleInfo._make: a tuple is the cheapest thing
// to hand over per sample.
nb::tuple SampleInfoTuple(const SampleInfo& info);

// A stacked batch as numpy: (infos, columns, squeezed), where infos holds one
// array per SampleInfoTuple field and each column is [batch, ...]. Fixed-size
// columns are handed over without a copy.
nb::tuple StackedBatchTuple(StackedBatch batch);

}  // namespace reverb_tf::binding

#endif  // REVERB_TF_CC_PYTHON_CONVERSIONS_H_
