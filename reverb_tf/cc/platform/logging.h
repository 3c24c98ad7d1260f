// SPDX-License-Identifier: Apache-2.0
// The core's reports of what no caller can be told: a damaged write-ahead
// log replayed, an older checkpoint loaded past damaged ones, a background
// checkpoint that failed, an old checkpoint that could not be removed, a log
// that became writable again. (What a caller can be told is a status, never
// a log line.)
//
// Each report is one line with a severity, handed to the process's sink. The
// default sink writes it to stderr at once, as "reverb_tf: WARNING: <line>"
// ("reverb_tf: <line>" for INFO). A host process installs a sink of its own
// once (the Python module routes lines to Python's logging), so each report
// reaches the host's log once and stderr not at all. A host's sink runs on
// a thread of its own, in the order the lines came: Log() is called with
// the core's locks held, and a host's sink may take the host's (Python's
// GIL), which a thread of the host waiting on a core lock holds. (Debian
// 12's absl predates absl's logging library, hence this small one.)
//
// Thread safety: thread-safe. After fork() the child writes to stderr (the
// delivery thread is the parent's).
#ifndef REVERB_TF_CC_PLATFORM_LOGGING_H_
#define REVERB_TF_CC_PLATFORM_LOGGING_H_

#include <functional>

#include "absl/strings/string_view.h"
#include "reverb_tf/cc/platform/export.h"

namespace reverb_tf {

enum class LogSeverity { kInfo = 0, kWarning = 1, kError = 2 };

using LogSink = std::function<void(LogSeverity, absl::string_view)>;

// Replaces the host's sink; null goes back to stderr. Lines logged before
// returns are delivered (to the old sink) first, and the old sink is
// destroyed before this returns. Must not be called from a sink.
REVERB_TF_EXPORT void SetLogSink(LogSink sink);

// Reports `line` (no trailing newline).
REVERB_TF_EXPORT void Log(LogSeverity severity, absl::string_view line);

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_PLATFORM_LOGGING_H_
