// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/wire/insert_frame.h"

#include <cstdint>
#include <utility>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"

namespace reverb_tf {
namespace {

using ::google::protobuf::internal::WireFormatLite;

void PutVarint(uint64_t value, std::string* out) {
  uint8_t buffer[10];
  uint8_t* end = google::protobuf::io::CodedOutputStream::WriteVarint64ToArray(
      value, buffer);
  out->append(reinterpret_cast<const char*>(buffer), end - buffer);
}

// The tag of a length-delimited field.
void PutTag(int field, std::string* out) {
  PutVarint(
      WireFormatLite::MakeTag(field, WireFormatLite::WIRETYPE_LENGTH_DELIMITED),
      out);
}

size_t TagSize(int field) {
  return google::protobuf::io::CodedOutputStream::VarintSize32(
      WireFormatLite::MakeTag(field,
                              WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
}

size_t VarintSize(uint64_t value) {
  return google::protobuf::io::CodedOutputStream::VarintSize64(value);
}

}  // namespace

void InsertFrame::AddChunk(const proto::Chunk& fields,
                           const proto::Tensor& tensor, absl::string_view data,
                           std::shared_ptr<const void> owner) {
  // Chunk = its own fields, then `tensor` = the tensor's fields, then
  // `data`: the bytes themselves go last, as a slice of their own, and the
  // length prefixes count them.
  const size_t fields_size = fields.ByteSizeLong();
  const size_t tensor_fields_size = tensor.ByteSizeLong();
  const size_t data_field = TagSize(proto::Tensor::kDataFieldNumber) +
                            VarintSize(data.size()) + data.size();
  const size_t tensor_size = tensor_fields_size + data_field;
  const size_t chunk_size = fields_size +
                            TagSize(proto::Chunk::kTensorFieldNumber) +
                            VarintSize(tensor_size) + tensor_size;
  PutTag(proto::InsertRequest::kChunksFieldNumber, &head_);
  PutVarint(chunk_size, &head_);
  fields.AppendToString(&head_);
  PutTag(proto::Chunk::kTensorFieldNumber, &head_);
  PutVarint(tensor_size, &head_);
  tensor.AppendToString(&head_);
  PutTag(proto::Tensor::kDataFieldNumber, &head_);
  PutVarint(data.size(), &head_);
  if (data.size() <= kInlineBytes) {
    head_.append(data.data(), data.size());
    return;
  }
  slices_.emplace_back(head_);
  head_.clear();
  auto* kept = new std::shared_ptr<const void>(std::move(owner));
  slices_.emplace_back(
      const_cast<char*>(data.data()), data.size(),
      [](void* kept) {
        delete static_cast<std::shared_ptr<const void>*>(kept);
      },
      kept);
}

grpc::ByteBuffer InsertFrame::Finish(const proto::InsertRequest& rest) {
  rest.AppendToString(&head_);
  if (!head_.empty()) slices_.emplace_back(head_);
  grpc::ByteBuffer message(slices_.data(), slices_.size());
  slices_.clear();
  head_.clear();
  return message;
}

}  // namespace reverb_tf
