// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/selectors/uniform_selector.h"

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "reverb_tf/cc/platform/status_macros.h"
#include "reverb_tf/cc/selectors/item_selector.h"

namespace reverb_tf {

UniformSelector::UniformSelector(uint64_t seed) : rng_(seed) {}

absl::Status UniformSelector::Insert(Key key, double priority) {
  RETURN_IF_ERROR(ValidatePriority(priority));
  // try_emplace does the duplicate check and the insertion in one lookup.
  if (!index_of_.try_emplace(key, keys_.size()).second) {
    return absl::InvalidArgumentError(
        absl::StrCat("Key ", key, " is already present in UniformSelector."));
  }
  keys_.push_back(key);
  return absl::OkStatus();
}

absl::Status UniformSelector::Update(Key key, double priority) {
  RETURN_IF_ERROR(ValidatePriority(priority));
  if (!index_of_.contains(key)) {
    return absl::NotFoundError(
        absl::StrCat("Key ", key, " not found in UniformSelector."));
  }
  return absl::OkStatus();
}

absl::Status UniformSelector::Delete(Key key) {
  auto it = index_of_.find(key);
  if (it == index_of_.end()) {
    return absl::NotFoundError(
        absl::StrCat("Key ", key, " not found in UniformSelector."));
  }
  const size_t index = it->second;
  index_of_.erase(it);
  // Fill the hole with the last key so the vector stays dense. When the
  // deleted key was the last one there is no hole, and its map entry is
  // already gone, so nothing must be written back.
  const Key last = keys_.back();
  keys_.pop_back();
  if (index < keys_.size()) {
    keys_[index] = last;
    index_of_[last] = index;
  }
  return absl::OkStatus();
}

absl::StatusOr<ItemSelector::KeyWithProbability> UniformSelector::Sample() {
  if (keys_.empty()) {
    return absl::FailedPreconditionError(
        "Sample called on an empty UniformSelector.");
  }
  std::uniform_int_distribution<size_t> pick(0, keys_.size() - 1);
  return KeyWithProbability{keys_[pick(rng_)],
                            1.0 / static_cast<double>(keys_.size())};
}

void UniformSelector::Clear() {
  // Swap with empty containers: clear() would keep the capacity, and Reset()
  // must give a big table's memory back.
  decltype(keys_)().swap(keys_);
  decltype(index_of_)().swap(index_of_);
}

int64_t UniformSelector::size() const {
  return static_cast<int64_t>(keys_.size());
}

SelectorOptions UniformSelector::options() const {
  SelectorOptions options;
  options.kind = SelectorOptions::Kind::kUniform;
  return options;
}

std::string UniformSelector::DebugString() const {
  return absl::StrCat("UniformSelector(size=", keys_.size(), ")");
}

}  // namespace reverb_tf
