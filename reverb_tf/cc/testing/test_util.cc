// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/testing/test_util.h"

#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "reverb_tf/cc/platform/table_memory.h"

namespace reverb_tf::testing {
namespace {

template <typename T>
T ValueOrDie(absl::StatusOr<T> value) {
  if (!value.ok()) {
    std::fprintf(stderr, "test_util: %s\n", value.status().ToString().c_str());
    std::abort();
  }
  return *std::move(value);
}

}  // namespace

ChunkRef MakeFloatChunk(ChunkStore& store, ChunkKey key, int steps, int width,
                        float value) {
  std::string data(sizeof(float) * steps * width, '\0');
  for (int i = 0; i < steps * width; ++i) {
    std::memcpy(data.data() + i * sizeof(float), &value, sizeof(float));
  }
  TensorPayload payload = ValueOrDie(
      MakePayload(DType::kFloat, Shape{steps, width}, std::move(data)));
  return ValueOrDie(store.Insert(key, /*episode_id=*/key, 0, payload));
}

Item MakeItem(Key key, double priority, const std::vector<ChunkRef>& columns) {
  Item item;
  item.key = key;
  item.priority = priority;
  for (const auto& chunk : columns) {
    SlicedColumn column;
    column.add_slice(ChunkSlice{chunk, 0, chunk->num_steps()});
    item.trajectory.push_back(std::move(column));
  }
  return item;
}

TableOptions MakeTableOptions(const std::string& name, SelectorOptions sampler,
                              SelectorOptions remover, int64_t max_size,
                              RateLimiterOptions limiter,
                              int32_t max_times_sampled) {
  TableOptions options;
  options.name = name;
  options.sampler = sampler;
  options.remover = remover;
  options.max_size = max_size;
  options.rate_limiter = limiter;
  options.max_times_sampled = max_times_sampled;
  return options;
}

SelectorOptions Uniform() { return {SelectorOptions::Kind::kUniform, 1.0}; }
SelectorOptions Fifo() { return {SelectorOptions::Kind::kFifo, 1.0}; }
SelectorOptions Lifo() { return {SelectorOptions::Kind::kLifo, 1.0}; }
SelectorOptions MinHeap() {
  SelectorOptions options;
  options.kind = SelectorOptions::Kind::kMinHeap;
  return options;
}

SelectorOptions Prioritized(double exponent) {
  return {SelectorOptions::Kind::kPrioritized, exponent};
}

size_t HeapBytesInUse() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd + static_cast<size_t>(MappedTableBytes());
}

std::shared_ptr<Table> MakeTable(TableOptions options, uint64_t seed) {
  return ValueOrDie(Table::Create(std::move(options), seed));
}

}  // namespace reverb_tf::testing
