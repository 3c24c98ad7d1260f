// SPDX-License-Identifier: Apache-2.0
// PrioritizedSelector alone, without a table or a network: nanoseconds per
// Update of a random held key (one at a time, and in batches of 256 through
// UpdateMany, as Table::MutatePriorities makes them) and per Sample, at
// several sizes. Random keys over the whole selector are its worst case:
// nothing stays cached at 10M keys.
//
//   bazel run //bench:selector_bench -- [sizes...]   (default: 10000 1000000
//   10000000)
#include <cstdio>
#include <cstdlib>
#include <random>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "reverb_tf/cc/selectors/prioritized_selector.h"

namespace {

using reverb_tf::Key;
using reverb_tf::PrioritizedSelector;

double NanosPer(absl::Time start, int64_t ops) {
  return absl::ToDoubleNanoseconds(absl::Now() - start) /
         static_cast<double>(ops);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::atoll(argv[i]));
  if (sizes.empty()) sizes = {10000, 1000000, 10000000};
  std::printf("%12s %14s %16s %12s\n", "keys", "update ns", "batched ns",
              "sample ns");
  for (int64_t size : sizes) {
    PrioritizedSelector selector(/*priority_exponent=*/0.6, /*seed=*/1);
    std::mt19937_64 rng(7);
    std::vector<Key> keys(size);
    for (int64_t i = 0; i < size; ++i) {
      keys[i] = rng();
      if (!selector.Insert(keys[i], 1.0 + (rng() % 1000) / 100.0).ok())
        return 1;
    }
    constexpr int kOps = 2000000;
    std::vector<Key> picked(kOps);
    std::vector<double> priorities(kOps);
    for (int i = 0; i < kOps; ++i) {
      picked[i] = keys[rng() % size];
      priorities[i] = 0.1 + (rng() % 1000) / 100.0;
    }
    absl::Time start = absl::Now();
    for (int i = 0; i < kOps; ++i) {
      if (!selector.Update(picked[i], priorities[i]).ok()) return 1;
    }
    const double update_ns = NanosPer(start, kOps);
    constexpr int kBatch = 256;
    std::vector<std::pair<Key, double>> batches(kOps);
    for (int i = 0; i < kOps; ++i) batches[i] = {picked[i], priorities[i]};
    start = absl::Now();
    for (int i = 0; i + kBatch <= kOps; i += kBatch) {
      size_t applied = 0;
      if (!selector
               .UpdateMany(absl::MakeConstSpan(&batches[i], kBatch), &applied)
               .ok())
        return 1;
    }
    const double batched_ns = NanosPer(start, kOps / kBatch * kBatch);
    start = absl::Now();
    double sink = 0;
    for (int i = 0; i < kOps; ++i) sink += selector.Sample()->probability;
    const double sample_ns = NanosPer(start, kOps);
    std::printf("%12lld %14.1f %16.1f %12.1f%s\n", static_cast<long long>(size),
                update_ns, batched_ns, sample_ns, sink < 0 ? "!" : "");
  }
  return 0;
}
