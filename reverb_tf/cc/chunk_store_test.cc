// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/chunk_store.h"

#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "reverb_tf/cc/item.h"
#include "reverb_tf/cc/testing/status_matchers.h"
#include "reverb_tf/cc/testing/test_util.h"

namespace reverb_tf {
namespace {

using ::reverb_tf::testing::MakeFloatChunk;

TEST(ChunkStoreTest, RejectsInvalidPayloads) {
  ChunkStore store;
  auto scalar = MakePayload(DType::kFloat, {}, std::string(4, '\0'));
  ASSERT_OK(scalar);
  EXPECT_EQ(store.Insert(1, 1, 0, *scalar).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto empty = MakePayload(DType::kFloat, {0, 4}, "");
  EXPECT_EQ(store.Insert(2, 1, 0, *empty).status().code(),
            absl::StatusCode::kInvalidArgument);
  TensorPayload broken;
  broken.dtype = DType::kFloat;
  broken.shape = {2};
  broken.data = "abc";
  broken.uncompressed_size = 3;
  EXPECT_EQ(store.Insert(3, 1, 0, broken).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.num_live_chunks(), 0);
}

TEST(ChunkStoreTest, ChunkLivesExactlyAsLongAsItsLastReference) {
  ChunkStore store;
  auto chunk = MakeFloatChunk(store, 7, 10);
  EXPECT_EQ(chunk->key(), 7u);
  EXPECT_EQ(chunk->num_steps(), 10);
  EXPECT_EQ(store.num_live_chunks(), 1);
  EXPECT_EQ(chunk->ref_count(), 1);
  {
    // Two items share the chunk.
    Item a = testing::MakeItem(1, 1.0, {chunk});
    Item b = testing::MakeItem(2, 1.0, {chunk});
    EXPECT_EQ(chunk->ref_count(), 3);
    ChunkRef copy = chunk;
    ChunkRef moved = std::move(copy);
    EXPECT_EQ(copy, nullptr);
    EXPECT_EQ(chunk->ref_count(), 4);
    moved.reset();
    chunk.reset();
    a = Item();
    EXPECT_EQ(store.num_live_chunks(), 1);
    EXPECT_EQ(b.trajectory[0].slices()[0].chunk->ref_count(), 1);
  }
  EXPECT_EQ(store.num_live_chunks(), 0);
  EXPECT_EQ(store.num_live_bytes(), 0);
}

TEST(ChunkStoreTest, SmallAndLargePayloadsRoundTrip) {
  ChunkStore store;
  for (size_t size : {size_t{16}, Chunk::kInlineBytes, Chunk::kInlineBytes + 1,
                      size_t{1} << 20}) {
    std::string bytes(size, '\0');
    for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>(i * 7);
    auto payload =
        MakePayload(DType::kUint8, {1, static_cast<int64_t>(size)}, bytes);
    ASSERT_OK(payload);
    auto chunk = store.Insert(size, 1, 3, *payload);
    ASSERT_OK(chunk);
    EXPECT_EQ((*chunk)->data(), bytes) << size;
    EXPECT_EQ((*chunk)->episode_step(), 3);
    const TensorPayload copy = *(*chunk)->ToPayload();
    EXPECT_EQ(copy.data, bytes);
    EXPECT_EQ(copy.shape, payload->shape);
    EXPECT_GE((*chunk)->ByteSize(), static_cast<int64_t>(size));
    EXPECT_EQ(store.num_live_bytes(), (*chunk)->ByteSize());
  }
  EXPECT_EQ(store.num_live_chunks(), 0);
}

TEST(ChunkStoreTest, LaneChunksKeepOneEpisodePerLane) {
  ChunkStore store;
  // Three steps of two lanes: row t * 2 + b is lane b's step t.
  std::string bytes(6 * 4, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i);
  auto payload = MakePayload(DType::kFloat, {6}, bytes);
  ASSERT_OK(payload);
  const uint64_t ids[] = {11, 22};
  auto chunk = store.Insert(5, 0, 7, *payload, ids);
  ASSERT_OK(chunk);
  EXPECT_EQ((*chunk)->num_lanes(), 2);
  EXPECT_EQ((*chunk)->num_steps(), 6);
  EXPECT_EQ((*chunk)->episode_step(), 7);
  for (int64_t row = 0; row < 6; ++row) {
    EXPECT_EQ((*chunk)->episode_id(row), ids[row % 2]) << row;
  }
  EXPECT_EQ((*chunk)->data(), bytes);
  // Compressed, the ids sit behind the uncompressed size, bytes unharmed.
  auto zeros = MakePayload(DType::kFloat, {4, 256}, std::string(4096, '\0'));
  ASSERT_OK(zeros);
  auto compressed = Compress(*std::move(zeros), 3);
  ASSERT_OK(compressed);
  ASSERT_EQ(compressed->compression, Compression::kZstd);
  auto packed = store.Insert(6, 0, 0, *compressed, ids);
  ASSERT_OK(packed);
  EXPECT_EQ((*packed)->episode_id(3), 22u);
  EXPECT_EQ((*packed)->uncompressed_size(), 4096);
  EXPECT_EQ((*packed)->data(), compressed->data);
  // Rows that do not divide among the lanes are refused.
  const uint64_t four[] = {1, 2, 3, 4};
  auto uneven = store.Insert(7, 0, 0, *payload, four);
  EXPECT_EQ(uneven.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.num_live_chunks(), 2);
}

TEST(ChunkStoreTest, ChunksOutliveTheirStoreSafely) {
  ChunkRef chunk;
  {
    ChunkStore store;
    chunk = MakeFloatChunk(store, 1, 1);
  }
  EXPECT_EQ(chunk->num_steps(), 1);
  EXPECT_EQ(chunk->shape(), (std::vector<int64_t>{1, 4}));
  chunk.reset();  // must not touch freed accounting
}

// What TakeBuffer() gives when it has nothing: a string's own capacity.
const size_t kNoBuffer = std::string().capacity();

// A chunk of `bytes` uint8 bytes of value `fill`, and where its bytes are.
ChunkRef ByteChunk(ChunkStore& store, ChunkKey key, size_t bytes, char fill) {
  auto payload = MakePayload(DType::kUint8, {1, static_cast<int64_t>(bytes)},
                             std::string(bytes, fill));
  EXPECT_OK(payload);
  auto chunk = store.Insert(key, 1, 0, *std::move(payload));
  EXPECT_OK(chunk);
  return *std::move(chunk);
}

TEST(ChunkStoreTest, ABufferIsRecycledOnlyWhenAsked) {
  ChunkStore store;
  ByteChunk(store, 1, 28224, 'a');
  EXPECT_EQ(store.num_recycled_bytes(), 0);
  EXPECT_EQ(store.TakeBuffer(28224).capacity(), kNoBuffer);
}

TEST(ChunkStoreTest, ADeadChunksBufferServesTheNextOfItsSize) {
  ChunkStore store;
  store.RecycleBuffers(1 << 20);
  ChunkRef chunk = ByteChunk(store, 1, 28224, 'a');
  const char* bytes = chunk->data().data();
  EXPECT_EQ(store.num_recycled_bytes(), 0);  // still referenced
  chunk.reset();
  EXPECT_GE(store.num_recycled_bytes(), 28224);
  // Too big, and too small to be worth a 28 KB buffer: not served.
  EXPECT_EQ(store.TakeBuffer(28225 + 8192).capacity(), kNoBuffer);
  EXPECT_EQ(store.TakeBuffer(1000).capacity(), kNoBuffer);
  std::string buffer = store.TakeBuffer(28000);
  EXPECT_GE(buffer.capacity(), 28224);
  EXPECT_EQ(buffer.size(), 0);
  EXPECT_EQ(buffer.data(), bytes);
  EXPECT_EQ(store.num_recycled_bytes(), 0);
  EXPECT_EQ(store.TakeBuffer(28000).capacity(), kNoBuffer);  // taken once only

  // A chunk made of it holds what it was given, not what was there.
  buffer.assign(28224, 'b');
  auto payload = MakePayload(DType::kUint8, {1, 28224}, std::move(buffer));
  ASSERT_OK(payload);
  auto again = store.Insert(2, 1, 0, *std::move(payload));
  ASSERT_OK(again);
  EXPECT_EQ((*again)->data(), std::string(28224, 'b'));
  EXPECT_EQ((*again)->data().data(), bytes);
}

TEST(ChunkStoreTest, KeptBuffersAreFreedOnDemand) {
  ChunkStore store;
  store.RecycleBuffers(1 << 20);
  ByteChunk(store, 1, 28224, 'a');  // dies at once
  ASSERT_GE(store.num_recycled_bytes(), 28224);
  store.FreeRecycledBuffers();
  EXPECT_EQ(store.num_recycled_bytes(), 0);
  EXPECT_EQ(store.TakeBuffer(28000).capacity(), kNoBuffer);
  // Recycling goes on afterwards.
  ByteChunk(store, 2, 28224, 'a');
  EXPECT_GE(store.TakeBuffer(28000).capacity(), 28224);
}

TEST(ChunkStoreTest, RecyclingKeepsSmallBuffersOutAndStaysInItsBound) {
  ChunkStore store;
  store.RecycleBuffers(3 * 10000);
  std::vector<ChunkRef> chunks;
  // Inline chunks have no buffer; 2 KiB ones are left to malloc.
  chunks.push_back(ByteChunk(store, 1, 512, 'a'));
  chunks.push_back(ByteChunk(store, 2, 2048, 'a'));
  for (ChunkKey key = 3; key < 8; ++key) {
    chunks.push_back(ByteChunk(store, key, 10000, 'a'));
  }
  chunks.clear();
  EXPECT_GE(store.num_recycled_bytes(), 2 * 10000);
  EXPECT_LE(store.num_recycled_bytes(), 3 * 10000);
  EXPECT_EQ(store.TakeBuffer(2048).capacity(), kNoBuffer);
}

TEST(ChunkStoreTest, RecycledBuffersNobodyTakesAreFreed) {
  ChunkStore store;
  store.RecycleBuffers(1 << 20);
  ByteChunk(store, 1, 28224, 'a');
  EXPECT_GT(store.num_recycled_bytes(), 0);
  // Freed one to two periods after they came back, with no other call.
  const absl::Time deadline =
      absl::Now() + 2 * ChunkStore::kRecycledBufferPeriod + absl::Seconds(5);
  while (store.num_recycled_bytes() > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(store.num_recycled_bytes(), 0);
}

TEST(ChunkStoreTest, RecycledChunksOutliveTheirStoreSafely) {
  ChunkRef chunk;
  {
    ChunkStore store;
    store.RecycleBuffers(1 << 20);
    chunk = ByteChunk(store, 1, 28224, 'a');
  }
  EXPECT_EQ(chunk->data().size(), 28224);
  chunk.reset();  // gives the buffer back to recycling that still exists
}

TEST(ItemTest, ValidateTrajectoryCatchesBadSlices) {
  ChunkStore store;
  auto chunk = MakeFloatChunk(store, 1, 3);
  Item item = testing::MakeItem(1, 1.0, {chunk});
  EXPECT_OK(ValidateTrajectory(item.trajectory));
  item.trajectory[0].mutable_slices()[0].length = 4;
  EXPECT_EQ(ValidateTrajectory(item.trajectory).code(),
            absl::StatusCode::kInvalidArgument);
  item.trajectory[0].mutable_slices()[0] = ChunkSlice{chunk, 2, 1};
  item.trajectory[0].set_squeeze(true);
  EXPECT_OK(ValidateTrajectory(item.trajectory));
  item.trajectory[0].mutable_slices()[0] = ChunkSlice{chunk, 1, 2};
  EXPECT_EQ(ValidateTrajectory(item.trajectory).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateTrajectory({}).code(), absl::StatusCode::kInvalidArgument);
  item.trajectory[0].mutable_slices()[0].chunk = nullptr;
  EXPECT_EQ(ValidateTrajectory(item.trajectory).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ItemTest, SignatureMismatchNamesColumnDtypeAndShape) {
  ChunkStore store;
  auto obs = MakeFloatChunk(store, 1, 3, /*width=*/4);
  Item item = testing::MakeItem(1, 1.0, {obs});
  TableSignature signature;
  signature.columns.push_back(
      ColumnSpec{"observation", DType::kFloat, {-1, 4}});
  EXPECT_OK(ValidateAgainstSignature(item.trajectory, signature));
  signature.columns[0].shape = {3, 4};
  EXPECT_OK(ValidateAgainstSignature(item.trajectory, signature));
  signature.columns[0].shape = {2, 4};
  absl::Status status = ValidateAgainstSignature(item.trajectory, signature);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("'observation'"), std::string::npos);
  EXPECT_NE(status.message().find("float32[2, 4]"), std::string::npos);
  EXPECT_NE(status.message().find("float32[3, 4]"), std::string::npos);
  signature.columns[0] = ColumnSpec{"observation", DType::kInt32, {-1, 4}};
  EXPECT_FALSE(ValidateAgainstSignature(item.trajectory, signature).ok());
  // A squeezed single step drops the time dimension.
  item.trajectory[0].mutable_slices()[0] = ChunkSlice{obs, 2, 1};
  item.trajectory[0].set_squeeze(true);
  signature.columns[0] = ColumnSpec{"observation", DType::kFloat, {4}};
  EXPECT_OK(ValidateAgainstSignature(item.trajectory, signature));
  signature.columns.push_back(signature.columns[0]);
  EXPECT_FALSE(ValidateAgainstSignature(item.trajectory, signature).ok());
}

}  // namespace
}  // namespace reverb_tf
