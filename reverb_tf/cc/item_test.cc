// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/item.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "reverb_tf/cc/chunk_store.h"
#include "reverb_tf/cc/testing/test_util.h"

namespace reverb_tf {
namespace {

using ::reverb_tf::testing::MakeFloatChunk;

// Keys of the chunks a column's slices reference, in order, with offsets.
std::vector<std::pair<ChunkKey, int32_t>> Contents(const SlicedColumn& column) {
  std::vector<std::pair<ChunkKey, int32_t>> out;
  for (const ChunkSlice& slice : column.slices()) {
    out.emplace_back(slice.chunk == nullptr ? 0 : slice.chunk->key(),
                     slice.offset);
  }
  return out;
}

TEST(SlicedColumnTest, KeepsOneSliceInlineAndGrowsToMany) {
  ChunkStore store;
  ChunkRef chunk = MakeFloatChunk(store, 1, 8);
  SlicedColumn column;
  EXPECT_TRUE(column.slices().empty());
  EXPECT_EQ(column.num_steps(), 0);
  column.add_slice({chunk, 0, 2});
  EXPECT_EQ(column.num_steps(), 2);
  for (int32_t i = 1; i < 5; ++i) column.add_slice({chunk, 2 * i, 1});
  EXPECT_EQ(column.slices().size(), 5u);
  EXPECT_EQ(column.num_steps(), 6);
  EXPECT_EQ(Contents(column), (std::vector<std::pair<ChunkKey, int32_t>>{
                                  {1, 0}, {1, 2}, {1, 4}, {1, 6}, {1, 8}}));
  EXPECT_EQ(chunk->ref_count(), 6);
  column.resize_slices(2);
  EXPECT_EQ(chunk->ref_count(), 3);
  column.resize_slices(3);
  EXPECT_EQ(column.slices()[2].chunk, nullptr);
  column.mutable_slices()[2] = {chunk, 7, 1};
  EXPECT_EQ(column.num_steps(), 4);
  EXPECT_EQ(chunk->ref_count(), 4);
}

TEST(SlicedColumnTest, CopiesAndMovesKeepSlicesFlagAndReferenceCounts) {
  ChunkStore store;
  ChunkRef a = MakeFloatChunk(store, 1, 4);
  ChunkRef b = MakeFloatChunk(store, 2, 4);
  for (int slices : {1, 3}) {
    SCOPED_TRACE(slices);
    SlicedColumn original;
    for (int i = 0; i < slices; ++i)
      original.add_slice({i % 2 == 0 ? a : b, i, 1});
    original.set_squeeze(true);
    const auto contents = Contents(original);
    const int32_t refs = a->ref_count() + b->ref_count();

    SlicedColumn copy(original);
    EXPECT_EQ(Contents(copy), contents);
    EXPECT_TRUE(copy.squeeze());
    EXPECT_EQ(a->ref_count() + b->ref_count(), refs + slices);

    SlicedColumn moved(std::move(copy));
    EXPECT_EQ(Contents(moved), contents);
    EXPECT_TRUE(moved.squeeze());
    EXPECT_TRUE(
        copy.slices().empty());  // NOLINT: a moved-from column is empty.
    EXPECT_EQ(a->ref_count() + b->ref_count(), refs + slices);

    SlicedColumn assigned({{b, 3, 1}}, false);
    assigned = moved;
    EXPECT_EQ(Contents(assigned), contents);
    EXPECT_EQ(a->ref_count() + b->ref_count(), refs + 2 * slices);
    assigned = std::move(moved);
    EXPECT_EQ(Contents(assigned), contents);
    EXPECT_EQ(a->ref_count() + b->ref_count(), refs + slices);
    assigned = assigned;  // NOLINT: self-assignment must keep the slices.
    EXPECT_EQ(Contents(assigned), contents);
  }
  EXPECT_EQ(a->ref_count(), 1);
  EXPECT_EQ(b->ref_count(), 1);
}

TEST(SlicedColumnTest, TrajectoriesOfManySlicesSurviveVectorGrowth) {
  ChunkStore store;
  ChunkRef chunk = MakeFloatChunk(store, 9, 100);
  Trajectory trajectory;
  for (int c = 0; c < 40; ++c) {
    SlicedColumn column;
    for (int s = 0; s <= c % 4; ++s) column.add_slice({chunk, s, 1});
    trajectory.push_back(std::move(column));
  }
  int64_t steps = 0;
  for (const SlicedColumn& column : trajectory) steps += column.num_steps();
  EXPECT_EQ(steps, 10 * (1 + 2 + 3 + 4));
  EXPECT_EQ(chunk->ref_count(), 1 + steps);
  trajectory.clear();
  EXPECT_EQ(chunk->ref_count(), 1);
}

}  // namespace
}  // namespace reverb_tf
