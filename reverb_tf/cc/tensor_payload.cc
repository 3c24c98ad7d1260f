// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/tensor_payload.h"

#include <zstd.h>

#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "reverb_tf/cc/platform/status_macros.h"

namespace reverb_tf {
namespace {

void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

// Reads a varint at *pos; false when the input ends or the varint is longer
// than 10 bytes (malformed).
bool ReadVarint(const std::string& in, size_t* pos, uint64_t* value) {
  *value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*pos >= in.size()) return false;
    const uint8_t byte = static_cast<uint8_t>(in[(*pos)++]);
    *value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

// Byte offsets of the first `count` encoded strings in `data` plus the end
// offset; an error if the encoding is malformed.
absl::StatusOr<std::vector<size_t>> StringOffsets(const std::string& data,
                                                  int64_t count) {
  std::vector<size_t> offsets;
  offsets.reserve(count + 1);
  size_t pos = 0;
  for (int64_t i = 0; i < count; ++i) {
    offsets.push_back(pos);
    uint64_t length;
    if (!ReadVarint(data, &pos, &length) || length > data.size() - pos) {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed string payload at element ", i));
    }
    pos += length;
  }
  offsets.push_back(pos);
  return offsets;
}

int64_t ElementsPerRow(const TensorPayload& payload) {
  int64_t n = 1;
  for (size_t i = 1; i < payload.shape.size(); ++i) n *= payload.shape[i];
  return n;
}

}  // namespace

int64_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kBool:
    case DType::kInt8:
    case DType::kUint8:
      return 1;
    case DType::kInt16:
    case DType::kUint16:
    case DType::kHalf:
    case DType::kBfloat16:
      return 2;
    case DType::kFloat:
    case DType::kInt32:
    case DType::kUint32:
      return 4;
    case DType::kDouble:
    case DType::kInt64:
    case DType::kUint64:
    case DType::kComplex64:
      return 8;
    case DType::kComplex128:
      return 16;
    case DType::kString:
    case DType::kInvalid:
      return 0;
  }
  return 0;
}

bool IsValidDType(int32_t value) {
  const DType dtype = static_cast<DType>(value);
  return dtype == DType::kString ||
         (dtype != DType::kInvalid && DTypeSize(dtype) > 0);
}

std::string DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat:
      return "float32";
    case DType::kDouble:
      return "float64";
    case DType::kInt32:
      return "int32";
    case DType::kUint8:
      return "uint8";
    case DType::kInt16:
      return "int16";
    case DType::kInt8:
      return "int8";
    case DType::kString:
      return "string";
    case DType::kComplex64:
      return "complex64";
    case DType::kInt64:
      return "int64";
    case DType::kBool:
      return "bool";
    case DType::kBfloat16:
      return "bfloat16";
    case DType::kUint16:
      return "uint16";
    case DType::kComplex128:
      return "complex128";
    case DType::kHalf:
      return "float16";
    case DType::kUint32:
      return "uint32";
    case DType::kUint64:
      return "uint64";
    case DType::kInvalid:
      break;
  }
  return absl::StrCat("invalid(", static_cast<int32_t>(dtype), ")");
}

std::string ShapeDebugString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

int64_t TensorPayload::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::Status TensorPayload::ValidateHead(size_t data_size) const {
  if (!IsValidDType(static_cast<int32_t>(dtype))) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid dtype ", static_cast<int32_t>(dtype)));
  }
  if (compression != Compression::kNone && compression != Compression::kZstd) {
    return absl::InvalidArgumentError("unknown compression");
  }
  // Element count and byte size, without overflowing: every partial product
  // stays within kMaxPayloadBytes (a zero dimension ends the product at 0).
  const int64_t element_bytes = dtype == DType::kString ? 1 : DTypeSize(dtype);
  int64_t elements = 1;
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "negative dimension in shape ", ShapeDebugString(shape)));
    }
  }
  for (int64_t d : shape) {
    if (d == 0) {
      elements = 0;
      break;
    }
    if (elements > kMaxPayloadBytes / element_bytes / d) {
      return absl::InvalidArgumentError(absl::StrCat(
          DTypeName(dtype), ShapeDebugString(shape), " is larger than the ",
          kMaxPayloadBytes, " bytes a tensor may have"));
    }
    elements *= d;
  }
  if (uncompressed_size < 0 || uncompressed_size > kMaxPayloadBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("uncompressed_size ", uncompressed_size,
                     " is outside [0, ", kMaxPayloadBytes, "]"));
  }
  if (dtype != DType::kString &&
      uncompressed_size != elements * element_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(DTypeName(dtype), ShapeDebugString(shape), " needs ",
                     elements * element_bytes, " bytes, the payload declares ",
                     uncompressed_size));
  }
  if (dtype == DType::kString && uncompressed_size < elements) {
    return absl::InvalidArgumentError(absl::StrCat(
        "string", ShapeDebugString(shape), " needs at least ", elements,
        " bytes, the payload declares ", uncompressed_size));
  }
  if (compression == Compression::kNone &&
      uncompressed_size != static_cast<int64_t>(data_size)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "uncompressed_size ", uncompressed_size, " != data size ", data_size));
  }
  return absl::OkStatus();
}

