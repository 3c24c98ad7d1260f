// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/selectors/order_selectors.h"

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "reverb_tf/cc/platform/status_macros.h"

namespace reverb_tf {

OrderSelector::OrderSelector(SelectorOptions::Kind kind, const char* name)
    : kind_(kind), name_(name), order_(name) {}

absl::Status OrderSelector::Insert(Key key, double priority) {
  RETURN_IF_ERROR(ValidatePriority(priority));
  return order_.Add(key);
}

absl::Status OrderSelector::Update(Key key, double priority) {
  RETURN_IF_ERROR(ValidatePriority(priority));
  return order_.CheckPresent(key);
}

absl::Status OrderSelector::Delete(Key key) { return order_.Remove(key); }

absl::StatusOr<ItemSelector::KeyWithProbability> OrderSelector::Sample() {
  if (order_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("Sample called on an empty ", name_, "."));
  }
  const Key key =
      kind_ == SelectorOptions::Kind::kFifo ? order_.oldest() : order_.newest();
  return KeyWithProbability{key, 1.0};
}

void OrderSelector::Clear() { order_.Clear(); }

int64_t OrderSelector::size() const { return order_.size(); }

SelectorOptions OrderSelector::options() const {
  SelectorOptions options;
  options.kind = kind_;
  return options;
}

std::string OrderSelector::DebugString() const {
  return absl::StrCat(name_, "(size=", order_.size(), ")");
}

bool OrderSelector::AppendInsertionRanks(
    std::vector<std::pair<uint64_t, Key>>* ranks) const {
  order_.AppendRanks(ranks);
  return true;
}

}  // namespace reverb_tf
