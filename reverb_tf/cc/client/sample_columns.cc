// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/client/sample_columns.h"

#include <utility>
#include <vector>

#include "reverb_tf/cc/platform/status_macros.h"

namespace reverb_tf {

absl::StatusOr<TensorPayload> JoinSlices(
    size_t num_slices, bool squeeze,
    absl::FunctionRef<absl::StatusOr<ChunkRows>(size_t)> slice) {
  if (num_slices == 1) {  // most columns: no list of parts
    ASSIGN_OR_RETURN(const ChunkRows rows, slice(0));
    const TensorPayload& chunk = *rows.chunk;
    TensorPayload result;
    if (rows.offset == 0 && rows.length == chunk.shape[0]) {
      result = rows.last_use != nullptr ? std::move(*rows.last_use) : chunk;
    } else {
      ASSIGN_OR_RETURN(result, SliceRows(chunk, rows.offset, rows.length));
    }
    if (squeeze) result.shape.erase(result.shape.begin());
    return result;
  }
  std::vector<TensorPayload> parts;
  parts.reserve(num_slices);
  for (size_t i = 0; i < num_slices; ++i) {
    ASSIGN_OR_RETURN(const ChunkRows rows, slice(i));
    const TensorPayload& chunk = *rows.chunk;
    if (rows.offset == 0 && rows.length == chunk.shape[0] && num_slices == 1) {
      parts.push_back(chunk);
    } else {
      ASSIGN_OR_RETURN(TensorPayload part,
                       SliceRows(chunk, rows.offset, rows.length));
      parts.push_back(std::move(part));
    }
  }
  TensorPayload result;
  if (parts.size() == 1) {
    result = std::move(parts[0]);
  } else {
    ASSIGN_OR_RETURN(result, ConcatRows(parts));
  }
  if (squeeze) result.shape.erase(result.shape.begin());
  return result;
}

}  // namespace reverb_tf
