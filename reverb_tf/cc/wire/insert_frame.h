// SPDX-License-Identifier: Apache-2.0
// An InsertRequest serialized around chunk bytes it does not copy.
//
// A writer's chunk bytes are the bulk of every insert message (a 84x84x4
// frame is 28 KB). Serializing the message as a protobuf copies them once
// more on the sender's thread; an InsertFrame instead hands gRPC the chunk
// bytes as slices of the writer's own buffers, and writes only the
// fields around them. The server parses the result as an ordinary
// InsertRequest: repeated fields of concatenated protobuf bytes append.
//
// Thread safety: an InsertFrame is used by one thread; the message it
// returns may be written and released from any thread.
#ifndef REVERB_TF_CC_WIRE_INSERT_FRAME_H_
#define REVERB_TF_CC_WIRE_INSERT_FRAME_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "reverb_tf/cc/proto/service.pb.h"

namespace reverb_tf {

class InsertFrame {
 public:
  // Chunk bytes up to this size are copied into the message: for the small
  // steps of most actors (a few floats per column) a copy costs less than a
  // slice of their own and a reference to their owner.
  static constexpr size_t kInlineBytes = 4096;

  // Adds the chunk with `fields` (its key and episode; no tensor) and a
  // tensor with `tensor`'s dtype and shape fields (no data) and `data` as its
  // bytes. `data` must stay valid and unchanged while `owner` lives; the
  // message keeps `owner` until gRPC has sent the bytes (bytes of at most
  // kInlineBytes are copied at once, and `owner` is not kept).
  void AddChunk(const proto::Chunk& fields, const proto::Tensor& tensor,
                absl::string_view data, std::shared_ptr<const void> owner);

  // The message: the chunks added, then `rest` (items, released chunk keys,
  // the rate limiter timeout; it must hold no chunks). Leaves the frame empty.
  grpc::ByteBuffer Finish(const proto::InsertRequest& rest);

 private:
  // Bytes written since the last chunk data slice.
  std::string head_;
  std::vector<grpc::Slice> slices_;
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_WIRE_INSERT_FRAME_H_
