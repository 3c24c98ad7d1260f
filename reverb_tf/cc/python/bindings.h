// SPDX-License-Identifier: Apache-2.0
// The parts of the reverb_tf._core module (docs/core_module_api.md), each
// adding its classes and functions to the module; core_module.cc calls them
// in this order, so that a class is registered before one that takes it.
//
// Thread safety: called once, at import, with the GIL held.
#ifndef REVERB_TF_CC_PYTHON_BINDINGS_H_
#define REVERB_TF_CC_PYTHON_BINDINGS_H_

#include <nanobind/nanobind.h>

namespace reverb_tf::binding {

void BindTables(nanobind::module_& m);
void BindServer(nanobind::module_& m);
void BindWriters(nanobind::module_& m);
void BindClient(nanobind::module_& m);
// set_log_sink: the core's log lines (platform/logging.h) to a callable.
void BindLogging(nanobind::module_& m);

}  // namespace reverb_tf::binding

#endif  // REVERB_TF_CC_PYTHON_BINDINGS_H_
