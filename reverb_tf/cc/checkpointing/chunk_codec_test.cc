// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/checkpointing/chunk_codec.h"

#include <string>

#include "gtest/gtest.h"
#include "reverb_tf/cc/testing/status_matchers.h"
#include "reverb_tf/cc/testing/test_util.h"

namespace reverb_tf {
namespace {

// An entry as both files hold it: the head, then the chunk's bytes.
std::string Entry(const Chunk& chunk) {
  std::string entry;
  EncodeChunkHead(chunk, &entry);
  entry.append(chunk.data().data(), chunk.data().size());
  return entry;
}

TEST(ChunkCodecTest, PlainChunksRoundTripAsBefore) {
  ChunkStore store;
  ChunkRef chunk = testing::MakeFloatChunk(store, 9, 3, 2, 1.5f);
  auto copy = DecodeChunk(Entry(*chunk), &store);
  ASSERT_OK(copy);
  EXPECT_EQ((*copy)->key(), 9u);
  EXPECT_EQ((*copy)->num_lanes(), 0);
  EXPECT_EQ((*copy)->episode_id(), chunk->episode_id());
  EXPECT_EQ((*copy)->shape(), chunk->shape());
  EXPECT_EQ((*copy)->data(), chunk->data());
  // Exactly what files from before lane chunks hold: key, episode, step,
  // dtype, compression, rank, two dims, uncompressed size.
  std::string head;
  EncodeChunkHead(*chunk, &head);
  EXPECT_EQ(head.size(), 8 + 1 + 1 + 1 + 1 + 1 + 2 + 1);
}

TEST(ChunkCodecTest, LaneChunksKeepTheirLanesEpisodes) {
  ChunkStore store;
  auto payload = MakePayload(DType::kInt32, {4, 1}, std::string(16, '\x05'));
  ASSERT_OK(payload);
  const uint64_t ids[] = {uint64_t{1} << 60, 3};
  auto chunk = store.Insert(77, 0, 12, *payload, ids);
  ASSERT_OK(chunk);
  const std::string entry = Entry(**chunk);
  auto copy = DecodeChunk(entry, &store);
  ASSERT_OK(copy);
  EXPECT_EQ((*copy)->num_lanes(), 2);
  EXPECT_EQ((*copy)->episode_id(0), ids[0]);
  EXPECT_EQ((*copy)->episode_id(3), ids[1]);
  EXPECT_EQ((*copy)->episode_step(), 12);
  EXPECT_EQ((*copy)->data(), (*chunk)->data());
  // Cut inside the ids, or a lane count no bytes could back: refused.
  std::string head;
  EncodeChunkHead(**chunk, &head);
  for (size_t cut = head.size() - 12; cut < head.size(); cut += 5) {
    EXPECT_FALSE(DecodeChunk(entry.substr(0, cut), &store).ok()) << cut;
  }
  std::string huge = head.substr(0, head.size() - 17);
  PutVarint(&huge, uint64_t{1} << 40);
  EXPECT_EQ(DecodeChunk(huge, &store).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace reverb_tf
