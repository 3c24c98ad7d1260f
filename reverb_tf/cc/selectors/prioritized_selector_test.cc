// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/selectors/prioritized_selector.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reverb_tf/cc/selectors/item_selector.h"
#include "reverb_tf/cc/testing/status_matchers.h"

namespace reverb_tf {
namespace {

using ::testing::HasSubstr;

// Chi-square critical values at p = 0.001, by degrees of freedom (from the
// standard table). Seeds are fixed, so the tests are deterministic; the
// threshold only says how unlucky a correct implementation may be before a
// seed would need changing (1 in 1000 per test).
constexpr double kChiSquareCritical3Dof = 16.266;
constexpr double kChiSquareCritical4Dof = 18.467;
constexpr double kChiSquareCritical9Dof = 27.877;

struct KeyPriority {
  Key key;
  double priority;
};

// Draws `num_samples` samples and returns how often each key came up,
// checking on the way that every reported probability is the expected one.
absl::flat_hash_map<Key, int> CountSamples(
    PrioritizedSelector& selector, int num_samples,
    const absl::flat_hash_map<Key, double>& expected_probability) {
  absl::flat_hash_map<Key, int> counts;
  for (int i = 0; i < num_samples; ++i) {
    absl::StatusOr<ItemSelector::KeyWithProbability> sample = selector.Sample();
    EXPECT_OK(sample);
    if (!sample.ok()) break;
    auto it = expected_probability.find(sample->key);
    if (it == expected_probability.end()) {
      ADD_FAILURE() << "sampled unexpected key " << sample->key;
      break;
    }
    EXPECT_NEAR(sample->probability, it->second, 1e-12 * it->second);
    ++counts[sample->key];
  }
  return counts;
}

double ChiSquare(const absl::flat_hash_map<Key, int>& counts,
                 const absl::flat_hash_map<Key, double>& probability,
                 int num_samples) {
  double chi_square = 0.0;
  for (const auto& [key, p] : probability) {
    const double expected = p * num_samples;
    auto it = counts.find(key);
    const double observed = it == counts.end() ? 0.0 : it->second;
    chi_square += (observed - expected) * (observed - expected) / expected;
  }
  return chi_square;
}

// Exact probabilities p_i = w_i / sum_j w_j with w = priority^exponent.
absl::flat_hash_map<Key, double> ExpectedProbabilities(
    const std::vector<KeyPriority>& items, double exponent) {
  double total = 0.0;
  for (const KeyPriority& item : items) {
    total += std::pow(item.priority, exponent);
  }
  absl::flat_hash_map<Key, double> probability;
  for (const KeyPriority& item : items) {
    probability[item.key] = std::pow(item.priority, exponent) / total;
  }
  return probability;
}

TEST(PrioritizedSelectorTest, MinProbabilityFollowsEveryChange) {
  // Against a brute-force minimum over random inserts, updates (zeros
  // among them: never chosen, so never the minimum) and deletes, through
  // grows and shrinks of the tree.
  PrioritizedSelector selector(/*priority_exponent=*/0.5, /*seed=*/3);
  EXPECT_EQ(selector.MinProbability(), 0.0);
  std::mt19937_64 rng(11);
  absl::flat_hash_map<Key, double> weights;
  Key next = 1;
  for (int step = 0; step < 20000; ++step) {
    const int op = static_cast<int>(rng() % 10);
    const double priority =
        rng() % 7 == 0 ? 0.0 : 0.01 + (rng() % 10000) / 100.0;
    if (op < 5 || weights.size() < 3) {
      ASSERT_OK(selector.Insert(next, priority));
      weights[next++] = std::sqrt(priority);
    } else if (op < 8) {
      const Key key = std::next(weights.begin(), rng() % weights.size())->first;
      ASSERT_OK(selector.Update(key, priority));
      weights[key] = std::sqrt(priority);
    } else {
      const Key key = std::next(weights.begin(), rng() % weights.size())->first;
      ASSERT_OK(selector.Delete(key));
      weights.erase(key);
    }
    if (step % 97 != 0) continue;
    double total = 0, smallest = std::numeric_limits<double>::infinity();
    for (const auto& [key, weight] : weights) {
      total += weight;
      if (weight > 0) smallest = std::min(smallest, weight);
    }
    const double expected = total > 0 && std::isfinite(smallest)
                                ? smallest / total
                                : 1.0 / static_cast<double>(weights.size());
    ASSERT_NEAR(selector.MinProbability(), expected, 1e-9 * expected)
        << "step " << step;
  }
  // What Sample() reports never goes below it.
  for (int i = 0; i < 1000; ++i) {
    auto sample = selector.Sample();
    ASSERT_OK(sample);
    EXPECT_GE(sample->probability, selector.MinProbability() * (1 - 1e-12));
  }
  selector.Clear();
  EXPECT_EQ(selector.MinProbability(), 0.0);
  ASSERT_OK(selector.Insert(1, 4.0));
  EXPECT_EQ(selector.MinProbability(), 1.0);
}

TEST(PrioritizedSelectorTest, MinProbabilityIsUniformWhenEveryPriorityIsZero) {
  PrioritizedSelector selector(/*priority_exponent=*/1.0, /*seed=*/3);
  for (Key key = 1; key <= 4; ++key) ASSERT_OK(selector.Insert(key, 0.0));
  EXPECT_DOUBLE_EQ(selector.MinProbability(), 0.25);
}

TEST(PrioritizedSelectorTest, FrequenciesFollowPriorityToTheExponent) {
  constexpr double kExponent = 0.7;
  constexpr int kSamples = 200000;
  const std::vector<KeyPriority> items = {
      {1, 0.1}, {2, 0.5}, {3, 1.0},  {4, 2.0},  {5, 3.0},
      {6, 5.0}, {7, 8.0}, {8, 13.0}, {9, 21.0}, {10, 34.0}};
  PrioritizedSelector selector(kExponent, /*seed=*/42);
  for (const KeyPriority& item : items) {
    ASSERT_OK(selector.Insert(item.key, item.priority));
  }
  const absl::flat_hash_map<Key, double> expected =
      ExpectedProbabilities(items, kExponent);
  const absl::flat_hash_map<Key, int> counts =
      CountSamples(selector, kSamples, expected);
  EXPECT_LT(ChiSquare(counts, expected, kSamples), kChiSquareCritical9Dof);

  // Negative control: the same counts must clearly reject a nearby wrong
  // distribution (exponent 1 instead of 0.7), or the check above proves
  // nothing.
  EXPECT_GT(ChiSquare(counts, ExpectedProbabilities(items, 1.0), kSamples),
            10 * kChiSquareCritical9Dof);
}

TEST(PrioritizedSelectorTest, FrequenciesStayCorrectAfterDeletesAndUpdates) {
  constexpr double kExponent = 0.7;
  constexpr int kSamples = 100000;
  std::vector<KeyPriority> items;
  for (Key key = 0; key < 12; ++key) items.push_back({key, 1.0 + key});
  PrioritizedSelector selector(kExponent, /*seed=*/43);
  for (const KeyPriority& item : items) {
    ASSERT_OK(selector.Insert(item.key, item.priority));
  }
  // Deleting the first and a middle key moves the last keys into their
  // slots; the updates then have to find the moved keys.
  ASSERT_OK(selector.Delete(0));
  ASSERT_OK(selector.Delete(5));
  items.erase(items.begin() + 5);
  items.erase(items.begin());
  for (KeyPriority& item : items) {
    if (item.key == 11 || item.key == 10 || item.key == 2) {
      item.priority = item.key == 2 ? 40.0 : 0.25;
      ASSERT_OK(selector.Update(item.key, item.priority));
    }
  }
  ASSERT_EQ(selector.size(), 10);
  const absl::flat_hash_map<Key, double> expected =
      ExpectedProbabilities(items, kExponent);
  const absl::flat_hash_map<Key, int> counts =
      CountSamples(selector, kSamples, expected);
  EXPECT_LT(ChiSquare(counts, expected, kSamples), kChiSquareCritical9Dof);
}

TEST(PrioritizedSelectorTest, ReportsExactProbability) {
  PrioritizedSelector selector(/*priority_exponent=*/1.0, /*seed=*/1);
  ASSERT_OK(selector.Insert(1, 1.0));
  ASSERT_OK(selector.Insert(2, 3.0));
  EXPECT_EQ(selector.total_weight(), 4.0);
  bool seen[3] = {false, false, false};
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<ItemSelector::KeyWithProbability> sample = selector.Sample();
    ASSERT_OK(sample);
    EXPECT_EQ(sample->probability, sample->key == 1 ? 0.25 : 0.75);
    seen[sample->key] = true;
  }
  EXPECT_TRUE(seen[1] && seen[2]);
}

TEST(PrioritizedSelectorTest, RootDoesNotDriftOverLongRuns) {
  constexpr int kKeys = 1000;
  constexpr int kUpdates = 1000000;
  PrioritizedSelector selector(/*priority_exponent=*/1.0, /*seed=*/3);
  std::vector<double> priorities(kKeys, 1.0);
  for (Key key = 0; key < kKeys; ++key) {
    ASSERT_OK(selector.Insert(key, 1.0));
  }
  // Priorities spanning 16 orders of magnitude: an implementation that
  // adjusted ancestors by (new - old) would leave rounding errors of the
  // size of the largest priorities behind in the root, which dwarf the
  // small final total below.
  std::mt19937_64 rng(8);
  std::uniform_int_distribution<Key> key_dist(0, kKeys - 1);
  std::uniform_real_distribution<double> log10_dist(-6.0, 10.0);
  for (int i = 0; i < kUpdates; ++i) {
    const Key key = key_dist(rng);
    priorities[key] = std::pow(10.0, log10_dist(rng));
    ASSERT_OK(selector.Update(key, priorities[key]));
  }
  // Bring every key back to [0, 1), in random order, as a trained agent's
  // priorities would settle.
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (Key key = 0; key < kKeys; ++key) {
    priorities[key] = unit(rng);
    ASSERT_OK(selector.Update(key, priorities[key]));
  }
  long double fresh_sum = 0.0L;
  for (double p : priorities) fresh_sum += p;
  const double expected = static_cast<double>(fresh_sum);
  EXPECT_NEAR(selector.total_weight(), expected, 1e-9 * expected);
  EXPECT_NEAR(selector.SumOfLeavesForTesting(), expected, 1e-12 * expected);

  absl::StatusOr<ItemSelector::KeyWithProbability> sample = selector.Sample();
  ASSERT_OK(sample);
  const double p = priorities[sample->key] / expected;
  EXPECT_NEAR(sample->probability, p, 1e-9 * p);
}

TEST(PrioritizedSelectorTest, AllZeroPrioritiesSampleUniformly) {
  constexpr int kSamples = 20000;
  PrioritizedSelector selector(/*priority_exponent=*/0.7, /*seed=*/5);
  absl::flat_hash_map<Key, double> expected;
  for (Key key = 0; key < 5; ++key) {
    ASSERT_OK(selector.Insert(key, 1.0));
    expected[key] = 0.2;
  }
  // Reaching zero through Update must behave like inserting zeros.
  for (Key key = 0; key < 5; ++key) {
    ASSERT_OK(selector.Update(key, 0.0));
  }
  EXPECT_EQ(selector.total_weight(), 0.0);
  const absl::flat_hash_map<Key, int> counts =
      CountSamples(selector, kSamples, expected);
  EXPECT_LT(ChiSquare(counts, expected, kSamples), kChiSquareCritical4Dof);
}

TEST(PrioritizedSelectorTest, UnderflowedWeightsCountAsZero) {
  // 1e-200 squared underflows to 0.
  PrioritizedSelector selector(/*priority_exponent=*/2.0, /*seed=*/6);
  for (Key key = 0; key < 4; ++key) {
    ASSERT_OK(selector.Insert(key, 1e-200));
  }
  absl::StatusOr<ItemSelector::KeyWithProbability> sample = selector.Sample();
  ASSERT_OK(sample);
  EXPECT_EQ(sample->probability, 0.25);
  ASSERT_OK(selector.Update(2, 1e-100));
  for (int i = 0; i < 100; ++i) {
    sample = selector.Sample();
    ASSERT_OK(sample);
    EXPECT_EQ(sample->key, 2u);
    EXPECT_EQ(sample->probability, 1.0);
  }
}

TEST(PrioritizedSelectorTest, ZeroPriorityKeysAreNeverSampledBesidePositive) {
  PrioritizedSelector selector(/*priority_exponent=*/1.0, /*seed=*/9);
  // One tiny positive weight among many zeros and nothing else: it must
  // win every time, however small it is.
  for (Key key = 0; key < 100; ++key) {
    ASSERT_OK(selector.Insert(key, key == 37 ? 1e-300 : 0.0));
  }
  for (int i = 0; i < 2000; ++i) {
    absl::StatusOr<ItemSelector::KeyWithProbability> sample = selector.Sample();
    ASSERT_OK(sample);
    ASSERT_EQ(sample->key, 37u);
    ASSERT_EQ(sample->probability, 1.0);
  }
}

TEST(PrioritizedSelectorTest, WalkNeverEndsOnZeroWeightLeafAtEdgeTargets) {
  // Layouts with zeros at the ends and in between; the targets include
  // total_weight() itself, which a plain "target < left" walk would carry
  // past the last positive leaf.
  const std::vector<std::vector<double>> layouts = {
      {1.0, 0.0},
      {0.0, 1.0},
      {5.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0},
      {0.0, 0.0, 0.0, 5.0, 0.0, 0.0, 0.0, 0.0},
      {1e-300, 0.0, 0.0},
      {1e16, 0.0, 1.0, 0.0, 0.0},
      {0.1, 0.2, 0.0, 0.3, 0.0, 0.0},
  };
  for (const std::vector<double>& layout : layouts) {
    PrioritizedSelector selector(/*priority_exponent=*/1.0, /*seed=*/1);
    for (size_t i = 0; i < layout.size(); ++i) {
      ASSERT_OK(selector.Insert(i, layout[i]));
    }
    const double total = selector.total_weight();
    for (double target : {0.0, total / 2, std::nextafter(total, 0.0), total}) {
      SCOPED_TRACE(::testing::Message()
                   << "layout size " << layout.size() << " target " << target);
      absl::StatusOr<ItemSelector::KeyWithProbability> sample =
          selector.SampleAtForTesting(target);
      ASSERT_OK(sample);
      EXPECT_GT(layout[sample->key], 0.0);
      EXPECT_GT(sample->probability, 0.0);
    }
  }
}

TEST(PrioritizedSelectorTest, WalkFindsTheLeafCoveringTheTarget) {
  PrioritizedSelector selector(/*priority_exponent=*/1.0, /*seed=*/1);
  // Cumulative sums 1, 3, 6, 10.
  for (Key key = 0; key < 4; ++key) {
    ASSERT_OK(selector.Insert(key, key + 1.0));
  }
  const std::vector<std::pair<double, Key>> cases = {
      {0.0, 0}, {0.999, 0}, {1.0, 1}, {2.999, 1},
      {3.0, 2}, {5.999, 2}, {6.0, 3}, {10.0, 3}};
  for (const auto& [target, key] : cases) {
    absl::StatusOr<ItemSelector::KeyWithProbability> sample =
        selector.SampleAtForTesting(target);
    ASSERT_OK(sample);
    EXPECT_EQ(sample->key, key) << "target " << target;
    EXPECT_EQ(sample->probability, (key + 1.0) / 10.0);
  }
}

TEST(PrioritizedSelectorTest, WalkFindsTheCoveringLeafOnEveryLevelOfDeepTrees) {
  // Sizes whose trees have 1 to 5 levels above the leaves, the upper ones
  // with partly filled groups of siblings; small integer weights (zeros
  // among them) keep every prefix sum exact, so the leaf covering a target
  // is known exactly. Checked again after deletes have moved keys into
  // other slots and shrunk the tree.
  std::mt19937_64 rng(5);
  for (int n : {9, 65, 100, 513, 4097, 5000}) {
    PrioritizedSelector selector(/*priority_exponent=*/1.0, /*seed=*/n);
    absl::flat_hash_map<Key, double> weight;
    for (Key key = 0; key < static_cast<Key>(n); ++key) {
      weight[key] = static_cast<double>(rng() % 6);
      ASSERT_OK(selector.Insert(key, weight[key]));
    }
    for (int round = 0; round < 2; ++round) {
      SCOPED_TRACE(::testing::Message() << "n " << n << " round " << round);
      // Slot order is insertion order with deletes refilled from the end,
      // which the test does not track: instead, every key's interval is
      // [target where it starts, + its weight), and walking all of them
      // in turn must visit each positive key exactly where its weight says.
      double total = 0;
      for (const auto& [key, w] : weight) total += w;
      ASSERT_EQ(selector.total_weight(), total);
      absl::flat_hash_map<Key, double> covered;
      for (double target = 0.5; target < total; target += 1.0) {
        auto sample = selector.SampleAtForTesting(target);
        ASSERT_OK(sample);
        ASSERT_GT(weight[sample->key], 0.0) << "target " << target;
        ASSERT_EQ(sample->probability, weight[sample->key] / total);
        covered[sample->key] += 1.0;
      }
      for (const auto& [key, w] : weight) {
        ASSERT_EQ(covered.contains(key) ? covered[key] : 0.0, w)
            << "key " << key;
      }
      // Integer targets on the boundaries go to the later key, and the end
      // of the range to a positive one.
      auto last = selector.SampleAtForTesting(total);
      ASSERT_OK(last);
      EXPECT_GT(weight[last->key], 0.0);
      // Delete about 3 in 4 keys (shrinking the tree), then walk again.
      std::vector<Key> keys;
      for (const auto& [key, w] : weight) keys.push_back(key);
      std::sort(keys.begin(), keys.end());
      for (Key key : keys) {
        if (rng() % 4 == 0 || weight.size() <= 2) continue;
        ASSERT_OK(selector.Delete(key));
        weight.erase(key);
      }
      ASSERT_EQ(selector.size(), static_cast<int64_t>(weight.size()));
    }
  }
}

TEST(PrioritizedSelectorTest, RandomLayoutsNeverYieldZeroWeightKeys) {
  std::mt19937_64 rng(21);
  std::uniform_real_distribution<double> log10_dist(-300.0, 300.0);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int trial = 0; trial < 300; ++trial) {
    PrioritizedSelector selector(/*priority_exponent=*/1.0, trial);
    const int n = 1 + static_cast<int>(rng() % 40);
    std::vector<double> priorities(n);
    for (int i = 0; i < n; ++i) {
      priorities[i] = unit(rng) < 0.6 ? 0.0 : std::pow(10.0, log10_dist(rng));
      ASSERT_OK(selector.Insert(i, priorities[i]));
    }
    if (!(selector.total_weight() > 0.0)) continue;
    const double total = selector.total_weight();
    for (double target :
         {total, std::nextafter(total, 0.0), unit(rng) * total}) {
      absl::StatusOr<ItemSelector::KeyWithProbability> sample =
          selector.SampleAtForTesting(target);
      ASSERT_OK(sample);
      ASSERT_GT(priorities[sample->key], 0.0)
          << "trial " << trial << " target " << target;
    }
    for (int i = 0; i < 20; ++i) {
      absl::StatusOr<ItemSelector::KeyWithProbability> sample =
          selector.Sample();
      ASSERT_OK(sample);
      ASSERT_GT(priorities[sample->key], 0.0) << "trial " << trial;
    }
  }
}

