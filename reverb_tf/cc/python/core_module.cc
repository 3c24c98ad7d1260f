// SPDX-License-Identifier: Apache-2.0
// reverb_tf._core: the Python binding of libreverb_tf.so
// (docs/core_module_api.md). One file per part of the module (bindings.h);
// how they call the core is in calls.h, how they convert values in
// conversions.h.
#include <pybind11/pybind11.h>

#include <cstdint>

#include "reverb_tf/cc/python/bindings.h"
#include "reverb_tf/cc/python/calls.h"

PYBIND11_MODULE(_core, m) {
  namespace binding = ::reverb_tf::binding;
  namespace py = ::pybind11;
  m.doc() = "Native core of reverb_tf (see docs/core_module_api.md).";
  binding::main_thread_ident =
      static_cast<unsigned long>(  // NOLINT(runtime/int)
          py::module_::import("threading")
              .attr("main_thread")()
              .attr("ident")
              .cast<uint64_t>());
  binding::BindTables(m);
  binding::BindServer(m);
  binding::BindWriters(m);
  binding::BindClient(m);
  binding::BindLogging(m);
}
