// SPDX-License-Identifier: Apache-2.0
#ifndef REVERB_TF_CC_SELECTORS_UNIFORM_SELECTOR_H_
#define REVERB_TF_CC_SELECTORS_UNIFORM_SELECTOR_H_

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

// Samples every present key with equal probability; priorities are validated
// but otherwise ignored.
//
// Keys live in a dense vector so Sample is a single random index; the map
// lets Delete find a key's slot, which is then filled by the last key so the
// vector stays dense. All operations are O(1) (amortized for Insert).
//
// Thread safety: not thread-safe. It is owned by a Table and only called
// while the Table's mutex is held.
class UniformSelector : public ItemSelector {
 public:
  explicit UniformSelector(uint64_t seed);

  UniformSelector(const UniformSelector&) = delete;
  UniformSelector& operator=(const UniformSelector&) = delete;

  absl::Status Insert(Key key, double priority) override;
  absl::Status Update(Key key, double priority) override;
  absl::Status Delete(Key key) override;
  absl::StatusOr<KeyWithProbability> Sample() override;
  void Clear() override;
  int64_t size() const override;
  // Every key: 1/size.
  double MinProbability() const override {
    return size() > 0 ? 1.0 / static_cast<double>(size()) : 0.0;
  }
  SelectorOptions options() const override;
  std::string DebugString() const override;

 private:
  TableVector<Key> keys_;
  // Inverse of `keys_`: index_of_[keys_[i]] == i for every i.
  TableMap<Key, size_t> index_of_;
  std::mt19937_64 rng_;
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_SELECTORS_UNIFORM_SELECTOR_H_
