// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/selectors/lifo_selector.h"

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "reverb_tf/cc/platform/status_macros.h"
#include "reverb_tf/cc/selectors/item_selector.h"

namespace reverb_tf {

LifoSelector::LifoSelector() : order_("LifoSelector") {}

absl::Status LifoSelector::Insert(Key key, double priority) {
  RETURN_IF_ERROR(ValidatePriority(priority));
  return order_.Add(key);
}

absl::Status LifoSelector::Update(Key key, double priority) {
  RETURN_IF_ERROR(ValidatePriority(priority));
  return order_.CheckPresent(key);
}

absl::Status LifoSelector::Delete(Key key) { return order_.Remove(key); }

absl::StatusOr<ItemSelector::KeyWithProbability> LifoSelector::Sample() {
  if (order_.empty()) {
    return absl::FailedPreconditionError(
        "Sample called on an empty LifoSelector.");
  }
  return KeyWithProbability{order_.newest(), 1.0};
}

void LifoSelector::Clear() { order_.Clear(); }

int64_t LifoSelector::size() const { return order_.size(); }

SelectorOptions LifoSelector::options() const {
  SelectorOptions options;
  options.kind = SelectorOptions::Kind::kLifo;
  return options;
}

std::string LifoSelector::DebugString() const {
  return absl::StrCat("LifoSelector(size=", order_.size(), ")");
}

bool LifoSelector::AppendInsertionRanks(
    std::vector<std::pair<uint64_t, Key>>* ranks) const {
  order_.AppendRanks(ranks);
  return true;
}

}  // namespace reverb_tf
