// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/checkpointing/chunk_codec.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "reverb_tf/cc/checkpointing/byte_codec.h"
#include "reverb_tf/cc/platform/status_macros.h"

namespace reverb_tf {
namespace {

// Set in the compression byte of a lane chunk's head, whose uncompressed
// size is followed by the lane count and the lanes' episode ids. Files
// written before lane chunks existed never set it, so they read as before.
constexpr uint8_t kLaneChunkBit = 0x80;

}  // namespace

void EncodeChunkHead(const Chunk& chunk, std::string* out) {
  out->clear();
  const int64_t lanes = chunk.num_lanes();
  PutFixed64(out, chunk.key());
  PutVarint(out, chunk.episode_id());
  PutVarint(out, static_cast<uint32_t>(chunk.episode_step()));
  out->push_back(static_cast<char>(chunk.dtype()));
  out->push_back(static_cast<char>(static_cast<uint8_t>(chunk.compression()) |
                                   (lanes > 0 ? kLaneChunkBit : 0)));
  PutVarint(out, chunk.shape().size());
  for (int64_t dim : chunk.shape()) PutVarint(out, static_cast<uint64_t>(dim));
  PutVarint(out, static_cast<uint64_t>(chunk.uncompressed_size()));
  if (lanes == 0) return;
  PutVarint(out, static_cast<uint64_t>(lanes));
  for (int64_t lane = 0; lane < lanes; ++lane) {
    PutFixed64(out, chunk.episode_id(lane));
  }
}

absl::Status DecodeChunkHead(ByteReader* in, ChunkHead* head) {
  uint64_t episode_step, rank, uncompressed_size;
  uint8_t dtype, compression;
  in->GetFixed64(&head->key);
  in->GetVarint(&head->episode_id);
  in->GetVarintAtMost(INT32_MAX, &episode_step);
  in->GetByte(&dtype);
  in->GetByte(&compression);
  in->GetVarintAtMost(32, &rank);
  TensorPayload& tensor = head->tensor;
  for (uint64_t i = 0; i < rank && in->ok(); ++i) {
    uint64_t dim;
    if (in->GetVarintAtMost(INT64_MAX, &dim))
      tensor.shape.push_back(static_cast<int64_t>(dim));
  }
  in->GetVarintAtMost(INT64_MAX, &uncompressed_size);
  if ((compression & kLaneChunkBit) != 0) {
    compression &= ~kLaneChunkBit;
    uint64_t lanes = 0;
    // Each id takes 8 bytes: bounds what a damaged count could allocate.
    if (in->GetVarintAtMost(in->rest().size() / 8, &lanes) && lanes > 0) {
      head->lane_episode_ids.resize(lanes);
      for (uint64_t& id : head->lane_episode_ids) in->GetFixed64(&id);
    } else {
      return absl::InvalidArgumentError("malformed lane chunk entry");
    }
  }
  if (!in->ok()) return absl::InvalidArgumentError("malformed chunk entry");
  if (!IsValidDType(dtype) ||
      compression > static_cast<uint8_t>(Compression::kZstd)) {
    return absl::InvalidArgumentError(
        "chunk entry with an unknown dtype or compression");
  }
  head->episode_step = static_cast<int32_t>(episode_step);
  tensor.dtype = static_cast<DType>(dtype);
  tensor.compression = static_cast<Compression>(compression);
  tensor.uncompressed_size = static_cast<int64_t>(uncompressed_size);
  return absl::OkStatus();
}

absl::StatusOr<ChunkRef> DecodeChunk(absl::string_view payload,
                                     ChunkStore* store) {
  ByteReader in(payload);
  ChunkHead head;
  RETURN_IF_ERROR(DecodeChunkHead(&in, &head));
  head.tensor.data.assign(in.rest().data(), in.rest().size());
  return InsertLoaded(std::move(head), store);
}

absl::StatusOr<ChunkRef> InsertLoaded(ChunkHead head, ChunkStore* store) {
  absl::StatusOr<ChunkRef> chunk =
      store->Insert(head.key, head.episode_id, head.episode_step,
                    std::move(head.tensor), head.lane_episode_ids);
  // Loads run faster than a spill thread writes: keep RAM near the budget.
  store->AwaitSpillRoom();
  return chunk;
}

void EncodeChunkOnDisk(const Chunk& chunk, const SpillLocation& where,
                       std::string* out) {
  EncodeChunkHead(chunk, out);
  PutVarint(out, where.segment);
  PutVarint(out, where.offset);
  PutVarint(out, where.size);
  PutVarint(out, where.crc);
}

absl::Status DecodeChunkOnDisk(absl::string_view payload, ChunkHead* head,
                               SpillLocation* where) {
  ByteReader in(payload);
  RETURN_IF_ERROR(DecodeChunkHead(&in, head));
  uint64_t segment, offset, size, crc;
  in.GetVarintAtMost(UINT32_MAX, &segment);
  in.GetVarintAtMost(INT64_MAX, &offset);
  in.GetVarintAtMost(UINT32_MAX, &size);
  in.GetVarintAtMost(UINT32_MAX, &crc);
  if (!in.ok() || !in.empty()) {
    return absl::InvalidArgumentError("malformed spilled chunk entry");
  }
  where->segment = static_cast<uint32_t>(segment);
  where->offset = offset;
  where->size = static_cast<uint32_t>(size);
  where->crc = static_cast<uint32_t>(crc);
  return absl::OkStatus();
}

absl::Status DecodeTrajectory(
    ByteReader* in, uint64_t num_columns,
    absl::FunctionRef<void(ByteReader*, uint64_t*)> read_reference,
    absl::FunctionRef<absl::StatusOr<ChunkRef>(uint64_t)> resolve,
    Trajectory* trajectory) {
  trajectory->resize(num_columns);
  for (SlicedColumn& column : *trajectory) {
    uint64_t slices;
    // Every slice takes at least one byte: bounds what a damaged count
    // could make us allocate.
    if (!in->GetVarintAtMost(uint64_t{2} * in->rest().size() + 1, &slices))
      break;
    column.set_squeeze((slices & 1) != 0);
    column.resize_slices(slices >> 1);
    for (ChunkSlice& slice : column.mutable_slices()) {
      uint64_t reference, offset, length;
      read_reference(in, &reference);
      in->GetVarintAtMost(INT32_MAX, &offset);
      in->GetVarintAtMost(INT32_MAX, &length);
      if (!in->ok()) break;
      ASSIGN_OR_RETURN(slice.chunk, resolve(reference));
      slice.offset = static_cast<int32_t>(offset);
      slice.length = static_cast<int32_t>(length);
    }
  }
  return absl::OkStatus();
}

}  // namespace reverb_tf
