// SPDX-License-Identifier: Apache-2.0
// How the bindings of reverb_tf._core call into the core: statuses raised as
// reverb_tf.errors (RaiseStatus, the one status-code mapping of the Python
// layer) or, for constructor arguments, as ValueError; the GIL released
// around every call that may block (WithoutGil, WaitInSlices,
// RunCancellable), with Ctrl-C turned into KeyboardInterrupt within
// kSignalPoll by cancelling the call.
//
// Thread safety: every function here is called with the GIL held and
// returns with it held; CallThreads is thread-safe.
#ifndef REVERB_TF_CC_PYTHON_CALLS_H_
#define REVERB_TF_CC_PYTHON_CALLS_H_

#include <cxxabi.h>
#include <nanobind/nanobind.h>
#include <pthread.h>

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "reverb_tf/cc/client/client.h"
#include "reverb_tf/cc/platform/deadline.h"

namespace reverb_tf::binding {

namespace nb = ::nanobind;

inline constexpr absl::Duration kSignalPoll = absl::Milliseconds(100);

// A bool argument as dm-reverb's bindings (pybind11) take one: True, False,
// any number (numpy.bool_, 0, 1.0, ...) by its truth, and None as False
// (where the argument is declared `.none()`, as every Truth is). nanobind's
// own bool takes only True and False, which would turn `clear_buffers=1` or
// `clear_buffers=None` into a TypeError.
struct Truth {
  bool value = false;
  operator bool() const { return value; }  // NOLINT(runtime/explicit)
};

[[noreturn]] inline void RaiseStatus(const absl::Status& status) {
  nb::object error = nb::module_::import_("reverb_tf.errors")
                         .attr("from_status")(static_cast<int>(status.code()),
                                              std::string(status.message()));
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())),
                  error.ptr());
  throw nb::python_error();
}

inline void CheckOk(const absl::Status& status) {
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
inline void CheckArgument(const absl::Status& status) {
  if (!status.ok())
    throw nb::value_error(std::string(status.message()).c_str());
}

template <typename T>
T ArgumentOrRaise(absl::StatusOr<T> value) {
  CheckArgument(value.status());
  return *std::move(value);
}

inline absl::Duration TimeoutFromSeconds(std::optional<double> seconds) {
  if (!seconds.has_value() || *seconds < 0) return absl::InfiniteDuration();
  return absl::Seconds(*seconds);
}

// A daemon thread that retakes the GIL while the interpreter finalizes is
// ended by CPython (3.11 to 3.13) with pthread_exit, a forced unwind of its
// stack. That unwind must not reach nanobind's dispatch, whose noexcept
// frames turn it into std::terminate (an abort at exit for any program with
// a daemon thread blocked in a call); nor can it be caught and dropped
// (glibc aborts when its handler returns). So the thread stops here, in the
// handler, for good, as CPython 3.14 itself parks such threads: it holds
// no lock, and the exiting process ends it.
[[noreturn]] inline void ParkEndedThread() {
  while (true) absl::SleepFor(absl::Hours(1));
}

// Runs `f()` without the GIL and returns its result. Deliberately not a
// scoped guard (nb::gil_scoped_release): its noexcept destructor would meet
// the forced unwind above.
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
    // From PyEval_RestoreThread: the GIL is not ours to retake.
    ParkEndedThread();
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
      [&](absl::Duration slice) {
        return WithoutGil([&] { return call(slice); });
      },
      [] {
        if (PyErr_CheckSignals() != 0) throw nb::python_error();
        return absl::OkStatus();
      });
  if (status.code() == absl::StatusCode::kDeadlineExceeded) {
    // The status speaks of the last slice; report the caller's timeout.
    RaiseStatus(absl::DeadlineExceededError(
        absl::StrCat("timed out after ", absl::FormatDuration(timeout), ": ",
                     status.message())));
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

inline CallThreads* CallThreads::instance_ = new CallThreads();

// The interpreter's main thread: the only one Ctrl-C reaches
// (PyErr_CheckSignals is a no-op elsewhere). Set at module init.
inline unsigned long main_thread_ident =
    0;  // NOLINT(runtime/int): PyThread's type

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
    ParkEndedThread();
  }
  state->done.WaitForNotification();
  PyEval_RestoreThread(saved);
  if (interrupted) throw nb::python_error();
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

}  // namespace reverb_tf::binding

namespace nanobind::detail {

template <>
struct type_caster<::reverb_tf::binding::Truth> {
  NB_TYPE_CASTER(::reverb_tf::binding::Truth, const_name("bool"))

  bool from_python(handle src, uint32_t flags, cleanup_list*) noexcept {
    if (src.ptr() == Py_True || src.ptr() == Py_False || src.is_none()) {
      value.value = src.ptr() == Py_True;
      return true;
    }
    if ((flags & static_cast<uint32_t>(cast_flags::convert)) == 0) return false;
    // Numbers only, as pybind11: types with nb_bool (PyType_GetSlot reads
    // it on the stable ABI too).
    auto* nb_bool = reinterpret_cast<inquiry>(
        PyType_GetSlot(Py_TYPE(src.ptr()), Py_nb_bool));
    if (nb_bool == nullptr) return false;
    const int truth = nb_bool(src.ptr());
    if (truth < 0) {
      PyErr_Clear();
      return false;
    }
    value.value = truth != 0;
    return true;
  }

  static handle from_cpp(::reverb_tf::binding::Truth src, rv_policy,
                         cleanup_list*) noexcept {
    return handle(src.value ? Py_True : Py_False).inc_ref();
  }
};

}  // namespace nanobind::detail

#endif  // REVERB_TF_CC_PYTHON_CALLS_H_
