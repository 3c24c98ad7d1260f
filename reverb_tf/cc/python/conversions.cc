// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/python/conversions.h"

#include <climits>
#include <cstdint>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "reverb_tf/cc/python/calls.h"

namespace reverb_tf::binding {

DType DTypeFromNumpy(const py::dtype& dtype) {
  const char kind = dtype.kind();
  const auto size = dtype.itemsize();
  switch (kind) {
    case 'f':
      if (size == 4) return DType::kFloat;
      if (size == 8) return DType::kDouble;
      if (size == 2) return DType::kHalf;
      break;
    case 'i':
      if (size == 1) return DType::kInt8;
      if (size == 2) return DType::kInt16;
      if (size == 4) return DType::kInt32;
      if (size == 8) return DType::kInt64;
      break;
    case 'u':
      if (size == 1) return DType::kUint8;
      if (size == 2) return DType::kUint16;
      if (size == 4) return DType::kUint32;
      if (size == 8) return DType::kUint64;
      break;
    case 'b':
      return DType::kBool;
    case 'c':
      if (size == 8) return DType::kComplex64;
      if (size == 16) return DType::kComplex128;
      break;
    case 'O':
    case 'S':
    case 'U':
      return DType::kString;
    default:
      break;
  }
  if (py::str(dtype.attr("name")).cast<std::string>() == "bfloat16")
    return DType::kBfloat16;
  RaiseStatus(absl::InvalidArgumentError(absl::StrCat(
      "unsupported numpy dtype ", py::str(dtype).cast<std::string>())));
}

py::dtype NumpyDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat:
      return py::dtype("float32");
    case DType::kDouble:
      return py::dtype("float64");
    case DType::kHalf:
      return py::dtype("float16");
    case DType::kInt8:
      return py::dtype("int8");
    case DType::kInt16:
      return py::dtype("int16");
    case DType::kInt32:
      return py::dtype("int32");
    case DType::kInt64:
      return py::dtype("int64");
    case DType::kUint8:
      return py::dtype("uint8");
    case DType::kUint16:
      return py::dtype("uint16");
    case DType::kUint32:
      return py::dtype("uint32");
    case DType::kUint64:
      return py::dtype("uint64");
    case DType::kBool:
      return py::dtype("bool");
    case DType::kComplex64:
      return py::dtype("complex64");
    case DType::kComplex128:
      return py::dtype("complex128");
    case DType::kString:
      return py::dtype("O");
    case DType::kBfloat16:
      return py::dtype::from_args(
          py::module_::import("ml_dtypes").attr("bfloat16"));
    case DType::kInvalid:
      break;
  }
  RaiseStatus(absl::InternalError("invalid dtype"));
}

TensorPayload PayloadFromArray(py::handle value) {
  py::array array = py::array::ensure(value, py::array::c_style);
  if (!array) throw py::error_already_set();
  const DType dtype = DTypeFromNumpy(array.dtype());
  Shape shape(array.shape(), array.shape() + array.ndim());
  if (dtype == DType::kString) {
    std::vector<std::string> elements;
    elements.reserve(array.size());
    py::object flat = array.attr("ravel")();
    for (py::handle element : flat) {
      if (PyBytes_Check(element.ptr())) {
        elements.emplace_back(element.cast<std::string>());
      } else if (PyUnicode_Check(element.ptr())) {
        elements.emplace_back(py::str(element).cast<std::string>());  // UTF-8
      } else {
        // A leaf numpy can only hold as an object: the wrong type of value
        // (a TypeError, as dm-reverb's conversion raises).
        throw py::type_error(absl::StrCat(
            "a value must be array-like (numbers, bools, bytes or str); got an "
            "element of type ",
            Py_TYPE(element.ptr())->tp_name));
      }
    }
    return ValueOrRaise(MakeStringPayload(std::move(shape), elements));
  }
  std::string bytes(static_cast<const char*>(array.data()), array.nbytes());
  return ValueOrRaise(MakePayload(dtype, std::move(shape), std::move(bytes)));
}

std::vector<std::optional<TensorPayload>> StepFromColumns(
    const py::list& columns) {
  std::vector<std::optional<TensorPayload>> step(columns.size());
  for (size_t i = 0; i < columns.size(); ++i) {
    if (!columns[i].is_none()) step[i] = PayloadFromArray(columns[i]);
  }
  return step;
}

std::vector<ItemColumn> ItemColumnsFrom(const std::vector<ColumnRef>& refs) {
  std::vector<ItemColumn> columns;
  columns.reserve(refs.size());
  for (const auto& [column, steps, squeeze] : refs) {
    columns.push_back(ItemColumn{column, steps, squeeze});
  }
  return columns;
}

