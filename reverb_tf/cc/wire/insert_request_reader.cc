// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/wire/insert_request_reader.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"

namespace reverb_tf {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;
using google::protobuf::io::StringOutputStream;

constexpr uint32_t LengthDelimited(int field_number) {
  return WireFormatLite::MakeTag(field_number,
                                 WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
}

// The length-delimited fields the reader looks at itself: a request's
// chunks (a large one read here, a small one by protobuf), items and item
// batches (protobuf, in place), a chunk's tensor and a tensor's bytes. Every
// other field is copied as it is and merged by protobuf at the end.
constexpr uint32_t kRequestChunks =
    LengthDelimited(proto::InsertRequest::kChunksFieldNumber);
constexpr uint32_t kRequestItems =
    LengthDelimited(proto::InsertRequest::kItemsFieldNumber);
constexpr uint32_t kRequestItemBatches =
    LengthDelimited(proto::InsertRequest::kItemBatchesFieldNumber);
constexpr uint32_t kChunkTensor =
    LengthDelimited(proto::Chunk::kTensorFieldNumber);
constexpr uint32_t kTensorData =
    LengthDelimited(proto::Tensor::kDataFieldNumber);

// Protobuf's parser is stricter than CodedInputStream on varint encodings:
// it refuses a tag or a length of more than five bytes (CodedInputStream
// reads up to ten and drops the high bits), and a length of 2 GiB less its
// 16 bytes of slop or more. The reader refuses the same.
constexpr int kMaxTagOrLengthBytes = 5;
constexpr uint64_t kMaxLength = INT32_MAX - 16;

// A tag as protobuf's parser reads it; 0 at the input's end or limit.
bool ReadTag(CodedInputStream* in, uint32_t* tag) {
  const int start = in->CurrentPosition();
  *tag = in->ReadTag();
  return in->CurrentPosition() - start <= kMaxTagOrLengthBytes;
}

// A length prefix as protobuf's parser reads it.
bool ReadLength(CodedInputStream* in, int* length) {
  const int start = in->CurrentPosition();
  uint64_t value;
  if (!in->ReadVarint64(&value) ||
      in->CurrentPosition() - start > kMaxTagOrLengthBytes ||
      value > kMaxLength) {
    return false;
  }
  *length = static_cast<int>(value);
  return true;
}

// Copies the field of `tag` (already read) to `out` as it is, refusing what
// protobuf's parser refuses. WireFormatLite::SkipField copies too, but
// re-encodes lengths, also those in groups, and so would hand protobuf a
// field it accepts where the original bytes are refused.
bool CopyField(CodedInputStream* in, uint32_t tag, CodedOutputStream* out) {
  switch (WireFormatLite::GetTagWireType(tag)) {
    case WireFormatLite::WIRETYPE_LENGTH_DELIMITED: {
      int length;
      std::string bytes;
      if (!ReadLength(in, &length) || !in->ReadString(&bytes, length)) {
        return false;
      }
      out->WriteTag(tag);
      out->WriteVarint32(static_cast<uint32_t>(length));
      out->WriteString(bytes);
      return true;
    }
    case WireFormatLite::WIRETYPE_START_GROUP: {
      if (!in->IncrementRecursionDepth()) return false;
      out->WriteTag(tag);
      const uint32_t end =
          WireFormatLite::MakeTag(WireFormatLite::GetTagFieldNumber(tag),
                                  WireFormatLite::WIRETYPE_END_GROUP);
      while (true) {
        uint32_t inner;
        if (!ReadTag(in, &inner) || inner == 0) return false;
        if (WireFormatLite::GetTagWireType(inner) ==
            WireFormatLite::WIRETYPE_END_GROUP) {
          if (inner != end) return false;
          break;
        }
        if (!CopyField(in, inner, out)) return false;
      }
      in->DecrementRecursionDepth();
      out->WriteTag(end);
      return true;
    }
    default:
      // Varints and fixed-width values are copied as protobuf reads them;
      // an end-group tag outside a group and invalid wire types are refused.
      return WireFormatLite::SkipField(in, tag, out);
  }
}

// Reads the fields of one message up to the input's end or current limit:
// `read_field(tag, &read)` reads the fields it knows, setting `read`
// (returning false for bytes that do not parse); the others are gathered and
// merged into `message` at the end, which keeps protobuf's semantics for each
// field since a message's fields can be merged in any grouping that keeps their
// order.
template <typename Message, typename ReadField>
bool ReadFields(CodedInputStream* in, Message* message, ReadField read_field) {
  std::string rest;
  {
    StringOutputStream rest_stream(&rest);
    CodedOutputStream rest_out(&rest_stream);
    while (true) {
      uint32_t tag;
      if (!ReadTag(in, &tag)) return false;
      if (tag == 0) break;
      bool read = false;
      if (!read_field(tag, &read)) return false;
      if (!read && !CopyField(in, tag, &rest_out)) {
        return false;
      }
    }
    // At the end of the input or limit: tag 0 there is not a field.
    if (!in->ConsumedEntireMessage()) return false;
  }
  return rest.empty() || message->MergeFromString(rest);
}

// Reads a length-delimited submessage with `read(length)`, within its length.
template <typename Read>
bool ReadSubmessage(CodedInputStream* in, Read read) {
  int length;
  if (!ReadLength(in, &length)) return false;
  // PushLimit() would cut a length beyond the enclosing message's to it.
  if (const int outer = in->BytesUntilLimit(); outer >= 0 && length > outer) {
    return false;
  }
  const auto [limit, depth] = in->IncrementRecursionDepthAndPushLimit(length);
  // The end of the input counts as a message's end: a submessage must also
  // have reached its length.
  return depth >= 0 && read(length) && in->BytesUntilLimit() == 0 &&
         in->DecrementRecursionDepthAndPopLimit(limit);
}

// CodedInputStream::ReadString(), without its resize(): that zero-fills
// the whole string before the copy overwrites it, a memset that cost 5% of
// the server's CPU for 28 KB frames (perf, 16 writer streams). append()
// leaves the capacity past the size alone.
bool ReadBytes(CodedInputStream* in, int size, std::string* out) {
  out->clear();
  out->reserve(static_cast<size_t>(size));
  while (size > 0) {
    const void* data;
    int available;
    if (!in->GetDirectBufferPointer(&data, &available)) return false;
    const int n = std::min(size, available);
    out->append(static_cast<const char*>(data), static_cast<size_t>(n));
    if (!in->Skip(n)) return false;
    size -= n;
  }
  return true;
}

bool ReadTensor(CodedInputStream* in, proto::Tensor* tensor,
                TakeBuffer take_buffer) {
  return ReadFields(in, tensor, [&](uint32_t tag, bool* read) {
    if (tag != kTensorData) return true;
    *read = true;
    int size;
    if (!ReadLength(in, &size) || size > in->BytesUntilLimit()) {
      return false;
    }
    std::string* data = tensor->mutable_data();
    if (data->capacity() < static_cast<size_t>(size)) {
      std::string buffer = take_buffer(static_cast<size_t>(size));
      if (buffer.capacity() >= static_cast<size_t>(size)) data->swap(buffer);
    }
    return ReadBytes(in, size, data);
  });
}

bool ReadChunk(CodedInputStream* in, proto::Chunk* chunk,
               TakeBuffer take_buffer) {
  return ReadFields(in, chunk, [&](uint32_t tag, bool* read) {
    if (tag != kChunkTensor) return true;
    *read = true;
    return ReadSubmessage(in, [&](int) {
      return ReadTensor(in, chunk->mutable_tensor(), take_buffer);
    });
  });
}

}  // namespace

bool MayHoldLargeChunks(google::protobuf::io::ZeroCopyInputStream* input) {
  CodedInputStream in(input);
  while (true) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) return !in.ConsumedEntireMessage();
    if (tag != kRequestChunks) {
      if (!WireFormatLite::SkipField(&in, tag)) return true;
      continue;
    }
    int length;
    if (!ReadLength(&in, &length) ||
        length >= static_cast<int>(kMinReadBufferBytes) || !in.Skip(length)) {
      return true;
    }
  }
}

bool ReadInsertRequest(google::protobuf::io::ZeroCopyInputStream* input,
                       proto::InsertRequest* request, TakeBuffer take_buffer) {
  request->Clear();
  CodedInputStream in(input);
  return ReadFields(&in, request, [&](uint32_t tag, bool* read) {
    // Protobuf's parser for what holds no large chunk bytes: small chunks
    // (the common small step) cost no more than a plain parse.
    google::protobuf::MessageLite* message = nullptr;
    if (tag == kRequestItems) {
      message = request->add_items();
    } else if (tag == kRequestItemBatches) {
      message = request->add_item_batches();
    } else if (tag != kRequestChunks) {
      return true;
    }
    *read = true;
    return ReadSubmessage(&in, [&](int length) {
      if (message != nullptr) return message->MergePartialFromCodedStream(&in);
      proto::Chunk* chunk = request->add_chunks();
      if (length < static_cast<int>(kMinReadBufferBytes)) {
        return chunk->MergePartialFromCodedStream(&in);
      }
      return ReadChunk(&in, chunk, take_buffer);
    });
  });
}

}  // namespace reverb_tf
