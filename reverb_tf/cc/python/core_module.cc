// SPDX-License-Identifier: Apache-2.0
// reverb_tf._core: the Python binding of libreverb_tf.so
// (docs/core_module_api.md), made with nanobind, whose runtime is compiled
// into this module (third_party/python/local_python.bzl). One file per part
// of the module (bindings.h); how they call the core is in calls.h, how they
// convert values in conversions.h.
#include <nanobind/nanobind.h>

#include <cstdint>

#include "reverb_tf/cc/python/bindings.h"
#include "reverb_tf/cc/python/calls.h"
#include "reverb_tf/cc/python/conversions.h"

NB_MODULE(_core, m) {
  namespace binding = ::reverb_tf::binding;
  namespace nb = ::nanobind;
  m.doc() = "Native core of reverb_tf (see docs/core_module_api.md).";
  // Objects the module still holds at exit (the leaked caches of
  // conversions.cc, a client a daemon thread keeps) are not leaks worth a
  // warning on every run.
  nb::set_leak_warnings(false);
  binding::main_thread_ident =
      static_cast<unsigned long>(  // NOLINT(runtime/int)
          nb::cast<uint64_t>(nb::module_::import_("threading")
                                 .attr("main_thread")()
                                 .attr("ident")));
  binding::BindConversions(m);
  binding::BindTables(m);
  binding::BindServer(m);
  binding::BindWriters(m);
  binding::BindClient(m);
  binding::BindLogging(m);
}
