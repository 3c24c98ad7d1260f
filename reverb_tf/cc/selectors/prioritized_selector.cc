// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/selectors/prioritized_selector.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "reverb_tf/cc/platform/status_macros.h"
#include "reverb_tf/cc/selectors/item_selector.h"

namespace reverb_tf {
namespace {

// One group of leaves under the root; keeping it small means an emptied
// selector gives back its memory.
constexpr size_t kMinCapacity = 8;
constexpr double kInfinity = std::numeric_limits<double>::infinity();

}  // namespace

absl::Status ValidatePriorityExponent(double priority_exponent) {
  // Written so that NaN fails too. An infinite exponent is rejected as well:
  // it maps every priority to 0, 1 or infinity, which is never useful.
  if (priority_exponent >= 0.0 && std::isfinite(priority_exponent)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "priority_exponent must be finite and >= 0, got ", priority_exponent));
}

PrioritizedSelector::PrioritizedSelector(double priority_exponent,
                                         uint64_t seed)
    : priority_exponent_(priority_exponent),
      capacity_(kMinCapacity),
      leaves_(kMinCapacity, 0.0),
      rng_(seed) {
  static_assert(kMinCapacity % kFanOut == 0);
  LayOutLevels();
}

void PrioritizedSelector::LayOutLevels() {
  level_offsets_.assign(1, 0);
  size_t nodes = capacity_;
  size_t offset = 0;
  do {
    nodes = ParentsOf(nodes);
    level_offsets_.push_back(offset);
    offset += 2 * kFanOut * ParentsOf(nodes);  // whole groups of siblings
  } while (nodes > 1);
  num_levels_ = level_offsets_.size() - 1;
  root_offset_ = GroupOffset(num_levels_, 0);
  // A new vector, not assign(): a shrunk or cleared tree gives memory back.
  nodes_ = TableVector<double>(offset, 0.0);
  for (size_t group = 0; group < offset; group += 2 * kFanOut) {
    std::fill_n(&nodes_[group + kFanOut], kFanOut, kInfinity);
  }
}

absl::StatusOr<double> PrioritizedSelector::WeightOf(double priority) const {
  // Exponent 0 must mean uniform, including for priority 0; spelling out
  // the special cases also keeps exponent 1 exact and turns -0.0 into 0.0.
  if (priority_exponent_ == 0.0) return 1.0;
  if (priority == 0.0) return 0.0;
  if (priority_exponent_ == 1.0) return priority;
  const double weight = std::pow(priority, priority_exponent_);
  if (!std::isfinite(weight)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Priority ", priority, " raised to the priority exponent ",
                     priority_exponent_, " overflows."));
  }
  return weight;
}

void PrioritizedSelector::RecomputeNode(size_t level, size_t node) {
  double sum = 0.0;
  double smallest = kInfinity;
  if (level == 1) {
    const double* children = &leaves_[node * kFanOut];
    for (size_t i = 0; i < kFanOut; ++i) {
      sum += children[i];
      if (children[i] > 0.0 && children[i] < smallest) smallest = children[i];
    }
  } else {
    const double* children = &nodes_[GroupOffset(level - 1, node)];
    for (size_t i = 0; i < kFanOut; ++i) {
      sum += children[i];
      smallest = std::min(smallest, children[kFanOut + i]);
    }
  }
  const size_t at = SumOffset(level, node);
  nodes_[at] = sum;
  nodes_[at + kFanOut] = smallest;
}

void PrioritizedSelector::SetLeaf(size_t slot, double weight) {
  leaves_[slot] = weight;
  // Recompute rather than add a delta: see the class comment.
  size_t node = slot;
  for (size_t level = 1; level <= num_levels_; ++level) {
    node /= kFanOut;
    RecomputeNode(level, node);
  }
}

double PrioritizedSelector::MinProbability() const {
  if (keys_.empty()) return 0.0;
  const double total = total_weight();
  const double smallest = nodes_[root_offset_ + kFanOut];
  // Every weight 0 (or underflowed): Sample() is uniform.
  if (!(total > 0.0) || !std::isfinite(smallest)) {
    return 1.0 / static_cast<double>(keys_.size());
  }
  return smallest / total;
}

void PrioritizedSelector::Resize(size_t capacity) {
  TableVector<double> leaves(capacity, 0.0);
  std::copy_n(leaves_.begin(), keys_.size(), leaves.begin());
  leaves_ = std::move(leaves);
  capacity_ = capacity;
  LayOutLevels();
  size_t nodes = capacity_;
  for (size_t level = 1; level <= num_levels_; ++level) {
    nodes = ParentsOf(nodes);
    for (size_t node = 0; node < nodes; ++node) RecomputeNode(level, node);
  }
}