namespace {

// A leaf dm-tree would not look into and PayloadFromArray takes.
bool IsPlainLeaf(PyObject* value) {
  static PyObject* const numpy_generic =
      py::object(py::module_::import("numpy").attr("generic")).release().ptr();
  return py::isinstance<py::array>(value) || PyFloat_Check(value) ||
         PyLong_Check(value) || PyUnicode_Check(value) ||
         PyBytes_Check(value) || PyComplex_Check(value) ||
         PyObject_TypeCheck(value,
                            reinterpret_cast<PyTypeObject*>(numpy_generic));
}

// obj.name, or nullptr (no Python error left set) if it has none.
py::object AttrOrNull(PyObject* obj, PyObject* name) {
  PyObject* value = PyObject_GetAttr(obj, name);
  if (value == nullptr) PyErr_Clear();
  return py::reinterpret_steal<py::object>(value);
}

bool AddItemColumn(PyObject* value, PyObject* column_type, PyObject* generation,
                   std::vector<ItemColumn>* out) {
  static PyObject* const generation_name =
      PyUnicode_InternFromString("_generation");
  static PyObject* const entry_name = PyUnicode_InternFromString("_entry");
  if (Py_TYPE(value) != reinterpret_cast<PyTypeObject*>(column_type))
    return false;
  if (AttrOrNull(value, generation_name).ptr() != generation) return false;
  const py::object entry = AttrOrNull(value, entry_name);
  if (!entry || !PyTuple_CheckExact(entry.ptr()) ||
      PyTuple_GET_SIZE(entry.ptr()) != 3)
    return false;
  PyObject* column = PyTuple_GET_ITEM(entry.ptr(), 0);
  PyObject* steps = PyTuple_GET_ITEM(entry.ptr(), 1);
  if (!PyLong_CheckExact(column) || !PyList_CheckExact(steps)) return false;
  ItemColumn item_column;
  const long column_index = PyLong_AsLong(column);  // NOLINT(runtime/int)
  if (column_index < 0 || column_index > INT32_MAX) {
    PyErr_Clear();
    return false;
  }
  item_column.column = static_cast<int32_t>(column_index);
  item_column.steps.reserve(PyList_GET_SIZE(steps));
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(steps); ++i) {
    PyObject* step = PyList_GET_ITEM(steps, i);
    if (!PyLong_CheckExact(step)) return false;
    const long long index = PyLong_AsLongLong(step);  // NOLINT(runtime/int)
    if (index == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    item_column.steps.push_back(index);
  }
  item_column.squeeze = PyTuple_GET_ITEM(entry.ptr(), 2) == Py_True;
  out->push_back(std::move(item_column));
  return true;
}

}  // namespace

std::optional<double> PlainNumber(py::handle value) {
  if (PyFloat_CheckExact(value.ptr())) return PyFloat_AS_DOUBLE(value.ptr());
  if (!PyLong_CheckExact(value.ptr())) return std::nullopt;
  const double result = PyLong_AsDouble(value.ptr());
  if (result == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    return std::nullopt;
  }
  return result;
}

std::optional<std::vector<std::optional<TensorPayload>>> CommonStep(
    py::handle data, py::handle columns, size_t num_columns) {
  if (!PyDict_CheckExact(data.ptr()) || !PyDict_CheckExact(columns.ptr()))
    return std::nullopt;
  // Every decision first, so that a fallback has converted nothing.
  std::vector<PyObject*> values(num_columns, nullptr);
  PyObject* key;
  PyObject* value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(data.ptr(), &pos, &key, &value)) {
    PyObject* column = PyDict_GetItemWithError(columns.ptr(), key);
    if (column == nullptr) {
      PyErr_Clear();  // a new field (or an unhashable key): general path
      return std::nullopt;
    }
    if (!PyLong_CheckExact(column)) return std::nullopt;
    const long index = PyLong_AsLong(column);  // NOLINT(runtime/int)
    if (index < 0 || static_cast<size_t>(index) >= num_columns) {
      PyErr_Clear();
      return std::nullopt;
    }
    if (value == Py_None) continue;
    if (!IsPlainLeaf(value)) return std::nullopt;
    values[index] = value;
  }
  std::vector<std::optional<TensorPayload>> step(num_columns);
  for (size_t i = 0; i < num_columns; ++i) {
    if (values[i] != nullptr) step[i] = PayloadFromArray(values[i]);
  }
  return step;
}

