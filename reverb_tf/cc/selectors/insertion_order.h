// SPDX-License-Identifier: Apache-2.0
#ifndef REVERB_TF_CC_SELECTORS_INSERTION_ORDER_H_
#define REVERB_TF_CC_SELECTORS_INSERTION_ORDER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "reverb_tf/cc/platform/table_memory.h"
#include "reverb_tf/cc/selectors/item_selector.h"

namespace reverb_tf {

// Set of keys that remembers the order they were added in, with O(1) add,
// remove (from anywhere), membership test and access to both ends. It is
// the shared bookkeeping of FifoSelector and LifoSelector, which differ only
// in which end they sample.
//
// Errors follow the ItemSelector contract so selectors can return them
// as is; `owner` names the selector in their messages.
//
// Thread safety: not thread-safe. Owned by a selector, which is owned by a
// Table and only called while the Table's mutex is held.
class InsertionOrder {
 public:
  explicit InsertionOrder(std::string owner);

  InsertionOrder(const InsertionOrder&) = delete;
  InsertionOrder& operator=(const InsertionOrder&) = delete;

  // Appends `key` as the newest key; InvalidArgument if already present.
  absl::Status Add(Key key);

  // Removes `key` wherever it is in the order; NotFound if absent.
  absl::Status Remove(Key key);

  // OK if `key` is present, NotFound otherwise.
  absl::Status CheckPresent(Key key) const;

  // Both require !empty().
  Key oldest() const { return oldest_; }
  Key newest() const { return newest_; }

  // Appends (position, key) for every key, oldest first.
  void AppendRanks(std::vector<std::pair<uint64_t, Key>>* ranks) const;

  bool empty() const { return links_.empty(); }
  int64_t size() const { return static_cast<int64_t>(links_.size()); }
  void Clear();

 private:
  // A key's neighbours in the order. Undefined: `older` of the oldest key,
  // `newer` of the newest (keys may take any value, so none can mark "none").
  struct Links {
    Key older = 0;
    Key newer = 0;
  };

  std::string owner_;
  // A doubly linked list threaded through the map by key: no node of its
  // own per key (a std::list node costs 32 bytes more per item), and
  // rehashing moves nothing that is pointed at.
  TableMap<Key, Links> links_;
  Key oldest_ = 0;
  Key newest_ = 0;
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_SELECTORS_INSERTION_ORDER_H_
