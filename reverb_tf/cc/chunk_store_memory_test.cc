// SPDX-License-Identifier: Apache-2.0
// Checks that freed chunks give their memory back to the heap. Apart from
// chunk_store_test because it reads glibc's heap statistics, which a
// sanitizer's allocator replaces: this target is tagged nosan so that the
// rest of the chunk store's tests run under ASan.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "reverb_tf/cc/chunk_store.h"
#include "reverb_tf/cc/testing/test_util.h"

namespace reverb_tf {
namespace {

using ::reverb_tf::testing::MakeFloatChunk;

TEST(ChunkStoreMemoryTest, FreeingChunksReturnsTheirMemory) {
  ChunkStore store;
  const size_t before = testing::HeapBytesInUse();
  std::vector<ChunkRef> chunks;
  for (int i = 0; i < 64; ++i) {
    chunks.push_back(MakeFloatChunk(store, i, /*steps=*/256, /*width=*/256));
  }
  const size_t held = testing::HeapBytesInUse() - before;
  EXPECT_GE(held, 64u * 256 * 256 * sizeof(float));
  EXPECT_GE(store.num_live_bytes(), int64_t{64} * 256 * 256 * 4);
  chunks.clear();
  const size_t after = testing::HeapBytesInUse();
  // Allow for allocator bookkeeping, never for the 16 MiB of payload.
  EXPECT_LT(after - std::min(after, before), 64u * 1024);
  EXPECT_EQ(store.num_live_chunks(), 0);
}

}  // namespace
}  // namespace reverb_tf
