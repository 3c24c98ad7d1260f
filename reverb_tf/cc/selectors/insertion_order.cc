// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/selectors/insertion_order.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "reverb_tf/cc/selectors/item_selector.h"

namespace reverb_tf {

InsertionOrder::InsertionOrder(std::string owner) : owner_(std::move(owner)) {}

absl::Status InsertionOrder::Add(Key key) {
  auto [it, inserted] = links_.try_emplace(key);
  if (!inserted) {
    return absl::InvalidArgumentError(
        absl::StrCat("Key ", key, " is already present in ", owner_, "."));
  }
  if (links_.size() == 1) {
    oldest_ = key;
  } else {
    it->second.older = newest_;
    links_.find(newest_)->second.newer =
        key;  // `it` stays valid: no insert since
  }
  newest_ = key;
  return absl::OkStatus();
}

absl::Status InsertionOrder::Remove(Key key) {
  auto it = links_.find(key);
  if (it == links_.end()) {
    return absl::NotFoundError(
        absl::StrCat("Key ", key, " not found in ", owner_, "."));
  }
  const Links links = it->second;
  links_.erase(it);
  if (links_.empty()) return absl::OkStatus();
  if (key == oldest_) {
    oldest_ = links.newer;
  } else {
    links_.find(links.older)->second.newer = links.newer;
  }
  if (key == newest_) {
    newest_ = links.older;
  } else {
    links_.find(links.newer)->second.older = links.older;
  }
  return absl::OkStatus();
}

absl::Status InsertionOrder::CheckPresent(Key key) const {
  if (!links_.contains(key)) {
    return absl::NotFoundError(
        absl::StrCat("Key ", key, " not found in ", owner_, "."));
  }
  return absl::OkStatus();
}

void InsertionOrder::Clear() {
  // clear() would keep the map's capacity; Reset() must give memory back.
  decltype(links_)().swap(links_);
}

void InsertionOrder::AppendRanks(
    std::vector<std::pair<uint64_t, Key>>* ranks) const {
  ranks->reserve(ranks->size() + links_.size());
  Key key = oldest_;
  for (uint64_t rank = 0; rank < links_.size(); ++rank) {
    ranks->emplace_back(rank, key);
    if (rank + 1 < links_.size()) key = links_.find(key)->second.newer;
  }
}

}  // namespace reverb_tf
