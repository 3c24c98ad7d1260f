// SPDX-License-Identifier: Apache-2.0
// Internal to the client (client.h's Sampler): sampling several servers as
// one table.
//
// ShardedSampler runs several StreamSamplers, each in a thread of its own
// that decodes what its stream receives into the queue of its shard, and
// merges them: each sample comes from a shard chosen at random in
// proportion to the shard's total sampling weight (its size, or its sum of
// priority^exponent), as its latest sample reported it, so that items of
// all shards are sampled as from one table.
//
// With max_samples, no more than that may be requested from the servers in
// all (a queue-like table must not lose items to prefetching), so the
// shares cannot follow what arrives: the caller gives each shard's weight
// as it is now, the max_samples are split between the shards by a
// multinomial draw with those weights (as sampling one table would split
// them), and each shard's streams request exactly its quota; the merge
// interleaves the quotas at random.
//
// Without max_samples: Until kStallGrace after the
// first shard delivered, a shard that has delivered nothing yet is waited
// for too, so that the first shard up does not serve the first batches
// alone. A chosen shard whose queue is
// empty is waited for a short grace (kStallGrace); if it still has nothing
// (its rate limiter holds it back, its link is slow) it is passed over
// until it delivers again, so one blocked shard does not stall the others.
// A sample's info is the merged table's, as one table holding every
// shard's items would report it: the shards' sizes and total weights are
// added up (each shard's as its latest sample reported it, or as the
// client found it before sampling; a shard known neither way counts for
// nothing), and the probability and smallest
// probability are the item's weight over that total. Queue-like tables keep
// their shard's info: their order, not a probability, chooses.
//
// A stream that fails because its server went away is reopened in the
// background with backoff; the others go on. Only when every shard has
// failed for longer than SamplerOptions::reconnect_timeout does Next()
// report UNAVAILABLE.
//
// Thread safety: as Sampler: Next() and TryNext() from one thread at a
// time, Cancel() from any thread. One mutex guards every shard's queue and
// state, which the caller and the worker threads share. Only a worker's own
// thread calls its StreamSampler's Next() or replaces it; Cancel() and the
// destructor reach the StreamSamplers under the mutex, and the destructor
// joins the workers.
#ifndef REVERB_TF_CC_CLIENT_SHARDED_SAMPLER_H_
#define REVERB_TF_CC_CLIENT_SHARDED_SAMPLER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "reverb_tf/cc/client/client.h"
#include "reverb_tf/cc/client/client_stub.h"
#include "reverb_tf/cc/client/stream_sampler.h"

namespace reverb_tf {

class ShardedSampler : public Sampler {
 public:
  // A shard's table as the client found it before sampling (server info).
  struct ShardTable {
    double weight = 0;  // the sampler's total weight
    int64_t size = 0;
    double min_item_weight = 0;  // TableInfo::sampler_min_item_weight
  };

  // `tables`: each shard's table now, to split options.max_samples by and
  // to count in merged infos until the shard delivers; may be empty (then
  // max_samples is split evenly).
  ShardedSampler(std::vector<std::shared_ptr<ClientStub>> shards,
                 std::string table, const SamplerOptions& options,
                 const std::vector<ShardTable>& tables);
  ~ShardedSampler() override;

  absl::Status Next(Sample* sample) override;
  bool TryNext(Sample* sample) override;
  void Cancel() override;

  // How long a chosen shard with nothing queued is waited for.
  static constexpr absl::Duration kStallGrace = absl::Milliseconds(20);

 private:
  struct Shard {
    std::shared_ptr<ClientStub> stub;
    // The latest sample's table_weight, table_size, and smallest item
    // weight (min_probability * table_weight); until the first sample,
    // the constructor's `tables`, else 0: a shard known neither way adds
    // nothing to merged infos.
    double weight = 0;
    int64_t size = 0;
    double min_item_weight = 0;
    // Delivered since its streams last failed; `ever_up`: ever delivered.
    bool up = false;
    bool ever_up = false;
    // Its streams are failing (since failed_since), with last_error.
    bool failed = false;
    absl::Time failed_since;
    absl::Status last_error;
    // Waited for in vain; passed over until it delivers again.
    bool stalled = false;
    // Streams to run once the table is known to be unordered, and running.
    int streams_wanted = 1;
    int streams_running = 0;
    std::deque<Sample> queue;
    // With max_samples: how many samples this shard is to deliver, how
    // many were taken from it, and what its streams may still request.
    int64_t quota = -1;
    int64_t taken = 0;
    std::shared_ptr<SampleBudget> budget;
  };
  struct Worker {
    int shard = 0;
    std::unique_ptr<StreamSampler> sampler;
    std::thread thread;
  };

  void StartWorkerLocked(int shard) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WorkerLoop(Worker* worker);
  // A shard chosen in proportion to weight among those that are up and not
  // stalled, or (with `queued_only`) among those with a sample queued; -1
  // if there is none.
  int ChooseShardLocked(bool queued_only) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TakeLocked(int shard, Sample* sample) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rewrites `info`, a sample of shard `shard`, as the merged table's (see
  // the top of this file).
  void MergeInfoLocked(int shard, SampleInfo* info)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // UNAVAILABLE once every shard has failed for reconnect_timeout; OK while
  // some shard may still deliver.
  absl::Status AllFailedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // With max_samples: the shard the next sample must come from, drawn in
  // proportion to what the shards still owe; -1 when all is taken.
  int QuotaShardLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status NextByQuotaLocked(Sample* sample)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Marks shards that have delivered nothing yet as stalled once
  // kStallGrace has passed since the first delivery; until then, whether
  // Next() should wait for them.
  bool AwaitingFirstDeliveriesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string table_;
  SamplerOptions stream_options_;
  const int64_t max_samples_;
  const absl::Duration reconnect_timeout_;
  const bool by_quota_;

  absl::Mutex mu_;
  absl::CondVar cv_;
  std::vector<Shard> shards_ ABSL_GUARDED_BY(mu_);
  // The table hands items out in a defined order (a stream said so).
  bool ordered_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<Worker>> workers_ ABSL_GUARDED_BY(mu_);
  int workers_finished_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t returned_ ABSL_GUARDED_BY(mu_) = 0;
  // QuotaShardLocked()'s pick, kept until a sample of it is taken.
  int quota_choice_ ABSL_GUARDED_BY(mu_) = -1;
  // When the first shard delivered its first sample.
  absl::Time first_delivery_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool awaiting_first_deliveries_ ABSL_GUARDED_BY(mu_) = true;
  absl::Status fatal_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_CLIENT_SHARDED_SAMPLER_H_
