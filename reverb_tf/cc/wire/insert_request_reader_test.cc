// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/wire/insert_request_reader.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "grpcpp/support/byte_buffer.h"
#include "gtest/gtest.h"
#include "reverb_tf/cc/wire/insert_frame.h"

namespace reverb_tf {
namespace {

// What protobuf's own parser makes of `bytes`: nullopt-like (false) or the
// message serialized.
struct Parsed {
  bool ok = false;
  std::string serialized;
  bool operator==(const Parsed& other) const {
    return ok == other.ok && (!ok || serialized == other.serialized);
  }
};

Parsed ByProtobuf(const std::string& bytes) {
  proto::InsertRequest request;
  Parsed parsed;
  parsed.ok = request.ParseFromString(bytes);
  if (parsed.ok) parsed.serialized = request.SerializeAsString();
  return parsed;
}

// Reads `bytes` in pieces of `piece` bytes (a stream of several buffers, as
// gRPC's slices are), with buffers of `capacity` handed out on request.
Parsed ByReader(const std::string& bytes, int piece = 7, size_t capacity = 0,
                std::vector<size_t>* asked = nullptr) {
  proto::InsertRequest request;
  google::protobuf::io::ArrayInputStream input(
      bytes.data(), static_cast<int>(bytes.size()), piece);
  Parsed parsed;
  parsed.ok = ReadInsertRequest(&input, &request, [&](size_t size) {
    if (asked != nullptr) asked->push_back(size);
    std::string buffer;
    buffer.reserve(capacity);
    return buffer;
  });
  if (parsed.ok) parsed.serialized = request.SerializeAsString();
  return parsed;
}

proto::InsertRequest Request() {
  proto::InsertRequest request;
  for (int i = 0; i < 3; ++i) {
    proto::Chunk* chunk = request.add_chunks();
    chunk->set_key(100 + i);
    chunk->set_episode_id(7);
    chunk->set_episode_step(i);
    if (i == 2) chunk->add_lane_episode_ids(9), chunk->add_lane_episode_ids(10);
    proto::Tensor* tensor = chunk->mutable_tensor();
    tensor->set_dtype(4);
    tensor->add_shape(1);
    // Chunk 1 is large enough for a buffer of its own.
    const int bytes = i == 1 ? 5000 : 2;
    tensor->add_shape(bytes);
    tensor->set_data(std::string(bytes, static_cast<char>('a' + i)));
  }
  proto::Item* item = request.add_items();
  item->set_key(5);
  item->set_table("t");
  item->set_priority(1.5);
  proto::Slice* slice = item->add_columns()->add_slices();
  slice->set_chunk_key(100);
  slice->set_length(1);
  proto::ItemBatch* batch = request.add_item_batches();
  batch->set_table("t");
  batch->add_keys(6);
  batch->add_priorities(2.0);
  batch->add_lanes(1);
  request.add_release_chunk_keys(99);
  request.set_rate_limiter_timeout_ms(-1);
  return request;
}

TEST(InsertRequestReaderTest, ReadsWhatProtobufReads) {
  const std::string bytes = Request().SerializeAsString();
  for (int piece : {1, 3, 64, 1 << 20}) {
    const Parsed parsed = ByReader(bytes, piece);
    ASSERT_TRUE(parsed.ok) << piece;
    EXPECT_EQ(parsed, ByProtobuf(bytes)) << piece;
  }
}

TEST(InsertRequestReaderTest, ChunkBytesGoIntoTheBuffersHandedOut) {
  proto::InsertRequest request = Request();
  const std::string bytes = request.SerializeAsString();
  google::protobuf::io::ArrayInputStream input(bytes.data(),
                                               static_cast<int>(bytes.size()));
  std::vector<const char*> handed;
  proto::InsertRequest read;
  ASSERT_TRUE(ReadInsertRequest(&input, &read, [&](size_t size) {
    std::string buffer;
    buffer.reserve(size + 10);
    handed.push_back(buffer.data());
    return buffer;
  }));
  // Only a chunk of kMinReadBufferBytes or more asks for a buffer.
  ASSERT_EQ(handed.size(), 1);
  EXPECT_EQ(read.chunks(1).tensor().data().data(), handed[0]);
  EXPECT_EQ(read.chunks(1).tensor().data(), request.chunks(1).tensor().data());
}

TEST(InsertRequestReaderTest, AnEmptyOrTooSmallBufferIsNotUsed) {
  const std::string bytes = Request().SerializeAsString();
  std::vector<size_t> asked;
  EXPECT_EQ(ByReader(bytes, 64, /*capacity=*/100, &asked), ByProtobuf(bytes));
  EXPECT_EQ(asked, std::vector<size_t>{5000});
}

TEST(InsertRequestReaderTest, ReadsTheClientsFrames) {
  // The bytes a remote writer sends: chunk data in slices of its own.
  const proto::InsertRequest request = Request();
  InsertFrame frame;
  for (const proto::Chunk& chunk : request.chunks()) {
    proto::Chunk fields = chunk;
    fields.clear_tensor();
    proto::Tensor tensor = chunk.tensor();
    tensor.clear_data();
    auto owner = std::make_shared<std::string>(chunk.tensor().data());
    frame.AddChunk(fields, tensor, *owner, owner);
  }
  proto::InsertRequest rest = request;
  rest.clear_chunks();
  grpc::ByteBuffer message = frame.Finish(rest);
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(message.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  const Parsed parsed = ByReader(bytes);
  ASSERT_TRUE(parsed.ok);
  EXPECT_EQ(parsed.serialized, request.SerializeAsString());
}

// `value` as a varint of exactly `bytes` bytes (padded with continuation
// bytes; high bits beyond them dropped), or of the fewest when `bytes` is 0.
std::string VarintOf(uint64_t value, int bytes = 0) {
  std::string out;
  for (int i = 0; bytes == 0 ? (i == 0 || value != 0) : i < bytes; ++i) {
    const uint8_t low = value & 0x7f;
    value >>= 7;
    const bool more = bytes == 0 ? value != 0 : i + 1 < bytes;
    out.push_back(static_cast<char>(low | (more ? 0x80 : 0)));
  }
  return out;
}

std::string Tag(int field, int wire_type, int bytes = 0) {
  return VarintOf(static_cast<uint64_t>(field) << 3 | wire_type, bytes);
}

// A length-delimited field whose length is `length` (the body's size when
// negative) in `length_bytes` bytes.
std::string Field(int field, const std::string& body, int length_bytes = 0,
                  int64_t length = -1) {
  return Tag(field, 2) +
         VarintOf(length < 0 ? body.size() : static_cast<uint64_t>(length),
                  length_bytes) +
         body;
}

std::string Group(int field, const std::string& body, int end_tag_bytes = 0) {
  return Tag(field, 3) + body + Tag(field, 4, end_tag_bytes);
}

TEST(InsertRequestReaderTest, RepeatedAndUnknownFieldsMergeAsInProtobuf) {
  // Chunks, small and large, whose tensor comes twice (its data replaced, its
  // shape appended), a repeated scalar, and fields no message declares.
  for (size_t second_bytes : {30, 5000}) {
    std::string bytes = Request().SerializeAsString();
    proto::Chunk first;
    first.set_key(1);
    first.mutable_tensor()->set_data(std::string(6000, 'f'));
    first.mutable_tensor()->add_shape(3);
    std::string chunk_bytes = first.SerializeAsString();
    proto::Chunk second;
    second.set_key(2);
    second.mutable_tensor()->set_data(std::string(second_bytes, 's'));
    second.mutable_tensor()->add_shape(4);
    chunk_bytes += second.SerializeAsString();
    chunk_bytes += std::string("\xa0\x06\x2a", 3);          // field 100: 42
    chunk_bytes += std::string("\x22\x03\xa8\x06\x01", 5);  // tensor: 101
    bytes += "\x0a" + VarintOf(chunk_bytes.size()) + chunk_bytes;
    bytes += std::string("\x20\x05", 2);        // the timeout again: 5
    bytes += std::string("\xfa\x3e\x02hi", 5);  // field 1007, bytes
    const Parsed parsed = ByReader(bytes);
    ASSERT_TRUE(parsed.ok);
    EXPECT_EQ(parsed, ByProtobuf(bytes)) << second_bytes;
  }
}

bool MayHold(const std::string& bytes) {
  google::protobuf::io::ArrayInputStream input(
      bytes.data(), static_cast<int>(bytes.size()), 5);
  return MayHoldLargeChunks(&input);
}

TEST(InsertRequestReaderTest, TellsMessagesOfSmallChunksApart) {
  proto::InsertRequest request = Request();
  EXPECT_TRUE(MayHold(request.SerializeAsString()));  // chunk 1: 5000 bytes
  request.mutable_chunks(1)->mutable_tensor()->set_data(std::string(4000, 'x'));
  EXPECT_FALSE(MayHold(request.SerializeAsString()));
  // Chunk fields, with the key and shape, reach kMinReadBufferBytes.
  request.mutable_chunks(1)->mutable_tensor()->set_data(
      std::string(kMinReadBufferBytes, 'x'));
  EXPECT_TRUE(MayHold(request.SerializeAsString()));
  EXPECT_FALSE(MayHold(""));
  // Bytes that do not parse are left to ReadInsertRequest.
  EXPECT_TRUE(MayHold(std::string("\x0a\x05\x08", 3)));
  EXPECT_TRUE(MayHold(std::string("\x0c", 1)));
}

// Inputs on which the fuzzer once found the reader and protobuf to differ.
TEST(InsertRequestReaderTest, FuzzerFindingsReadAsInProtobuf) {
  const std::vector<std::string> findings = {
      std::string("\x0a\x3e\x08\x01\x22\x3a\x08\x01\x12\x02\x06\x02\x20\x30"
                  "\x2a\x30\x00\x00\x00\x00\x00\x00\x00\x80\x3f\x00\x00\x00"
                  "\x40\x00\x00\x40\xf9\x59\x54\x11\xff\x7f\x00\x00\x40\x00"
                  "\x00\xc0\x40\x00\x00\xe0\x40\x00\x00\x1d\x1d\x1d\x1d\x1d"
                  "\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d\xdc\xe2\xe2"
                  "\xe2\xe2\xe2\xe2\xe2\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d"
                  "\x1d\x00\x41\x00\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d"
                  "\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d"
                  "\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d"
                  "\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d"
                  "\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x1d\x00\x10\x41\x00"
                  "\x00\x20\x41\x00\x00\x30\x41\x12\x16\x08\x01\x12\x01\x74"
                  "\x19\x00\x00\x00\x00\x00\x00\xf0\x3f\x22\x06\x0a\x04\x08"
                  "\x01\x18\x06",
                  184),
      std::string("\x0a\x00\x20\x20\xe0\xff\xff\xff\xff\xff\xff\xff\xff"
                  "\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x60\x09"
                  "\x70\x70",
                  27),
      // Tags of more than five bytes, at the top and in a large chunk.
      std::string("\xdc\xe2\xe2\xe2\xe2\xe2\xe2\xe2\x1d\x01\x02\x03\x04", 13),
      "\x0a\x84\x20" + std::string("\xdc\xe2\xe2\xe2\xe2\xe2\x1d", 7) +
          std::string(4093, '\x01'),
      // A chunk's length in eight bytes.
      std::string("\x0a\x00\x0a\x00\x2a\x00\x0a\x80\x80\x80\x80\x80\x80"
                  "\x80\x00\x2a\x08\x08\x08\x2a\x00\x08\x08\x08\x08",
                  25),
  };
  for (const std::string& bytes : findings) {
    for (int piece : {1, 7, 60, 1 << 20}) {
      EXPECT_EQ(ByReader(bytes, piece), ByProtobuf(bytes)) << piece;
    }
  }
}

// Protobuf's parser refuses a length or tag of more than five bytes and a
// length of 2 GiB or more (a fifth byte of 8 or above), where
// CodedInputStream reads up to ten bytes and drops high bits. Each length
// the reader meets, in each place (in a chunk read by the reader or by
// protobuf, in fields copied for protobuf, in groups), in every encoding.
TEST(InsertRequestReaderTest, LongTagsAndLengthsReadAsInProtobuf) {
  struct Encoding {
    int bytes;
    uint64_t high;  // bits above what `bytes` bytes hold are dropped
  };
  std::vector<Encoding> encodings;
  for (int bytes = 1; bytes <= 11; ++bytes) encodings.push_back({bytes, 0});
  for (uint64_t high : {uint64_t{1} << 31, uint64_t{1} << 32,
                        uint64_t{0x7f} << 28, uint64_t{1} << 35}) {
    encodings.push_back({5, high});
    encodings.push_back({6, high});
  }
  const std::string data(5000, 'x');
  const std::string small_chunk = Field(4, Field(5, "ab"));  // a tensor
  // Each place builds a request with the length of one field encoded `e`.
  using Place = std::function<std::string(const Encoding&)>;
  auto length = [](const std::string& body, const Encoding& e) {
    return body.size() + e.high;
  };
  const std::vector<std::pair<std::string, Place>> places = {
      {"small chunk",
       [&](const Encoding& e) {
         return Field(1, small_chunk, e.bytes, length(small_chunk, e));
       }},
      {"item",
       [&](const Encoding& e) {
         const std::string item = Field(2, "t");
         return Field(2, item, e.bytes, length(item, e));
       }},
      {"copied field",
       [&](const Encoding& e) {
         return Field(9, "ab", e.bytes, length("ab", e));
       }},
      {"field in a group",
       [&](const Encoding& e) {
         return Group(9, Field(1, "ab", e.bytes, length("ab", e)));
       }},
      {"tag in a group",
       [&](const Encoding& e) {
         return Group(9, Tag(1, 0, e.bytes) + VarintOf(3));
       }},
      {"end of a group",
       [&](const Encoding& e) { return Group(9, Field(1, "ab"), e.bytes); }},
      {"large chunk",
       [&](const Encoding& e) {
         const std::string chunk = Field(4, Field(5, data));
         return Field(1, chunk, e.bytes, length(chunk, e));
       }},
      {"tensor of a large chunk",
       [&](const Encoding& e) {
         const std::string tensor = Field(5, data);
         return Field(1, Field(4, tensor, e.bytes, length(tensor, e)));
       }},
      {"bytes of a large chunk",
       [&](const Encoding& e) {
         return Field(1, Field(4, Field(5, data, e.bytes, length(data, e))));
       }},
      {"copied field of a large chunk",
       [&](const Encoding& e) {
         return Field(1, Field(9, "ab", e.bytes, length("ab", e)) +
                             Field(4, Field(5, data)));
       }},
      {"copied field of a large tensor",
       [&](const Encoding& e) {
         return Field(1, Field(4, Field(5, data) + Field(9, "ab", e.bytes,
                                                         length("ab", e))));
       }},
      {"group in a large chunk",
       [&](const Encoding& e) {
         return Field(1, Group(9, Field(1, "ab", e.bytes, length("ab", e))) +
                             Field(4, Field(5, data)));
       }},
  };
  for (const auto& [place, build] : places) {
    int accepted = 0;
    for (const Encoding& e : encodings) {
      const std::string bytes = build(e);
      const Parsed expected = ByProtobuf(bytes);
      accepted += expected.ok;
      for (int piece : {1, 7, 1 << 20}) {
        EXPECT_EQ(ByReader(bytes, piece), expected)
            << place << ", " << e.bytes << " bytes, high " << e.high
            << ", pieces of " << piece;
      }
    }
    // Both outcomes: the short encodings are read, the long ones refused.
    EXPECT_GT(accepted, 0) << place;
    EXPECT_LT(accepted, static_cast<int>(encodings.size())) << place;
  }
}

// Every prefix and every single-byte change of a valid request: the reader
// accepts exactly what protobuf accepts, and reads the same message.
TEST(InsertRequestReaderTest, DamagedBytesFailOrReadAsInProtobuf) {
  const std::string valid = Request().SerializeAsString();
  int accepted = 0;
  for (size_t n = 0; n < valid.size(); ++n) {
    const std::string prefix = valid.substr(0, n);
    const Parsed expected = ByProtobuf(prefix);
    ASSERT_EQ(ByReader(prefix), expected) << "prefix of " << n << " bytes";
    accepted += expected.ok;
  }
  for (size_t i = 0; i < valid.size(); ++i) {
    for (int value : {0x00, 0x01, 0x08, 0x0a, 0x0c, 0x2a, 0x7f, 0x80, 0xff}) {
      std::string changed = valid;
      changed[i] = static_cast<char>(value);
      const Parsed expected = ByProtobuf(changed);
      ASSERT_EQ(ByReader(changed), expected)
          << "byte " << i << " set to " << value;
      accepted += expected.ok;
    }
  }
  // Both outcomes occurred: the sweep exercised acceptance and refusal.
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, static_cast<int>(valid.size() * 10));
}

}  // namespace
}  // namespace reverb_tf
