// SPDX-License-Identifier: Apache-2.0
// Conversions between the wire protos (and a server's config) and the
// core's types, and the one mapping between absl and gRPC status codes.
// A table's options convert through wire/table_messages.h.
//
// absl::StatusCode and grpc::StatusCode share the canonical numbering, so a
// status crosses the wire with its code intact: a rate-limiter timeout stays
// DEADLINE_EXCEEDED, an unknown table NOT_FOUND, a bad signature
// INVALID_ARGUMENT, and the Python layer maps the number to an exception
// class (reverb_tf/errors.py).
//
// Thread safety: stateless; each function touches only its arguments, so
// calls may run concurrently on distinct ones. Chunks they share between
// threads are immutable and their references counted atomically
// (chunk_store.h).
#ifndef REVERB_TF_CC_WIRE_CONVERSIONS_H_
#define REVERB_TF_CC_WIRE_CONVERSIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/support/status.h"
#include "reverb_tf/cc/chunk_store.h"
#include "reverb_tf/cc/proto/data.pb.h"
#include "reverb_tf/cc/proto/schema.pb.h"
#include "reverb_tf/cc/proto/service.pb.h"
#include "reverb_tf/cc/table.h"
#include "reverb_tf/cc/tensor_payload.h"
#include "reverb_tf/cc/wire/serialized_table_info.h"

namespace reverb_tf {

grpc::Status ToGrpcStatus(const absl::Status& status);
REVERB_TF_EXPORT absl::Status FromGrpcStatus(const grpc::Status& status);

// Moves the tensor's bytes out of `tensor` (no copy of the data).
absl::StatusOr<TensorPayload> PayloadFromProto(proto::Tensor* tensor);
void PayloadToProto(TensorPayload payload, proto::Tensor* tensor);
// Every field of `payload` but its bytes.
void PayloadMetadataToProto(const TensorPayload& payload,
                            proto::Tensor* tensor);

// The server's view of a written item: its slices resolved against the
// chunks the stream holds. INVALID_ARGUMENT if a slice names a chunk not in
// `chunks` (slice bounds are the table's to check).
absl::StatusOr<Item> ItemFromProto(
    const proto::Item& proto_item,
    const absl::flat_hash_map<ChunkKey, ChunkRef>& chunks);

// Appends the items of `batch` to `items`, in order, their slices resolved
// in `chunks`. INVALID_ARGUMENT (nothing appended for the failing item or
// after it) if keys, priorities and lanes differ in number, a chunk is
// missing, or a lane is negative or moves an offset past 2^31-1; the slices'
// other bounds are the table's to check, as for any item.
absl::Status ItemsFromBatch(
    const proto::ItemBatch& batch,
    const absl::flat_hash_map<ChunkKey, ChunkRef>& chunks,
    std::vector<Item>* items);

// A server's disk tier figures, to and from its ServerInfo response.
void SpillStatsToProto(const ChunkStore::SpillStats& stats,
                       proto::SpillInfo* out);
ChunkStore::SpillStats SpillStatsFromProto(const proto::SpillInfo& info);

// A sample's info as the client reads it from a SampleResponse item.
SampleInfo SampleInfoFromProto(const proto::SampleInfo& info);

// Appends `sample` to `response`, with each chunk not yet in `sent` (which
// it extends); returns the chunk bytes added. Fails, naming the item, if a
// chunk's bytes cannot be read back from the spill directory
// (Chunk::Read); `response` is then to be dropped.
absl::StatusOr<int64_t> SampleToProto(const SampledItem& sample,
                                      proto::SampleResponse* response,
                                      absl::flat_hash_set<ChunkKey>* sent);

// A table of a server's config (--config), validated.
REVERB_TF_EXPORT absl::StatusOr<TableOptions> TableOptionsFromConfig(
    const schema::PriorityTableCheckpoint& config);
// A table's info as ServerInfo sends it and Python reads it.
void TableInfoToProto(const TableInfo& info, schema::TableInfo* out);
// INVALID_ARGUMENT for options that fail TableOptions::Validate (a server
// of another version or a hostile one).
absl::StatusOr<TableInfo> TableInfoFromProto(const schema::TableInfo& info);

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_WIRE_CONVERSIONS_H_
