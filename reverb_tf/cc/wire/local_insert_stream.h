// SPDX-License-Identifier: Apache-2.0
// The in-process insert stream (local_server.h): a writer of this process
// hands its InsertStream messages to the server's own stream logic
// (ReplayService::InsertSession) instead of serializing them.
//
// Here, above the core, because its messages are the wire's protobuf types,
// which the core neither includes nor declares. Every server registered by
// RegisterLocalServer() is a LocalInsertServer; a client opens its stream
// through FindLocalServer() and a dynamic_cast.
//
// Thread safety: LocalInsertStream::Write() from one thread at a time,
// Cancel() from any thread; LocalInsertServer is thread-safe.
#ifndef REVERB_TF_CC_WIRE_LOCAL_INSERT_STREAM_H_
#define REVERB_TF_CC_WIRE_LOCAL_INSERT_STREAM_H_

#include <memory>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "reverb_tf/cc/local_server.h"
#include "reverb_tf/cc/platform/export.h"
#include "reverb_tf/cc/proto/service.pb.h"

namespace reverb_tf {

// An InsertStream without gRPC.
class REVERB_TF_EXPORT LocalInsertStream {
 public:
  virtual ~LocalInsertStream() = default;
  // What one message of the InsertStream RPC does (the request's chunk
  // bytes are taken), with each acknowledgement handed to `ack` as the
  // server would send it. Blocks on rate limiters for up to the request's
  // timeout, until Cancel() (CANCELLED) or until the server stops
  // (UNAVAILABLE). An error ends the stream: later calls fail.
  virtual absl::Status Write(
      proto::InsertRequest& request,
      absl::FunctionRef<void(const proto::InsertResponse&)> ack) = 0;
  virtual void Cancel() = 0;
};

// A LocalServer that also takes insert streams.
class REVERB_TF_EXPORT LocalInsertServer : public LocalServer {
 public:
  // A new insert stream; UNAVAILABLE once the server is stopping.
  virtual absl::StatusOr<std::unique_ptr<LocalInsertStream>>
  OpenInsertStream() = 0;
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_WIRE_LOCAL_INSERT_STREAM_H_
