// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/wire/conversions.h"

#include <cstring>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"
#include "reverb_tf/cc/testing/status_matchers.h"
#include "reverb_tf/cc/testing/test_util.h"

namespace reverb_tf {
namespace {

// Two steps of three lanes, one int32 per row, row r holding r.
absl::StatusOr<ChunkRef> LaneChunk(ChunkStore& store, Compression compression) {
  std::string bytes(6 * sizeof(int32_t), '\0');
  for (int32_t row = 0; row < 6; ++row) {
    std::memcpy(bytes.data() + row * sizeof(int32_t), &row, sizeof(row));
  }
  absl::StatusOr<TensorPayload> payload =
      MakePayload(DType::kInt32, {6}, bytes);
  if (compression == Compression::kZstd) {
    // Repetitive enough to shrink.
    payload = MakePayload(DType::kInt32, {6, 64},
                          std::string(6 * 64 * sizeof(int32_t), '\x01'));
    if (payload.ok()) payload = Compress(*std::move(payload), 3);
  }
  if (!payload.ok()) return payload.status();
  const uint64_t ids[] = {100, 101, 102};
  return store.Insert(42, 0, 0, *std::move(payload), ids);
}

SampledItem SampleOf(const ChunkRef& chunk, int32_t offset, int32_t length) {
  SampledItem sample;
  sample.key = 1;
  sample.trajectory.emplace_back(
      SlicedColumn({ChunkSlice{chunk, offset, length}}, false));
  return sample;
}

TEST(SampleToProtoTest, ALaneChunkSendsTheSampledRowsOnly) {
  ChunkStore store;
  absl::StatusOr<ChunkRef> made = LaneChunk(store, Compression::kNone);
  ASSERT_OK(made);
  const ChunkRef& chunk = *made;
  proto::SampleResponse response;
  absl::flat_hash_set<ChunkKey> sent;
  // Lane 1's step 1 is row 4.
  EXPECT_EQ(*SampleToProto(SampleOf(chunk, 4, 1), &response, &sent), 4);
  ASSERT_EQ(response.chunks_size(), 1);
  const proto::Chunk& rows = response.chunks(0);
  EXPECT_NE(rows.key(), chunk->key());
  EXPECT_EQ(rows.episode_id(), 101u);
  EXPECT_EQ(rows.tensor().shape(0), 1);
  int32_t value = 0;
  ASSERT_EQ(rows.tensor().data().size(), sizeof(value));
  std::memcpy(&value, rows.tensor().data().data(), sizeof(value));
  EXPECT_EQ(value, 4);
  const proto::Slice& slice = response.items(0).columns(0).slices(0);
  EXPECT_EQ(slice.chunk_key(), rows.key());
  EXPECT_EQ(slice.offset(), 0);
  EXPECT_EQ(slice.length(), 1);
  // The same rows again are not sent twice; other rows are sent apart.
  EXPECT_EQ(*SampleToProto(SampleOf(chunk, 4, 1), &response, &sent), 0);
  EXPECT_EQ(*SampleToProto(SampleOf(chunk, 4, 2), &response, &sent), 8);
  EXPECT_EQ(*SampleToProto(SampleOf(chunk, 0, 1), &response, &sent), 4);
  ASSERT_EQ(response.chunks_size(), 3);
  EXPECT_NE(response.chunks(1).key(), rows.key());
  EXPECT_NE(response.chunks(2).key(), rows.key());
  EXPECT_EQ(response.chunks(2).episode_id(), 100u);
}

TEST(SampleToProtoTest, ACompressedLaneChunkIsSentWhole) {
  ChunkStore store;
  absl::StatusOr<ChunkRef> made = LaneChunk(store, Compression::kZstd);
  ASSERT_OK(made);
  const ChunkRef& chunk = *made;
  ASSERT_EQ(chunk->compression(), Compression::kZstd);
  proto::SampleResponse response;
  absl::flat_hash_set<ChunkKey> sent;
  ASSERT_TRUE(SampleToProto(SampleOf(chunk, 4, 1), &response, &sent).ok());
  ASSERT_EQ(response.chunks_size(), 1);
  EXPECT_EQ(response.chunks(0).key(), chunk->key());
  EXPECT_EQ(response.chunks(0).tensor().shape(0), 6);
  EXPECT_EQ(response.chunks(0).tensor().data(), chunk->data());
  EXPECT_EQ(response.chunks(0).tensor().uncompressed_size(),
            chunk->uncompressed_size());
  EXPECT_EQ(response.items(0).columns(0).slices(0).offset(), 4);
}

TEST(ItemsFromBatchTest, EachLaneGetsItsRows) {
  ChunkStore store;
  absl::StatusOr<ChunkRef> made = LaneChunk(store, Compression::kNone);
  ASSERT_OK(made);
  absl::flat_hash_map<ChunkKey, ChunkRef> chunks = {{42, *made}};
  proto::ItemBatch batch;
  batch.set_table("t");
  batch.set_unchecked(true);
  for (int lane : {2, 0}) {
    batch.add_keys(10 + lane);
    batch.add_priorities(0.5 * lane);
    batch.add_lanes(lane);
  }
  proto::Column* column = batch.add_columns();
  column->set_squeeze(true);
  proto::Slice* slice = column->add_slices();
  slice->set_chunk_key(42);
  slice->set_offset(3);  // lane 0's step 1
  slice->set_length(1);
  std::vector<Item> items;
  ASSERT_OK(ItemsFromBatch(batch, chunks, &items));
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].key, 12u);
  EXPECT_EQ(items[0].priority, 1.0);
  EXPECT_TRUE(items[0].unchecked);
  EXPECT_TRUE(items[0].trajectory[0].squeeze());
  EXPECT_EQ(items[0].trajectory[0].slices()[0].offset, 5);
  EXPECT_EQ(items[1].trajectory[0].slices()[0].offset, 3);
  EXPECT_EQ(items[1].trajectory[0].slices()[0].chunk.get(), made->get());
  EXPECT_EQ((*made)->ref_count(), 4);  // the map, `made` and two items

  // What cannot describe items is refused, naming the problem.
  proto::ItemBatch uneven = batch;
  uneven.add_keys(99);
  items.clear();
  absl::Status status = ItemsFromBatch(uneven, chunks, &items);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("must match"), std::string::npos);
  EXPECT_TRUE(items.empty());
  proto::ItemBatch far = batch;
  far.set_lanes(1, INT32_MAX);
  status = ItemsFromBatch(far, chunks, &items);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(items.size(), 1u);
  items.clear();
  far.set_lanes(1, -1);
  EXPECT_FALSE(ItemsFromBatch(far, chunks, &items).ok());
  items.clear();
  EXPECT_FALSE(ItemsFromBatch(batch, {}, &items).ok());
  EXPECT_TRUE(items.empty());
  proto::ItemBatch empty;
  EXPECT_OK(ItemsFromBatch(empty, chunks, &items));
  EXPECT_TRUE(items.empty());
}

}  // namespace
}  // namespace reverb_tf
