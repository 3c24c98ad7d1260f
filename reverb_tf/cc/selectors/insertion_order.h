#ifndef REVERB_TF_CC_SELECTORS_INSERTION_ORDER_H_
#define REVERB_TF_CC_SELECTORS_INSERTION_ORDER_H_

#include <cstdint>
#include <list>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
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
  Key oldest() const { return order_.front(); }
  Key newest() const { return order_.back(); }

  // Appends (position, key) for every key, oldest first.
  void AppendRanks(std::vector<std::pair<uint64_t, Key>>* ranks) const;

  bool empty() const { return order_.empty(); }
  int64_t size() const { return static_cast<int64_t>(position_.size()); }
  void Clear();

 private:
  std::string owner_;
  // Oldest key first. A std::list because its iterators stay valid when
  // other elements are erased, so the map can point straight at each node.
  std::list<Key> order_;
  absl::flat_hash_map<Key, std::list<Key>::iterator> position_;
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_SELECTORS_INSERTION_ORDER_H_
