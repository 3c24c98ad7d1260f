// SPDX-License-Identifier: Apache-2.0
// What the server's insert reader (wire/insert_request_reader.h) costs
// against protobuf's own parsing, per message of the two shapes writers
// send: 64 small items (three chunks of a few bytes each, the shared
// benchmark's step) and 24 items of one 28 KB frame each. The messages are
// gRPC byte buffers in slices of 8 KiB, as a socket read leaves them.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/impl/grpc_library.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "reverb_tf/cc/chunk_store.h"
#include "reverb_tf/cc/proto/service.pb.h"
#include "reverb_tf/cc/wire/insert_request_reader.h"

namespace {

using namespace reverb_tf;  // NOLINT: a short benchmark program.

proto::InsertRequest Message(int items, const std::vector<int>& column_bytes) {
  proto::InsertRequest request;
  uint64_t key = 1;
  for (int i = 0; i < items; ++i) {
    proto::Item* item = request.add_items();
    item->set_key(1000 + i);
    item->set_table("t");
    item->set_priority(1.0);
    for (int bytes : column_bytes) {
      proto::Chunk* chunk = request.add_chunks();
      chunk->set_key(key);
      chunk->set_episode_id(7);
      chunk->set_episode_step(i);
      proto::Tensor* tensor = chunk->mutable_tensor();
      tensor->set_dtype(1);
      tensor->add_shape(1);
      tensor->add_shape(bytes / 4);
      tensor->set_data(std::string(bytes, '\1'));
      proto::Slice* slice = item->add_columns()->add_slices();
      slice->set_chunk_key(key++);
      slice->set_length(1);
    }
  }
  return request;
}

grpc::ByteBuffer Slices(const std::string& bytes) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += 8192) {
    slices.emplace_back(bytes.data() + at,
                        std::min<size_t>(8192, bytes.size() - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

template <typename Parse>
double MicrosPerMessage(const std::string& bytes, int rounds, Parse parse) {
  proto::InsertRequest request;
  const absl::Time start = absl::Now();
  for (int r = 0; r < rounds; ++r) {
    grpc::ByteBuffer buffer = Slices(bytes);
    if (!parse(&buffer, &request)) std::abort();
  }
  return absl::ToDoubleMicroseconds(absl::Now() - start) / rounds;
}

}  // namespace

int main() {
  // gRPC's codegen interface, for byte buffers outside a channel or server.
  static grpc::internal::GrpcLibraryInitializer grpc_library;
  grpc_library.summon();
  grpc::internal::GrpcLibrary grpc_init_scope;
  struct Shape {
    const char* name;
    int items;
    std::vector<int> column_bytes;
    int rounds;
  };
  const Shape shapes[] = {{"64 small items", 64, {16, 4, 4}, 20000},
                          {"24 frames of 28 KB", 24, {28224}, 2000}};
  ChunkStore store;
  store.RecycleBuffers(int64_t{256} << 20);
  for (const Shape& shape : shapes) {
    const std::string bytes =
        Message(shape.items, shape.column_bytes).SerializeAsString();
    for (int round = 0; round < 3; ++round) {
      const double protobuf = MicrosPerMessage(
          bytes, shape.rounds,
          [](grpc::ByteBuffer* buffer, proto::InsertRequest* request) -> bool {
            return grpc::SerializationTraits<proto::InsertRequest>::Deserialize(
                       buffer, request)
                .ok();
          });
      const double reader = MicrosPerMessage(
          bytes, shape.rounds,
          [&](grpc::ByteBuffer* buffer, proto::InsertRequest* request) -> bool {
            // As the server decides: protobuf's parser for small steps.
            if (grpc::ProtoBufferReader scan(buffer);
                !MayHoldLargeChunks(&scan)) {
              return grpc::SerializationTraits<
                         proto::InsertRequest>::Deserialize(buffer, request)
                  .ok();
            }
            grpc::ProtoBufferReader input(buffer);
            const bool ok = ReadInsertRequest(
                &input, request, [&](size_t n) { return store.TakeBuffer(n); });
            // The chunks die as a server's would, giving their buffers back.
            for (proto::Chunk& chunk : *request->mutable_chunks()) {
              std::string data;
              data.swap(*chunk.mutable_tensor()->mutable_data());
              if (data.capacity() >= ChunkStore::kMinRecycledBytes) {
                const int64_t size = static_cast<int64_t>(data.size());
                auto payload =
                    MakePayload(DType::kUint8, {1, size}, std::move(data));
                (void)store.Insert(chunk.key(), 1, 0, *std::move(payload));
              }
            }
            return ok;
          });
      std::printf(
          "%-20s protobuf %8.2f us, the server's reading %8.2f us per message "
          "(%zu bytes)\n",
          shape.name, protobuf, reader, bytes.size());
    }
  }
  return 0;
}
