// SPDX-License-Identifier: Apache-2.0
// ThreadSanitizer annotations for Debian's prebuilt absl synchronization.
//
// Debian's libabsl is not built with TSan, so the happens-before edges its
// Mutex, CondVar and Notification create are invisible to it: every access
// guarded by an absl::Mutex in our (instrumented) code would be reported as a
// race. Linked only into the TSan build (--config=tsan), this file wraps the
// out-of-line entry points with the linker's --wrap (see BUILD) and tells
// TSan what they do, with the same annotations absl itself uses when it is
// built with TSan (sanitizer/tsan_interface.h): lock/unlock around Lock and
// Unlock, an unlock before and a lock after the waits that release the mutex,
// release/acquire for Notification.
#include <sanitizer/tsan_interface.h>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

using absl::Condition;
using absl::CondVar;
using absl::Mutex;
using absl::Notification;

namespace {

// Runs `wait`, a call that releases `mu` and holds it again when it returns,
// as TSan sees it: an unlock, then a lock. Everything in between runs
// inside the unlock annotation, where TSan ignores memory accesses: absl
// evaluates waiters' conditions in there (under the real lock, which TSan
// cannot see), as absl's own TSan build does.
template <typename Wait>
auto ReleasedDuring(Mutex* mu, Wait wait) {
  __tsan_mutex_pre_unlock(mu, 0);
  auto result = wait();
  __tsan_mutex_post_unlock(mu, 0);
  __tsan_mutex_pre_lock(mu, 0);
  __tsan_mutex_post_lock(mu, 0, 0);
  return result;
}

}  // namespace

// Each wrapped function: __real_X is the library's X; calls to X from our
// objects reach __wrap_X. Member functions take `this` first.
#define REAL(mangled, ret, ...) extern "C" ret __real_##mangled(__VA_ARGS__)
#define WRAP(mangled, ret, ...)    \
  REAL(mangled, ret, __VA_ARGS__); \
  extern "C" ret __wrap_##mangled(__VA_ARGS__)

// Mutex::Lock / Unlock / ReaderLock / ReaderUnlock / TryLock
WRAP(_ZN4absl7debian35Mutex4LockEv, void, Mutex* mu) {
  __tsan_mutex_pre_lock(mu, 0);
  __real__ZN4absl7debian35Mutex4LockEv(mu);
  __tsan_mutex_post_lock(mu, 0, 0);
}
WRAP(_ZN4absl7debian35Mutex6UnlockEv, void, Mutex* mu) {
  __tsan_mutex_pre_unlock(mu, 0);
  __real__ZN4absl7debian35Mutex6UnlockEv(mu);
  __tsan_mutex_post_unlock(mu, 0);
}
WRAP(_ZN4absl7debian35Mutex10ReaderLockEv, void, Mutex* mu) {
  __tsan_mutex_pre_lock(mu, __tsan_mutex_read_lock);
  __real__ZN4absl7debian35Mutex10ReaderLockEv(mu);
  __tsan_mutex_post_lock(mu, __tsan_mutex_read_lock, 0);
}
WRAP(_ZN4absl7debian35Mutex12ReaderUnlockEv, void, Mutex* mu) {
  __tsan_mutex_pre_unlock(mu, __tsan_mutex_read_lock);
  __real__ZN4absl7debian35Mutex12ReaderUnlockEv(mu);
  __tsan_mutex_post_unlock(mu, __tsan_mutex_read_lock);
}
WRAP(_ZN4absl7debian35Mutex7TryLockEv, bool, Mutex* mu) {
  __tsan_mutex_pre_lock(mu, __tsan_mutex_try_lock);
  const bool locked = __real__ZN4absl7debian35Mutex7TryLockEv(mu);
  __tsan_mutex_post_lock(
      mu, __tsan_mutex_try_lock | (locked ? 0 : __tsan_mutex_try_lock_failed),
      0);
  return locked;
}

// A destroyed mutex's address may hold a new one: TSan must forget it.
WRAP(_ZN4absl7debian35MutexD1Ev, void, Mutex* mu) {
  __real__ZN4absl7debian35MutexD1Ev(mu);
  __tsan_mutex_destroy(mu, 0);
}

// Waits that release the mutex and hold it again on return.
WRAP(_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE, void, Mutex* mu,
     const Condition& cond) {
  ReleasedDuring(mu, [&] {
    __real__ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE(mu, cond);
    return true;
  });
}
WRAP(_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE,
     bool, Mutex* mu, const Condition& cond, absl::Duration timeout) {
  return ReleasedDuring(mu, [&] {
    return __real__ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE(
        mu, cond, timeout);
  });
}
WRAP(_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE,
     bool, Mutex* mu, const Condition& cond, absl::Time deadline) {
  return ReleasedDuring(mu, [&] {
    return __real__ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE(
        mu, cond, deadline);
  });
}
WRAP(_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE, void, Mutex* mu,
     const Condition& cond) {
  __tsan_mutex_pre_lock(mu, 0);
  __real__ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE(mu, cond);
  __tsan_mutex_post_lock(mu, 0, 0);
}
WRAP(_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE, void, CondVar* cv, Mutex* mu) {
  ReleasedDuring(mu, [&] {
    __real__ZN4absl7debian37CondVar4WaitEPNS0_5MutexE(cv, mu);
    return true;
  });
}
WRAP(_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE, bool,
     CondVar* cv, Mutex* mu, absl::Duration timeout) {
  return ReleasedDuring(mu, [&] {
    return __real__ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE(
        cv, mu, timeout);
  });
}
WRAP(_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE, bool,
     CondVar* cv, Mutex* mu, absl::Time deadline) {
  return ReleasedDuring(mu, [&] {
    return __real__ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE(
        cv, mu, deadline);
  });
}

// Notification: Notify() releases, a wait that saw the notification acquires.
WRAP(_ZN4absl7debian312Notification6NotifyEv, void, Notification* n) {
  __tsan_release(n);
  __real__ZN4absl7debian312Notification6NotifyEv(n);
}
WRAP(_ZNK4absl7debian312Notification19WaitForNotificationEv, void,
     const Notification* n) {
  __real__ZNK4absl7debian312Notification19WaitForNotificationEv(n);
  __tsan_acquire(const_cast<Notification*>(n));
}
WRAP(
    _ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE,
    bool, const Notification* n, absl::Duration timeout) {
  const bool notified =
      __real__ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE(
          n, timeout);
  if (notified) __tsan_acquire(const_cast<Notification*>(n));
  return notified;
}
