// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/selectors/fifo_selector.h"

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "reverb_tf/cc/platform/status_macros.h"
#include "reverb_tf/cc/selectors/item_selector.h"

namespace reverb_tf {

FifoSelector::FifoSelector() : order_("FifoSelector") {}

absl::Status FifoSelector::Insert(Key key, double priority) {
  RETURN_IF_ERROR(ValidatePriority(priority));
  return order_.Add(key);
}

absl::Status FifoSelector::Update(Key key, double priority) {
  RETURN_IF_ERROR(ValidatePriority(priority));
  return order_.CheckPresent(key);
}

absl::Status FifoSelector::Delete(Key key) { return order_.Remove(key); }

absl::StatusOr<ItemSelector::KeyWithProbability> FifoSelector::Sample() {
  if (order_.empty()) {
    return absl::FailedPreconditionError(
        "Sample called on an empty FifoSelector.");
  }
  return KeyWithProbability{order_.oldest(), 1.0};
}

void FifoSelector::Clear() { order_.Clear(); }

int64_t FifoSelector::size() const { return order_.size(); }

SelectorOptions FifoSelector::options() const {
  SelectorOptions options;
  options.kind = SelectorOptions::Kind::kFifo;
  return options;
}

std::string FifoSelector::DebugString() const {
  return absl::StrCat("FifoSelector(size=", order_.size(), ")");
}

bool FifoSelector::AppendInsertionRanks(
    std::vector<std::pair<uint64_t, Key>>* ranks) const {
  order_.AppendRanks(ranks);
  return true;
}

}  // namespace reverb_tf
