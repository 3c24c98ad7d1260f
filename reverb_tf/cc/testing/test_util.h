// SPDX-License-Identifier: Apache-2.0
// Builders shared by the core's unit tests.
#ifndef REVERB_TF_CC_TESTING_TEST_UTIL_H_
#define REVERB_TF_CC_TESTING_TEST_UTIL_H_

#include <memory>
#include <string>
#include <vector>

#include "reverb_tf/cc/chunk_store.h"
#include "reverb_tf/cc/item.h"
#include "reverb_tf/cc/table.h"

namespace reverb_tf::testing {

// A float32 chunk of shape [steps, width], every value `value`. Dies on error.
ChunkRef MakeFloatChunk(ChunkStore& store, ChunkKey key, int steps,
                        int width = 4, float value = 0);

// An item with one column per chunk, each column the whole chunk.
Item MakeItem(Key key, double priority, const std::vector<ChunkRef>& columns);

TableOptions MakeTableOptions(const std::string& name, SelectorOptions sampler,
                              SelectorOptions remover, int64_t max_size,
                              RateLimiterOptions limiter,
                              int32_t max_times_sampled = 0);

SelectorOptions Uniform();
SelectorOptions Fifo();
SelectorOptions Lifo();
SelectorOptions Prioritized(double exponent);
SelectorOptions MinHeap();

// Heap bytes in use right now: glibc's arena and mmapped blocks, and the
// blocks tables map themselves (platform/table_memory.h).
size_t HeapBytesInUse();

// Creates a table; dies on error.
std::shared_ptr<Table> MakeTable(TableOptions options, uint64_t seed = 42);

}  // namespace reverb_tf::testing

#endif  // REVERB_TF_CC_TESTING_TEST_UTIL_H_
