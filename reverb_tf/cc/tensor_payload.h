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

struct REVERB_TF_EXPORT TensorPayload {
  DType dtype = DType::kInvalid;
  Shape shape;
  Compression compression = Compression::kNone;
  // Size of `data` once decompressed (== data.size() when uncompressed).
  int64_t uncompressed_size = 0;
  std::string data;

  int64_t num_elements() const;

  // Checks that dtype and shape are valid and, for uncompressed fixed-size
  // dtypes, that data holds exactly num_elements() * DTypeSize(dtype) bytes;
  // for strings, that the encoding holds exactly num_elements() strings.
  absl::Status Validate() const;
};

// Builds an uncompressed payload from raw row-major bytes (fixed-size dtypes).
REVERB_TF_EXPORT absl::StatusOr<TensorPayload> MakePayload(
    DType dtype, Shape shape, std::string data);

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

// Returns `payload` uncompressed (a no-op for uncompressed payloads).
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
