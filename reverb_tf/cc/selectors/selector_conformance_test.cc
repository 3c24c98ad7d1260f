// SPDX-License-Identifier: Apache-2.0
// Checks that every selector kind, built through MakeSelector, honours the
// contract in item_selector.h, and compares each against a brute-force
// reference model over long random operation sequences.

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reverb_tf/cc/selectors/item_selector.h"
#include "reverb_tf/cc/testing/status_matchers.h"

namespace reverb_tf {
namespace {

using ::testing::HasSubstr;
using Kind = SelectorOptions::Kind;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

struct SelectorParam {
  std::string name;
  SelectorOptions options;
};

// Makes test names in failure output readable instead of a byte dump.
void PrintTo(const SelectorParam& param, std::ostream* os) {
  *os << param.name << " " << param.options.DebugString();
}

SelectorOptions Options(Kind kind, double priority_exponent = 1.0) {
  SelectorOptions options;
  options.kind = kind;
  options.priority_exponent = priority_exponent;
  return options;
}

bool IsDeterministic(Kind kind) {
  return kind != Kind::kUniform && kind != Kind::kPrioritized;
}

class SelectorConformanceTest : public ::testing::TestWithParam<SelectorParam> {
 protected:
  std::unique_ptr<ItemSelector> Make(uint64_t seed = 1234) {
    absl::StatusOr<std::unique_ptr<ItemSelector>> selector =
        MakeSelector(GetParam().options, seed);
    EXPECT_OK(selector);
    return selector.ok() ? *std::move(selector) : nullptr;
  }
  Kind kind() const { return GetParam().options.kind; }
};

TEST_P(SelectorConformanceTest, OptionsRoundTripThroughFactory) {
  std::unique_ptr<ItemSelector> selector = Make();
  ASSERT_NE(selector, nullptr);
  EXPECT_EQ(selector->options(), GetParam().options);
  EXPECT_EQ(selector->options().kind, kind());
  if (kind() == Kind::kPrioritized) {
    EXPECT_EQ(selector->options().priority_exponent,
              GetParam().options.priority_exponent);
  }
  EXPECT_FALSE(selector->DebugString().empty());
}

TEST_P(SelectorConformanceTest, NewSelectorIsEmptyAndCannotSample) {
  std::unique_ptr<ItemSelector> selector = Make();
  ASSERT_NE(selector, nullptr);
  EXPECT_EQ(selector->size(), 0);
  EXPECT_EQ(selector->Sample().status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_P(SelectorConformanceTest, DuplicateInsertIsInvalidArgument) {
  std::unique_ptr<ItemSelector> selector = Make();
  ASSERT_NE(selector, nullptr);
  ASSERT_OK(selector->Insert(7, 1.0));
  absl::Status status = selector->Insert(7, 2.0);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("7"));
  EXPECT_EQ(selector->size(), 1);
  // The failed insert must not have disturbed the existing entry.
  ASSERT_OK(selector->Delete(7));
  EXPECT_EQ(selector->size(), 0);
  EXPECT_EQ(selector->Delete(7).code(), absl::StatusCode::kNotFound);
}

TEST_P(SelectorConformanceTest, UpdateOfUnknownKeyIsNotFound) {
  std::unique_ptr<ItemSelector> selector = Make();
  ASSERT_NE(selector, nullptr);
  EXPECT_EQ(selector->Update(3, 1.0).code(), absl::StatusCode::kNotFound);
  ASSERT_OK(selector->Insert(1, 1.0));
  absl::Status status = selector->Update(3, 1.0);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("3"));
  EXPECT_EQ(selector->size(), 1);
}

// Two selectors of the same seed answer the same samples (keys and
// probabilities) only while they hold the same keys and priorities.
void ExpectSameSamples(ItemSelector& a, ItemSelector& b, int draws) {
  for (int i = 0; i < draws; ++i) {
    absl::StatusOr<ItemSelector::KeyWithProbability> sa = a.Sample();
    absl::StatusOr<ItemSelector::KeyWithProbability> sb = b.Sample();
    ASSERT_OK(sa);
    ASSERT_OK(sb);
    ASSERT_EQ(sa->key, sb->key) << "draw " << i;
    ASSERT_EQ(sa->probability, sb->probability) << "draw " << i;
  }
}

TEST_P(SelectorConformanceTest, UpdateManyIsUpdateOneKeyAtATime) {
  std::unique_ptr<ItemSelector> many = Make(/*seed=*/5);
  std::unique_ptr<ItemSelector> one = Make(/*seed=*/5);
  ASSERT_TRUE(many && one);
  std::mt19937_64 rng(11);
  for (Key key = 0; key < 300; ++key) {
    const double priority = static_cast<double>(rng() % 1000) / 10.0;
    ASSERT_OK(many->Insert(key, priority));
    ASSERT_OK(one->Insert(key, priority));
  }
  for (int round = 0; round < 20; ++round) {
    // Repeated keys included: the last update of a key wins.
    std::vector<std::pair<Key, double>> batch(1 + rng() % 64);
    for (auto& [key, priority] : batch) {
      key = rng() % 300;
      priority = static_cast<double>(rng() % 1000) / 10.0;
    }
    size_t applied = 0;
    ASSERT_OK(many->UpdateMany(batch, &applied));
    EXPECT_EQ(applied, batch.size());
    for (const auto& [key, priority] : batch) {
      ASSERT_OK(one->Update(key, priority));
    }
    ExpectSameSamples(*many, *one, 50);
  }
  EXPECT_EQ(many->TotalWeight(), one->TotalWeight());
  EXPECT_EQ(many->MinProbability(), one->MinProbability());
}

TEST_P(SelectorConformanceTest, UpdateManyStopsAtTheFirstRefusedUpdate) {
  std::unique_ptr<ItemSelector> many = Make(/*seed=*/5);
  std::unique_ptr<ItemSelector> one = Make(/*seed=*/5);
  ASSERT_TRUE(many && one);
  for (Key key = 0; key < 20; ++key) {
    ASSERT_OK(many->Insert(key, 1.0 + key));
    ASSERT_OK(one->Insert(key, 1.0 + key));
  }
  size_t applied = 99;
  absl::Status status =
      many->UpdateMany({{3, 40.0}, {4, 50.0}, {77, 1.0}, {5, 60.0}}, &applied);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("77"));
  EXPECT_EQ(applied, 2u);
  ASSERT_OK(one->Update(3, 40.0));
  ASSERT_OK(one->Update(4, 50.0));
  ExpectSameSamples(*many, *one, 100);

