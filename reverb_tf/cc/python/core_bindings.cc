// SPDX-License-Identifier: Apache-2.0
// reverb_tf._core: the Python binding of libreverb_tf.so (docs/core_module_api.md).
//
// Conventions:
//   * every failure is raised as reverb_tf.errors.from_status(code, message),
//     the one status-code mapping of the Python layer;
//   * the GIL is released around every call that may block, through
//     WaitInSlices() or RunCancellable(), which also turn Ctrl-C into
//     KeyboardInterrupt within 100 ms by cancelling the call.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cxxabi.h>
#include <pthread.h>

#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "reverb_tf/cc/checkpointing/checkpointer.h"
#include "reverb_tf/cc/client/client.h"
#include "reverb_tf/cc/local_server.h"
#include "reverb_tf/cc/client/sample_batch.h"
#include "reverb_tf/cc/patterns/structured_writer.h"
#include "reverb_tf/cc/platform/deadline.h"
#include "reverb_tf/cc/security/auth.h"
#include "reverb_tf/cc/security/credentials.h"
#include "reverb_tf/cc/service/server.h"

namespace reverb_tf {
namespace {

namespace py = ::pybind11;

constexpr absl::Duration kSignalPoll = absl::Milliseconds(100);

[[noreturn]] void RaiseStatus(const absl::Status& status) {
  py::object error = py::module_::import("reverb_tf.errors")
                         .attr("from_status")(static_cast<int>(status.code()),
                                              std::string(status.message()));
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
  throw py::error_already_set();
}

void CheckOk(const absl::Status& status) {
  if (!status.ok()) RaiseStatus(status);
}

template <typename T>
T ValueOrRaise(absl::StatusOr<T> value) {
  if (!value.ok()) RaiseStatus(value.status());
  return *std::move(value);
}

// For the checks of constructor arguments (selectors, rate limiters, table
// options): a plain ValueError, which is what dm-reverb raises for them and
// what its programs catch, rather than the status classes of failed calls.
void CheckArgument(const absl::Status& status) {
  if (!status.ok()) throw py::value_error(std::string(status.message()));
}

template <typename T>
T ArgumentOrRaise(absl::StatusOr<T> value) {
  CheckArgument(value.status());
  return *std::move(value);
}

absl::Duration TimeoutFromSeconds(std::optional<double> seconds) {
  if (!seconds.has_value() || *seconds < 0) return absl::InfiniteDuration();
  return absl::Seconds(*seconds);
}

// Runs `f()` without the GIL and returns its result. Deliberately not a
// scoped guard (py::gil_scoped_release): when the interpreter is finalizing,
// retaking the GIL on a daemon thread ends that thread with a forced unwind,
// which a guard's noexcept destructor would turn into std::terminate (an
// abort at exit for any program with a daemon thread blocked in a call).
template <typename F>
auto WithoutGil(F f) -> decltype(f()) {
  PyThreadState* saved = PyEval_SaveThread();
  try {
    if constexpr (std::is_void_v<decltype(f())>) {
      f();
      PyEval_RestoreThread(saved);  // may end this thread (see above)
    } else {
      auto result = f();
      PyEval_RestoreThread(saved);  // may end this thread (see above)
      return result;
    }
  } catch (abi::__forced_unwind&) {
    throw;  // from PyEval_RestoreThread: the GIL is not ours to retake
  } catch (...) {
    PyEval_RestoreThread(saved);
    throw;
  }
}

// Runs `call(slice)` (returning absl::Status, DEADLINE_EXCEEDED when a slice
// expires) without the GIL until it succeeds, fails otherwise, `timeout`
// passes or Ctrl-C is pressed. Used for waits on our own condition
// variables, where slicing costs nothing.
template <typename Call>
void WaitInSlices(absl::Duration timeout, Call call) {
  const absl::Status status = CallInSlices(
      timeout, kSignalPoll,
      [&](absl::Duration slice) { return WithoutGil([&] { return call(slice); }); },
      [] {
        if (PyErr_CheckSignals() != 0) throw py::error_already_set();
        return absl::OkStatus();
      });
  if (status.code() == absl::StatusCode::kDeadlineExceeded) {
    // The status speaks of the last slice; report the caller's timeout.
    RaiseStatus(absl::DeadlineExceededError(absl::StrCat(
        "timed out after ", absl::FormatDuration(timeout), ": ", status.message())));
  }
  CheckOk(status);
}

// Threads that run RunCancellable's calls, kept for reuse: a new thread per
// call cost ~50 us, as much as the call itself for a small update.
// Workers idle for kIdleExit end, so a burst of concurrent calls does not
// leave its threads behind. The pool is leaked (never destroyed): workers
// may still wait on its lock while the process exits. After fork() the
// child gets a fresh pool, since the parent's workers are not in it.
class CallThreads {
 public:
  static CallThreads& Get() {
    static const bool registered = [] {
      pthread_atfork(nullptr, nullptr, [] { instance_ = new CallThreads(); });
      return true;
    }();
    (void)registered;
    return *instance_;
  }

  // Runs `task` on an idle worker, or a new one if none is idle.
  void Run(std::function<void()> task) {
    absl::MutexLock lock(&mu_);
    tasks_.push_back(std::move(task));
    if (idle_ >= static_cast<int>(tasks_.size())) {
      cv_.Signal();
      return;
    }
    std::thread([this] { Work(); }).detach();
  }

 private:
  static constexpr absl::Duration kIdleExit = absl::Seconds(30);

  void Work() {
    absl::MutexLock lock(&mu_);
    while (true) {
      ++idle_;
      const absl::Time until = absl::Now() + kIdleExit;
      while (tasks_.empty()) {
        if (cv_.WaitWithDeadline(&mu_, until) && tasks_.empty()) {
          --idle_;
          return;
        }
      }
      --idle_;
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      mu_.Unlock();
      task();
      task = nullptr;  // its captures die outside the lock
      mu_.Lock();
    }
  }

