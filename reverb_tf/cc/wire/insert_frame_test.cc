// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/wire/insert_frame.h"

#include <memory>
#include <string>
#include <vector>

#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/support/byte_buffer.h"
#include "gtest/gtest.h"
#include "reverb_tf/cc/testing/status_matchers.h"

namespace reverb_tf {
namespace {

proto::Chunk Skeleton(uint64_t key, std::vector<int64_t> shape) {
  proto::Chunk chunk;
  chunk.set_key(key);
  chunk.set_episode_id(key * 3 + 1);
  chunk.set_episode_step(static_cast<int32_t>(key % 7));
  proto::Tensor* tensor = chunk.mutable_tensor();
  tensor->set_dtype(4);
  for (int64_t d : shape) tensor->add_shape(d);
  tensor->set_uncompressed_size(1 << 20);  // a multi-byte varint
  return chunk;
}

std::string Flatten(const grpc::ByteBuffer& message) {
  std::vector<grpc::Slice> slices;
  EXPECT_OK(message.Dump(&slices));
  std::string out;
  for (const grpc::Slice& slice : slices) {
    out.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return out;
}

TEST(InsertFrameTest, ParsesAsTheRequestItStandsFor) {
  // Data sizes around the one- and two-byte varint boundary, empty, and big.
  const std::vector<size_t> sizes = {0, 1, 127, 128, 300, 28224, 1 << 20};
  auto bytes = std::make_shared<std::vector<std::string>>();
  for (size_t i = 0; i < sizes.size(); ++i)
    bytes->push_back(std::string(sizes[i], 'a' + i));

  InsertFrame frame;
  proto::InsertRequest expected;
  for (size_t i = 0; i < sizes.size(); ++i) {
    proto::Chunk skeleton =
        Skeleton(1000 + i, {1, static_cast<int64_t>(sizes[i])});
    proto::Tensor tensor = skeleton.tensor();
    skeleton.clear_tensor();
    frame.AddChunk(skeleton, tensor, (*bytes)[i], bytes);
    *tensor.mutable_data() = (*bytes)[i];
    *skeleton.mutable_tensor() = tensor;
    *expected.add_chunks() = skeleton;
  }
  proto::InsertRequest rest;
  rest.add_items()->set_key(77);
  rest.add_items()->set_key(78);
  rest.add_release_chunk_keys(5);
  rest.set_rate_limiter_timeout_ms(-1);
  expected.MergeFrom(rest);

  const grpc::ByteBuffer message = frame.Finish(rest);
  proto::InsertRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(message)));
  EXPECT_TRUE(
      google::protobuf::util::MessageDifferencer::Equals(parsed, expected))
      << parsed.ShortDebugString().substr(0, 400);
}

TEST(InsertFrameTest, LendsTheBytesAndHoldsTheirOwnerUntilTheMessageGoes) {
  auto data = std::make_shared<std::string>(28224, 'x');
  std::weak_ptr<std::string> watch = data;
  const char* const where = data->data();
  grpc::ByteBuffer copy;
  {
    InsertFrame frame;
    proto::Chunk skeleton = Skeleton(1, {1, 28224});
    const proto::Tensor tensor = skeleton.tensor();
    skeleton.clear_tensor();
    frame.AddChunk(skeleton, tensor, *data, data);
    data.reset();
    const grpc::ByteBuffer message = frame.Finish(proto::InsertRequest());
    EXPECT_FALSE(watch.expired());
    std::vector<grpc::Slice> slices;
    ASSERT_OK(message.Dump(&slices));
    bool lent = false;
    for (const grpc::Slice& slice : slices) {
      lent |= reinterpret_cast<const char*>(slice.begin()) == where;
    }
    EXPECT_TRUE(lent) << "the chunk bytes were copied";
    copy = message;  // shares the slices
  }
  EXPECT_FALSE(watch.expired());
  copy.Clear();
  EXPECT_TRUE(watch.expired());
}

TEST(InsertFrameTest, CopiesSmallBytesAndKeepsNoOwner) {
  auto data = std::make_shared<std::string>(InsertFrame::kInlineBytes, 'y');
  std::weak_ptr<std::string> watch = data;
  InsertFrame frame;
  proto::Chunk skeleton =
      Skeleton(2, {1, static_cast<int64_t>(InsertFrame::kInlineBytes)});
  const proto::Tensor tensor = skeleton.tensor();
  skeleton.clear_tensor();
  frame.AddChunk(skeleton, tensor, *data, data);
  data.reset();
  EXPECT_TRUE(watch.expired()) << "a small chunk's owner was kept";
  const grpc::ByteBuffer message = frame.Finish(proto::InsertRequest());
  proto::InsertRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(message)));
  ASSERT_EQ(parsed.chunks_size(), 1);
  EXPECT_EQ(parsed.chunks(0).tensor().data(),
            std::string(InsertFrame::kInlineBytes, 'y'));
}

}  // namespace
}  // namespace reverb_tf