  status = many->UpdateMany({{6, 70.0}, {7, kNaN}, {8, 90.0}}, &applied);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(applied, 1u);
  ASSERT_OK(one->Update(6, 70.0));
  ExpectSameSamples(*many, *one, 100);

  ASSERT_OK(many->UpdateMany({}, &applied));
  EXPECT_EQ(applied, 0u);
}

TEST_P(SelectorConformanceTest, DeleteOfUnknownKeyIsNotFound) {
  std::unique_ptr<ItemSelector> selector = Make();
  ASSERT_NE(selector, nullptr);
  EXPECT_EQ(selector->Delete(3).code(), absl::StatusCode::kNotFound);
  ASSERT_OK(selector->Insert(1, 1.0));
  EXPECT_EQ(selector->Delete(3).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(selector->size(), 1);
  ASSERT_OK(selector->Delete(1));
  EXPECT_EQ(selector->Delete(1).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(selector->size(), 0);
}

// NaN for every kind; negative and infinite priorities only where they are
// sampling weights.
std::vector<double> BadPriorities(SelectorOptions::Kind kind) {
  if (kind != SelectorOptions::Kind::kPrioritized) return {kNaN, -kNaN};
  return {
      kNaN,  -kNaN, -1.0, -1e-300, -std::numeric_limits<double>::denorm_min(),
      -kInf, kInf};
}

TEST_P(SelectorConformanceTest, InvalidPrioritiesAreRejectedOnInsert) {
  std::unique_ptr<ItemSelector> selector = Make();
  ASSERT_NE(selector, nullptr);
  for (double bad : BadPriorities(kind())) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(selector->Insert(1, bad).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(selector->size(), 0);
  }
  // The rejected key was never added, so it can now be inserted.
  EXPECT_OK(selector->Insert(1, 1.0));
}

TEST_P(SelectorConformanceTest, InvalidPrioritiesAreRejectedOnUpdate) {
  std::unique_ptr<ItemSelector> selector = Make();
  ASSERT_NE(selector, nullptr);
  // With a single key every kind must sample it with probability 1.
  ASSERT_OK(selector->Insert(1, 2.0));
  for (double bad : BadPriorities(kind())) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(selector->Update(1, bad).code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(selector->size(), 1);
  absl::StatusOr<ItemSelector::KeyWithProbability> sample = selector->Sample();
  ASSERT_OK(sample);
  EXPECT_EQ(sample->key, 1u);
  EXPECT_EQ(sample->probability, 1.0);
}

TEST_P(SelectorConformanceTest, FailedUpdateLeavesPriorityUnchanged) {
  std::unique_ptr<ItemSelector> selector = Make();
  ASSERT_NE(selector, nullptr);
  ASSERT_OK(selector->Insert(1, 1.0));
  ASSERT_OK(selector->Insert(2, 3.0));
  absl::StatusOr<ItemSelector::KeyWithProbability> before = selector->Sample();
  ASSERT_OK(before);
  ASSERT_EQ(selector->Update(1, -kNaN).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_EQ(selector->Update(2, kNaN).code(),
            absl::StatusCode::kInvalidArgument);
  if (IsDeterministic(kind())) {
    absl::StatusOr<ItemSelector::KeyWithProbability> after = selector->Sample();
    ASSERT_OK(after);
    EXPECT_EQ(after->key, before->key);
  } else {
    // Random kinds: for Prioritized the reported probability depends on
    // both priorities, so it reveals whether either one changed; for
    // Uniform it must stay 1/2 regardless.
    for (int i = 0; i < 50; ++i) {
      absl::StatusOr<ItemSelector::KeyWithProbability> after =
          selector->Sample();
      ASSERT_OK(after);
      if (after->key == before->key) {
        EXPECT_EQ(after->probability, before->probability);
      }
    }
  }
}

TEST_P(SelectorConformanceTest, BoundaryPrioritiesAreAccepted) {
  std::unique_ptr<ItemSelector> selector = Make();
  ASSERT_NE(selector, nullptr);
  Key key = 0;
  std::vector<double> goods = {
      0.0, -0.0, std::numeric_limits<double>::denorm_min(), 1e-300, 1.0, 1e300};
  if (kind() != SelectorOptions::Kind::kPrioritized) {
    goods.insert(goods.end(), {-1.0, -1e300, kInf, -kInf});
  }
  for (double good : goods) {
    SCOPED_TRACE(good);
    EXPECT_OK(selector->Insert(key, good));
    EXPECT_OK(selector->Update(key, good));
    ++key;
  }
  EXPECT_EQ(selector->size(), static_cast<int64_t>(key));
  EXPECT_OK(selector->Sample());
}

TEST_P(SelectorConformanceTest, PriorityErrorIsReportedBeforeKeyError) {
  std::unique_ptr<ItemSelector> selector = Make();
  ASSERT_NE(selector, nullptr);
  ASSERT_OK(selector->Insert(1, 1.0));
  EXPECT_EQ(selector->Insert(1, kNaN).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(selector->Update(99, kNaN).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(SelectorConformanceTest, SizeTracksSuccessfulOperationsOnly) {
  std::unique_ptr<ItemSelector> selector = Make();
  ASSERT_NE(selector, nullptr);
  for (Key key = 0; key < 100; ++key) {
    ASSERT_OK(selector->Insert(key, static_cast<double>(key % 7)));
    EXPECT_EQ(selector->size(), static_cast<int64_t>(key + 1));
  }
  for (Key key = 0; key < 100; key += 3) {
    ASSERT_OK(selector->Update(key, 0.5));
  }
  EXPECT_EQ(selector->size(), 100);
  EXPECT_FALSE(selector->Insert(5, 1.0).ok());
  EXPECT_FALSE(selector->Delete(500).ok());
  EXPECT_EQ(selector->size(), 100);
  for (Key key = 0; key < 100; key += 2) {
    ASSERT_OK(selector->Delete(key));
  }
  EXPECT_EQ(selector->size(), 50);
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<ItemSelector::KeyWithProbability> sample =
        selector->Sample();
    ASSERT_OK(sample);
    EXPECT_EQ(sample->key % 2, 1u) << "sampled deleted key " << sample->key;
    EXPECT_EQ(selector->size(), 50) << "Sample must not remove the key";
  }
}

TEST_P(SelectorConformanceTest, ClearRemovesEverything) {
  std::unique_ptr<ItemSelector> selector = Make();
  ASSERT_NE(selector, nullptr);
  for (Key key = 0; key < 10; ++key) {
    ASSERT_OK(selector->Insert(key, 1.0 + key));
  }
  selector->Clear();
  EXPECT_EQ(selector->size(), 0);
  EXPECT_EQ(selector->Sample().status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(selector->Update(3, 1.0).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(selector->Delete(3).code(), absl::StatusCode::kNotFound);
  // Usable again afterwards, including for the old keys.
  ASSERT_OK(selector->Insert(3, 2.0));
  ASSERT_OK(selector->Insert(11, 2.0));
  EXPECT_EQ(selector->size(), 2);
  absl::StatusOr<ItemSelector::KeyWithProbability> sample = selector->Sample();
  ASSERT_OK(sample);
  EXPECT_TRUE(sample->key == 3 || sample->key == 11) << sample->key;
}

TEST_P(SelectorConformanceTest, DeleteThenReinsertSameKey) {
  std::unique_ptr<ItemSelector> selector = Make();
  ASSERT_NE(selector, nullptr);
  ASSERT_OK(selector->Insert(42, 1.0));
  for (int round = 0; round < 3; ++round) {
    ASSERT_OK(selector->Delete(42));
    EXPECT_EQ(selector->size(), 0);
    EXPECT_FALSE(selector->Sample().ok());
    ASSERT_OK(selector->Insert(42, 2.0 + round));
    EXPECT_EQ(selector->size(), 1);
    absl::StatusOr<ItemSelector::KeyWithProbability> sample =
        selector->Sample();
    ASSERT_OK(sample);
    EXPECT_EQ(sample->key, 42u);
    EXPECT_EQ(sample->probability, 1.0);
    EXPECT_OK(selector->Update(42, 0.0));
  }
}

TEST_P(SelectorConformanceTest, EmptyAgainAfterDeletingEverything) {
  std::unique_ptr<ItemSelector> selector = Make();
  ASSERT_NE(selector, nullptr);
  for (Key key = 0; key < 33; ++key) ASSERT_OK(selector->Insert(key, 1));
  for (Key key = 0; key < 33; ++key) ASSERT_OK(selector->Delete(key));
  EXPECT_EQ(selector->size(), 0);
  EXPECT_EQ(selector->Sample().status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_P(SelectorConformanceTest, SameSeedGivesSameSamples) {
  std::unique_ptr<ItemSelector> a = Make(/*seed=*/99);
  std::unique_ptr<ItemSelector> b = Make(/*seed=*/99);
  std::unique_ptr<ItemSelector> c = Make(/*seed=*/100);
  ASSERT_TRUE(a && b && c);
  for (Key key = 0; key < 10; ++key) {
    for (ItemSelector* s : {a.get(), b.get(), c.get()}) {
      ASSERT_OK(s->Insert(key, 1.0 + key));
    }
  }
  bool c_differs = false;
  for (int i = 0; i < 200; ++i) {
    absl::StatusOr<ItemSelector::KeyWithProbability> sa = a->Sample();
    absl::StatusOr<ItemSelector::KeyWithProbability> sb = b->Sample();
    absl::StatusOr<ItemSelector::KeyWithProbability> sc = c->Sample();
    ASSERT_OK(sa);
    ASSERT_OK(sb);
    ASSERT_OK(sc);
    EXPECT_EQ(sa->key, sb->key);
    c_differs |= (sa->key != sc->key);
  }
  // Only the random kinds use the seed; for them, 200 draws over 10 keys
  // with different seeds coinciding everywhere would mean the seed is
  // ignored.
  EXPECT_EQ(c_differs, !IsDeterministic(kind()));
}

// Brute-force model of all six kinds: keeps every present key with its
// priority and insertion rank and answers questions by linear scans.
class ReferenceModel {
 public:
  struct Entry {
    double priority;
    uint64_t rank;
  };

  explicit ReferenceModel(const SelectorOptions& options) : options_(options) {}

  bool Contains(Key key) const { return entries_.count(key) > 0; }
  void Insert(Key key, double priority) {
    entries_[key] = Entry{priority, next_rank_++};
  }
  void Update(Key key, double priority) { entries_[key].priority = priority; }
  void Delete(Key key) { entries_.erase(key); }
  void Clear() { entries_.clear(); }
  int64_t size() const { return static_cast<int64_t>(entries_.size()); }
  const Entry& at(Key key) const { return entries_.at(key); }

  // The key a deterministic kind must sample.
  Key Predict() const {
    std::optional<Key> best;
    for (const auto& [key, entry] : entries_) {
      if (!best.has_value() || Better(entry, entries_.at(*best))) best = key;
    }
    return *best;
  }

  // The probability a random kind must report for `key`.
  double Probability(Key key) const {
    const double n = static_cast<double>(entries_.size());
    if (options_.kind == Kind::kUniform) return 1.0 / n;
    double total = 0.0;
    for (const auto& [k, entry] : entries_) total += Weight(entry.priority);
    if (total == 0.0) return 1.0 / n;
    return Weight(entries_.at(key).priority) / total;
  }

  double Weight(double priority) const {
    if (options_.priority_exponent == 0.0) return 1.0;
    return std::pow(priority, options_.priority_exponent);
  }

 private:
  bool Better(const Entry& a, const Entry& b) const {
    switch (options_.kind) {
      case Kind::kFifo:
        return a.rank < b.rank;
      case Kind::kLifo:
        return a.rank > b.rank;
      case Kind::kMinHeap:
        return a.priority < b.priority ||
               (a.priority == b.priority && a.rank < b.rank);
      case Kind::kMaxHeap:
        return a.priority > b.priority ||
               (a.priority == b.priority && a.rank < b.rank);
      default:
        ADD_FAILURE() << "Predict() called for a random kind";
        return false;
    }
  }

  SelectorOptions options_;
  uint64_t next_rank_ = 0;
  std::map<Key, Entry> entries_;
};

TEST_P(SelectorConformanceTest, RandomOperationsMatchReferenceModel) {
  std::unique_ptr<ItemSelector> selector = Make(/*seed=*/7);
  ASSERT_NE(selector, nullptr);
  ReferenceModel model(GetParam().options);
  std::mt19937_64 rng(2024);
  // A small key space makes duplicate inserts and re-inserts of deleted
  // keys common.
  std::uniform_int_distribution<Key> key_dist(0, 63);
  std::uniform_int_distribution<int> op_dist(0, 99);
  std::uniform_int_distribution<int> small_int(0, 5);
  std::uniform_real_distribution<double> real(0.0, 10.0);
  auto random_priority = [&]() -> double {
    // Small integers (including 0) give the heaps plenty of ties.
    return op_dist(rng) < 50 ? static_cast<double>(small_int(rng)) : real(rng);
  };

  int samples_checked = 0;
  for (int step = 0; step < 20000; ++step) {
    SCOPED_TRACE(absl::StrCat("step ", step));
    const int op = op_dist(rng);
    const Key key = key_dist(rng);
    if (op < 35) {
      const double priority = random_priority();
      absl::Status status = selector->Insert(key, priority);
      if (model.Contains(key)) {
        ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
      } else {
        ASSERT_OK(status);
        model.Insert(key, priority);
      }
    } else if (op < 55) {
      const double priority = random_priority();
      absl::Status status = selector->Update(key, priority);
      if (model.Contains(key)) {
        ASSERT_OK(status);
        model.Update(key, priority);
      } else {
        ASSERT_EQ(status.code(), absl::StatusCode::kNotFound);
      }
    } else if (op < 80) {
      absl::Status status = selector->Delete(key);
      if (model.Contains(key)) {
        ASSERT_OK(status);
        model.Delete(key);
      } else {
        ASSERT_EQ(status.code(), absl::StatusCode::kNotFound);
      }
    } else if (op < 99) {
      absl::StatusOr<ItemSelector::KeyWithProbability> sample =
          selector->Sample();
      if (model.size() == 0) {
        ASSERT_EQ(sample.status().code(),
                  absl::StatusCode::kFailedPrecondition);
        continue;
      }
      ASSERT_OK(sample);
      ASSERT_TRUE(model.Contains(sample->key))
          << "sampled absent key " << sample->key;
      ++samples_checked;
      if (IsDeterministic(kind())) {
        ASSERT_EQ(sample->key, model.Predict());
        ASSERT_EQ(sample->probability, 1.0);
      } else {
        const double expected = model.Probability(sample->key);
        ASSERT_NEAR(sample->probability, expected, 1e-12 * expected);
        // A zero-weight key may only come up when every weight is zero.
        if (kind() == Kind::kPrioritized &&
            model.Weight(model.at(sample->key).priority) == 0.0) {
          ASSERT_EQ(sample->probability,
                    1.0 / static_cast<double>(model.size()));
        }
      }
    } else {
      selector->Clear();
      model.Clear();
    }
    ASSERT_EQ(selector->size(), model.size());
  }
  // Guards against the op mix degenerating (e.g. always empty).
  EXPECT_GT(samples_checked, 3000);
}

INSTANTIATE_TEST_SUITE_P(
    AllKinds, SelectorConformanceTest,
    ::testing::Values(
        SelectorParam{"Uniform", Options(Kind::kUniform)},
        SelectorParam{"Prioritized", Options(Kind::kPrioritized, 0.7)},
        SelectorParam{"PrioritizedLinear", Options(Kind::kPrioritized, 1.0)},
        SelectorParam{"Fifo", Options(Kind::kFifo)},
        SelectorParam{"Lifo", Options(Kind::kLifo)},
        SelectorParam{"MinHeap", Options(Kind::kMinHeap)},
        SelectorParam{"MaxHeap", Options(Kind::kMaxHeap)}),
    [](const ::testing::TestParamInfo<SelectorParam>& param_info) {
      return param_info.param.name;
    });

// Contract of the free functions in item_selector.h.

TEST(ValidatePriorityTest, AcceptsEverythingButNaN) {
  for (double good : {0.0, -0.0, std::numeric_limits<double>::denorm_min(), 1.0,
                      -2.5, std::numeric_limits<double>::max(), kInf, -kInf}) {
    EXPECT_OK(ValidatePriority(good)) << good;
  }
  absl::Status nan = ValidatePriority(kNaN);
  EXPECT_EQ(nan.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(nan.message(), HasSubstr("nan"));
}

TEST(ValidatePriorityWeightTest, AcceptsFiniteNonNegative) {
  for (double good : {0.0, -0.0, std::numeric_limits<double>::denorm_min(), 1.0,
                      std::numeric_limits<double>::max()}) {
    EXPECT_OK(ValidatePriorityWeight(good)) << good;
  }
}

TEST(ValidatePriorityWeightTest,
     RejectsNaNNegativeAndInfiniteWithValueInMessage) {
  absl::Status nan = ValidatePriorityWeight(kNaN);
  EXPECT_EQ(nan.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(nan.message(), HasSubstr("nan"));

  absl::Status negative = ValidatePriorityWeight(-2.5);
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(negative.message(), HasSubstr("-2.5"));

  absl::Status inf = ValidatePriorityWeight(kInf);
  EXPECT_EQ(inf.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(inf.message(), HasSubstr("inf"));

  EXPECT_EQ(ValidatePriorityWeight(-kInf).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MakeSelectorTest, RejectsBadPriorityExponent) {
  for (double bad : {-1.0, -1e-300, kNaN, kInf}) {
    absl::StatusOr<std::unique_ptr<ItemSelector>> selector =
        MakeSelector(Options(Kind::kPrioritized, bad), 1);
    EXPECT_EQ(selector.status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(MakeSelectorTest, IgnoresExponentForOtherKinds) {
  // The exponent is documented as meaningful only for kPrioritized, so a
  // stale value left in the options must not break other kinds.
  absl::StatusOr<std::unique_ptr<ItemSelector>> selector =
      MakeSelector(Options(Kind::kFifo, -1.0), 1);
  ASSERT_OK(selector);
  EXPECT_EQ((*selector)->options().kind, Kind::kFifo);
}

TEST(MakeSelectorTest, RejectsOutOfRangeKind) {
  absl::StatusOr<std::unique_ptr<ItemSelector>> selector =
      MakeSelector(Options(static_cast<Kind>(17)), 1);
  EXPECT_EQ(selector.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(selector.status().message(), HasSubstr("17"));
}

TEST(SelectorOptionsTest, DebugStringNamesKindAndExponent) {
  EXPECT_EQ(Options(Kind::kPrioritized, 0.7).DebugString(),
            "SelectorOptions(kind=Prioritized, priority_exponent=0.7)");
  // The exponent is omitted where it means nothing.
  EXPECT_EQ(Options(Kind::kMaxHeap, 0.7).DebugString(),
            "SelectorOptions(kind=MaxHeap)");
  EXPECT_EQ(Options(Kind::kUniform).DebugString(),
            "SelectorOptions(kind=Uniform)");
  EXPECT_EQ(Options(Kind::kFifo).DebugString(), "SelectorOptions(kind=Fifo)");
  EXPECT_EQ(Options(Kind::kLifo).DebugString(), "SelectorOptions(kind=Lifo)");
  EXPECT_EQ(Options(Kind::kMinHeap).DebugString(),
            "SelectorOptions(kind=MinHeap)");
  EXPECT_THAT(Options(static_cast<Kind>(17)).DebugString(),
              HasSubstr("Unknown(17)"));
}

TEST(SelectorOptionsTest, EqualityIgnoresExponentUnlessPrioritized) {
  EXPECT_EQ(Options(Kind::kFifo, 1.0), Options(Kind::kFifo, 2.0));
  EXPECT_FALSE(Options(Kind::kPrioritized, 1.0) ==
               Options(Kind::kPrioritized, 2.0));
  EXPECT_FALSE(Options(Kind::kMinHeap) == Options(Kind::kMaxHeap));
}

}  // namespace
}  // namespace reverb_tf
