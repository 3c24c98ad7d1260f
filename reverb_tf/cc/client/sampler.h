// SPDX-License-Identifier: Apache-2.0
// Internal to the client: the two Samplers (client.h).
//
// StreamSampler reads one SampleStream in the caller's thread, keeping
// max_in_flight samples requested ahead of what was consumed, so a consumer
// never waits for a round trip.
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
#ifndef REVERB_TF_CC_CLIENT_SAMPLER_H_
#define REVERB_TF_CC_CLIENT_SAMPLER_H_

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

namespace reverb_tf {

// Samples that may still be requested from the servers, shared by the
// streams of one sampler so that all of them together never request more
// than max_samples (what a queue-like table must not lose to prefetching).
// No stream takes more than its share of what remains, so that a small
// budget is spread over the streams and the last samples are requested by
// the streams the merge draws from. Thread-safe.
class SampleBudget {
 public:
  SampleBudget(int64_t total, int streams) : remaining_(total), streams_(streams) {}
  // Takes up to `wanted`, and at most ceil(remaining / streams); returns how
  // many were taken.
  int64_t Take(int64_t wanted);
  // Gives back samples requested on a stream that failed before they came.
  void Give(int64_t n) { remaining_.fetch_add(n); }

 private:
  std::atomic<int64_t> remaining_;
  const int streams_;
};

struct SamplerStream;

// Thread safety: Next()/TryNext() from one thread at a time; Cancel() and
// ordered() from any thread.
class StreamSampler : public Sampler {
 public:
  // With a `budget`, credits are taken from it (and options.max_samples is
  // not consulted): Next() reports OUT_OF_RANGE once it is spent and every
  // sample taken from it was returned.
  StreamSampler(std::shared_ptr<ClientStub> stub, std::string table,
                const SamplerOptions& options, std::shared_ptr<SampleBudget> budget = nullptr);
  ~StreamSampler() override;

  absl::Status Next(Sample* sample) override;
  bool TryNext(Sample* sample) override;
  void Cancel() override;

  // The table's sampler hands items out in order (known from the first
  // response on).
  bool ordered() const { return ordered_.load(); }

 private:
  absl::Status Fail(absl::Status status);
  // Reads the next response into buffer_, granting credits first.
  absl::Status Refill();
  // Replaces the stream (a retry, or max_samples_per_stream reached); the
  // credits of the old one that brought nothing go back to the budget.
  void OpenStream();

  const std::shared_ptr<ClientStub> stub_;
  const std::string table_;
  const SamplerOptions options_;
  const std::shared_ptr<SampleBudget> budget_;
  std::unique_ptr<SamplerStream> stream_;
  std::vector<Sample> buffer_;
  size_t next_in_buffer_ = 0;
  int64_t returned_ = 0;
  // Samples received (decoded) and requested, over all streams.
  int64_t received_ = 0;
  int64_t granted_ = 0;
  // returned_ when the current stream was opened.
  int64_t stream_start_ = 0;
  absl::Status error_;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> ordered_{false};
  // Guards replacing stream_ (a retry) against Cancel() from another thread.
  absl::Mutex stream_mu_;
};

// Samples a table of a server in this process directly (local_server.h):
// Table::Sample with the same batch, timeout and cancellation as a stream,
// the sampled columns materialized from the chunks without serialization.
// Thread safety: as StreamSampler.
class InProcessSampler : public Sampler {
 public:
  InProcessSampler(std::shared_ptr<ClientStub> stub, std::string table,
                   const SamplerOptions& options);

  absl::Status Next(Sample* sample) override;
  bool TryNext(Sample* sample) override;
  void Cancel() override { cancel_.Cancel(); }

  // The table's items themselves, for a caller that reads their chunks
  // (sample_batch.cc stacks them without materializing each sample):
  // replaces `items` with between 1 and `max_items` sampled items, blocking
  // for the first, under the same max_samples, timeout and cancellation as
  // Next(). FAILED_PRECONDITION while samples that Next() materialized are
  // still buffered (buffered() > 0); errors as Next() otherwise.
  absl::Status NextItems(int64_t max_items, std::vector<SampledItem>* items);
  // Materialized samples not yet returned by Next()/TryNext().
  size_t buffered() const { return buffer_.size() - next_in_buffer_; }

 private:
  absl::Status Refill();
  // One Table::Sample call of up to `max_items` (and the sampler's batch
  // and max_samples limits).
  absl::StatusOr<std::vector<SampledItem>> SampleTable(int64_t max_items);

  const std::shared_ptr<ClientStub> stub_;
  const std::string table_;
  const SamplerOptions options_;
  Cancellation cancel_;
  std::vector<Sample> buffer_;
  size_t next_in_buffer_ = 0;
  int64_t returned_ = 0;
  absl::Status error_;
};

// Materializes `item`'s columns (uncompressed) into `sample`.
absl::Status MaterializeSample(const SampledItem& item, Sample* sample);


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
  ShardedSampler(std::vector<std::shared_ptr<ClientStub>> shards, std::string table,
                 const SamplerOptions& options, const std::vector<ShardTable>& tables);
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
  void MergeInfoLocked(int shard, SampleInfo* info) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // UNAVAILABLE once every shard has failed for reconnect_timeout; OK while
  // some shard may still deliver.
  absl::Status AllFailedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // With max_samples: the shard the next sample must come from, drawn in
  // proportion to what the shards still owe; -1 when all is taken.
  int QuotaShardLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status NextByQuotaLocked(Sample* sample) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

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

#endif  // REVERB_TF_CC_CLIENT_SAMPLER_H_