absl::Status PrioritizedSelector::Insert(Key key, double priority) {
  RETURN_IF_ERROR(ValidatePriorityWeight(priority));
  ASSIGN_OR_RETURN(const double weight, WeightOf(priority));
  if (slot_of_.contains(key)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Key ", key, " is already present in PrioritizedSelector."));
  }
  if (keys_.size() == capacity_) Resize(2 * capacity_);
  const size_t slot = keys_.size();
  SetLeaf(slot, weight);
  if (!std::isfinite(total_weight())) {
    // Undoing the leaf restores every node bit for bit, since nodes depend
    // only on the leaves.
    SetLeaf(slot, 0.0);
    return absl::InvalidArgumentError(absl::StrCat(
        "Inserting key ", key, " with priority ", priority,
        " would overflow the total weight of PrioritizedSelector."));
  }
  keys_.push_back(key);
  slot_of_.emplace(key, slot);
  return absl::OkStatus();
}

absl::Status PrioritizedSelector::Update(Key key, double priority) {
  RETURN_IF_ERROR(ValidatePriorityWeight(priority));
  ASSIGN_OR_RETURN(const double weight, WeightOf(priority));
  auto it = slot_of_.find(key);
  if (it == slot_of_.end()) {
    return absl::NotFoundError(
        absl::StrCat("Key ", key, " not found in PrioritizedSelector."));
  }
  const size_t slot = it->second;
  const double old_weight = leaves_[slot];
  SetLeaf(slot, weight);
  if (!std::isfinite(total_weight())) {
    SetLeaf(slot, old_weight);
    return absl::InvalidArgumentError(absl::StrCat(
        "Updating key ", key, " to priority ", priority,
        " would overflow the total weight of PrioritizedSelector."));
  }
  return absl::OkStatus();
}

absl::Status PrioritizedSelector::UpdateMany(
    absl::Span<const std::pair<Key, double>> updates, size_t* applied) {
  constexpr double kLargest = std::numeric_limits<double>::max();
  // Keys are random: in a large selector each lookup, leaf and node misses
  // the cache, so each pass asks for what it will touch kAhead steps later.
  constexpr size_t kAhead = 8;
  // One key, or a total this large: one at a time (see the header).
  if (updates.size() < 2 || !(total_weight() <= kLargest / 4)) {
    return ItemSelector::UpdateMany(updates, applied);
  }
  const double weight_bound = kLargest / 4 / static_cast<double>(capacity_);
  batch_slots_.clear();
  batch_weights_.clear();
  for (size_t i = 0; i < updates.size(); ++i) {
    if (i + kAhead < updates.size())
      slot_of_.prefetch(updates[i + kAhead].first);
    const auto& [key, priority] = updates[i];
    if (!ValidatePriorityWeight(priority).ok()) break;
    const absl::StatusOr<double> weight = WeightOf(priority);
    const auto it = slot_of_.find(key);
    if (!weight.ok() || *weight > weight_bound || it == slot_of_.end()) break;
    batch_slots_.push_back(it->second);
    batch_weights_.push_back(*weight);
  }
  if (batch_slots_.size() < updates.size()) {
    // Some update would be refused or might overflow: one at a time gives
    // each its own answer and stops where Update() would.
    return ItemSelector::UpdateMany(updates, applied);
  }
  // A node's sum is set to NaN while it waits in dirty_ (a sum is never NaN
  // otherwise: weights are finite and the bound keeps sums finite), so that
  // each node is listed once without a set beside the tree.
  constexpr double kListed = std::numeric_limits<double>::quiet_NaN();
  auto list = [this](size_t level, size_t node) {
    double& sum = nodes_[SumOffset(level, node)];
    if (std::isnan(sum)) return;
    sum = kListed;
    dirty_.push_back(node);
  };
  dirty_.clear();
  const size_t count = batch_slots_.size();
  for (size_t i = 0; i < count; ++i) {
    if (i + kAhead < count) {
      const size_t ahead = batch_slots_[i + kAhead];
      __builtin_prefetch(&leaves_[ahead], /*rw=*/1);
      __builtin_prefetch(&nodes_[SumOffset(1, ahead / kFanOut)], /*rw=*/1);
    }
    leaves_[batch_slots_[i]] = batch_weights_[i];
    list(1, batch_slots_[i] / kFanOut);
  }
  for (size_t level = 1;; ++level) {
    // Recomputing reads the children just written and writes the node just
    // listed: both cached. Listing the parents is where the misses are.
    for (size_t node : dirty_) RecomputeNode(level, node);
    if (level == num_levels_) break;
    const size_t listed = dirty_.size();
    for (size_t j = 0; j < listed; ++j) {
      if (j + kAhead < listed) {
        __builtin_prefetch(
            &nodes_[SumOffset(level + 1, dirty_[j + kAhead] / kFanOut)],
            /*rw=*/1);
      }
      list(level + 1, dirty_[j] / kFanOut);
    }
    dirty_.erase(dirty_.begin(), dirty_.begin() + listed);
  }
  *applied = updates.size();
  return absl::OkStatus();
}

