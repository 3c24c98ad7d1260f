// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/wire/insert_request_reader.h"

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
      const int start = in->CurrentPosition();
      const uint32_t tag = in->ReadTag();
      // CodedInputStream reads a tag of up to ten bytes, dropping high bits;
      // protobuf's parser refuses one of more than five.
      if (in->CurrentPosition() - start > 5) return false;
      if (tag == 0) break;
      bool read = false;
      if (!read_field(tag, &read)) return false;
      if (!read && !WireFormatLite::SkipField(in, tag, &rest_out)) {
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
  if (!in->ReadVarintSizeAsInt(&length)) return false;
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

bool ReadTensor(CodedInputStream* in, proto::Tensor* tensor,
                TakeBuffer take_buffer) {
  return ReadFields(in, tensor, [&](uint32_t tag, bool* read) {
    if (tag != kTensorData) return true;
    *read = true;
    int size;
    if (!in->ReadVarintSizeAsInt(&size) || size > in->BytesUntilLimit()) {
      return false;
    }
    std::string* data = tensor->mutable_data();
    if (data->capacity() < static_cast<size_t>(size)) {
      std::string buffer = take_buffer(static_cast<size_t>(size));
      if (buffer.capacity() >= static_cast<size_t>(size)) data->swap(buffer);
    }
    return in->ReadString(data, size);
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
    if (!in.ReadVarintSizeAsInt(&length) ||
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
