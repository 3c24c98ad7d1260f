// SPDX-License-Identifier: Apache-2.0
// The narrow interface every item selector implements.
//
// A selector decides which item a table hands out on Sample() (the table's
// "sampler") and which item it evicts when it is full (the table's
// "remover"). A table owns two independent selectors and tells both about
// every insert, priority update and delete; the selector stores only keys and
// whatever ordering data it needs (priorities, insertion order), never item
// data.
//
// Thread safety: implementations are NOT thread-safe. The owning Table calls
// them only while holding its own mutex.
//
// Error contract, shared by all implementations and enforced by
// selector_conformance_test.cc:
//   * Insert of a key already present      -> InvalidArgument
//   * Update / Delete of an unknown key     -> NotFound
//   * a priority that is NaN, negative or infinite
//                                          -> InvalidArgument (Insert, Update)
//   * Sample on an empty selector           -> FailedPrecondition
// When a call breaks several rules at once, the priority error is reported
// (it is checked before the key is looked up), so every implementation
// answers a given bad call with the same code.
#ifndef REVERB_TF_CC_SELECTORS_ITEM_SELECTOR_H_
#define REVERB_TF_CC_SELECTORS_ITEM_SELECTOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "reverb_tf/cc/item_key.h"
#include "reverb_tf/cc/platform/export.h"

namespace reverb_tf {

// Serializable description of a selector; enough to rebuild it (the server
// config, server_info and checkpoints all use it).
struct REVERB_TF_EXPORT SelectorOptions {
  enum class Kind { kUniform, kPrioritized, kFifo, kLifo, kMinHeap, kMaxHeap };
  Kind kind = Kind::kUniform;
  // Only meaningful for kPrioritized: sampling probability is proportional to
  // priority^priority_exponent.
  double priority_exponent = 1.0;

  // InvalidArgument for a kind out of range (a corrupt config or checkpoint)
  // or a prioritized exponent that fails ValidatePriorityExponent.
  absl::Status Validate() const;
  std::string DebugString() const;
  // Hands keys out in a defined order (fifo, lifo, heaps) rather than at
  // random.
  bool ordered() const {
    return kind != Kind::kUniform && kind != Kind::kPrioritized;
  }
  bool operator==(const SelectorOptions& other) const {
    return kind == other.kind && (kind != Kind::kPrioritized ||
                                  priority_exponent == other.priority_exponent);
  }
};

class ItemSelector {
 public:
  struct KeyWithProbability {
    Key key;
    // Probability with which this key was chosen. Deterministic selectors
    // (Fifo, Lifo, heaps) report 1.
    double probability;
  };

  virtual ~ItemSelector() = default;

  // Adds `key` with `priority`. Priorities are ignored by selectors that do
  // not order by them, but are still validated.
  virtual absl::Status Insert(Key key, double priority) = 0;

  // Changes the priority of a present `key`.
  virtual absl::Status Update(Key key, double priority) = 0;

  // Applies `updates` in order, as Update() one key at a time would, and
  // stops at the first that fails; `*applied` is how many were applied (all
  // of them when the result is OK). Selectors that keep more than one
  // node per key (PrioritizedSelector's sum tree) may share work across
  // the batch; the default calls Update() for each.
  virtual absl::Status UpdateMany(
      absl::Span<const std::pair<Key, double>> updates, size_t* applied);

  // False for selectors whose choice ignores priorities (Uniform, Fifo,
  // Lifo): their Update() only checks the key, which a table that already
  // found the item may skip (one hash lookup less per priority update).
  bool priority_matters() const {
    const SelectorOptions::Kind kind = options().kind;
    return kind != SelectorOptions::Kind::kUniform &&
           kind != SelectorOptions::Kind::kFifo &&
           kind != SelectorOptions::Kind::kLifo;
  }

  // Removes a present `key`.
  virtual absl::Status Delete(Key key) = 0;

  // Chooses a key without removing it.
  virtual absl::StatusOr<KeyWithProbability> Sample() = 0;

  // Removes every key.
  virtual void Clear() = 0;

  virtual int64_t size() const = 0;

  // The sum of the keys' sampling weights: what Sample() chooses in
  // proportion to. Clients that merge samples of several tables (shards)
  // weigh each table by it. Every key weighs 1 unless a selector says
  // otherwise.
  virtual double TotalWeight() const { return static_cast<double>(size()); }

  // The smallest probability with which Sample() would choose any key now
  // (0 if there is none). With a sample's own probability P it gives the
  // importance-sampling weight normalised by the largest one without
  // another look at the table: (P / MinProbability())^-beta equals
  // (N·P)^-beta / max_i (N·P_i)^-beta. Deterministic selectors report 1, as
  // they report for every sample.
  virtual double MinProbability() const { return size() > 0 ? 1.0 : 0.0; }

  virtual SelectorOptions options() const = 0;

  virtual std::string DebugString() const = 0;

  // Fifo, Lifo and the heaps depend on the order keys were inserted in (the
  // heaps to break ties), so a checkpoint must re-insert keys in that order.
  // Those selectors append every key with a rank that grows with insertion
  // time and return true; order-free selectors return false. O(size).
  virtual bool AppendInsertionRanks(
      std::vector<std::pair<uint64_t, Key>>* ranks) const {
    return false;
  }
};

// Validates a priority for Insert/Update of the selectors that only order
// by priority or ignore it (fifo, lifo, uniform, heaps): anything but NaN,
// which has no order. Negative and infinite priorities are ordinary keys of a
// heap (dm-reverb accepts them too).
absl::Status ValidatePriority(double priority);

// Validates a priority that is a sampling weight (the prioritized selector):
// finite and >= 0 (-0.0 is accepted). Infinity would make the weight total
// infinite, leaving every finite key with probability 0.
absl::Status ValidatePriorityWeight(double priority);

// Builds the selector described by `options`. `seed` seeds the random
// selectors (Uniform, Prioritized); deterministic selectors ignore it.
absl::StatusOr<std::unique_ptr<ItemSelector>> MakeSelector(
    const SelectorOptions& options, uint64_t seed);

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_SELECTORS_ITEM_SELECTOR_H_