  static CallThreads* instance_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  int idle_ ABSL_GUARDED_BY(mu_) = 0;  // workers waiting for a task
};

CallThreads* CallThreads::instance_ = new CallThreads();

// The interpreter's main thread: the only one Ctrl-C reaches
// (PyErr_CheckSignals is a no-op elsewhere). Set at module init.
unsigned long main_thread_ident = 0;  // NOLINT(runtime/int): PyThread's type

// Runs `call(cancel)` without the GIL. On the main thread it runs on a
// reused worker (CallThreads) while this thread waits for Ctrl-C, which
// cancels the call (aborting its RPC) and raises KeyboardInterrupt; on any
// other thread, where no signal can arrive, it runs inline. For calls that
// block in gRPC, which cannot be sliced.
template <typename Call>
auto RunCancellable(Call call) -> decltype(call(nullptr)) {
  using Result = decltype(call(nullptr));
  if (PyThread_get_thread_ident() != main_thread_ident) {
    Cancellation cancel;
    return WithoutGil([&] { return call(&cancel); });
  }
  // Shared with the worker: its Notify() may still touch `done` after this
  // thread has seen it and returned.
  struct State {
    Cancellation cancel;
    std::optional<Result> result;
    absl::Notification done;
  };
  auto state = std::make_shared<State>();
  bool interrupted = false;
  // The GIL is released and retaken by hand, not by RAII: when the
  // interpreter is finalizing, retaking it on a daemon thread ends that
  // thread with a forced unwind, and a scoped guard would then try to retake
  // it again inside the unwind (std::terminate).
  PyThreadState* saved = PyEval_SaveThread();
  // `call` refers to this frame: the worker is done with it before we
  // return (every path below waits for `done`).
  CallThreads::Get().Run([state, &call] {
    state->result.emplace(call(&state->cancel));
    state->done.Notify();
  });
  try {
    while (!state->done.WaitForNotificationWithTimeout(kSignalPoll)) {
      PyEval_RestoreThread(saved);  // may end this thread (see above)
      const bool signalled = PyErr_CheckSignals() != 0;
      saved = PyEval_SaveThread();
      if (signalled) {
        interrupted = true;
        state->cancel.Cancel();
        break;
      }
    }
  } catch (abi::__forced_unwind&) {
    // This thread is being ended: end the call too, so that the worker
    // (which references this frame) is done before the frame is gone.
    state->cancel.Cancel();
    state->done.WaitForNotification();
    throw;
  }
  state->done.WaitForNotification();
  PyEval_RestoreThread(saved);
  if (interrupted) throw py::error_already_set();
  return *std::move(state->result);
}

// RunCancellable for a call of `client`; inline (no thread hop, ~30 us less)
// when the call reaches a server of this process, which never blocks.
template <typename Call>
auto RunClientCall(Client& client, Call call) -> decltype(call(nullptr)) {
  if (client.InProcess()) {
    Cancellation cancel;
    return WithoutGil([&] { return call(&cancel); });
  }
  return RunCancellable(std::move(call));
}

// ------------------------------------------------------------ dtypes

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
  if (py::str(dtype.attr("name")).cast<std::string>() == "bfloat16") return DType::kBfloat16;
  RaiseStatus(absl::InvalidArgumentError(absl::StrCat(
      "unsupported numpy dtype ", py::str(dtype).cast<std::string>())));
}

py::dtype NumpyDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat: return py::dtype("float32");
    case DType::kDouble: return py::dtype("float64");
    case DType::kHalf: return py::dtype("float16");
    case DType::kInt8: return py::dtype("int8");
    case DType::kInt16: return py::dtype("int16");
    case DType::kInt32: return py::dtype("int32");
    case DType::kInt64: return py::dtype("int64");
    case DType::kUint8: return py::dtype("uint8");
    case DType::kUint16: return py::dtype("uint16");
    case DType::kUint32: return py::dtype("uint32");
    case DType::kUint64: return py::dtype("uint64");
    case DType::kBool: return py::dtype("bool");
    case DType::kComplex64: return py::dtype("complex64");
    case DType::kComplex128: return py::dtype("complex128");
    case DType::kString: return py::dtype("O");
    case DType::kBfloat16:
      return py::dtype::from_args(py::module_::import("ml_dtypes").attr("bfloat16"));
    case DType::kInvalid: break;
  }
  RaiseStatus(absl::InternalError("invalid dtype"));
}

// ------------------------------------------------- numpy <-> payloads

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
            "element of type ", Py_TYPE(element.ptr())->tp_name));
      }
    }
    return ValueOrRaise(MakeStringPayload(std::move(shape), elements));
  }
  std::string bytes(static_cast<const char*>(array.data()), array.nbytes());
  return ValueOrRaise(MakePayload(dtype, std::move(shape), std::move(bytes)));
}

// A step as Python's writers pass it: one array-like per flat column, None
// where the column is missing.
std::vector<std::optional<TensorPayload>> StepFromColumns(const py::list& columns) {
  std::vector<std::optional<TensorPayload>> step(columns.size());
  for (size_t i = 0; i < columns.size(); ++i) {
    if (!columns[i].is_none()) step[i] = PayloadFromArray(columns[i]);
  }
  return step;
}

// An item's reference to one column as Python passes it: (column, steps,
// squeeze), a TrajectoryColumn's _entry.
using ColumnRef = std::tuple<int32_t, std::vector<int64_t>, bool>;

std::vector<ItemColumn> ItemColumnsFrom(const std::vector<ColumnRef>& refs) {
  std::vector<ItemColumn> columns;
  columns.reserve(refs.size());
  for (const auto& [column, steps, squeeze] : refs) {
    columns.push_back(ItemColumn{column, steps, squeeze});
  }
  return columns;
}

// An object array of `shape` holding `elements` (row-major) as bytes.
py::array BytesArray(absl::Span<const int64_t> shape, const std::vector<std::string>& elements) {
  py::array out(py::dtype("O"), std::vector<py::ssize_t>(shape.begin(), shape.end()));
  PyObject** cells = static_cast<PyObject**>(out.mutable_data());
  for (size_t i = 0; i < elements.size(); ++i) {
    cells[i] = PyBytes_FromStringAndSize(elements[i].data(), elements[i].size());
  }
  return out;
}

