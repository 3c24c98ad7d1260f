// SPDX-License-Identifier: Apache-2.0
// Replay servers of this process, which clients in the same process reach
// without gRPC (as dm-reverb does for samplers).
//
// A ReplayServer registers itself by port once it serves, unless it serves
// TLS or asks for tokens (those ride on the RPC: a client that could not
// connect over the wire must not get in this way), and unregisters when it
// starts stopping. A client of "localhost:PORT" (or
// 127.0.0.1, ::1) then samples, updates priorities, reads server info,
// resets and checkpoints through the tables directly: the same table
// methods the service calls, with the same rate limiters, timeouts,
// cancellation, write-ahead log commits and errors, but no serialization,
// no copies through the network stack and no thread hops. Writers hand
// their insert messages to the service's own stream logic instead of
// serializing them (wire/local_insert_stream.h: every registered server
// takes them). In-process insert streams are not counted among the
// server's active streams.
// REVERB_TF_IN_PROCESS=0 (or SetInProcessEnabled(false)) sends everything
// over gRPC.
//
// Thread safety: thread-safe.
#ifndef REVERB_TF_CC_LOCAL_SERVER_H_
#define REVERB_TF_CC_LOCAL_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "reverb_tf/cc/platform/export.h"
#include "reverb_tf/cc/table.h"

namespace reverb_tf {

// What a server of this process offers its in-process clients. Methods
// fail with UNAVAILABLE once the server is stopping, as its RPCs would.
class REVERB_TF_EXPORT LocalServer {
 public:
  virtual ~LocalServer() = default;
  virtual absl::StatusOr<std::shared_ptr<Table>> FindTable(
      const std::string& name) = 0;
  // What ServerInfo answers: each table's info, by name.
  virtual absl::StatusOr<std::vector<TableInfo>> TableInfos() = 0;
  // Makes logged changes durable (the write-ahead log's Commit()).
  virtual absl::Status Commit() = 0;
  // The path of a new checkpoint.
  virtual absl::StatusOr<std::string> Checkpoint() = 0;
};

// `host` is the interface the server listens on ("localhost", "0.0.0.0",
// an address): only a server that loopback clients could reach is found.
REVERB_TF_EXPORT void RegisterLocalServer(int port, const std::string& host,
                                          std::shared_ptr<LocalServer> server);
REVERB_TF_EXPORT void UnregisterLocalServer(int port,
                                            const LocalServer* server);

// The port of `address` if it names a loopback interface ("localhost:P",
// "127.0.0.1:P", "[::1]:P", "ipv4:127.0.0.1:P", ...), else -1.
REVERB_TF_EXPORT int LoopbackPort(absl::string_view address);

// The server of this process listening on `port` that loopback clients
// reach, if any and if in-process access is enabled. Not in a fork()ed
// child of the process that started it (that child holds only a copy).
REVERB_TF_EXPORT std::shared_ptr<LocalServer> FindLocalServer(int port);

// Process-wide switch (default: on unless REVERB_TF_IN_PROCESS=0).
REVERB_TF_EXPORT void SetInProcessEnabled(bool enabled);
REVERB_TF_EXPORT bool InProcessEnabled();

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_LOCAL_SERVER_H_
