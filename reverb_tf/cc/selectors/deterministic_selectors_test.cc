// SPDX-License-Identifier: Apache-2.0
// Ordering rules specific to FifoSelector, LifoSelector and HeapSelector.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reverb_tf/cc/selectors/heap_selector.h"
#include "reverb_tf/cc/selectors/item_selector.h"
#include "reverb_tf/cc/selectors/order_selectors.h"
#include "reverb_tf/cc/testing/status_matchers.h"

namespace reverb_tf {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

// Samples and returns the key, failing the test (and returning a sentinel)
// if sampling fails or reports a probability other than 1.
Key SampleKey(ItemSelector& selector) {
  absl::StatusOr<ItemSelector::KeyWithProbability> sample = selector.Sample();
  EXPECT_OK(sample);
  if (!sample.ok()) return ~Key{0};
  EXPECT_EQ(sample->probability, 1.0);
  return sample->key;
}

// Repeatedly samples and deletes until empty, returning the keys in the
// order they came out.
std::vector<Key> Drain(ItemSelector& selector) {
  std::vector<Key> order;
  while (selector.size() > 0) {
    const Key key = SampleKey(selector);
    order.push_back(key);
    if (!selector.Delete(key).ok()) {
      ADD_FAILURE() << "could not delete sampled key " << key;
      break;
    }
  }
  return order;
}

TEST(FifoSelectorTest, SamplesOldestAndIgnoresUpdates) {
  FifoSelector selector;
  EXPECT_EQ(selector.options().kind, SelectorOptions::Kind::kFifo);
  ASSERT_OK(selector.Insert(10, 5.0));
  ASSERT_OK(selector.Insert(20, 1.0));
  ASSERT_OK(selector.Insert(30, 9.0));
  EXPECT_EQ(SampleKey(selector), 10u);
  EXPECT_EQ(SampleKey(selector), 10u) << "Sample must not consume the key";
  // Priorities play no part in the order.
  ASSERT_OK(selector.Update(30, 1000.0));
  ASSERT_OK(selector.Update(10, 0.0));
  EXPECT_EQ(SampleKey(selector), 10u);
  // Deleting from the middle keeps the rest in order.
  ASSERT_OK(selector.Delete(20));
  // Re-inserting makes the key the newest.
  ASSERT_OK(selector.Delete(10));
  ASSERT_OK(selector.Insert(10, 5.0));
  EXPECT_THAT(Drain(selector), ElementsAre(30, 10));
}

TEST(LifoSelectorTest, SamplesNewestAndIgnoresUpdates) {
  LifoSelector selector;
  EXPECT_EQ(selector.options().kind, SelectorOptions::Kind::kLifo);
  ASSERT_OK(selector.Insert(10, 5.0));
  ASSERT_OK(selector.Insert(20, 1.0));
  ASSERT_OK(selector.Insert(30, 9.0));
  EXPECT_EQ(SampleKey(selector), 30u);
  ASSERT_OK(selector.Update(10, 1000.0));
  ASSERT_OK(selector.Update(30, 0.0));
  EXPECT_EQ(SampleKey(selector), 30u);
  ASSERT_OK(selector.Delete(20));
  // Re-inserting the oldest key makes it the newest.
  ASSERT_OK(selector.Delete(10));
  ASSERT_OK(selector.Insert(10, 5.0));
  EXPECT_EQ(SampleKey(selector), 10u);
  EXPECT_THAT(Drain(selector), ElementsAre(10, 30));
}

TEST(FifoLifoSelectorTest, LongSequencesDrainInInsertionOrder) {
  FifoSelector fifo;
  LifoSelector lifo;
  std::vector<Key> expected;
  // Insert 0..999 in a scrambled order, deleting every third one again.
  std::vector<Key> keys(1000);
  for (Key i = 0; i < keys.size(); ++i) keys[i] = i;
  std::shuffle(keys.begin(), keys.end(), std::mt19937_64(5));
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_OK(fifo.Insert(keys[i], 1.0));
    ASSERT_OK(lifo.Insert(keys[i], 1.0));
    if (i % 3 == 0) {
      ASSERT_OK(fifo.Delete(keys[i]));
      ASSERT_OK(lifo.Delete(keys[i]));
    } else {
      expected.push_back(keys[i]);
    }
  }
  EXPECT_THAT(Drain(fifo), ElementsAreArray(expected));
  std::reverse(expected.begin(), expected.end());
  EXPECT_THAT(Drain(lifo), ElementsAreArray(expected));
}

