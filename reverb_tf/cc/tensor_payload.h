// SPDX-License-Identifier: Apache-2.0
// TensorPayload: how a tensor is stored in chunks and shipped on the wire,
// without TensorFlow. A payload is a dtype, a shape and row-major bytes,
// optionally zstd-compressed.
//
// String tensors are encoded element by element as <varint length><bytes>,
// so that a payload never needs TF's TensorProto.
//
// Thread safety: a TensorPayload is a value type; const methods may be called
// concurrently.
#ifndef REVERB_TF_CC_TENSOR_PAYLOAD_H_
#define REVERB_TF_CC_TENSOR_PAYLOAD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "reverb_tf/cc/dtype.h"
#include "reverb_tf/cc/platform/export.h"

namespace reverb_tf {

// Bytes per element for fixed-size dtypes; 0 for kString and kInvalid.
REVERB_TF_EXPORT int64_t DTypeSize(DType dtype);
REVERB_TF_EXPORT bool IsValidDType(int32_t value);
REVERB_TF_EXPORT std::string DTypeName(DType dtype);

enum class Compression : uint8_t { kNone = 0, kZstd = 1 };

using Shape = absl::InlinedVector<int64_t, 4>;

REVERB_TF_EXPORT std::string ShapeDebugString(absl::Span<const int64_t> shape);

// The largest tensor (once uncompressed) a payload may describe. Every size
// a payload declares is checked against its dtype and shape and against this
// bound before anything is allocated for it, so no peer can make a process
// allocate more than this for one tensor.
inline constexpr int64_t kMaxPayloadBytes = int64_t{2} << 30;

struct REVERB_TF_EXPORT TensorPayload {
  DType dtype = DType::kInvalid;
  Shape shape;
  Compression compression = Compression::kNone;
  // Size of `data` once decompressed (== data.size() when uncompressed).
  int64_t uncompressed_size = 0;
  std::string data;

  // Only meaningful for a payload that passed Validate() (no overflow).
  int64_t num_elements() const;

  // Checks, without allocating: dtype and compression are known, dimensions
  // are >= 0, the element count and byte size neither overflow nor exceed
  // kMaxPayloadBytes, and uncompressed_size is what dtype and shape imply
  // (for strings: at least one byte per element). Uncompressed data must
  // hold exactly that (strings: exactly num_elements() encoded strings);
  // compressed data must be one zstd frame declaring uncompressed_size.
  // Whether a compressed frame really decodes is VerifyCompressed()'s job.
  absl::Status Validate() const;
  // What Validate() checks without looking at the bytes, for a payload
  // whose `data_size` bytes are elsewhere (a chunk on disk, whose bytes
  // were validated when they arrived and are checksummed since).
  absl::Status ValidateHead(size_t data_size) const;
};

// Builds an uncompressed payload from raw row-major bytes (fixed-size dtypes).
REVERB_TF_EXPORT absl::StatusOr<TensorPayload> MakePayload(DType dtype,
                                                           Shape shape,
                                                           std::string data);

// Builds an uncompressed kString payload.
REVERB_TF_EXPORT absl::StatusOr<TensorPayload> MakeStringPayload(
    Shape shape, absl::Span<const std::string> elements);

// Decodes the elements of an uncompressed kString payload.
REVERB_TF_EXPORT absl::StatusOr<std::vector<std::string>> DecodeStrings(
    const TensorPayload& payload);

// zstd-compresses `payload` at `level` (1..19). Payloads that do not shrink
// are returned unchanged, so callers never pay for incompressible data twice.
REVERB_TF_EXPORT absl::StatusOr<TensorPayload> Compress(TensorPayload payload,
                                                        int level);

// Decodes a compressed payload without keeping the result (a bounded 64 KiB
// buffer; strings are decoded whole, at most kMaxPayloadBytes) and checks it
// yields exactly uncompressed_size bytes that form a valid payload. What a
// server runs on each compressed chunk it accepts, so that no stored chunk
// can fail, or lie, when a client decompresses it. OK for uncompressed ones,
// whose whole check is Validate().
REVERB_TF_EXPORT absl::Status VerifyCompressed(const TensorPayload& payload);

// Returns `payload` uncompressed (a no-op for uncompressed payloads). The
// payload is validated before its declared size is allocated.
REVERB_TF_EXPORT absl::StatusOr<TensorPayload> Decompress(
    TensorPayload payload);

// Rows [offset, offset + length) along dimension 0 of an uncompressed
// payload, as a new payload of shape [length, shape[1:]...].
REVERB_TF_EXPORT absl::StatusOr<TensorPayload> SliceRows(
    const TensorPayload& payload, int64_t offset, int64_t length);

// Concatenates uncompressed payloads along dimension 0; all must share dtype
// and trailing dimensions.
REVERB_TF_EXPORT absl::StatusOr<TensorPayload> ConcatRows(
    absl::Span<const TensorPayload> parts);

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_TENSOR_PAYLOAD_H_
