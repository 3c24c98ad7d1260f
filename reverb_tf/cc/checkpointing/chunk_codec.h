// How a chunk is stored in checkpoint files and in the write-ahead log:
// a head (key, episode, dtype, compression, shape, uncompressed size)
// followed by the chunk's bytes as they are held (compressed or not), so
// that large data is written without being copied into a buffer first.
#ifndef REVERB_TF_CC_CHECKPOINTING_CHUNK_CODEC_H_
#define REVERB_TF_CC_CHECKPOINTING_CHUNK_CODEC_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "reverb_tf/cc/chunk_store.h"

namespace reverb_tf {

// Replaces `out` with the head of `chunk`'s entry; the entry's payload is
// the head followed by chunk.data().
void EncodeChunkHead(const Chunk& chunk, std::string* out);

// Rebuilds a chunk from an entry's payload (head and bytes) in `store`.
// INVALID_ARGUMENT for a malformed payload (the caller names the file).
absl::StatusOr<ChunkRef> DecodeChunk(absl::string_view payload, ChunkStore* store);

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_CHECKPOINTING_CHUNK_CODEC_H_
