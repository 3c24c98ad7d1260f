// SPDX-License-Identifier: Apache-2.0
// Measures the heap bytes one stored small item costs in the core, in the
// shape the shared benchmark inserts ({observation: f32[4], action: i32,
// reward: f32}, one step per chunk, squeezed columns), and checks that
// removing the items gives the memory back.
#include <cstdio>
#include <cstring>

#include "gtest/gtest.h"
#include "reverb_tf/cc/table.h"
#include "reverb_tf/cc/testing/status_matchers.h"
#include "reverb_tf/cc/testing/test_util.h"

namespace reverb_tf {
namespace {

using ::reverb_tf::testing::Fifo;
using ::reverb_tf::testing::MakeTable;
using ::reverb_tf::testing::MakeTableOptions;
using ::reverb_tf::testing::Prioritized;
using ::reverb_tf::testing::Uniform;

constexpr int kItems = 100000;

ChunkRef StepChunk(ChunkStore& store, ChunkKey key, DType dtype,
                   Shape step_shape) {
  Shape shape = {1};
  shape.insert(shape.end(), step_shape.begin(), step_shape.end());
  int64_t elements = 1;
  for (int64_t d : step_shape) elements *= d;
  auto payload =
      MakePayload(dtype, shape, std::string(elements * DTypeSize(dtype), '\1'));
  return *store.Insert(key, key, 0, *payload);
}

Item SmallItem(ChunkStore& store, Key key) {
  Item item;
  item.key = key;
  item.priority = 1.0 + (key % 7);
  const ChunkRef columns[] = {
      StepChunk(store, 3 * key, DType::kFloat, {4}),
      StepChunk(store, 3 * key + 1, DType::kInt32, {}),
      StepChunk(store, 3 * key + 2, DType::kFloat, {}),
  };
  for (const auto& chunk : columns) {
    SlicedColumn column;
    column.add_slice(ChunkSlice{chunk, 0, 1});
    column.set_squeeze(true);
    item.trajectory.push_back(std::move(column));
  }
  return item;
}

class TableMemoryTest : public ::testing::TestWithParam<SelectorOptions> {};

TEST_P(TableMemoryTest, BytesPerSmallItem) {
  ChunkStore store;
  auto table =
      MakeTable(MakeTableOptions("memory", GetParam(), Fifo(), 2 * kItems,
                                 RateLimiterOptions::MinSize(1)));
  const size_t before = testing::HeapBytesInUse();
  for (Key key = 0; key < kItems; ++key) {
    ASSERT_OK(table->InsertOrAssign(SmallItem(store, key)));
  }
  const size_t after = testing::HeapBytesInUse();
  const double per_item = static_cast<double>(after - before) / kItems;
  std::printf("%s: %.0f heap bytes per stored small item (%d items)\n",
              GetParam().DebugString().c_str(), per_item, kItems);
  RecordProperty("bytes_per_item", static_cast<int>(per_item));
  // dm-reverb 0.14 needs ~3.5 KB of server memory per such item. This bound
  // is a regression guard on the core's share, not the target itself.
  EXPECT_LT(per_item, 560);
  EXPECT_GT(per_item, 3 * sizeof(Chunk));  // the measurement sees the chunks

  ASSERT_OK(table->Reset());
  const size_t released = testing::HeapBytesInUse();
  EXPECT_LT(released - std::min(released, before), 64u * 1024)
      << "memory not released after Reset";
  EXPECT_EQ(store.num_live_chunks(), 0);
}

INSTANTIATE_TEST_SUITE_P(Selectors, TableMemoryTest,
                         ::testing::Values(Uniform(), Prioritized(0.6)));

}  // namespace
}  // namespace reverb_tf