TEST(FifoLifoSelectorTest, RandomOperationsMatchAListModel) {
  // Inserts, deletes anywhere (ends included) and re-inserts, against a
  // std::list: the oldest and newest keys must match after every step. Keys
  // include 0 and the largest value, which nothing may treat as "none".
  FifoSelector fifo;
  LifoSelector lifo;
  std::vector<Key> model;  // oldest first
  std::mt19937_64 rng(11);
  const std::vector<Key> pool = {0, 1,  2,       3,           5,
                                 8, 13, ~Key{0}, ~Key{0} - 1, 1u << 31};
  for (int step = 0; step < 20000; ++step) {
    const Key key = pool[rng() % pool.size()];
    const auto it = std::find(model.begin(), model.end(), key);
    if (it == model.end()) {
      ASSERT_OK(fifo.Insert(key, 1.0));
      ASSERT_OK(lifo.Insert(key, 1.0));
      model.push_back(key);
    } else {
      ASSERT_OK(fifo.Delete(key));
      ASSERT_OK(lifo.Delete(key));
      model.erase(it);
      EXPECT_EQ(fifo.Delete(key).code(), absl::StatusCode::kNotFound);
    }
    ASSERT_EQ(fifo.size(), static_cast<int64_t>(model.size()));
    if (model.empty()) continue;
    ASSERT_EQ(SampleKey(fifo), model.front()) << "step " << step;
    ASSERT_EQ(SampleKey(lifo), model.back()) << "step " << step;
  }
  EXPECT_THAT(Drain(fifo), ElementsAreArray(model));
}

TEST(HeapSelectorTest, OptionsReportHeapDirection) {
  EXPECT_EQ(HeapSelector(/*min_heap=*/true).options().kind,
            SelectorOptions::Kind::kMinHeap);
  EXPECT_EQ(HeapSelector(/*min_heap=*/false).options().kind,
            SelectorOptions::Kind::kMaxHeap);
}

TEST(HeapSelectorTest, MinHeapSamplesLowestPriority) {
  HeapSelector selector(/*min_heap=*/true);
  ASSERT_OK(selector.Insert(1, 5.0));
  ASSERT_OK(selector.Insert(2, 3.0));
  ASSERT_OK(selector.Insert(3, 4.0));
  EXPECT_EQ(SampleKey(selector), 2u);
  EXPECT_THAT(Drain(selector), ElementsAre(2, 3, 1));
}

TEST(HeapSelectorTest, MaxHeapSamplesHighestPriority) {
  HeapSelector selector(/*min_heap=*/false);
  ASSERT_OK(selector.Insert(1, 5.0));
  ASSERT_OK(selector.Insert(2, 3.0));
  ASSERT_OK(selector.Insert(3, 4.0));
  EXPECT_EQ(SampleKey(selector), 1u);
  EXPECT_THAT(Drain(selector), ElementsAre(1, 3, 2));
}

TEST(HeapSelectorTest, TiesGoToEarliestInsertedKey) {
  for (bool min_heap : {true, false}) {
    SCOPED_TRACE(min_heap ? "min" : "max");
    HeapSelector selector(min_heap);
    // Key values run against insertion order so that ordering by key would
    // give a different answer.
    ASSERT_OK(selector.Insert(30, 1.0));
    ASSERT_OK(selector.Insert(20, 1.0));
    ASSERT_OK(selector.Insert(10, 1.0));
    // -0.0 == 0.0, so these tie as well.
    ASSERT_OK(selector.Insert(5, -0.0));
    ASSERT_OK(selector.Insert(4, 0.0));
    if (min_heap) {
      EXPECT_THAT(Drain(selector), ElementsAre(5, 4, 30, 20, 10));
    } else {
      EXPECT_THAT(Drain(selector), ElementsAre(30, 20, 10, 5, 4));
    }
  }
}

