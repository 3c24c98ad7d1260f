#include "reverb_tf/cc/selectors/insertion_order.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "reverb_tf/cc/selectors/item_selector.h"

namespace reverb_tf {

InsertionOrder::InsertionOrder(std::string owner) : owner_(std::move(owner)) {}

absl::Status InsertionOrder::Add(Key key) {
  auto [it, inserted] = position_.try_emplace(key);
  if (!inserted) {
    return absl::InvalidArgumentError(
        absl::StrCat("Key ", key, " is already present in ", owner_, "."));
  }
  it->second = order_.insert(order_.end(), key);
  return absl::OkStatus();
}

absl::Status InsertionOrder::Remove(Key key) {
  auto it = position_.find(key);
  if (it == position_.end()) {
    return absl::NotFoundError(
        absl::StrCat("Key ", key, " not found in ", owner_, "."));
  }
  order_.erase(it->second);
  position_.erase(it);
  return absl::OkStatus();
}

absl::Status InsertionOrder::CheckPresent(Key key) const {
  if (!position_.contains(key)) {
    return absl::NotFoundError(
        absl::StrCat("Key ", key, " not found in ", owner_, "."));
  }
  return absl::OkStatus();
}

void InsertionOrder::Clear() {
  order_.clear();
  // clear() would keep the map's capacity; Reset() must give memory back.
  decltype(position_)().swap(position_);
}

void InsertionOrder::AppendRanks(
    std::vector<std::pair<uint64_t, Key>>* ranks) const {
  uint64_t rank = 0;
  for (Key key : order_) ranks->emplace_back(rank++, key);
}

}  // namespace reverb_tf
