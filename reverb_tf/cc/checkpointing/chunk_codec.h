// SPDX-License-Identifier: Apache-2.0
// How a chunk is stored in checkpoint files and in the write-ahead log:
// a head (key, episode, dtype, compression, shape, uncompressed size and,
// for a lane chunk, its lanes' episode ids) followed by the chunk's bytes as
// they are held (compressed or not), so that large data is written without
// being copied into a buffer first. Also how both store the chunk slices of an
// item's trajectory.
//
// Thread safety: stateless; calls may run concurrently on distinct
// arguments. DecodeChunk inserts into `store`, which is thread-safe, so
// several threads may decode into one store.
#ifndef REVERB_TF_CC_CHECKPOINTING_CHUNK_CODEC_H_
#define REVERB_TF_CC_CHECKPOINTING_CHUNK_CODEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "reverb_tf/cc/checkpointing/byte_codec.h"
#include "reverb_tf/cc/chunk_store.h"
#include "reverb_tf/cc/item.h"

namespace reverb_tf {

// Replaces `out` with the head of `chunk`'s entry; the entry's payload is
// the head followed by chunk.data().
void EncodeChunkHead(const Chunk& chunk, std::string* out);

// Rebuilds a chunk from an entry's payload (head and bytes) in `store`,
// for a bulk load: it waits for a spill tier to catch up
// (ChunkStore::AwaitSpillRoom). INVALID_ARGUMENT for a malformed payload
// (the caller names the file).
absl::StatusOr<ChunkRef> DecodeChunk(absl::string_view payload,
                                     ChunkStore* store);

// A chunk's head as decoded: everything but its bytes.
struct ChunkHead {
  uint64_t key = 0;
  uint64_t episode_id = 0;
  int32_t episode_step = 0;
  TensorPayload tensor;  // without data
  std::vector<uint64_t> lane_episode_ids;
};

// Reads the head EncodeChunkHead wrote; INVALID_ARGUMENT if malformed.
absl::Status DecodeChunkHead(ByteReader* in, ChunkHead* head);

// Makes the chunk `head` (its bytes in head.tensor.data) in `store` for a
// bulk load, as DecodeChunk does: it then waits for a spill tier to catch
// up (ChunkStore::AwaitSpillRoom).
absl::StatusOr<ChunkRef> InsertLoaded(ChunkHead head, ChunkStore* store);

// A checkpoint's entry for a chunk whose bytes stay in a spill segment
// file: the head, then where the record is (`where.segment` numbers the
// file among the checkpoint's), its size and CRC-32C.
void EncodeChunkOnDisk(const Chunk& chunk, const SpillLocation& where,
                       std::string* out);
absl::Status DecodeChunkOnDisk(absl::string_view payload, ChunkHead* head,
                               SpillLocation* where);

// Reads `num_columns` columns of a trajectory as both files store them: per
// column a varint (number of slices << 1 | squeeze), per slice a chunk
// reference, an offset and a length. The reference's encoding is the
// file's: `read_reference` reads one, `resolve` maps it to its chunk or
// fails (that error is returned). Malformed input ends the reading early
// with `in` failed, which the caller checks.
absl::Status DecodeTrajectory(
    ByteReader* in, uint64_t num_columns,
    absl::FunctionRef<void(ByteReader*, uint64_t*)> read_reference,
    absl::FunctionRef<absl::StatusOr<ChunkRef>(uint64_t)> resolve,
    Trajectory* trajectory);

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_CHECKPOINTING_CHUNK_CODEC_H_
