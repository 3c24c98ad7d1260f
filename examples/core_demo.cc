// SPDX-License-Identifier: Apache-2.0
// The replay core on its own, in one process: two actors write episodes into
// a prioritized table as overlapping 3-step trajectories that share chunks,
// while a learner samples batches and updates priorities, all under a
// SampleToInsertRatio rate limiter. Prints what happened.
#include <atomic>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "reverb_tf/cc/chunk_store.h"
#include "reverb_tf/cc/table.h"

namespace {

using namespace reverb_tf;  // NOLINT: a short example program.

constexpr int kEpisodes = 200;
constexpr int kEpisodeLength = 50;
constexpr int kTrajectoryLength = 3;

ChunkRef ObservationChunk(ChunkStore& store, ChunkKey key, uint64_t episode,
                          int step) {
  float observation[4] = {static_cast<float>(episode), static_cast<float>(step),
                          0, 1};
  std::string bytes(reinterpret_cast<const char*>(observation),
                    sizeof(observation));
  auto payload = MakePayload(DType::kFloat, {1, 4}, std::move(bytes));
  return *store.Insert(key, episode, step, *payload);
}

}  // namespace

int main() {
  ChunkStore store;
  TableOptions options;
  options.name = "replay";
  options.sampler = {SelectorOptions::Kind::kPrioritized, 0.8};
  options.remover = {SelectorOptions::Kind::kFifo, 1};
  options.max_size = 2000;
  options.rate_limiter = RateLimiterOptions::SampleToInsertRatio(4.0, 100, 400);
  options.signature = TableSignature{
      {ColumnSpec{"observation", DType::kFloat, {kTrajectoryLength, 4}}}, ""};
  auto table = *Table::Create(options, /*seed=*/7);

  std::atomic<bool> done{false};
  std::atomic<int64_t> next_key{1};
  const absl::Time start = absl::Now();
  std::vector<std::thread> actors;
  for (int actor = 0; actor < 2; ++actor) {
    actors.emplace_back([&, actor] {
      for (int e = 0; e < kEpisodes / 2; ++e) {
        const uint64_t episode = actor * kEpisodes + e;
        std::vector<ChunkRef> steps;
        for (int t = 0; t < kEpisodeLength; ++t) {
          steps.push_back(ObservationChunk(store, next_key++, episode, t));
          if (t + 1 < kTrajectoryLength) continue;
          Item item;
          item.key = next_key++;
          item.priority = 1.0;
          SlicedColumn column;
          for (int k = t + 1 - kTrajectoryLength; k <= t; ++k) {
            column.add_slice(ChunkSlice{steps[k], 0, 1});
          }
          item.trajectory.push_back(std::move(column));
          absl::Status status =
              table->InsertOrAssign(std::move(item), absl::Seconds(10));
          if (!status.ok()) {
            std::fprintf(stderr, "insert failed: %s\n",
                         status.ToString().c_str());
            return;
          }
        }
      }
    });
  }
  int64_t sampled = 0, updated = 0;
  std::thread learner([&] {
    std::mt19937 rng(1);
    while (!done.load()) {
      auto batch = table->Sample(64, absl::Milliseconds(100));
      if (!batch.ok()) continue;  // limiter timeout: actors are behind
      std::vector<std::pair<Key, double>> updates;
      for (const SampledItem& sample : *batch) {
        updates.push_back({sample.key, 0.1 + (rng() % 100) / 10.0});
      }
      sampled += batch->size();
      updated += table->MutatePriorities(updates, {})->updated;
    }
  });
  for (auto& actor : actors) actor.join();
  done.store(true);
  learner.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);

  const TableInfo info = table->info();
  std::printf(
      "core demo: %lld items inserted, %lld sampled, %lld priority updates in "
      "%.2f s\n",
      static_cast<long long>(info.rate_limiter_info.inserts),
      static_cast<long long>(sampled), static_cast<long long>(updated),
      seconds);
  std::printf(
      "table '%s': size %lld / %lld, observed samples per insert %.2f (target "
      "4)\n",
      info.options.name.c_str(), static_cast<long long>(info.current_size),
      static_cast<long long>(info.options.max_size),
      static_cast<double>(info.rate_limiter_info.samples) /
          static_cast<double>(info.rate_limiter_info.inserts));
  std::printf("chunks live: %lld (shared by overlapping trajectories)\n",
              static_cast<long long>(store.num_live_chunks()));
  if (absl::Status status = table->CheckInvariants(); !status.ok()) {
    std::fprintf(stderr, "invariant violated: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