TEST(HeapSelectorTest, UpdateMovesKeyBothWays) {
  HeapSelector selector(/*min_heap=*/true);
  for (Key key = 0; key < 8; ++key) {
    ASSERT_OK(selector.Insert(key, 10.0 + key));
  }
  EXPECT_EQ(SampleKey(selector), 0u);
  // Up: a deep key becomes the minimum.
  ASSERT_OK(selector.Update(7, 1.0));
  EXPECT_EQ(SampleKey(selector), 7u);
  // Down: the current minimum becomes the maximum.
  ASSERT_OK(selector.Update(7, 100.0));
  EXPECT_EQ(SampleKey(selector), 0u);
  ASSERT_OK(selector.Update(0, 50.0));
  EXPECT_EQ(SampleKey(selector), 1u);
  EXPECT_THAT(Drain(selector), ElementsAre(1, 2, 3, 4, 5, 6, 0, 7));
}

TEST(HeapSelectorTest, UpdateKeepsInsertionRankButReinsertDoesNot) {
  for (bool min_heap : {true, false}) {
    SCOPED_TRACE(min_heap ? "min" : "max");
    HeapSelector selector(min_heap);
    ASSERT_OK(selector.Insert(1, 2.0));
    ASSERT_OK(selector.Insert(2, 2.0));
    ASSERT_OK(selector.Insert(3, 2.0));
    EXPECT_EQ(SampleKey(selector), 1u);
    // Moving key 1 away and back must not make it younger than 2 and 3.
    ASSERT_OK(selector.Update(1, min_heap ? 9.0 : 0.0));
    EXPECT_EQ(SampleKey(selector), 2u);
    ASSERT_OK(selector.Update(1, 2.0));
    EXPECT_EQ(SampleKey(selector), 1u);
    // Delete + Insert is a new item, so it now loses ties to 2 and 3.
    ASSERT_OK(selector.Delete(1));
    ASSERT_OK(selector.Insert(1, 2.0));
    EXPECT_THAT(Drain(selector), ElementsAre(2, 3, 1));
  }
}

// Heap draining must equal a stable sort by priority of the insertion
// order, after arbitrary updates and deletes from the middle.
TEST(HeapSelectorTest, DrainMatchesStableSortAfterRandomChurn) {
  for (bool min_heap : {true, false}) {
    SCOPED_TRACE(min_heap ? "min" : "max");
    HeapSelector selector(min_heap);
    std::mt19937_64 rng(11);
    // Few distinct priorities, so ties are everywhere.
    std::uniform_int_distribution<int> priority_dist(0, 20);
    struct Item {
      Key key;
      double priority;
    };
    std::vector<Item> items;  // In insertion order.
    for (Key key = 0; key < 2000; ++key) {
      const double priority = priority_dist(rng);
      ASSERT_OK(selector.Insert(key, priority));
      items.push_back({key, priority});
    }
    for (int i = 0; i < 3000; ++i) {
      Item& item = items[rng() % items.size()];
      item.priority = priority_dist(rng);
      ASSERT_OK(selector.Update(item.key, item.priority));
    }
    for (int i = 0; i < 500; ++i) {
      const size_t index = rng() % items.size();
      ASSERT_OK(selector.Delete(items[index].key));
      items.erase(items.begin() + static_cast<std::ptrdiff_t>(index));
    }
    std::stable_sort(
        items.begin(), items.end(), [min_heap](const Item& a, const Item& b) {
          return min_heap ? a.priority < b.priority : a.priority > b.priority;
        });
    std::vector<Key> expected;
    for (const Item& item : items) expected.push_back(item.key);
    EXPECT_THAT(Drain(selector), ElementsAreArray(expected));
  }
}

TEST(HeapSelectorTest, FailedOperationsLeaveHeapIntact) {
  HeapSelector selector(/*min_heap=*/true);
  ASSERT_OK(selector.Insert(1, 3.0));
  ASSERT_OK(selector.Insert(2, 1.0));
  EXPECT_FALSE(selector.Insert(1, 0.0).ok());
  EXPECT_FALSE(selector.Update(2, NAN).ok());
  EXPECT_FALSE(selector.Delete(7).ok());
  EXPECT_THAT(Drain(selector), ElementsAre(2, 1));
}

}  // namespace
}  // namespace reverb_tf