absl::Status PrioritizedSelector::Delete(Key key) {
  auto it = slot_of_.find(key);
  if (it == slot_of_.end()) {
    return absl::NotFoundError(
        absl::StrCat("Key ", key, " not found in PrioritizedSelector."));
  }
  const size_t slot = it->second;
  slot_of_.erase(it);
  const size_t last_slot = keys_.size() - 1;
  const double last_weight = leaves_[last_slot];
  // Clear the last leaf before copying its weight into the hole so the
  // moved weight is never counted twice, which could overflow the total
  // transiently.
  SetLeaf(last_slot, 0.0);
  if (slot != last_slot) {
    const Key moved = keys_[last_slot];
    keys_[slot] = moved;
    slot_of_[moved] = slot;
    SetLeaf(slot, last_weight);
  }
  keys_.pop_back();
  // Shrinking at a quarter (not half) full keeps a key count hovering
  // around a power of two from resizing on every operation.
  if (capacity_ > kMinCapacity && keys_.size() * 4 <= capacity_) {
    Resize(capacity_ / 2);
  }
  return absl::OkStatus();
}

absl::StatusOr<ItemSelector::KeyWithProbability> PrioritizedSelector::Sample() {
  if (keys_.empty()) {
    return absl::FailedPreconditionError(
        "Sample called on an empty PrioritizedSelector.");
  }
  const double total = total_weight();
  if (!(total > 0.0)) {
    // Every weight is 0 (all priorities 0, or so small their weights
    // underflowed): no key is preferred, so fall back to uniform.
    std::uniform_int_distribution<size_t> pick(0, keys_.size() - 1);
    return KeyWithProbability{keys_[pick(rng_)],
                              1.0 / static_cast<double>(keys_.size())};
  }
  std::uniform_real_distribution<double> uniform(0.0, total);
  return SampleAt(uniform(rng_));
}

ItemSelector::KeyWithProbability PrioritizedSelector::SampleAt(
    double target) const {
  size_t node = 0;  // the root, on level num_levels_
  for (size_t level = num_levels_; level >= 1; --level) {
    const double* children = level == 1 ? &leaves_[node * kFanOut]
                                        : &nodes_[GroupOffset(level - 1, node)];
    // The walk is a chain of dependent loads, one per level: fetch the
    // next level's candidates (one line of sums per child) while this one
    // is read and decided.
    if (level >= 2) {
      const size_t first = node * kFanOut;  // of this node's children
      const double* next = level == 2 ? &leaves_[first * kFanOut]
                                      : &nodes_[GroupOffset(level - 2, first)];
      const size_t stride = level == 2 ? kFanOut : 2 * kFanOut;
      for (size_t i = 0; i < kFanOut; ++i)
        __builtin_prefetch(next + i * stride);
    }
    // Rounding can leave `target` at or past the end of the subtree it is
    // walking (and some standard libraries can even return `total` itself
    // from the distribution), which would send a plain comparison into a
    // zero-weight subtree. Since a node with a positive sum has at least one
    // positive child, never entering a child whose sum is 0 (and taking the
    // last positive one when `target` runs past them all) guarantees the
    // leaf reached has positive weight.
    size_t chosen = kFanOut;
    size_t last_positive = kFanOut;
    for (size_t i = 0; i < kFanOut; ++i) {
      const double sum = children[i];
      if (!(sum > 0.0)) continue;
      if (target < sum) {
        chosen = i;
        break;
      }
      target -= sum;
      last_positive = i;
    }
    node = node * kFanOut + (chosen < kFanOut ? chosen : last_positive);
  }
  return KeyWithProbability{keys_[node], leaves_[node] / total_weight()};
}

absl::StatusOr<ItemSelector::KeyWithProbability>
PrioritizedSelector::SampleAtForTesting(double target) const {
  if (!(total_weight() > 0.0)) {
    return absl::FailedPreconditionError(
        "SampleAtForTesting needs a positive total weight.");
  }
  return SampleAt(target);
}

void PrioritizedSelector::Clear() {
  // Swap with empty containers: clear() would keep the capacity, and Reset()
  // must give a big table's memory back.
  decltype(keys_)().swap(keys_);
  decltype(slot_of_)().swap(slot_of_);
  capacity_ = kMinCapacity;
  leaves_ = TableVector<double>(kMinCapacity, 0.0);
  LayOutLevels();
}

int64_t PrioritizedSelector::size() const {
  return static_cast<int64_t>(keys_.size());
}

SelectorOptions PrioritizedSelector::options() const {
  SelectorOptions options;
  options.kind = SelectorOptions::Kind::kPrioritized;
  options.priority_exponent = priority_exponent_;
  return options;
}

std::string PrioritizedSelector::DebugString() const {
  return absl::StrCat(
      "PrioritizedSelector(priority_exponent=", priority_exponent_,
      ", size=", keys_.size(), ", total_weight=", total_weight(), ")");
}

double PrioritizedSelector::SumOfLeavesForTesting() const {
  double sum = 0.0;
  for (size_t slot = 0; slot < keys_.size(); ++slot) {
    sum += leaves_[slot];
  }
  return sum;
}

}  // namespace reverb_tf
