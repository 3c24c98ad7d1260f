// SPDX-License-Identifier: Apache-2.0
#ifndef REVERB_TF_CC_SELECTORS_LIFO_SELECTOR_H_
#define REVERB_TF_CC_SELECTORS_LIFO_SELECTOR_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "reverb_tf/cc/selectors/insertion_order.h"
#include "reverb_tf/cc/selectors/item_selector.h"

namespace reverb_tf {

// Samples the newest present key: last in, first out. Deleting a key from
// anywhere in the order is supported, as a table's other selector may evict it.
// Priorities are validated but otherwise ignored, so Update never changes
// the order. All operations are O(1). Sample reports probability 1.
//
// Thread safety: not thread-safe. It is owned by a Table and only called
// while the Table's mutex is held.
class LifoSelector : public ItemSelector {
 public:
  LifoSelector();

  LifoSelector(const LifoSelector&) = delete;
  LifoSelector& operator=(const LifoSelector&) = delete;

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
  InsertionOrder order_;
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_SELECTORS_LIFO_SELECTOR_H_
