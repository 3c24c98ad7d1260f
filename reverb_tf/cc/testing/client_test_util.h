// SPDX-License-Identifier: Apache-2.0
// Helpers for tests that talk to a real server through the C++ client.
#ifndef REVERB_TF_CC_TESTING_CLIENT_TEST_UTIL_H_
#define REVERB_TF_CC_TESTING_CLIENT_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "reverb_tf/cc/client/client.h"
#include "reverb_tf/cc/local_server.h"
#include "reverb_tf/cc/service/server.h"

namespace reverb_tf::testing {

// While alive, clients reach servers of this process directly (true) or
// over gRPC (false) (local_server.h); restores the setting after.
class ScopedInProcess {
 public:
  explicit ScopedInProcess(bool enabled) : before_(InProcessEnabled()) {
    SetInProcessEnabled(enabled);
  }
  ~ScopedInProcess() { SetInProcessEnabled(before_); }

 private:
  const bool before_;
};

// A writer with `keep_alive` keep-alive references; dies on error.
std::unique_ptr<TrajectoryWriter> NewWriter(Client& client, int keep_alive = 1);

// The streams `server` serves now, from its metrics page; -1 if absent.
int64_t ActiveStreams(const ReplayServer& server);
// Waits up to 5 s for ActiveStreams(server) == want (a stream ends on the
// server shortly after its client let go); returns the last count.
int64_t AwaitActiveStreams(const ReplayServer& server, int64_t want);

// The current size of table `name` as server_info reports it; -1 (and a test
// failure) if the call fails or the server has no such table.
int64_t TableSize(Client& client, const std::string& name);

}  // namespace reverb_tf::testing

#endif  // REVERB_TF_CC_TESTING_CLIENT_TEST_UTIL_H_
