// SPDX-License-Identifier: Apache-2.0
// The selectors that follow insertion order: FifoSelector samples the oldest
// present key, LifoSelector the newest. They are one class (OrderSelector)
// that reads one end or the other of an InsertionOrder.
//
// Deleting a key from anywhere in the order is supported, as a table's other
// selector may evict it. Priorities are validated but otherwise ignored, so
// Update never changes the order. All operations are O(1). Sample reports
// probability 1.
//
// Thread safety: not thread-safe. Owned by a Table and only called while the
// Table's mutex is held.
#ifndef REVERB_TF_CC_SELECTORS_ORDER_SELECTORS_H_
#define REVERB_TF_CC_SELECTORS_ORDER_SELECTORS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "reverb_tf/cc/selectors/insertion_order.h"
#include "reverb_tf/cc/selectors/item_selector.h"

namespace reverb_tf {

class OrderSelector : public ItemSelector {
 public:
  OrderSelector(const OrderSelector&) = delete;
  OrderSelector& operator=(const OrderSelector&) = delete;

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

 protected:
  // `kind` is kFifo (sample the oldest) or kLifo (the newest); `name` names
  // the selector in messages.
  OrderSelector(SelectorOptions::Kind kind, const char* name);

 private:
  const SelectorOptions::Kind kind_;
  const char* const name_;
  InsertionOrder order_;
};

class FifoSelector final : public OrderSelector {
 public:
  FifoSelector()
      : OrderSelector(SelectorOptions::Kind::kFifo, "FifoSelector") {}
};

class LifoSelector final : public OrderSelector {
 public:
  LifoSelector()
      : OrderSelector(SelectorOptions::Kind::kLifo, "LifoSelector") {}
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_SELECTORS_ORDER_SELECTORS_H_