absl::Status TensorPayload::Validate() const {
  RETURN_IF_ERROR(ValidateHead(data.size()));
  if (compression == Compression::kZstd) {
    const unsigned long long frame_size =
        ZSTD_getFrameContentSize(data.data(), data.size());
    if (frame_size == ZSTD_CONTENTSIZE_ERROR ||
        frame_size == ZSTD_CONTENTSIZE_UNKNOWN ||
        frame_size != static_cast<unsigned long long>(uncompressed_size)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "compressed payload is not a zstd frame of the declared ",
          uncompressed_size, " bytes"));
    }
    return absl::OkStatus();
  }
  if (dtype == DType::kString) {
    ASSIGN_OR_RETURN(auto offsets, StringOffsets(data, num_elements()));
    if (offsets.back() != data.size()) {
      return absl::InvalidArgumentError(
          "string payload holds more bytes than its shape implies");
    }
    return absl::OkStatus();
  }
  const int64_t expected = num_elements() * DTypeSize(dtype);
  if (expected != static_cast<int64_t>(data.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(DTypeName(dtype), ShapeDebugString(shape), " needs ",
                     expected, " bytes, payload has ", data.size()));
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorPayload> MakePayload(DType dtype, Shape shape,
                                          std::string data) {
  if (dtype == DType::kString) {
    return absl::InvalidArgumentError("use MakeStringPayload for strings");
  }
  TensorPayload payload;
  payload.dtype = dtype;
  payload.shape = std::move(shape);
  payload.uncompressed_size = static_cast<int64_t>(data.size());
  payload.data = std::move(data);
  RETURN_IF_ERROR(payload.Validate());
  return payload;
}

absl::StatusOr<TensorPayload> MakeStringPayload(
    Shape shape, absl::Span<const std::string> elements) {
  TensorPayload payload;
  payload.dtype = DType::kString;
  payload.shape = std::move(shape);
  if (payload.num_elements() != static_cast<int64_t>(elements.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shape ", ShapeDebugString(payload.shape), " needs ",
        payload.num_elements(), " strings, got ", elements.size()));
  }
  for (const std::string& s : elements) {
    AppendVarint(s.size(), &payload.data);
    payload.data.append(s);
  }
  payload.uncompressed_size = static_cast<int64_t>(payload.data.size());
  return payload;
}

absl::StatusOr<std::vector<std::string>> DecodeStrings(
    const TensorPayload& payload) {
  if (payload.dtype != DType::kString ||
      payload.compression != Compression::kNone) {
    return absl::InvalidArgumentError("not an uncompressed string payload");
  }
  ASSIGN_OR_RETURN(auto offsets,
                   StringOffsets(payload.data, payload.num_elements()));
  std::vector<std::string> out;
  out.reserve(payload.num_elements());
  for (size_t i = 0; i + 1 < offsets.size(); ++i) {
    size_t pos = offsets[i];
    uint64_t length;
    ReadVarint(payload.data, &pos, &length);
    out.emplace_back(payload.data, pos, length);
  }
  return out;
}

absl::StatusOr<TensorPayload> Compress(TensorPayload payload, int level) {
  if (payload.compression != Compression::kNone) return payload;
  if (level < 1 || level > ZSTD_maxCLevel()) {
    return absl::InvalidArgumentError(
        absl::StrCat("zstd level must be in [1, ", ZSTD_maxCLevel(), "]"));
  }
  std::string compressed(ZSTD_compressBound(payload.data.size()), '\0');
  const size_t size =
      ZSTD_compress(compressed.data(), compressed.size(), payload.data.data(),
                    payload.data.size(), level);
  if (ZSTD_isError(size)) {
    return absl::InternalError(
        absl::StrCat("zstd compression failed: ", ZSTD_getErrorName(size)));
  }
  if (size >= payload.data.size()) return payload;
  compressed.resize(size);
  compressed.shrink_to_fit();
  payload.data = std::move(compressed);
  payload.compression = Compression::kZstd;
  return payload;
}

