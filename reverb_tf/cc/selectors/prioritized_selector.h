// SPDX-License-Identifier: Apache-2.0
#ifndef REVERB_TF_CC_SELECTORS_PRIORITIZED_SELECTOR_H_
#define REVERB_TF_CC_SELECTORS_PRIORITIZED_SELECTOR_H_

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "reverb_tf/cc/platform/table_memory.h"
#include "reverb_tf/cc/selectors/item_selector.h"

namespace reverb_tf {

// Returns InvalidArgument unless `priority_exponent` is finite and >= 0.
// MakeSelector calls it; code constructing PrioritizedSelector directly must
// call it first.
absl::Status ValidatePriorityExponent(double priority_exponent);

// Samples key i with probability w_i / sum_j w_j, where the weight w_i is
// priority_i ^ priority_exponent (exponent 0 gives uniform sampling, since
// 0^0 is taken to be 1). When every weight is 0, sampling falls back to
// uniform and reports probability 1/size.
//
// Keys occupy a dense array of slots (a deleted slot is refilled with the
// last one), and the weights sit in the leaves of an 8-ary sum tree, so
// Insert, Update, Delete and Sample are O(log n). Each node also holds the
// smallest positive weight below it (MinProbability). The 8 children of a
// node lie side by side: their sums fill one cache line and their minimums
// the next, so an update, which recomputes a leaf's ancestors, touches the
// leaf's line and two lines per level over log8(n) levels: 17 at 10M keys
// (2^24 slots, 8 levels). The binary sum tree and separate minimum tree it
// replaced touched one line per level of each over log2(n) levels, about 43
// at 10M keys: 2.5 times as many, most of them cache misses.
// The tree's capacity doubles when full and halves when a quarter full, so
// memory tracks size.
//
// Numerical stability: whenever a leaf changes, each ancestor is recomputed
// as the sum of its children, in their order, rather than adjusted by the
// change. Every node is therefore a fixed function of the current leaves,
// whatever history led there, so no rounding error can accumulate over long
// runs. Weights and the total are kept finite: a priority whose weight, or
// whose addition to the total, would overflow is rejected with InvalidArgument
// and leaves the selector unchanged.
//
// Thread safety: not thread-safe. It is owned by a Table and only called
// while the Table's mutex is held.
class PrioritizedSelector : public ItemSelector {
 public:
  // `priority_exponent` must pass ValidatePriorityExponent.
  PrioritizedSelector(double priority_exponent, uint64_t seed);

  PrioritizedSelector(const PrioritizedSelector&) = delete;
  PrioritizedSelector& operator=(const PrioritizedSelector&) = delete;

  absl::Status Insert(Key key, double priority) override;
  absl::Status Update(Key key, double priority) override;
  // Sets every leaf first, then recomputes each ancestor once for the batch
  // (256 random keys of 8k: about 355 node recomputations instead of
  // 1,280), with the leaves' and the tree's cache misses overlapped. The
  // nodes come out exactly as Update() one by one leaves them, since nodes
  // depend only on the leaves; that holds when no Update of the sequence
  // would be refused, which is checked before anything changes (every new
  // weight at most a quarter of the largest double over the capacity, the
  // total at most a quarter of it: no sum can overflow). Otherwise, and
  // for a single key, it updates one key at a time.
  absl::Status UpdateMany(absl::Span<const std::pair<Key, double>> updates,
                          size_t* applied) override;
  absl::Status Delete(Key key) override;
  absl::StatusOr<KeyWithProbability> Sample() override;
  void Clear() override;
  int64_t size() const override;
  SelectorOptions options() const override;
  std::string DebugString() const override;

  // Sum of all weights, as held at the root of the tree.
  double total_weight() const { return nodes_[root_offset_]; }
  double TotalWeight() const override { return total_weight(); }
  // The smallest positive weight over the total (keys of weight 0 are never
  // chosen), or 1/size when every weight is 0 (Sample() is uniform then).
  double MinProbability() const override;

  // Sums the leaves afresh in slot order, O(n). Lets tests check that the
  // root has not drifted away from the leaves.
  double SumOfLeavesForTesting() const;

  // Runs Sample's tree walk with a chosen `target` in [0, total_weight()]
  // instead of a random one, so tests can hit rounding edge cases (such as
  // target == total_weight()) deterministically. FailedPrecondition unless
  // total_weight() > 0.
  absl::StatusOr<KeyWithProbability> SampleAtForTesting(double target) const;

 private:
  // Maps a validated priority to its sampling weight, or InvalidArgument if
  // the weight overflows.
  absl::StatusOr<double> WeightOf(double priority) const;

  // Walks from the root to the leaf where the running sum of weights, in
  // slot order, passes `target`; never ends on a zero-weight leaf.
  // Requires total_weight() > 0.
  KeyWithProbability SampleAt(double target) const;

  // Stores `weight` in the leaf of `slot` and recomputes its ancestors.
  void SetLeaf(size_t slot, double weight);

  // Rebuilds the tree with `capacity` leaves (a power of two, at least
  // kFanOut and the number of keys). Internal nodes get exactly the values
  // incremental updates would have given them, so resizing never perturbs
  // the total.
  void Resize(size_t capacity);

  // Children per node.
  static constexpr size_t kFanOut = 8;
  // Nodes on the level above `nodes` nodes.
  static constexpr size_t ParentsOf(size_t nodes) {
    return (nodes + kFanOut - 1) / kFanOut;
  }
  // Where group `group` of internal level `level` (1 = the leaves'
  // parents) starts in nodes_: kFanOut sums, then their kFanOut minimums.
  size_t GroupOffset(size_t level, size_t group) const {
    return level_offsets_[level] + 2 * kFanOut * group;
  }
  // Recomputes node `node` of internal level `level` (its sum and minimum)
  // from its children.
  void RecomputeNode(size_t level, size_t node);
  // Where node `node` of internal level `level` keeps its sum in nodes_.
  size_t SumOffset(size_t level, size_t node) const {
    return GroupOffset(level, node / kFanOut) + node % kFanOut;
  }
  // Lays out the internal levels for capacity_ leaves, all nodes empty.
  void LayOutLevels();

  double priority_exponent_;
  // Number of leaves; a power of two >= kFanOut.
  size_t capacity_;
  // leaves_[s] is the weight of slot s; slots past keys_.size() hold 0.
  TableVector<double> leaves_;
  // The internal levels, bottom up: level k (>= 1) has one node per kFanOut
  // nodes of level k - 1 (rounded up), the last level one node, the root.
  // Stored in groups of kFanOut siblings (see GroupOffset), padded with
  // sum 0 and minimum +infinity.
  TableVector<double> nodes_;
  // level_offsets_[k]: where level k starts in nodes_ (index 0 unused).
  std::vector<size_t> level_offsets_;
  size_t num_levels_;   // internal levels; the root's is num_levels_
  size_t root_offset_;  // GroupOffset(num_levels_, 0): the root's sum
  // keys_[s] is the key in slot s; slots [0, keys_.size()) are in use.
  TableVector<Key> keys_;
  // Inverse of `keys_`.
  TableMap<Key, size_t> slot_of_;
  std::mt19937_64 rng_;
  // UpdateMany's scratch, kept to spare an allocation per batch: the slots
  // and weights of the batch, then the nodes of one level to recompute.
  std::vector<size_t> batch_slots_;
  std::vector<double> batch_weights_;
  std::vector<size_t> dirty_;
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_SELECTORS_PRIORITIZED_SELECTOR_H_