// Zero-copy: the array views `bytes`, which a capsule owns from now on.
py::array ArrayOwning(DType dtype, absl::Span<const int64_t> shape, std::string bytes) {
  auto* owner = new std::string(std::move(bytes));
  py::capsule capsule(owner, [](void* p) { delete static_cast<std::string*>(p); });
  return py::array(NumpyDType(dtype), std::vector<py::ssize_t>(shape.begin(), shape.end()),
                   owner->data(), capsule);
}

py::array ArrayFromPayload(TensorPayload payload) {
  if (payload.dtype == DType::kString) {
    return BytesArray(payload.shape, ValueOrRaise(DecodeStrings(payload)));
  }
  return ArrayOwning(payload.dtype, payload.shape, std::move(payload.data));
}

// ---------------------------------------------------------- options

using SignatureList = std::vector<std::tuple<std::string, py::object, std::vector<int64_t>>>;

TableSignature MakeTableSignature(const SignatureList& columns) {
  TableSignature signature;
  for (const auto& [column, dtype, shape] : columns) {
    signature.columns.push_back(
        ColumnSpec{column, DTypeFromNumpy(py::dtype::from_args(dtype)), shape});
  }
  return signature;
}

TableOptions MakeTableOptions(const std::string& name,
                              const SelectorOptions& sampler,
                              const SelectorOptions& remover,
                              int64_t max_size, int32_t max_times_sampled,
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

// ----------------------------------------------------------- objects

// In the order of reverb_tf.replay_sample.SampleInfo's fields (dm-reverb's),
// which Python builds with SampleInfo._make: a tuple is the cheapest thing
// to hand over per sample.
py::dict TablesDict(std::vector<TableInfo> tables) {
  py::dict out;
  for (TableInfo& info : tables) {
    const std::string name = info.options.name;
    out[py::str(name)] = py::cast(std::move(info));
  }
  return out;
}

py::tuple SampleInfoTuple(const SampleInfo& info) {
  return py::make_tuple(info.key, info.probability, info.table_size, info.priority,
                        info.times_sampled, info.table_weight, info.min_probability);
}


// A stacked batch as numpy: (infos, columns, squeezed), where infos holds one
// array per SampleInfoTuple field and each column is [batch, ...]. Fixed-size
// columns are handed over without a copy.
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
    columns.append(column.dtype == DType::kString
                       ? BytesArray(column.shape, column.strings)
                       : ArrayOwning(column.dtype, column.shape, std::move(column.data)));
  }
  return py::make_tuple(
      py::make_tuple(key, probability, table_size, priority, times_sampled, table_weight,
                     min_probability),
      columns, squeezed);
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "Native core of reverb_tf (see docs/core_module_api.md).";
  main_thread_ident = static_cast<unsigned long>(  // NOLINT(runtime/int)
      py::module_::import("threading").attr("main_thread")().attr("ident").cast<uint64_t>());

  // Selector kinds under the names Python's reverb_tf.item_selectors uses.
  py::enum_<SelectorOptions::Kind>(m, "SelectorKind")
      .value("uniform", SelectorOptions::Kind::kUniform)
      .value("prioritized", SelectorOptions::Kind::kPrioritized)
      .value("fifo", SelectorOptions::Kind::kFifo)
      .value("lifo", SelectorOptions::Kind::kLifo)
      .value("min_heap", SelectorOptions::Kind::kMinHeap)
      .value("max_heap", SelectorOptions::Kind::kMaxHeap);

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
        return absl::StrCat("SelectorOptions(", py::str(py::cast(o.kind).attr("name")).cast<std::string>(),
                            ", priority_exponent=", o.priority_exponent, ")");
      });

  // The rate limiter's parameters and presets, each checked by the core
  // (ValueError with its message): the one definition and the one set of
  // checks Python's reverb_tf.rate_limiters builds on.
  py::class_<RateLimiterOptions>(m, "RateLimiterOptions")
      .def(py::init([](double samples_per_insert, int64_t min_size_to_sample, double min_diff,
                       double max_diff) {
             return ArgumentOrRaise(RateLimiterOptions::Checked(
                 samples_per_insert, min_size_to_sample, min_diff, max_diff));
           }),
           py::arg("samples_per_insert"), py::arg("min_size_to_sample"), py::arg("min_diff"),
           py::arg("max_diff"))
      .def_static(
          "min_size",
          [](int64_t min_size_to_sample) {
            return ArgumentOrRaise(RateLimiterOptions::CheckedMinSize(min_size_to_sample));
          },
          py::arg("min_size_to_sample"))
      .def_static(
          "sample_to_insert_ratio",
          [](double samples_per_insert, int64_t min_size_to_sample, double error_buffer) {
            return ArgumentOrRaise(RateLimiterOptions::CheckedSampleToInsertRatio(
                samples_per_insert, min_size_to_sample, error_buffer));
          },
          py::arg("samples_per_insert"), py::arg("min_size_to_sample"), py::arg("error_buffer"))
      .def_static(
          "sample_to_insert_ratio_window",
          [](double samples_per_insert, int64_t min_size_to_sample, double min_diff,
             double max_diff) {
            return ArgumentOrRaise(RateLimiterOptions::CheckedSampleToInsertRatio(
                samples_per_insert, min_size_to_sample, min_diff, max_diff));
          },
          py::arg("samples_per_insert"), py::arg("min_size_to_sample"), py::arg("min_diff"),
          py::arg("max_diff"))
      .def_static(
          "queue",
          [](int64_t size) { return ArgumentOrRaise(RateLimiterOptions::CheckedQueue(size)); },
          py::arg("size"))
      .def_readonly("samples_per_insert", &RateLimiterOptions::samples_per_insert)
      .def_readonly("min_size_to_sample", &RateLimiterOptions::min_size_to_sample)
      .def_readonly("min_diff", &RateLimiterOptions::min_diff)
      .def_readonly("max_diff", &RateLimiterOptions::max_diff)
      // Empty, or why valid options may still surprise a program.
      .def("caveat", &RateLimiterOptions::Caveat)
      .def("__repr__", &RateLimiterOptions::DebugString);

  py::class_<TableOptions>(m, "TableOptions")
      .def(py::init(&MakeTableOptions), py::arg("name"), py::arg("sampler"),
           py::arg("remover"), py::arg("max_size"), py::arg("max_times_sampled"),
           py::arg("rate_limiter"), py::arg("signature"),
           py::arg("nested_structure") = py::bytes(""))
      .def_property_readonly("name", [](const TableOptions& o) { return o.name; });

  py::class_<RateLimiterCallStats>(m, "CallStats")
      .def_readonly("completed", &RateLimiterCallStats::completed)
      .def_readonly("limited", &RateLimiterCallStats::limited)
      .def_readonly("pending", &RateLimiterCallStats::pending)
      .def_property_readonly("completed_wait_time_s", [](const RateLimiterCallStats& s) {
        return absl::ToDoubleSeconds(s.completed_wait_time);
      });

  py::class_<RateLimiterInfo>(m, "RateLimiterInfo")
      .def_property_readonly("samples_per_insert", [](const RateLimiterInfo& i) { return i.options.samples_per_insert; })
      .def_property_readonly("min_size_to_sample", [](const RateLimiterInfo& i) { return i.options.min_size_to_sample; })
      .def_property_readonly("min_diff", [](const RateLimiterInfo& i) { return i.options.min_diff; })
      .def_property_readonly("max_diff", [](const RateLimiterInfo& i) { return i.options.max_diff; })
      .def_readonly("inserts", &RateLimiterInfo::inserts)
      .def_readonly("samples", &RateLimiterInfo::samples)
      .def_readonly("deletes", &RateLimiterInfo::deletes)
      .def_readonly("insert_stats", &RateLimiterInfo::insert_stats)
      .def_readonly("sample_stats", &RateLimiterInfo::sample_stats);

  py::class_<TableInfo>(m, "TableInfo")
      .def_property_readonly("name", [](const TableInfo& i) { return i.options.name; })
      .def_property_readonly("sampler_options", [](const TableInfo& i) { return i.options.sampler; })
      .def_property_readonly("remover_options", [](const TableInfo& i) { return i.options.remover; })
      .def_property_readonly("max_size", [](const TableInfo& i) { return i.options.max_size; })
      .def_property_readonly("max_times_sampled", [](const TableInfo& i) { return i.options.max_times_sampled; })
      .def_readonly("current_size", &TableInfo::current_size)
      .def_readonly("num_unique_samples", &TableInfo::num_unique_samples)
      .def_readonly("num_episodes", &TableInfo::num_episodes)
      .def_readonly("num_deleted_episodes", &TableInfo::num_deleted_episodes)
      .def_readonly("rate_limiter_info", &TableInfo::rate_limiter_info)
      .def_property_readonly("signature", [](const TableInfo& i) -> py::object {
        if (!i.options.signature.has_value()) return py::none();
        py::list columns;
        for (const ColumnSpec& c : i.options.signature->columns) {
          columns.append(py::make_tuple(c.name, NumpyDType(c.dtype), c.shape));
        }
        return columns;
      })
      .def_property_readonly("nested_structure", [](const TableInfo& i) {
        return py::bytes(i.options.signature.has_value() ? i.options.signature->nested_structure : "");
      });

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

  // A live table (table.h), owned by Python's reverb_tf.Table from its
  // construction and shared with the servers that host it.
  py::class_<Table, std::shared_ptr<Table>>(m, "Table")
      .def(py::init([](const TableOptions& options) {
             std::random_device seed_source;
             const uint64_t seed = (uint64_t{seed_source()} << 32) | seed_source();
             return ValueOrRaise(Table::Create(options, seed));
           }),
           py::arg("options"))
      .def_property_readonly("name", &Table::name)
      .def("info", &Table::info, "The table's info, read in this process (no RPC).")
      .def("can_insert",
           [](const Table& table, int64_t n) { return ValueOrRaise(table.CanInsert(n)); })
      .def("can_sample",
           [](const Table& table, int64_t n) { return ValueOrRaise(table.CanSample(n)); });

  py::class_<ReplayServer>(m, "Server")
      .def(py::init([](std::vector<std::shared_ptr<Table>> tables, int port,
                       int64_t max_message_bytes,
                       const std::string& checkpoint_root,
                       const std::string& fallback_checkpoint_path, int checkpoint_keep,
                       const std::string& checkpoint_group, double checkpoint_interval_s,
                       bool checkpoint_load_previous_if_damaged, int64_t max_active_streams,
                       const std::string& host, int metrics_port,
                       const std::string& tls_cert_file, const std::string& tls_key_file,
                       const std::string& tls_client_ca_file,
                       const std::string& auth_tokens_file, const std::string& wal_dir,
                       const std::string& wal_sync, double wal_sync_interval_s,
                       double wal_retry_interval_s, int64_t memory_limit) {
             ServerOptions options;
             if (!wal_dir.empty()) {
               WalOptions wal;
               wal.dir = wal_dir;
               wal.sync = ValueOrRaise(ParseWalSync(wal_sync));
               wal.interval = absl::Seconds(wal_sync_interval_s);
               wal.retry_interval = absl::Seconds(wal_retry_interval_s);
               options.wal = wal;
             }
             options.tls = ValueOrRaise(
                 ServerTlsFromFiles(tls_cert_file, tls_key_file, tls_client_ca_file));
             if (!auth_tokens_file.empty()) {
               const std::string tokens =
                   ValueOrRaise(ReadPemFile(auth_tokens_file, "auth tokens"));
               options.auth = ValueOrRaise(TokenAuthenticator::Create(tokens));
             }
             options.metrics_port = metrics_port;
             options.memory_limit = memory_limit;
             options.port = port;
             options.host = host;
             options.max_message_bytes = max_message_bytes;
             options.max_active_streams = max_active_streams;
             options.checkpoint_interval = absl::Seconds(checkpoint_interval_s);
             if (!checkpoint_root.empty()) {
               CheckpointerOptions checkpointer;
               checkpointer.root = checkpoint_root;
               checkpointer.fallback_checkpoint_path = fallback_checkpoint_path;
               checkpointer.keep = checkpoint_keep;
               checkpointer.group = checkpoint_group;
               checkpointer.load_previous_if_damaged = checkpoint_load_previous_if_damaged;
               options.checkpointer = ValueOrRaise(WithoutGil(
                   [&] { return Checkpointer::Create(std::move(checkpointer)); }));
             }
             // Loading a checkpoint can take a while: other Python threads run.
             return ValueOrRaise(
                 WithoutGil([&] { return ReplayServer::Start(tables, options); }));
           }),
           py::arg("tables"), py::arg("port") = 0,
           py::arg("max_message_bytes") = int64_t{256} << 20,
           py::arg("checkpoint_root") = "", py::arg("fallback_checkpoint_path") = "",
           py::arg("checkpoint_keep") = 1, py::arg("checkpoint_group") = "",
           py::arg("checkpoint_interval_s") = 0.0,
           py::arg("checkpoint_load_previous_if_damaged") = false,
           py::arg("max_active_streams") = ServerOptions().max_active_streams,
           py::arg("host") = ServerOptions().host,
           py::arg("metrics_port") = ServerOptions().metrics_port,
           py::arg("tls_cert_file") = "", py::arg("tls_key_file") = "",
           py::arg("tls_client_ca_file") = "", py::arg("auth_tokens_file") = "",
           py::arg("wal_dir") = "", py::arg("wal_sync") = "every_write",
           py::arg("wal_sync_interval_s") = 0.01,
           py::arg("wal_retry_interval_s") = 5.0, py::arg("memory_limit") = 0)
      .def_property_readonly("wal_replay",
                             [](const ReplayServer& server) {
                               const WalReplay& r = server.wal_replay();
                               py::dict out;
                               out["entries"] = r.entries;
                               out["files"] = r.files;
                               out["last_position"] = r.last_position;
                               out["damage"] = r.damage;
                               return out;
                             })
      .def_property_readonly("port", &ReplayServer::port)
      .def_property_readonly("metrics_port", &ReplayServer::metrics_port)
      .def("metrics_text", &ReplayServer::MetricsText)
      .def_property_readonly("loaded_checkpoint", &ReplayServer::loaded_checkpoint)
      .def_property_readonly("skipped_checkpoints", &ReplayServer::skipped_checkpoints)
      .def("checkpoint",
           [](ReplayServer& server) {
             auto stats = WithoutGil([&] { return server.Checkpoint(); });
             CheckOk(stats.status());
             py::dict out;
             out["path"] = stats->path;
             out["max_table_pause_s"] = absl::ToDoubleSeconds(stats->max_table_pause);
             out["total_s"] = absl::ToDoubleSeconds(stats->total);
             out["num_items"] = stats->num_items;
             out["num_chunks"] = stats->num_chunks;
             out["bytes"] = stats->bytes;
             return out;
           },
           "Saves a checkpoint; returns its path and timings (for benchmarks).")
      .def("stop", [](ReplayServer& server) { WithoutGil([&] { server.Stop(); }); })
      .def("wait", [](ReplayServer& server) {
        // Sliced so that Ctrl-C reaches Python; Stop() from another thread ends it.
        WaitInSlices(absl::InfiniteDuration(), [&](absl::Duration slice) {
          return server.WaitFor(slice) ? absl::OkStatus() : absl::DeadlineExceededError("waiting");
        });
      });

  py::class_<TrajectoryWriter>(m, "TrajectoryWriter")
      .def("append",
           [](TrajectoryWriter& writer, const py::list& columns, bool partial_step) {
             std::vector<std::optional<TensorPayload>> step = StepFromColumns(columns);
             return ValueOrRaise(writer.Append(std::move(step), partial_step));
           },
           py::arg("columns"), py::arg("partial_step") = false)
      .def("create_item",
           [](TrajectoryWriter& writer, const std::string& table, double priority,
              const std::vector<ColumnRef>& refs) {
             const std::vector<ItemColumn> columns = ItemColumnsFrom(refs);
             // Fast path: room in the in-flight window, nothing to wait for.
             absl::Status status = writer.CreateItem(table, priority, columns, absl::ZeroDuration());
             if (status.code() != absl::StatusCode::kDeadlineExceeded) return CheckOk(status);
             WaitInSlices(absl::InfiniteDuration(), [&](absl::Duration slice) {
               return writer.CreateItem(table, priority, columns, slice);
             });
           })
      .def("flush",
           [](TrajectoryWriter& writer, int32_t block_until_num_items,
              std::optional<double> timeout_s) {
             absl::Status status = writer.Flush(block_until_num_items, absl::ZeroDuration());
             if (status.code() != absl::StatusCode::kDeadlineExceeded) return CheckOk(status);
             WaitInSlices(TimeoutFromSeconds(timeout_s), [&](absl::Duration slice) {
               return writer.Flush(block_until_num_items, slice);
             });
           },
           py::arg("block_until_num_items") = 0, py::arg("timeout_s") = py::none())
      .def("end_episode",
           [](TrajectoryWriter& writer, bool clear_buffers, std::optional<double> timeout_s) {
             absl::Status status = writer.EndEpisode(clear_buffers, absl::ZeroDuration());
             if (status.code() != absl::StatusCode::kDeadlineExceeded) return CheckOk(status);
             WaitInSlices(TimeoutFromSeconds(timeout_s), [&](absl::Duration slice) {
               return writer.Flush(0, slice);
             });
           },
           py::arg("clear_buffers") = true, py::arg("timeout_s") = py::none())
      .def("configure",
           [](TrajectoryWriter& writer, int32_t column, std::optional<int32_t> keep_alive,
              std::optional<int32_t> max_chunk_length) {
             CheckOk(writer.Configure(column, keep_alive.value_or(0),
                                      max_chunk_length.value_or(0)));
           },
           py::arg("column"), py::arg("num_keep_alive_refs") = py::none(),
           py::arg("max_chunk_length") = py::none())
      .def("close", [](TrajectoryWriter& writer) {
        CheckOk(WithoutGil([&] { return writer.Close(); }));
      })
      .def_static("validate_column_options",
                  [](int32_t num_keep_alive_refs, std::optional<int32_t> max_chunk_length) {
                    CheckOk(TrajectoryWriter::ValidateColumnOptions(
                        num_keep_alive_refs, max_chunk_length.value_or(0)));
                  })
      .def("set_column_name", &TrajectoryWriter::SetColumnName)
      .def("set_table_signature",
           [](TrajectoryWriter& writer, const std::string& table,
              std::optional<SignatureList> signature) {
             std::optional<TableSignature> table_signature;
             if (signature.has_value()) table_signature = MakeTableSignature(*signature);
             writer.SetTableSignature(table, std::move(table_signature));
           })
      .def("history_step",
           [](const TrajectoryWriter& writer, int32_t column, int64_t index) {
             // IndexError and ValueError, as for a Python sequence.
             absl::StatusOr<int64_t> step = writer.HistoryStep(column, index);
             if (step.ok()) return *step;
             const std::string message(step.status().message());
             if (step.status().code() == absl::StatusCode::kOutOfRange) {
               throw py::index_error(message);
             }
             throw py::value_error(message);
           })
      .def("is_referenceable", &TrajectoryWriter::IsReferenceable)
      .def("read_cells",
           [](TrajectoryWriter& writer, int32_t column, const std::vector<int64_t>& steps) {
             absl::StatusOr<TensorPayload> payload =
                 WithoutGil([&] { return writer.ReadCells(column, steps); });
             // A plain RuntimeError for expired cells, as dm-reverb raises.
             if (payload.status().code() == absl::StatusCode::kFailedPrecondition) {
               throw std::runtime_error(std::string(payload.status().message()));
             }
             return ArrayFromPayload(ValueOrRaise(std::move(payload)));
           })
      .def("column_type",
           [](const TrajectoryWriter& writer, int32_t column) -> py::object {
             std::optional<std::pair<DType, Shape>> type = writer.ColumnType(column);
             if (!type.has_value()) return py::none();
             py::tuple shape(type->second.size());
             for (size_t i = 0; i < type->second.size(); ++i) shape[i] = type->second[i];
             return py::make_tuple(NumpyDType(type->first), shape);
           })
      .def_property_readonly("history_length", &TrajectoryWriter::history_length)
      .def_property_readonly("step_open", &TrajectoryWriter::step_open)
      .def_property_readonly("num_columns", &TrajectoryWriter::num_columns)
      .def_property_readonly("episode_steps", &TrajectoryWriter::episode_steps)
      .def_property_readonly("num_in_flight_items", &TrajectoryWriter::num_in_flight_items)
      // Batched (vectorised-environment) writers: num_lanes >= 1.
      .def("append_batch",
           [](TrajectoryWriter& writer, const py::list& columns) {
             std::vector<std::optional<TensorPayload>> step = StepFromColumns(columns);
             return ValueOrRaise(writer.AppendBatch(std::move(step)));
           })
      .def("create_items",
           [](TrajectoryWriter& writer, const std::string& table,
              const py::array_t<double, py::array::c_style | py::array::forcecast>& priorities,
              const std::vector<ColumnRef>& refs,
              const py::array_t<int32_t, py::array::c_style | py::array::forcecast>& lanes) {
             const std::vector<ItemColumn> columns = ItemColumnsFrom(refs);
             const absl::Span<const double> p(priorities.data(), priorities.size());
             const absl::Span<const int32_t> l(lanes.data(), lanes.size());
             absl::Status status = writer.CreateItems(table, p, columns, l, absl::ZeroDuration());
             if (status.code() != absl::StatusCode::kDeadlineExceeded) return CheckOk(status);
             WaitInSlices(absl::InfiniteDuration(), [&](absl::Duration slice) {
               return writer.CreateItems(table, p, columns, l, slice);
             });
           })
      .def("end_lane_episodes",
           [](TrajectoryWriter& writer,
              const py::array_t<int32_t, py::array::c_style | py::array::forcecast>& lanes,
              bool clear_buffers) {
             CheckOk(writer.EndLaneEpisodes(absl::MakeConstSpan(lanes.data(), lanes.size()),
                                            clear_buffers));
           })
      .def_property_readonly("lane_episode_steps",
                             [](const TrajectoryWriter& writer) {
                               std::vector<int32_t> steps = writer.LaneEpisodeSteps();
                               py::array_t<int32_t> out(static_cast<py::ssize_t>(steps.size()));
                               std::copy(steps.begin(), steps.end(), out.mutable_data());
                               return out;
                             })
      .def_property_readonly("num_lanes", &TrajectoryWriter::num_lanes);

  // The C++ side of reverb_tf.structured_writer.StructuredWriter.
  py::class_<StructuredWriter>(m, "StructuredWriter")
      .def("append",
           [](StructuredWriter& writer, const py::list& columns, bool partial_step) {
             std::vector<std::optional<TensorPayload>> step = StepFromColumns(columns);
             // Fast path: the items fit in the in-flight window.
             absl::Status status = writer.Append(std::move(step), partial_step, absl::ZeroDuration());
             if (status.code() != absl::StatusCode::kDeadlineExceeded) return CheckOk(status);
             WaitInSlices(absl::InfiniteDuration(), [&](absl::Duration slice) {
               return writer.CreatePendingItems(slice);
             });
           },
           py::arg("columns"), py::arg("partial_step") = false)
      // Pending items are created first (they wait only on the in-flight
      // window, which is effectively unlimited); then the wait for
      // acknowledgements is sliced like the Writer's.
      .def("flush",
           [](StructuredWriter& writer, int32_t block_until_num_items,
              std::optional<double> timeout_s) {
             WaitInSlices(absl::InfiniteDuration(), [&](absl::Duration slice) {
               return writer.CreatePendingItems(slice);
             });
             TrajectoryWriter& trajectory_writer = writer.trajectory_writer();
             absl::Status status = trajectory_writer.Flush(block_until_num_items,
                                                           absl::ZeroDuration());
             if (status.code() != absl::StatusCode::kDeadlineExceeded) return CheckOk(status);
             WaitInSlices(TimeoutFromSeconds(timeout_s), [&](absl::Duration slice) {
               return trajectory_writer.Flush(block_until_num_items, slice);
             });
           },
           py::arg("block_until_num_items") = 0, py::arg("timeout_s") = py::none())
      .def("end_episode",
           [](StructuredWriter& writer, bool clear_buffers, std::optional<double> timeout_s) {
             WaitInSlices(absl::InfiniteDuration(), [&](absl::Duration slice) {
               return writer.CreatePendingItems(slice);
             });
             // Ends the episode at once; DEADLINE_EXCEEDED only says that the
             // flush it starts is still running.
             absl::Status status = writer.EndEpisode(clear_buffers, absl::ZeroDuration());
             if (status.code() != absl::StatusCode::kDeadlineExceeded) return CheckOk(status);
             TrajectoryWriter& trajectory_writer = writer.trajectory_writer();
             WaitInSlices(TimeoutFromSeconds(timeout_s), [&](absl::Duration slice) {
               return trajectory_writer.Flush(0, slice);
             });
           },
           py::arg("clear_buffers") = true, py::arg("timeout_s") = py::none())
      .def("close",
           [](StructuredWriter& writer) { CheckOk(WithoutGil([&] { return writer.Close(); })); })
      .def_property_readonly("step_is_open", &StructuredWriter::step_is_open);

  py::class_<Sampler>(m, "Sampler")
      .def("next_batch",
           [](Sampler& sampler, int64_t max_items) {
             // Blocks for the first sample only; returns what followed it up
             // to max_items. An empty list: the stream ended (max_samples).
             std::vector<Sample> batch;
             const absl::Status status = RunCancellable([&](Cancellation* cancel) {
               Cancellation::Id id = 0;
               if (!cancel->Register([&sampler] { sampler.Cancel(); }, &id)) {
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
             py::list out;
             for (Sample& sample : batch) {
               py::list columns;
               for (TensorPayload& column : sample.columns) {
                 columns.append(ArrayFromPayload(std::move(column)));
               }
               py::list squeezed;
               for (bool flag : sample.squeezed) squeezed.append(py::bool_(flag));
               out.append(py::make_tuple(SampleInfoTuple(sample.info), columns, squeezed));
             }
             return out;
           },
           py::arg("max_items"))
      .def("next_stacked",
           [](Sampler& sampler, int64_t batch_size) -> py::object {
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
               absl::Status result = NextStackedBatch(&sampler, batch_size, &batch);
               cancel->UnregisterAndWait(id);
               return result;
             });
             if (absl::IsOutOfRange(status)) status = absl::OkStatus();
             if (!status.ok() && (batch.size() == 0 || absl::IsInvalidArgument(status))) {
               RaiseStatus(status);
             }
             py::object error = py::none();
             if (!status.ok()) {
               error = py::module_::import("reverb_tf.errors")
                           .attr("from_status")(static_cast<int>(status.code()),
                                                std::string(status.message()));
             }
             if (batch.size() == 0) return py::make_tuple(py::none(), error);
             return py::make_tuple(StackedBatchTuple(std::move(batch)), error);
           },
           py::arg("batch_size"))
      .def("cancel", &Sampler::Cancel,
           "Ends a blocked or later next_batch()/next_stacked() with CANCELLED; any thread.");

  py::class_<ClientSecurity>(m, "ClientSecurity",
                             "TLS and bearer token of clients (security/credentials.h).")
      .def(py::init<>(), "Plaintext, no token.")
      .def_static("from_environment",
                  [] { return ValueOrRaise(SecurityFromEnvironment()); })
      .def("derived",
           [](const ClientSecurity& base, std::optional<std::string> ca_file,
              std::optional<std::string> cert_file, std::optional<std::string> key_file,
              std::optional<std::string> server_name, std::optional<std::string> token) {
             // The given parts replace the base's; files are read now.
             ClientSecurity derived = ValueOrRaise(ClientSecurityFromFiles(
                 ca_file.value_or(""), cert_file.value_or(""), key_file.value_or(""),
                 server_name.value_or(""), token.value_or("")));
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
           py::arg("ca_file") = py::none(), py::arg("cert_file") = py::none(),
           py::arg("key_file") = py::none(), py::arg("server_name") = py::none(),
           py::arg("token") = py::none())
      .def_property_readonly("tls", &ClientSecurity::tls)
      .def_property_readonly("mutual_tls",
                             [](const ClientSecurity& s) { return !s.cert_chain.empty(); })
      .def_property_readonly("has_token",
                             [](const ClientSecurity& s) { return !s.token.empty(); })
      .def("__repr__", [](const ClientSecurity& s) {
        // Never the token or the key.
        return absl::StrCat("ClientSecurity(tls=", s.tls() ? "True" : "False",
                            ", mutual_tls=", s.cert_chain.empty() ? "False" : "True",
                            ", server_name='", s.server_name, "', token=",
                            s.token.empty() ? "None" : "'***'", ")");
      });
  m.def("set_in_process_enabled", &SetInProcessEnabled,
        "Clients of a server of this process reach its tables directly (default: on "
        "unless REVERB_TF_IN_PROCESS=0); off, every call goes over gRPC.",
        py::arg("enabled"));
  m.def("in_process_enabled", &InProcessEnabled);
  m.def("default_client_security", [] { return ValueOrRaise(DefaultClientSecurity()); });
  m.def("set_default_client_security",
        [](const ClientSecurity& security) { CheckOk(SetDefaultClientSecurity(security)); });

  py::class_<Client>(m, "Client")
      .def(py::init([](const std::string& address, int64_t max_message_bytes,
                       std::optional<ClientSecurity> security) {
             ClientOptions options;
             options.max_message_bytes = max_message_bytes;
             options.security = std::move(security);
             return ValueOrRaise(Client::Create(address, options));
           }),
           py::arg("server_address"), py::arg("max_message_bytes") = int64_t{256} << 20,
           py::arg("security") = py::none())
      .def_property_readonly("server_address", &Client::server_address)
      .def("server_info",
           [](Client& client, std::optional<double> timeout_s) {
             auto tables = RunClientCall(client, [&](Cancellation* cancel) {
               return client.ServerInfo(TimeoutFromSeconds(timeout_s), cancel);
             });
             return TablesDict(ValueOrRaise(std::move(tables)));
           },
           py::arg("timeout_s") = py::none())
      .def("server_info_of_any_shard",
           [](Client& client, std::optional<double> timeout_s) {
             auto tables = RunCancellable([&](Cancellation* cancel) {
               return client.ServerInfoOfAnyShard(TimeoutFromSeconds(timeout_s), cancel);
             });
             return TablesDict(ValueOrRaise(std::move(tables)));
           },
           "The tables of the first shard that answers (options and signatures).",
           py::arg("timeout_s") = py::none())
      .def("server_info_by_shard",
           [](Client& client, std::optional<double> timeout_s) {
             std::vector<ShardInfo> shards;
             CheckOk(RunCancellable([&](Cancellation* cancel) {
               shards = client.ServerInfoByShard(TimeoutFromSeconds(timeout_s), cancel);
               return absl::OkStatus();
             }));
             py::list out;
             for (ShardInfo& shard : shards) {
               if (shard.tables.ok()) {
                 out.append(py::make_tuple(shard.address, TablesDict(*std::move(shard.tables)),
                                           py::none()));
               } else {
                 const absl::Status& status = shard.tables.status();
                 out.append(py::make_tuple(
                     shard.address, py::none(),
                     py::make_tuple(static_cast<int>(status.code()),
                                    std::string(status.message()))));
               }
             }
             return out;
           },
           "[(address, {name: TableInfo} or None, (code, message) or None)] per shard.",
           py::arg("timeout_s") = py::none())
      .def_property_readonly("shard_addresses", &Client::ShardAddresses)
      .def("mutate_priorities",
           [](Client& client, const std::string& table, const std::vector<Key>& keys,
              const std::vector<double>& priorities, const std::vector<Key>& deletes,
              std::optional<double> timeout_s) {
             if (keys.size() != priorities.size()) {
               RaiseStatus(absl::InvalidArgumentError(absl::StrCat(
                   keys.size(), " keys but ", priorities.size(), " priorities")));
             }
             std::vector<std::pair<Key, double>> updates(keys.size());
             for (size_t i = 0; i < keys.size(); ++i) updates[i] = {keys[i], priorities[i]};
             MutationReport r;
             if (!timeout_s.has_value() && PyThread_get_thread_ident() == main_thread_ident &&
                 !client.InProcess()) {
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
             return py::make_tuple(r.updated, r.deleted, r.missing, r.unreachable, r.warning);
           },
           py::arg("table"), py::arg("keys"), py::arg("priorities"),
           py::arg("deletes"), py::arg("timeout_s") = py::none())
      .def("reset",
           [](Client& client, const std::string& table, std::optional<double> timeout_s) {
             CheckOk(RunClientCall(client, [&](Cancellation* cancel) {
               return client.Reset(table, TimeoutFromSeconds(timeout_s), cancel);
             }));
           },
           py::arg("table"), py::arg("timeout_s") = py::none())
      .def("checkpoint",
           [](Client& client, std::optional<double> timeout_s) {
             return ValueOrRaise(RunCancellable([&](Cancellation* cancel) {
               return client.Checkpoint(TimeoutFromSeconds(timeout_s), cancel);
             }));
           },
           py::arg("timeout_s") = py::none())
      .def("new_sampler",
           [](Client& client, const std::string& table, int64_t max_samples,
              int64_t max_in_flight, std::optional<double> timeout_s, int32_t num_streams,
              int64_t max_samples_per_stream) {
             SamplerOptions options;
             options.max_samples = max_samples;
             options.max_in_flight = max_in_flight;
             options.rate_limiter_timeout = TimeoutFromSeconds(timeout_s);
             options.num_streams = num_streams;
             options.max_samples_per_stream = max_samples_per_stream;
             return ValueOrRaise(client.NewSampler(table, options));
           },
           "A sampler (one stream per shard unless num_streams says more): at most "
           "max_in_flight samples per stream are requested ahead of next_batch(), so "
           "memory stays bounded for any max_samples.",
           py::arg("table"), py::arg("max_samples"), py::arg("max_in_flight"),
           py::arg("timeout_s") = py::none(), py::arg("num_streams") = -1,
           py::arg("max_samples_per_stream") = -1)
      .def("new_writer",
           [](Client& client, int32_t num_keep_alive_refs, std::optional<int32_t> max_chunk_length,
              int32_t max_in_flight_items, bool legacy_items, int32_t num_lanes,
              bool validate_items, std::optional<double> rate_limiter_timeout_s) {
             TrajectoryWriterOptions options;
             options.rate_limiter_timeout = TimeoutFromSeconds(rate_limiter_timeout_s);
             options.legacy_items = legacy_items;
             options.validate_items = validate_items;
             options.num_lanes = num_lanes;
             options.num_keep_alive_refs = num_keep_alive_refs;
             options.max_chunk_length = max_chunk_length.value_or(0);
             options.max_in_flight_items = max_in_flight_items;
             return ValueOrRaise(client.NewTrajectoryWriter(options));
           },
           py::arg("num_keep_alive_refs") = 1, py::arg("max_chunk_length") = py::none(),
           py::arg("max_in_flight_items") = 128, py::arg("legacy_items") = false,
           py::arg("num_lanes") = 0, py::arg("validate_items") = true,
           py::arg("rate_limiter_timeout_s") = py::none())
      .def("new_structured_writer",
           [](Client& client, const std::vector<py::bytes>& configs) {
             std::vector<std::string> serialized(configs.begin(), configs.end());
             return ValueOrRaise(StructuredWriter::Create(client, serialized));
           },
           py::arg("serialized_configs"));
}

}  // namespace reverb_tf
