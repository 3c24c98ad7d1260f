// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/python/conversions.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "reverb_tf/cc/python/calls.h"

namespace reverb_tf::binding {

namespace {

// What the conversions use of numpy, looked up once. Never freed: the
// module may be called until the interpreter is gone.
struct Numpy {
  nb::object ndarray;  // the type, also the constructor of arrays
  nb::object generic;  // numpy scalars
  nb::object asarray;
  nb::object empty;
  nb::object dtype;
  nb::object object_dtype;
};

// Called with the GIL held. Not a function-local static, whose guard would
// deadlock a second thread waiting on it with the GIL while the first,
// importing numpy, waits for the GIL.
const Numpy& GetNumpy() {
  static const Numpy* numpy = nullptr;
  if (numpy == nullptr) {
    nb::module_ module = nb::module_::import_("numpy");
    auto* fresh = new Numpy;
    fresh->ndarray = module.attr("ndarray");
    fresh->generic = module.attr("generic");
    fresh->asarray = module.attr("asarray");
    fresh->empty = module.attr("empty");
    fresh->dtype = module.attr("dtype");
    fresh->object_dtype = fresh->dtype("O");
    numpy = fresh;
  }
  return *numpy;
}

bool IsInstance(PyObject* value, const nb::object& type) {
  return PyObject_TypeCheck(value, reinterpret_cast<PyTypeObject*>(type.ptr()));
}

// The flags of every buffer read here: C-contiguous (else numpy refuses,
// and the caller makes a contiguous copy), with its format.
constexpr int kReadFlags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT;

// The core dtype of a buffer's format (struct module syntax) as numpy
// exports it for an array of native byte order. kString for bytes, str and
// object arrays; kInvalid for anything else (another byte order, long
// double, a dtype numpy cannot put in a buffer), which the caller reads
// from the array's dtype instead, as the error message needs it anyway.
DType DTypeFromFormat(const char* format, Py_ssize_t itemsize) {
  if (format == nullptr || format[0] == '\0') return DType::kInvalid;
  if (format[1] == '\0') {
    switch (format[0]) {
      case '?':
        return DType::kBool;
      case 'b':
      case 'h':
      case 'i':
      case 'l':
      case 'q':
        switch (itemsize) {
          case 1:
            return DType::kInt8;
          case 2:
            return DType::kInt16;
          case 4:
            return DType::kInt32;
          case 8:
            return DType::kInt64;
        }
        return DType::kInvalid;
      case 'B':
      case 'H':
      case 'I':
      case 'L':
      case 'Q':
        switch (itemsize) {
          case 1:
            return DType::kUint8;
          case 2:
            return DType::kUint16;
          case 4:
            return DType::kUint32;
          case 8:
            return DType::kUint64;
        }
        return DType::kInvalid;
      case 'e':
        return DType::kHalf;
      case 'f':
        return DType::kFloat;
      case 'd':
        return DType::kDouble;
      case 'O':
        return DType::kString;
      default:
        return DType::kInvalid;
    }
  }
  if (format[0] == 'Z' && format[2] == '\0') {
    if (format[1] == 'f') return DType::kComplex64;
    if (format[1] == 'd') return DType::kComplex128;
    return DType::kInvalid;
  }
  // Fixed-width bytes ("5s") and str ("5w") arrays.
  const size_t length = std::strlen(format);
  const char last = format[length - 1];
  if (last != 's' && last != 'w') return DType::kInvalid;
  for (size_t i = 0; i + 1 < length; ++i) {
    if (format[i] < '0' || format[i] > '9') return DType::kInvalid;
  }
  return DType::kString;
}

TensorPayload ScalarPayload(DType dtype, const void* value, size_t size) {
  return ValueOrRaise(MakePayload(
      dtype, Shape{}, std::string(static_cast<const char*>(value), size)));
}

// Each element of a string-kind array as bytes (str as UTF-8).
TensorPayload StringPayload(const nb::object& array, Shape shape) {
  std::vector<std::string> elements;
  const nb::object flat = array.attr("ravel")();
  const nb::object iterator = nb::steal(PyObject_GetIter(flat.ptr()));
  if (!iterator.is_valid()) throw nb::python_error();
  while (true) {
    const nb::object element = nb::steal(PyIter_Next(iterator.ptr()));
    if (!element.is_valid()) {
      if (PyErr_Occurred()) throw nb::python_error();
      break;
    }
    if (PyBytes_Check(element.ptr())) {
      char* data = nullptr;
      Py_ssize_t size = 0;
      if (PyBytes_AsStringAndSize(element.ptr(), &data, &size) != 0)
        throw nb::python_error();
      elements.emplace_back(data, size);
    } else if (PyUnicode_Check(element.ptr())) {
      Py_ssize_t size = 0;
      const char* data = PyUnicode_AsUTF8AndSize(element.ptr(), &size);
      if (data == nullptr) throw nb::python_error();
      elements.emplace_back(data, size);
    } else {
      // A leaf numpy can only hold as an object: the wrong type of value
      // (a TypeError, as dm-reverb's conversion raises).
      const nb::object type_name =
          nb::steal(PyType_GetName(reinterpret_cast<PyTypeObject*>(
              reinterpret_cast<PyObject*>(Py_TYPE(element.ptr())))));
      throw nb::type_error(
          absl::StrCat("a value must be array-like (numbers, bools, bytes or "
                       "str); got an element of type ",
                       type_name.is_valid() ? nb::cast<std::string>(type_name)
                                            : std::string("?"))
              .c_str());
    }
  }
  return ValueOrRaise(MakeStringPayload(std::move(shape), elements));
}

Shape ShapeOf(const Py_buffer& view) {
  return Shape(view.shape, view.shape + view.ndim);
}

// A shape as a tuple of ints.
nb::tuple ShapeTuple(absl::Span<const int64_t> shape) {
  nb::object tuple =
      nb::steal(PyTuple_New(static_cast<Py_ssize_t>(shape.size())));
  if (!tuple.is_valid()) throw nb::python_error();
  for (size_t i = 0; i < shape.size(); ++i) {
    PyObject* dim = PyLong_FromLongLong(shape[i]);
    if (dim == nullptr) throw nb::python_error();
    PyTuple_SetItem(tuple.ptr(), static_cast<Py_ssize_t>(i), dim);  // steals
  }
  return nb::borrow<nb::tuple>(tuple);
}

}  // namespace

bool Buffer::Get(PyObject* object, int flags) {
  if (held_) {
    PyBuffer_Release(&view_);
    held_ = false;
  }
  if (PyObject_GetBuffer(object, &view_, flags) != 0) {
    PyErr_Clear();
    return false;
  }
  held_ = true;
  return true;
}

ContiguousArray::ContiguousArray(nb::handle value, DType dtype) {
  array_ = GetNumpy().asarray(value, NumpyDType(dtype), "C");
  if (!buffer_.Get(array_.ptr(), kReadFlags)) {
    RaiseStatus(absl::InternalError("a contiguous array has no buffer"));
  }
}

DType DTypeFromNumpy(nb::handle dtype) {
  const std::string kind_name = nb::cast<std::string>(dtype.attr("kind"));
  const char kind = kind_name.empty() ? '\0' : kind_name[0];
  const auto size = nb::cast<int64_t>(dtype.attr("itemsize"));
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
  if (nb::cast<std::string>(nb::str(dtype.attr("name"))) == "bfloat16")
    return DType::kBfloat16;
  RaiseStatus(absl::InvalidArgumentError(absl::StrCat(
      "unsupported numpy dtype ", nb::cast<std::string>(nb::str(dtype)))));
}

nb::object NumpyDType(DType dtype) {
  // Indexed by the enum's value (dtype.h: at most 23); filled on first use.
  static nb::object* cache = new nb::object[24];
  const auto index = static_cast<int32_t>(dtype);
  if (index > 0 && index < 24 && cache[index].is_valid()) return cache[index];
  const Numpy& numpy = GetNumpy();
  nb::object result;
  switch (dtype) {
    case DType::kFloat:
      result = numpy.dtype("float32");
      break;
    case DType::kDouble:
      result = numpy.dtype("float64");
      break;
    case DType::kHalf:
      result = numpy.dtype("float16");
      break;
    case DType::kInt8:
      result = numpy.dtype("int8");
      break;
    case DType::kInt16:
      result = numpy.dtype("int16");
      break;
    case DType::kInt32:
      result = numpy.dtype("int32");
      break;
    case DType::kInt64:
      result = numpy.dtype("int64");
      break;
    case DType::kUint8:
      result = numpy.dtype("uint8");
      break;
    case DType::kUint16:
      result = numpy.dtype("uint16");
      break;
    case DType::kUint32:
      result = numpy.dtype("uint32");
      break;
    case DType::kUint64:
      result = numpy.dtype("uint64");
      break;
    case DType::kBool:
      result = numpy.dtype("bool");
      break;
    case DType::kComplex64:
      result = numpy.dtype("complex64");
      break;
    case DType::kComplex128:
      result = numpy.dtype("complex128");
      break;
    case DType::kString:
      result = numpy.object_dtype;
      break;
    case DType::kBfloat16:
      // Not cached: ml_dtypes is imported only when a bfloat16 is seen.
      return numpy.dtype(nb::module_::import_("ml_dtypes").attr("bfloat16"));
    case DType::kInvalid:
      break;
  }
  if (!result.is_valid()) RaiseStatus(absl::InternalError("invalid dtype"));
  cache[index] = result;
  return result;
}

TensorPayload PayloadFromArray(nb::handle value) {
  PyObject* object = value.ptr();
  // Python numbers as numpy.asarray makes them (float64, int64, bool),
  // without making an array.
  if (PyFloat_CheckExact(object)) {
    const double number = PyFloat_AsDouble(object);
    return ScalarPayload(DType::kDouble, &number, sizeof(number));
  }
  if (PyBool_Check(object)) {
    const bool flag = object == Py_True;
    return ScalarPayload(DType::kBool, &flag, sizeof(flag));
  }
  if (PyLong_CheckExact(object)) {
    int overflow = 0;
    const int64_t number = PyLong_AsLongLongAndOverflow(object, &overflow);
    if (overflow == 0 && !(number == -1 && PyErr_Occurred())) {
      return ScalarPayload(DType::kInt64, &number, sizeof(number));
    }
    PyErr_Clear();  // uint64 or object: numpy's to decide, below
  }
  const Numpy& numpy = GetNumpy();
  nb::object array;  // set once `value` has been converted
  Buffer buffer;
  bool have_buffer = (IsInstance(object, numpy.ndarray) ||
                      IsInstance(object, numpy.generic)) &&
                     buffer.Get(object, kReadFlags);
  if (!have_buffer) {
    // Anything else, or an array that is not C-contiguous: numpy converts
    // it (or raises as it does).
    array = numpy.asarray(value, nb::none(), "C");
    have_buffer = buffer.Get(array.ptr(), kReadFlags);
  }
  DType dtype = have_buffer ? DTypeFromFormat(buffer.view().format,
                                              buffer.view().itemsize)
                            : DType::kInvalid;
  if (dtype != DType::kInvalid && dtype != DType::kString) {
    const Py_buffer& view = buffer.view();
    return ValueOrRaise(
        MakePayload(dtype, ShapeOf(view),
                    std::string(static_cast<const char*>(view.buf), view.len)));
  }
  // Strings, and what the buffer's format does not say plainly (bfloat16,
  // another byte order, unsupported dtypes): from the array's dtype.
  if (!array.is_valid()) array = numpy.asarray(value, nb::none(), "C");
  if (dtype == DType::kInvalid) dtype = DTypeFromNumpy(array.attr("dtype"));
  Shape shape;
  for (nb::handle dim : nb::borrow<nb::tuple>(array.attr("shape"))) {
    shape.push_back(nb::cast<int64_t>(dim));
  }
  if (dtype == DType::kString) return StringPayload(array, std::move(shape));
  const nb::bytes bytes = nb::borrow<nb::bytes>(array.attr("tobytes")());
  return ValueOrRaise(MakePayload(
      dtype, std::move(shape),
      std::string(static_cast<const char*>(bytes.data()), bytes.size())));
}

std::vector<std::optional<TensorPayload>> StepFromColumns(
    const nb::list& columns) {
  std::vector<std::optional<TensorPayload>> step(columns.size());
  for (size_t i = 0; i < columns.size(); ++i) {
    nb::handle column = columns[i];
    if (!column.is_none()) step[i] = PayloadFromArray(column);
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
  const Numpy& numpy = GetNumpy();
  return IsInstance(value, numpy.ndarray) || PyFloat_Check(value) ||
         PyLong_Check(value) || PyUnicode_Check(value) ||
         PyBytes_Check(value) || PyComplex_Check(value) ||
         IsInstance(value, numpy.generic);
}

// obj.name, or an invalid object (no Python error left set) if it has none.
nb::object AttrOrNull(PyObject* obj, PyObject* name) {
  PyObject* value = PyObject_GetAttr(obj, name);
  if (value == nullptr) PyErr_Clear();
  return nb::steal(value);
}

bool AddItemColumn(PyObject* value, PyObject* column_type, PyObject* generation,
                   std::vector<ItemColumn>* out) {
  static PyObject* const generation_name =
      PyUnicode_InternFromString("_generation");
  static PyObject* const entry_name = PyUnicode_InternFromString("_entry");
  if (Py_TYPE(value) != reinterpret_cast<PyTypeObject*>(column_type))
    return false;
  if (AttrOrNull(value, generation_name).ptr() != generation) return false;
  const nb::object entry = AttrOrNull(value, entry_name);
  if (!entry.is_valid() || !PyTuple_CheckExact(entry.ptr()) ||
      NB_TUPLE_GET_SIZE(entry.ptr()) != 3)
    return false;
  PyObject* column = NB_TUPLE_GET_ITEM(entry.ptr(), 0);
  PyObject* steps = NB_TUPLE_GET_ITEM(entry.ptr(), 1);
  if (!PyLong_CheckExact(column) || !PyList_CheckExact(steps)) return false;
  ItemColumn item_column;
  const long column_index = PyLong_AsLong(column);  // NOLINT(runtime/int)
  if (column_index < 0 || column_index > INT32_MAX) {
    PyErr_Clear();
    return false;
  }
  item_column.column = static_cast<int32_t>(column_index);
  const Py_ssize_t num_steps = NB_LIST_GET_SIZE(steps);
  item_column.steps.reserve(num_steps);
  for (Py_ssize_t i = 0; i < num_steps; ++i) {
    PyObject* step = NB_LIST_GET_ITEM(steps, i);
    if (!PyLong_CheckExact(step)) return false;
    const long long index = PyLong_AsLongLong(step);  // NOLINT(runtime/int)
    if (index == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    item_column.steps.push_back(index);
  }
  item_column.squeeze = NB_TUPLE_GET_ITEM(entry.ptr(), 2) == Py_True;
  out->push_back(std::move(item_column));
  return true;
}

}  // namespace

std::optional<double> PlainNumber(nb::handle value) {
  if (PyFloat_CheckExact(value.ptr())) return PyFloat_AsDouble(value.ptr());
  if (!PyLong_CheckExact(value.ptr())) return std::nullopt;
  const double result = PyLong_AsDouble(value.ptr());
  if (result == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    return std::nullopt;
  }
  return result;
}

std::optional<std::vector<std::optional<TensorPayload>>> CommonStep(
    nb::handle data, nb::handle columns, size_t num_columns) {
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
    nb::handle trajectory, nb::handle column_type, nb::handle generation) {
  std::vector<ItemColumn> columns;
  if (!PyDict_CheckExact(trajectory.ptr())) {
    if (!AddItemColumn(trajectory.ptr(), column_type.ptr(), generation.ptr(),
                       &columns))
      return std::nullopt;
    return columns;
  }
  const nb::object keys = nb::steal(PyDict_Keys(trajectory.ptr()));
  if (!keys.is_valid()) throw nb::python_error();
  const Py_ssize_t num_keys = NB_LIST_GET_SIZE(keys.ptr());
  for (Py_ssize_t i = 0; i < num_keys; ++i) {
    if (!PyUnicode_CheckExact(NB_LIST_GET_ITEM(keys.ptr(), i)))
      return std::nullopt;
  }
  // str keys only: sorting them cannot fail, and is dm-tree's order.
  if (PyList_Sort(keys.ptr()) != 0) throw nb::python_error();
  columns.reserve(num_keys);
  for (Py_ssize_t i = 0; i < num_keys; ++i) {
    PyObject* value =
        PyDict_GetItem(trajectory.ptr(), NB_LIST_GET_ITEM(keys.ptr(), i));
    if (value == nullptr ||
        !AddItemColumn(value, column_type.ptr(), generation.ptr(), &columns))
      return std::nullopt;
  }
  return columns;
}

nb::object BytesArray(absl::Span<const int64_t> shape,
                      const std::vector<std::string>& elements) {
  const Numpy& numpy = GetNumpy();
  nb::object out = numpy.empty(ShapeTuple(shape), numpy.object_dtype);
  // The cells through the buffer protocol: numpy filled them with None,
  // whose references each replacement drops.
  Buffer buffer;
  if (!buffer.Get(out.ptr(), PyBUF_WRITABLE | kReadFlags) ||
      static_cast<size_t>(buffer.view().len) !=
          elements.size() * sizeof(PyObject*)) {
    RaiseStatus(absl::InternalError("an object array has no buffer"));
  }
  PyObject** cells = static_cast<PyObject**>(buffer.view().buf);
  for (size_t i = 0; i < elements.size(); ++i) {
    PyObject* element =
        PyBytes_FromStringAndSize(elements[i].data(), elements[i].size());
    if (element == nullptr) throw nb::python_error();
    PyObject* previous = cells[i];
    cells[i] = element;
    Py_XDECREF(previous);
  }
  return out;
}

namespace {

// The bytes of an array made by ArrayOwning: a Python object (the array's
// base) that owns them and lends them through the buffer protocol, so that
// numpy.ndarray(shape, dtype, buffer) views them without a copy. One
// object, where a capsule, nanobind's ndarray and a memoryview over it cost
// about 0.5 us more per array (a small sample's three columns).
struct ArrayBytes {
  std::string bytes;
  // Instead of `bytes`, when set: the first `block_size` bytes of this.
  std::unique_ptr<char[]> block;
  size_t block_size = 0;
};

int GetArrayBytesBuffer(PyObject* self, Py_buffer* view, int flags) {
  ArrayBytes* owner = nb::inst_ptr<ArrayBytes>(self);
  const bool block = owner->block != nullptr;
  return PyBuffer_FillInfo(
      view, self, block ? owner->block.get() : owner->bytes.data(),
      static_cast<Py_ssize_t>(block ? owner->block_size : owner->bytes.size()),
      /*readonly=*/0, flags);
}

PyType_Slot array_bytes_slots[] = {
    {Py_bf_getbuffer, reinterpret_cast<void*>(&GetArrayBytesBuffer)},
    {0, nullptr}};

}  // namespace

void BindConversions(nb::module_& m) {
  nb::class_<ArrayBytes>(m, "_ArrayBytes", nb::type_slots(array_bytes_slots));
}

nb::object ArrayOwning(DType dtype, absl::Span<const int64_t> shape,
                       std::string bytes) {
  // One call, and the array's dtype is exactly NumpyDType's.
  return GetNumpy().ndarray(ShapeTuple(shape), NumpyDType(dtype),
                            nb::cast(ArrayBytes{std::move(bytes)}));
}

nb::object ArrayOwning(DType dtype, absl::Span<const int64_t> shape,
                       BatchBytes bytes) {
  ArrayBytes owner;
  owner.block_size = bytes.size();
  owner.block = bytes.Release();
  return GetNumpy().ndarray(ShapeTuple(shape), NumpyDType(dtype),
                            nb::cast(std::move(owner)));
}

nb::object ArrayFromPayload(TensorPayload payload) {
  if (payload.dtype == DType::kString) {
    return BytesArray(payload.shape, ValueOrRaise(DecodeStrings(payload)));
  }
  return ArrayOwning(payload.dtype, payload.shape, std::move(payload.data));
}

nb::dict SpillDict(const ChunkStore::SpillStats& stats) {
  nb::dict out;
  out["dir"] = stats.dir;
  out["ram_bytes"] = stats.ram_bytes;
  out["disk_bytes"] = stats.disk_bytes;
  out["disk_file_bytes"] = stats.disk_file_bytes;
  out["spilled_chunks"] = stats.spilled_chunks;
  out["spilled_bytes"] = stats.spilled_bytes;
  out["ram_reads"] = stats.ram_reads;
  out["disk_reads"] = stats.disk_reads;
  out["disk_read_bytes"] = stats.disk_read_bytes;
  out["disk_read_seconds"] = stats.disk_read_seconds;
  out["compactions"] = stats.compactions;
  out["compacted_bytes"] = stats.compacted_bytes;
  out["last_error"] = stats.last_error;
  out["compaction_error"] = stats.compaction_error;
  return out;
}

nb::dict TablesDict(std::vector<TableInfo> tables) {
  nb::dict out;
  for (TableInfo& info : tables) {
    const std::string name = info.options.name;
    out[nb::str(name.data(), name.size())] = nb::cast(std::move(info));
  }
  return out;
}

nb::tuple SampleInfoTuple(const SampleInfo& info) {
  return nb::make_tuple(info.key, info.probability, info.table_size,
                        info.priority, info.times_sampled, info.table_weight,
                        info.min_probability);
}

namespace {

// One field of every SampleInfo of a batch as an array of `dtype`.
template <typename T, typename Field>
nb::object InfoArray(const std::vector<SampleInfo>& infos, DType dtype,
                     Field field) {
  std::string bytes(infos.size() * sizeof(T), '\0');
  T* out = reinterpret_cast<T*>(bytes.data());
  for (size_t i = 0; i < infos.size(); ++i) out[i] = field(infos[i]);
  const int64_t n = static_cast<int64_t>(infos.size());
  return ArrayOwning(dtype, {n}, std::move(bytes));
}

}  // namespace

nb::tuple StackedBatchTuple(StackedBatch batch) {
  const std::vector<SampleInfo>& infos = batch.infos;
  nb::object key = InfoArray<uint64_t>(
      infos, DType::kUint64, [](const SampleInfo& i) { return i.key; });
  nb::object probability = InfoArray<double>(
      infos, DType::kDouble, [](const SampleInfo& i) { return i.probability; });
  nb::object table_size = InfoArray<int64_t>(
      infos, DType::kInt64, [](const SampleInfo& i) { return i.table_size; });
  nb::object priority = InfoArray<double>(
      infos, DType::kDouble, [](const SampleInfo& i) { return i.priority; });
  nb::object times_sampled =
      InfoArray<int32_t>(infos, DType::kInt32,
                         [](const SampleInfo& i) { return i.times_sampled; });
  nb::object table_weight =
      InfoArray<double>(infos, DType::kDouble,
                        [](const SampleInfo& i) { return i.table_weight; });
  nb::object min_probability =
      InfoArray<double>(infos, DType::kDouble,
                        [](const SampleInfo& i) { return i.min_probability; });
  nb::list columns;
  nb::list squeezed;
  for (StackedColumn& column : batch.columns) {
    squeezed.append(nb::bool_(column.squeezed));
    columns.append(
        column.dtype == DType::kString
            ? BytesArray(column.shape, column.strings)
            : ArrayOwning(column.dtype, column.shape, std::move(column.data)));
  }
  return nb::make_tuple(
      nb::make_tuple(key, probability, table_size, priority, times_sampled,
                     table_weight, min_probability),
      columns, squeezed);
}

TableSignature MakeTableSignature(const SignatureList& columns) {
  TableSignature signature;
  for (const auto& [column, dtype, shape] : columns) {
    signature.columns.push_back(
        ColumnSpec{column, DTypeFromNumpy(GetNumpy().dtype(dtype)), shape});
  }
  return signature;
}

}  // namespace reverb_tf::binding
