// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/selectors/uniform_selector.h"

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "reverb_tf/cc/selectors/item_selector.h"
#include "reverb_tf/cc/testing/status_matchers.h"

namespace reverb_tf {
namespace {

// Chi-square critical value for 9 degrees of freedom at p = 0.001. The seed
// is fixed, so the test is deterministic; the threshold only decides how
// unlucky a correct implementation may be before the seed would need
// changing (1 in 1000).
constexpr double kChiSquareCritical9Dof = 27.877;

TEST(UniformSelectorTest, MinProbabilityIsOneOverTheSize) {
  UniformSelector selector(/*seed=*/17);
  EXPECT_EQ(selector.MinProbability(), 0.0);
  for (Key key = 1; key <= 8; ++key) ASSERT_OK(selector.Insert(key, 5.0 * key));
  EXPECT_DOUBLE_EQ(selector.MinProbability(), 1.0 / 8);
  ASSERT_OK(selector.Delete(3));
  EXPECT_DOUBLE_EQ(selector.MinProbability(), 1.0 / 7);
}

TEST(UniformSelectorTest, FrequenciesAreUniformAfterChurn) {
  UniformSelector selector(/*seed=*/17);
  // 15 keys with wildly different priorities, then 5 deletes spread over the
  // dense array (front, middle, back) so swap-with-last is exercised.
  for (Key key = 100; key < 115; ++key) {
    ASSERT_OK(selector.Insert(key, (key % 4) * 1000.0));
  }
  for (Key key : {100, 107, 114, 103, 110}) {
    ASSERT_OK(selector.Delete(key));
  }
  ASSERT_EQ(selector.size(), 10);

  constexpr int kSamples = 100000;
  absl::flat_hash_map<Key, int> counts;
  for (int i = 0; i < kSamples; ++i) {
    absl::StatusOr<ItemSelector::KeyWithProbability> sample = selector.Sample();
    ASSERT_OK(sample);
    ASSERT_EQ(sample->probability, 0.1);
    ++counts[sample->key];
  }
  ASSERT_EQ(counts.size(), 10u);
  const double expected = kSamples / 10.0;
  double chi_square = 0.0;
  for (const auto& [key, count] : counts) {
    EXPECT_FALSE(key == 100 || key == 107 || key == 114 || key == 103 ||
                 key == 110)
        << "sampled deleted key " << key;
    chi_square += (count - expected) * (count - expected) / expected;
  }
  EXPECT_LT(chi_square, kChiSquareCritical9Dof);
}

TEST(UniformSelectorTest, ReportsOneOverSize) {
  UniformSelector selector(/*seed=*/1);
  for (Key key = 0; key < 3; ++key) ASSERT_OK(selector.Insert(key, 0));
  absl::StatusOr<ItemSelector::KeyWithProbability> sample = selector.Sample();
  ASSERT_OK(sample);
  EXPECT_EQ(sample->probability, 1.0 / 3.0);
  ASSERT_OK(selector.Delete(sample->key));
  sample = selector.Sample();
  ASSERT_OK(sample);
  EXPECT_EQ(sample->probability, 0.5);
}

}  // namespace
}  // namespace reverb_tf
