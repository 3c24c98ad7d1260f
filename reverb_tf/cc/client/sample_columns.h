// SPDX-License-Identifier: Apache-2.0
// Internal to the client: how a sampled item's column is put together from
// the chunk rows it references, the one join the remote samplers (from a
// SampleResponse) and the in-process one (from the table's chunks) share.
//
// Thread safety: the functions are thread-compatible (no shared state).
#ifndef REVERB_TF_CC_CLIENT_SAMPLE_COLUMNS_H_
#define REVERB_TF_CC_CLIENT_SAMPLE_COLUMNS_H_

#include <cstddef>
#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "reverb_tf/cc/tensor_payload.h"

namespace reverb_tf {

// Rows [offset, offset + length) of a decompressed chunk.
struct ChunkRows {
  const TensorPayload* chunk;
  int64_t offset;
  int64_t length;
  // The same chunk, when this is its last use and it may be taken (left
  // moved-from); nullptr otherwise.
  TensorPayload* last_use = nullptr;
};

// Joins a column of `num_slices` slices, `slice(i)` being the i-th (its
// chunk need only stay valid until the next call): a single slice that
// covers its whole chunk is taken (its last use) or copied as is, others
// are cut out and concatenated. `squeeze` drops the time dimension.
absl::StatusOr<TensorPayload> JoinSlices(
    size_t num_slices, bool squeeze,
    absl::FunctionRef<absl::StatusOr<ChunkRows>(size_t)> slice);

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_CLIENT_SAMPLE_COLUMNS_H_