absl::Status VerifyCompressed(const TensorPayload& payload) {
  // Uncompressed payloads: Validate() is their whole check, which callers
  // have made (walking a string payload twice on the insert path is waste).
  if (payload.compression == Compression::kNone) return absl::OkStatus();
  RETURN_IF_ERROR(payload.Validate());
  if (payload.dtype == DType::kString) {
    // The string encoding can only be checked whole; Validate() bounded it.
    return Decompress(payload).status();
  }
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> context(ZSTD_createDCtx(),
                                                             ZSTD_freeDCtx);
  if (context == nullptr)
    return absl::ResourceExhaustedError("no zstd context");
  std::string buffer(64 << 10, '\0');
  ZSTD_inBuffer in{payload.data.data(), payload.data.size(), 0};
  int64_t produced = 0;
  size_t remaining_hint = 1;
  while (in.pos < in.size || remaining_hint != 0) {
    ZSTD_outBuffer out{buffer.data(), buffer.size(), 0};
    remaining_hint = ZSTD_decompressStream(context.get(), &out, &in);
    if (ZSTD_isError(remaining_hint)) {
      return absl::InvalidArgumentError(
          absl::StrCat("compressed payload does not decode: ",
                       ZSTD_getErrorName(remaining_hint)));
    }
    produced += static_cast<int64_t>(out.pos);
    if (produced > payload.uncompressed_size) break;
    if (out.pos == 0 && in.pos == in.size)
      break;  // no progress: truncated frame
  }
  if (produced != payload.uncompressed_size || remaining_hint != 0 ||
      in.pos != in.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("compressed payload decodes to ", produced,
                     "+ bytes, not the declared ", payload.uncompressed_size,
                     " in exactly one frame"));
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorPayload> Decompress(TensorPayload payload) {
  if (payload.compression == Compression::kNone) return payload;
  // Checks the declared size against dtype, shape and kMaxPayloadBytes (and
  // the frame header) before allocating it.
  if (absl::Status status = payload.Validate(); !status.ok()) {
    return absl::DataLossError(
        absl::StrCat("corrupt zstd payload: ", status.message()));
  }
  std::string raw(payload.uncompressed_size, '\0');
  const size_t size = ZSTD_decompress(raw.data(), raw.size(),
                                      payload.data.data(), payload.data.size());
  if (ZSTD_isError(size) || size != raw.size()) {
    return absl::DataLossError(absl::StrCat(
        "corrupt zstd payload: ",
        ZSTD_isError(size) ? ZSTD_getErrorName(size) : "short frame"));
  }
  payload.data = std::move(raw);
  payload.compression = Compression::kNone;
  RETURN_IF_ERROR(payload.Validate());
  return payload;
}

absl::StatusOr<TensorPayload> SliceRows(const TensorPayload& payload,
                                        int64_t offset, int64_t length) {
  if (payload.compression != Compression::kNone) {
    return absl::InvalidArgumentError(
        "SliceRows needs an uncompressed payload");
  }
  if (payload.shape.empty()) {
    return absl::InvalidArgumentError("cannot slice a scalar payload");
  }
  if (offset < 0 || length < 0 || offset + length > payload.shape[0]) {
    return absl::OutOfRangeError(
        absl::StrCat("rows [", offset, ", ", offset + length,
                     ") outside a payload of ", payload.shape[0], " rows"));
  }
  TensorPayload out;
  out.dtype = payload.dtype;
  out.shape = payload.shape;
  out.shape[0] = length;
  const int64_t per_row = ElementsPerRow(payload);
  if (payload.dtype == DType::kString) {
    ASSIGN_OR_RETURN(auto offsets,
                     StringOffsets(payload.data, (offset + length) * per_row));
    const size_t begin = offsets[offset * per_row];
    out.data = payload.data.substr(begin, offsets.back() - begin);
  } else {
    const int64_t row_bytes = per_row * DTypeSize(payload.dtype);
    out.data = payload.data.substr(offset * row_bytes, length * row_bytes);
  }
  out.uncompressed_size = static_cast<int64_t>(out.data.size());
  return out;
}

absl::StatusOr<TensorPayload> ConcatRows(
    absl::Span<const TensorPayload> parts) {
  if (parts.empty())
    return absl::InvalidArgumentError("nothing to concatenate");
  TensorPayload out;
  out.dtype = parts[0].dtype;
  out.shape = parts[0].shape;
  if (out.shape.empty()) {
    return absl::InvalidArgumentError("cannot concatenate scalar payloads");
  }
  out.shape[0] = 0;
  size_t bytes = 0;
  for (const TensorPayload& part : parts) bytes += part.data.size();
  out.data.reserve(bytes);
  for (const TensorPayload& part : parts) {
    if (part.compression != Compression::kNone) {
      return absl::InvalidArgumentError(
          "ConcatRows needs uncompressed payloads");
    }
    if (part.dtype != out.dtype || part.shape.size() != out.shape.size() ||
        !std::equal(part.shape.begin() + 1, part.shape.end(),
                    out.shape.begin() + 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot concatenate ", DTypeName(part.dtype),
                       ShapeDebugString(part.shape), " to ",
                       DTypeName(out.dtype), ShapeDebugString(parts[0].shape)));
    }
    out.shape[0] += part.shape[0];
    out.data.append(part.data);
  }
  out.uncompressed_size = static_cast<int64_t>(out.data.size());
  return out;
}

}  // namespace reverb_tf