TEST(PrioritizedSelectorTest, SampleAtForTestingNeedsPositiveTotal) {
  PrioritizedSelector selector(/*priority_exponent=*/1.0, /*seed=*/1);
  EXPECT_EQ(selector.SampleAtForTesting(0.0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_OK(selector.Insert(1, 0.0));
  EXPECT_EQ(selector.SampleAtForTesting(0.0).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(PrioritizedSelectorTest, ExponentZeroIsUniform) {
  constexpr int kSamples = 40000;
  PrioritizedSelector selector(/*priority_exponent=*/0.0, /*seed=*/10);
  // Includes 0, since 0^0 is taken as 1 here.
  const std::vector<KeyPriority> items = {
      {1, 0.0}, {2, 1.0}, {3, 1e300}, {4, 5.0}};
  absl::flat_hash_map<Key, double> expected;
  for (const KeyPriority& item : items) {
    ASSERT_OK(selector.Insert(item.key, item.priority));
    expected[item.key] = 0.25;
  }
  EXPECT_EQ(selector.total_weight(), 4.0);
  const absl::flat_hash_map<Key, int> counts =
      CountSamples(selector, kSamples, expected);
  EXPECT_LT(ChiSquare(counts, expected, kSamples), kChiSquareCritical3Dof);
}

TEST(PrioritizedSelectorTest, OverflowingWeightIsRejected) {
  PrioritizedSelector selector(/*priority_exponent=*/2.0, /*seed=*/1);
  absl::Status status = selector.Insert(1, 1e200);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("overflow"));
  EXPECT_EQ(selector.size(), 0);
  EXPECT_EQ(selector.total_weight(), 0.0);
  ASSERT_OK(selector.Insert(1, 1e100));
  EXPECT_EQ(selector.Update(1, 1e200).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(selector.total_weight(), 1e200);
}

TEST(PrioritizedSelectorTest, OverflowingTotalIsRejectedAndRolledBack) {
  constexpr double kMax = std::numeric_limits<double>::max();
  PrioritizedSelector selector(/*priority_exponent=*/1.0, /*seed=*/1);
  ASSERT_OK(selector.Insert(1, kMax));
  EXPECT_EQ(selector.Insert(2, kMax).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(selector.size(), 1);
  EXPECT_EQ(selector.total_weight(), kMax);
  ASSERT_OK(selector.Insert(2, 1.0));
  ASSERT_OK(selector.Insert(3, 0.0));
  const double total_before = selector.total_weight();
  EXPECT_EQ(selector.Update(2, kMax).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(selector.total_weight(), total_before);
  // Key 2 kept its old weight of 1, so key 3 (weight 0) is still never
  // chosen and the walk to the end lands on key 2.
  absl::StatusOr<ItemSelector::KeyWithProbability> sample =
      selector.SampleAtForTesting(total_before);
  ASSERT_OK(sample);
  EXPECT_EQ(sample->key, 2u);
  EXPECT_EQ(sample->probability, 1.0 / kMax);
}

// UpdateMany recomputes each tree node once per batch: the tree must come
// out bit for bit as Update() one key at a time leaves it, on every level
// of a deep tree (5,000 keys: 5 levels).
TEST(PrioritizedSelectorTest, UpdateManyLeavesTheTreeExactlyAsUpdateDoes) {
  PrioritizedSelector many(/*priority_exponent=*/0.6, /*seed=*/1);
  PrioritizedSelector one(/*priority_exponent=*/0.6, /*seed=*/1);
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> priority(0.0, 100.0);
  constexpr Key kKeys = 5000;
  for (Key key = 0; key < kKeys; ++key) {
    const double p = priority(rng);
    ASSERT_OK(many.Insert(key, p));
    ASSERT_OK(one.Insert(key, p));
  }
  for (int round = 0; round < 40; ++round) {
    std::vector<std::pair<Key, double>> batch(256);
    for (auto& [key, p] : batch) {
      key = rng() % kKeys;
      // Some zero weights, so that the minimums change too.
      p = rng() % 16 == 0 ? 0.0 : priority(rng);
    }
    size_t applied = 0;
    ASSERT_OK(many.UpdateMany(batch, &applied));
    ASSERT_EQ(applied, batch.size());
    for (const auto& [key, p] : batch) ASSERT_OK(one.Update(key, p));
    ASSERT_EQ(many.total_weight(), one.total_weight()) << "round " << round;
    ASSERT_EQ(many.MinProbability(), one.MinProbability());
    for (int i = 0; i < 64; ++i) {
      const double target = many.total_weight() * (i + 0.5) / 64;
      absl::StatusOr<ItemSelector::KeyWithProbability> a =
          many.SampleAtForTesting(target);
      absl::StatusOr<ItemSelector::KeyWithProbability> b =
          one.SampleAtForTesting(target);
      ASSERT_OK(a);
      ASSERT_OK(b);
      ASSERT_EQ(a->key, b->key);
      ASSERT_EQ(a->probability, b->probability);
    }
  }
  EXPECT_NEAR(many.total_weight(), many.SumOfLeavesForTesting(),
              1e-9 * many.total_weight());
}

// Near the largest double the batch cannot promise that no sum overflows:
// the updates go one at a time, and the one that would overflow is refused
// with the ones before it applied.
TEST(PrioritizedSelectorTest, UpdateManyNearOverflowRefusesWhereUpdateWould) {
  constexpr double kMax = std::numeric_limits<double>::max();
  PrioritizedSelector selector(/*priority_exponent=*/1.0, /*seed=*/1);
  ASSERT_OK(selector.Insert(1, kMax / 2));
  ASSERT_OK(selector.Insert(2, 1.0));
  ASSERT_OK(selector.Insert(3, 1.0));
  size_t applied = 0;
  absl::Status status =
      selector.UpdateMany({{2, kMax / 4}, {3, kMax / 2}, {1, 1.0}}, &applied);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("overflow"));
  EXPECT_EQ(applied, 1u);
  EXPECT_EQ(selector.total_weight(), kMax / 2 + kMax / 4 + 1.0);
  // Large weights that fit go in, one at a time.
  ASSERT_OK(selector.UpdateMany({{1, kMax / 4}, {3, kMax / 4}}, &applied));
  EXPECT_EQ(applied, 2u);
  EXPECT_EQ(selector.total_weight(), 3 * (kMax / 4));
}

TEST(PrioritizedSelectorTest, GrowingAndShrinkingKeepsTotalsExact) {
  PrioritizedSelector selector(/*priority_exponent=*/1.0, /*seed=*/1);
  for (Key key = 0; key < 1000; ++key) {
    ASSERT_OK(selector.Insert(key, 0.5));
  }
  EXPECT_EQ(selector.total_weight(), 500.0);
  for (Key key = 3; key < 1000; ++key) {
    ASSERT_OK(selector.Delete(key));
  }
  EXPECT_EQ(selector.total_weight(), 1.5);
  EXPECT_EQ(selector.SumOfLeavesForTesting(), 1.5);
  EXPECT_THAT(selector.DebugString(), HasSubstr("size=3"));
  ASSERT_OK(selector.Update(1, 2.0));
  EXPECT_EQ(selector.total_weight(), 3.0);
  selector.Clear();
  EXPECT_EQ(selector.total_weight(), 0.0);
  ASSERT_OK(selector.Insert(1, 7.0));
  EXPECT_EQ(selector.total_weight(), 7.0);
}

TEST(PrioritizedSelectorTest, ValidatePriorityExponent) {
  EXPECT_OK(ValidatePriorityExponent(0.0));
  EXPECT_OK(ValidatePriorityExponent(0.7));
  EXPECT_OK(ValidatePriorityExponent(3.0));
  for (double bad : {-0.1, std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity()}) {
    absl::Status status = ValidatePriorityExponent(bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(status.message(), HasSubstr("exponent"));
  }
}

}  // namespace
}  // namespace reverb_tf
