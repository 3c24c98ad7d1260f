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

// Capacity 1 makes the root itself the only leaf, which the tree code
// handles without special cases; keeping it small means an emptied selector
// gives back its memory.
constexpr size_t kMinCapacity = 1;

}  // namespace

absl::Status ValidatePriorityExponent(double priority_exponent) {
  // Written so that NaN fails too. An infinite exponent is rejected as well:
  // it maps every priority to 0, 1 or infinity, which is never useful.
  if (priority_exponent >= 0.0 && std::isfinite(priority_exponent)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("Priority exponent must be finite and non-negative, got ",
                   priority_exponent, "."));
}

PrioritizedSelector::PrioritizedSelector(double priority_exponent,
                                         uint64_t seed)
    : priority_exponent_(priority_exponent),
      capacity_(kMinCapacity),
      tree_(2 * kMinCapacity, 0.0),
      min_tree_(2, std::numeric_limits<double>::infinity()),
      rng_(seed) {}

absl::StatusOr<double> PrioritizedSelector::WeightOf(double priority) const {
  // Exponent 0 must mean uniform, including for priority 0; spelling out
  // the special cases also keeps exponent 1 exact and turns -0.0 into 0.0.
  if (priority_exponent_ == 0.0) return 1.0;
  if (priority == 0.0) return 0.0;
  if (priority_exponent_ == 1.0) return priority;
  const double weight = std::pow(priority, priority_exponent_);
  if (!std::isfinite(weight)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Priority ", priority, " raised to the priority exponent ",
        priority_exponent_, " overflows."));
  }
  return weight;
}

void PrioritizedSelector::Prefetch(Key key, int stage) const {
  if (stage == 0) {
    slot_of_.prefetch(key);
    return;
  }
  auto it = slot_of_.find(key);
  if (it == slot_of_.end()) return;
  // The leaf and its ancestors in both trees, but their top 4096 nodes
  // (32 KiB each, which stay cached): one cache line per level.
  for (size_t node = capacity_ + it->second; node >= 4096; node /= 2) {
    __builtin_prefetch(&tree_[node], /*rw=*/1);
  }
  const size_t blocks = num_min_blocks();
  for (size_t node = blocks + it->second / (capacity_ / blocks); node >= 4096; node /= 2) {
    __builtin_prefetch(&min_tree_[node], /*rw=*/1);
  }
}

void PrioritizedSelector::SetLeaf(size_t slot, double weight) {
  size_t node = capacity_ + slot;
  tree_[node] = weight;
  // Recompute rather than add a delta: see the class comment.
  for (node /= 2; node >= 1; node /= 2) {
    tree_[node] = tree_[2 * node] + tree_[2 * node + 1];
  }
  UpdateMin(slot);
}

void PrioritizedSelector::UpdateMin(size_t slot) {
  const size_t blocks = num_min_blocks();
  const size_t per_block = capacity_ / blocks;
  const size_t block = slot / per_block;
  const double* leaves = &tree_[capacity_ + block * per_block];
  double smallest = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < per_block; ++i) {
    if (leaves[i] > 0.0 && leaves[i] < smallest) smallest = leaves[i];
  }
  size_t node = blocks + block;
  min_tree_[node] = smallest;
  for (node /= 2; node >= 1; node /= 2) {
    min_tree_[node] = std::min(min_tree_[2 * node], min_tree_[2 * node + 1]);
  }
}

void PrioritizedSelector::RebuildMin() {
  const size_t blocks = num_min_blocks();
  // A new vector, not assign(): a shrunk or cleared tree gives memory back.
  min_tree_ = TableVector<double>(2 * blocks, std::numeric_limits<double>::infinity());
  const size_t per_block = capacity_ / blocks;
  for (size_t block = 0; block < blocks; ++block) {
    double smallest = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < per_block; ++i) {
      const double leaf = tree_[capacity_ + block * per_block + i];
      if (leaf > 0.0 && leaf < smallest) smallest = leaf;
    }
    min_tree_[blocks + block] = smallest;
  }
  for (size_t node = blocks - 1; node >= 1; --node) {
    min_tree_[node] = std::min(min_tree_[2 * node], min_tree_[2 * node + 1]);
  }
}

double PrioritizedSelector::MinProbability() const {
  if (keys_.empty()) return 0.0;
  const double total = total_weight();
  // Every weight 0 (or underflowed): Sample() is uniform.
  if (!(total > 0.0) || !std::isfinite(min_tree_[1])) {
    return 1.0 / static_cast<double>(keys_.size());
  }
  return min_tree_[1] / total;
}

void PrioritizedSelector::Resize(size_t capacity) {
  TableVector<double> tree(2 * capacity, 0.0);
  for (size_t slot = 0; slot < keys_.size(); ++slot) {
    tree[capacity + slot] = tree_[capacity_ + slot];
  }
  for (size_t node = capacity - 1; node >= 1; --node) {
    tree[node] = tree[2 * node] + tree[2 * node + 1];
  }
  tree_ = std::move(tree);
  capacity_ = capacity;
  RebuildMin();
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
  const double old_weight = tree_[capacity_ + slot];
  SetLeaf(slot, weight);
  if (!std::isfinite(total_weight())) {
    SetLeaf(slot, old_weight);
    return absl::InvalidArgumentError(absl::StrCat(
        "Updating key ", key, " to priority ", priority,
        " would overflow the total weight of PrioritizedSelector."));
  }
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
  const double last_weight = tree_[capacity_ + last_slot];
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

absl::StatusOr<ItemSelector::KeyWithProbability>
PrioritizedSelector::Sample() {
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
  size_t node = 1;
  while (node < capacity_) {
    const double left = tree_[2 * node];
    const double right = tree_[2 * node + 1];
    // Rounding can leave `target` at or past the end of the subtree it is
    // walking (and some standard libraries can even return `total` itself
    // from the distribution), which would send a plain comparison into a
    // zero-weight subtree. Since a node with a positive sum has at least one
    // positive child, never entering a child whose sum is 0 guarantees the
    // leaf reached has positive weight.
    if (right <= 0.0 || (left > 0.0 && target < left)) {
      node = 2 * node;
    } else {
      target -= left;
      node = 2 * node + 1;
    }
  }
  return KeyWithProbability{keys_[node - capacity_],
                            tree_[node] / total_weight()};
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
  tree_ = TableVector<double>(2 * kMinCapacity, 0.0);
  RebuildMin();
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
  return absl::StrCat("PrioritizedSelector(priority_exponent=",
                      priority_exponent_, ", size=", keys_.size(),
                      ", total_weight=", total_weight(), ")");
}

double PrioritizedSelector::SumOfLeavesForTesting() const {
  double sum = 0.0;
  for (size_t slot = 0; slot < keys_.size(); ++slot) {
    sum += tree_[capacity_ + slot];
  }
  return sum;
}

}  // namespace reverb_tf
