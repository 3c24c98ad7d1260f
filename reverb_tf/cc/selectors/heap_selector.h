// SPDX-License-Identifier: Apache-2.0
#ifndef REVERB_TF_CC_SELECTORS_HEAP_SELECTOR_H_
#define REVERB_TF_CC_SELECTORS_HEAP_SELECTOR_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "reverb_tf/cc/platform/table_memory.h"
#include "reverb_tf/cc/selectors/item_selector.h"

namespace reverb_tf {

// Samples the key with the lowest (min-heap) or highest (max-heap) priority.
// Among equal priorities the key inserted earliest wins; Update keeps a
// key's insertion rank, so re-prioritizing never makes a key "newer". Only
// Delete + Insert does. This makes Sample a pure function of the present
// (key, priority, insertion rank) triples, which tests and checkpoints rely
// on.
//
// A binary heap plus a key -> heap index map gives O(log n) Insert, Update
// and Delete, and O(1) Sample. Sample reports probability 1.
//
// Thread safety: not thread-safe. It is owned by a Table and only called
// while the Table's mutex is held.
class HeapSelector : public ItemSelector {
 public:
  explicit HeapSelector(bool min_heap);

  HeapSelector(const HeapSelector&) = delete;
  HeapSelector& operator=(const HeapSelector&) = delete;

  absl::Status Insert(Key key, double priority) override;
  absl::Status Update(Key key, double priority) override;
  absl::Status Delete(Key key) override;
  absl::StatusOr<KeyWithProbability> Sample() override;
  void Clear() override;
  int64_t size() const override;
  SelectorOptions options() const override;
  std::string DebugString() const override;
  bool AppendInsertionRanks(
      std::vector<std::pair<uint64_t, Key>>* ranks) const override;

 private:
  struct Entry {
    Key key;
    double priority;
    // Increases with every Insert; smaller means inserted earlier.
    uint64_t insertion_rank;
  };

  // True if `a` must be sampled before `b`. A strict total order, because
  // priorities are never NaN and insertion ranks are unique.
  bool Precedes(const Entry& a, const Entry& b) const;

  // Both restore the heap property for the entry at `index` and keep
  // `index_of_` in step with every move.
  void SiftUp(size_t index);
  void SiftDown(size_t index);
  // Moves the entry at `index` to wherever it now belongs.
  void Restore(size_t index);
  // Writes `entry` to heap_[index] and records that index for its key.
  void Place(size_t index, Entry entry);

  const bool min_heap_;
  uint64_t next_insertion_rank_ = 0;
  // heap_[0] is the entry to sample; children of i are 2i+1 and 2i+2.
  TableVector<Entry> heap_;
  // index_of_[heap_[i].key] == i for every i.
  TableMap<Key, size_t> index_of_;
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_SELECTORS_HEAP_SELECTOR_H_