std::optional<std::vector<ItemColumn>> CommonItemColumns(
    py::handle trajectory, py::handle column_type, py::handle generation) {
  std::vector<ItemColumn> columns;
  if (!PyDict_CheckExact(trajectory.ptr())) {
    if (!AddItemColumn(trajectory.ptr(), column_type.ptr(), generation.ptr(),
                       &columns))
      return std::nullopt;
    return columns;
  }
  const py::list keys =
      py::reinterpret_steal<py::list>(PyDict_Keys(trajectory.ptr()));
  for (py::handle key : keys) {
    if (!PyUnicode_CheckExact(key.ptr())) return std::nullopt;
  }
  // str keys only: sorting them cannot fail, and is dm-tree's order.
  if (PyList_Sort(keys.ptr()) != 0) throw py::error_already_set();
  columns.reserve(keys.size());
  for (py::handle key : keys) {
    PyObject* value = PyDict_GetItem(trajectory.ptr(), key.ptr());
    if (value == nullptr ||
        !AddItemColumn(value, column_type.ptr(), generation.ptr(), &columns))
      return std::nullopt;
  }
  return columns;
}

py::array BytesArray(absl::Span<const int64_t> shape,
                     const std::vector<std::string>& elements) {
  py::array out(py::dtype("O"),
                std::vector<py::ssize_t>(shape.begin(), shape.end()));
  PyObject** cells = static_cast<PyObject**>(out.mutable_data());
  for (size_t i = 0; i < elements.size(); ++i) {
    cells[i] =
        PyBytes_FromStringAndSize(elements[i].data(), elements[i].size());
  }
  return out;
}

py::array ArrayOwning(DType dtype, absl::Span<const int64_t> shape,
                      std::string bytes) {
  auto* owner = new std::string(std::move(bytes));
  py::capsule capsule(owner,
                      [](void* p) { delete static_cast<std::string*>(p); });
  return py::array(NumpyDType(dtype),
                   std::vector<py::ssize_t>(shape.begin(), shape.end()),
                   owner->data(), capsule);
}

py::array ArrayFromPayload(TensorPayload payload) {
  if (payload.dtype == DType::kString) {
    return BytesArray(payload.shape, ValueOrRaise(DecodeStrings(payload)));
  }
  return ArrayOwning(payload.dtype, payload.shape, std::move(payload.data));
}

py::dict TablesDict(std::vector<TableInfo> tables) {
  py::dict out;
  for (TableInfo& info : tables) {
    const std::string name = info.options.name;
    out[py::str(name)] = py::cast(std::move(info));
  }
  return out;
}

py::tuple SampleInfoTuple(const SampleInfo& info) {
  return py::make_tuple(info.key, info.probability, info.table_size,
                        info.priority, info.times_sampled, info.table_weight,
                        info.min_probability);
}

py::tuple StackedBatchTuple(StackedBatch batch) {
  const py::ssize_t n = batch.size();
  py::array_t<uint64_t> key(n);
  py::array_t<double> probability(n);
  py::array_t<int64_t> table_size(n);
  py::array_t<double> priority(n);
  py::array_t<int32_t> times_sampled(n);
  py::array_t<double> table_weight(n);
  py::array_t<double> min_probability(n);
  for (py::ssize_t i = 0; i < n; ++i) {
    const SampleInfo& info = batch.infos[i];
    key.mutable_at(i) = info.key;
    probability.mutable_at(i) = info.probability;
    table_size.mutable_at(i) = info.table_size;
    priority.mutable_at(i) = info.priority;
    times_sampled.mutable_at(i) = info.times_sampled;
    table_weight.mutable_at(i) = info.table_weight;
    min_probability.mutable_at(i) = info.min_probability;
  }
  py::list columns;
  py::list squeezed;
  for (StackedColumn& column : batch.columns) {
    squeezed.append(py::bool_(column.squeezed));
    columns.append(
        column.dtype == DType::kString
            ? BytesArray(column.shape, column.strings)
            : ArrayOwning(column.dtype, column.shape, std::move(column.data)));
  }
  return py::make_tuple(
      py::make_tuple(key, probability, table_size, priority, times_sampled,
                     table_weight, min_probability),
      columns, squeezed);
}

TableSignature MakeTableSignature(const SignatureList& columns) {
  TableSignature signature;
  for (const auto& [column, dtype, shape] : columns) {
    signature.columns.push_back(
        ColumnSpec{column, DTypeFromNumpy(py::dtype::from_args(dtype)), shape});
  }
  return signature;
}

}  // namespace reverb_tf::binding
