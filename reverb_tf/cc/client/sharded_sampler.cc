// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/client/sharded_sampler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "reverb_tf/cc/platform/deadline.h"
#include "reverb_tf/cc/platform/status_macros.h"

namespace reverb_tf {

ShardedSampler::ShardedSampler(std::vector<std::shared_ptr<ClientStub>> shards,
                               std::string table, const SamplerOptions& options,
                               const std::vector<ShardTable>& tables)
    : table_(std::move(table)),
      stream_options_(options),
      max_samples_(options.max_samples),
      reconnect_timeout_(options.reconnect_timeout),
      by_quota_(options.max_samples >= 0),
      rng_(std::random_device()()) {
  stream_options_.max_samples = -1;  // budgets count instead
  const int n = static_cast<int>(shards.size());
  const int total =
      options.num_streams < 1 ? n : std::max(options.num_streams, n);
  absl::MutexLock lock(&mu_);
  shards_.resize(n);
  for (int i = 0; i < n; ++i) {
    shards_[i].stub = std::move(shards[i]);
    shards_[i].streams_wanted = total / n + (i < total % n ? 1 : 0);
    if (i < static_cast<int>(tables.size())) {
      shards_[i].weight = tables[i].weight;
      shards_[i].size = tables[i].size;
      shards_[i].min_item_weight = tables[i].min_item_weight;
    }
  }
  if (by_quota_) {
    // A multinomial draw of max_samples over the weights, one binomial at a
    // time; without any weight, the shards alike.
    double left_weight = 0;
    for (int i = 0; i < n; ++i) left_weight += std::max(shards_[i].weight, 0.0);
    const bool alike = !(left_weight > 0);
    if (alike) left_weight = n;
    int64_t left = max_samples_;
    for (int i = 0; i < n; ++i) {
      const double w = alike ? 1.0 : std::max(shards_[i].weight, 0.0);
      const double p = left_weight > 0 ? std::min(1.0, w / left_weight) : 0.0;
      const int64_t quota =
          i == n - 1 ? left
                     : std::binomial_distribution<int64_t>(left, p)(rng_);
      shards_[i].quota = quota;
      shards_[i].budget =
          std::make_shared<SampleBudget>(quota, shards_[i].streams_wanted);
      left -= quota;
      left_weight -= w;
    }
  }
  for (int i = 0; i < n; ++i) {
    if (by_quota_ && shards_[i].quota == 0) continue;  // owes nothing
    StartWorkerLocked(i);
  }
}

ShardedSampler::~ShardedSampler() {
  std::vector<std::unique_ptr<Worker>> workers;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (auto& worker : workers_) {
      if (worker->sampler != nullptr) worker->sampler->Cancel();
    }
    cv_.SignalAll();
    workers = std::move(workers_);
  }
  for (auto& worker : workers) worker->thread.join();
}

void ShardedSampler::StartWorkerLocked(int shard) {
  auto worker = std::make_unique<Worker>();
  worker->shard = shard;
  ++shards_[shard].streams_running;
  Worker* raw = worker.get();
  workers_.push_back(std::move(worker));
  raw->thread = std::thread([this, raw] { WorkerLoop(raw); });
}

void ShardedSampler::WorkerLoop(Worker* worker) {
  absl::Duration backoff = absl::Milliseconds(100);
  std::shared_ptr<ClientStub> stub;
  std::shared_ptr<SampleBudget> budget;
  {
    absl::MutexLock lock(&mu_);
    stub = shards_[worker->shard].stub;
    budget = shards_[worker->shard].budget;
  }
  while (true) {
    // Opening a stream may wait for a connection: not under the lock.
    auto sampler =
        std::make_unique<StreamSampler>(stub, table_, stream_options_, budget);
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      if (cancelled_) sampler->Cancel();
      std::swap(worker->sampler, sampler);
    }
    sampler.reset();  // the failed one, outside the lock
    absl::Status status;
    while (true) {
      Sample sample;
      // Only this thread replaces worker->sampler, so it stays alive here.
      status = worker->sampler->Next(&sample);
      if (!status.ok()) break;
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      Shard& shard = shards_[worker->shard];
      backoff = absl::Milliseconds(100);
      shard.weight = sample.info.table_weight;
      shard.size = sample.info.table_size;
      shard.min_item_weight =
          sample.info.min_probability * sample.info.table_weight;
      shard.up = true;
      shard.ever_up = true;
      first_delivery_ = std::min(first_delivery_, absl::Now());
      shard.failed = false;
      shard.stalled = false;
      if (worker->sampler->ordered()) {
        ordered_ = true;
      } else {
        while (shard.streams_running < shard.streams_wanted)
          StartWorkerLocked(worker->shard);
      }
      shard.queue.push_back(std::move(sample));
      cv_.SignalAll();
      const size_t capacity =
          static_cast<size_t>(stream_options_.max_in_flight) *
          shard.streams_running;
      auto room = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || shards_[worker->shard].queue.size() < capacity;
      };
      mu_.Await(absl::Condition(&room));
      if (stopping_) return;
    }
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    if (absl::IsOutOfRange(status)) {  // the budget is spent
      ++workers_finished_;
      cv_.SignalAll();
      return;
    }
    if (!IsShardFailure(status) || cancelled_) {
      if (fatal_.ok()) fatal_ = status;
      cv_.SignalAll();
      return;
    }
    // The shard went away: the others go on while this stream is reopened.
    Shard& shard = shards_[worker->shard];
    shard.up = false;
    if (!shard.failed) {
      shard.failed = true;
      shard.failed_since = absl::Now();
    }
    shard.last_error = status;
    cv_.SignalAll();
    auto stop = [this]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
    mu_.AwaitWithTimeout(absl::Condition(&stop), backoff);
    if (stopping_) return;
    backoff = std::min(backoff * 2, absl::Seconds(2));
  }
}

int ShardedSampler::ChooseShardLocked(bool queued_only) {
  double total = 0;
  int candidates = 0;
  auto eligible = [&](const Shard& shard) {
    return queued_only ? !shard.queue.empty() : shard.up && !shard.stalled;
  };
  for (const Shard& shard : shards_) {
    if (!eligible(shard)) continue;
    ++candidates;
    total += std::max(shard.weight, 0.0);
  }
  if (candidates == 0) return -1;
  if (!(total > 0)) {
    // No weights (e.g. every priority 0): the candidates alike.
    int pick = static_cast<int>(
        std::uniform_int_distribution<int>(0, candidates - 1)(rng_));
    for (size_t i = 0; i < shards_.size(); ++i) {
      if (eligible(shards_[i]) && pick-- == 0) return static_cast<int>(i);
    }
  }
  double target = std::uniform_real_distribution<double>(0, total)(rng_);
  int last = -1;
  for (size_t i = 0; i < shards_.size(); ++i) {
    if (!eligible(shards_[i])) continue;
    last = static_cast<int>(i);
    target -= std::max(shards_[i].weight, 0.0);
    if (target < 0) return last;
  }
  return last;  // rounding left target at 0
}

void ShardedSampler::TakeLocked(int shard, Sample* sample) {
  *sample = std::move(shards_[shard].queue.front());
  shards_[shard].queue.pop_front();
  MergeInfoLocked(shard, &sample->info);
  ++shards_[shard].taken;
  ++returned_;
  quota_choice_ = -1;
  cv_.SignalAll();  // a worker may wait for room
}

void ShardedSampler::MergeInfoLocked(int shard, SampleInfo* info) {
  if (shards_.size() < 2 || ordered_) return;
  // The item's shard as it was when the item was chosen; the others as
  // they last reported.
  double total = std::max(info->table_weight, 0.0);
  int64_t size = info->table_size;
  double min_item_weight = info->min_probability * info->table_weight;
  for (size_t i = 0; i < shards_.size(); ++i) {
    if (static_cast<int>(i) == shard) continue;
    const Shard& other = shards_[i];
    total += std::max(other.weight, 0.0);
    size += other.size;
    min_item_weight = SmallerItemWeight(min_item_weight, other.min_item_weight);
  }
  if (!(total > 0)) return;  // nothing can be chosen: nothing to scale by
  info->probability *= info->table_weight / total;
  info->min_probability = min_item_weight / total;
  info->table_weight = total;
  info->table_size = size;
}

absl::Status ShardedSampler::AllFailedLocked() {
  absl::Time last_failure = absl::InfinitePast();
  for (const Shard& shard : shards_) {
    if (!shard.failed || !shard.queue.empty()) return absl::OkStatus();
    last_failure = std::max(last_failure, shard.failed_since);
  }
  if (absl::Now() - last_failure < reconnect_timeout_) return absl::OkStatus();
  std::vector<std::string> reasons;
  for (const Shard& shard : shards_)
    reasons.push_back(std::string(shard.last_error.message()));
  return absl::UnavailableError(
      absl::StrCat("no shard of table '", table_, "' could be reached for ",
                   absl::FormatDuration(reconnect_timeout_), ": ",
                   absl::StrJoin(reasons, "; ")));
}

bool ShardedSampler::AwaitingFirstDeliveriesLocked() {
  if (!awaiting_first_deliveries_) return false;
  const bool grace_over = absl::Now() - first_delivery_ >= kStallGrace;
  bool awaiting = false;
  for (Shard& shard : shards_) {
    if (shard.ever_up || shard.failed) continue;
    if (grace_over) {
      shard.stalled = true;
    } else {
      awaiting = true;
    }
  }
  awaiting_first_deliveries_ = awaiting;
  return awaiting;
}

absl::Status ShardedSampler::Next(Sample* sample) {
  absl::MutexLock lock(&mu_);
  while (true) {
    if (cancelled_) return absl::CancelledError("the sampler was cancelled");
    RETURN_IF_ERROR(fatal_);
    if (max_samples_ >= 0 && returned_ >= max_samples_) {
      return absl::OutOfRangeError(
          absl::StrCat("the sampler returned its max_samples=", max_samples_));
    }
    if (by_quota_) return NextByQuotaLocked(sample);
    if (AwaitingFirstDeliveriesLocked()) {
      // Until every shard delivered (or the grace since the first passed).
      cv_.WaitWithTimeout(&mu_,
                          first_delivery_ == absl::InfiniteFuture()
                              ? absl::Milliseconds(100)
                              : first_delivery_ + kStallGrace - absl::Now());
      continue;
    }
    int chosen = ChooseShardLocked(/*queued_only=*/false);
    if (chosen >= 0 && shards_[chosen].queue.empty()) {
      auto arrived = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return cancelled_ || !fatal_.ok() || !shards_[chosen].queue.empty() ||
               !shards_[chosen].up;
      };
      if (!mu_.AwaitWithTimeout(absl::Condition(&arrived), kStallGrace)) {
        shards_[chosen].stalled = true;
      }
      if (shards_[chosen].queue.empty())
        chosen = ChooseShardLocked(/*queued_only=*/true);
    } else if (chosen < 0) {
      // No shard is up: what failed shards delivered before is still good.
      chosen = ChooseShardLocked(/*queued_only=*/true);
    }
    if (chosen >= 0 && !shards_[chosen].queue.empty()) {
      TakeLocked(chosen, sample);
      return absl::OkStatus();
    }
    if (chosen >= 0) continue;  // the chosen shard changed state: choose again
    if (workers_finished_ == static_cast<int>(workers_.size())) {
      return absl::OutOfRangeError(
          "the sampler requested all the samples it may");
    }
    RETURN_IF_ERROR(AllFailedLocked());
    cv_.WaitWithTimeout(&mu_, absl::Milliseconds(100));
  }
}

int ShardedSampler::QuotaShardLocked() {
  if (quota_choice_ >= 0) return quota_choice_;
  int64_t owed = 0;
  for (const Shard& shard : shards_) owed += shard.quota - shard.taken;
  if (owed <= 0) return -1;
  int64_t target = std::uniform_int_distribution<int64_t>(0, owed - 1)(rng_);
  for (size_t i = 0; i < shards_.size(); ++i) {
    target -= shards_[i].quota - shards_[i].taken;
    if (target < 0) return quota_choice_ = static_cast<int>(i);
  }
  return -1;
}

absl::Status ShardedSampler::NextByQuotaLocked(Sample* sample) {
  const int chosen = QuotaShardLocked();
  if (chosen < 0)
    return absl::OutOfRangeError("the sampler returned all its samples");
  Shard& shard = shards_[chosen];
  while (shard.queue.empty()) {
    if (cancelled_) return absl::CancelledError("the sampler was cancelled");
    RETURN_IF_ERROR(fatal_);
    // The quota can only come from this shard: wait for it to come back,
    // up to reconnect_timeout.
    if (shard.failed &&
        absl::Now() - shard.failed_since >= reconnect_timeout_) {
      return absl::UnavailableError(
          absl::StrCat("shard ", shard.stub->address(), " of table '", table_,
                       "' could not be reached for ",
                       absl::FormatDuration(reconnect_timeout_), ": ",
                       shard.last_error.message()));
    }
    cv_.WaitWithTimeout(&mu_, absl::Milliseconds(100));
  }
  TakeLocked(chosen, sample);
  return absl::OkStatus();
}

bool ShardedSampler::TryNext(Sample* sample) {
  absl::MutexLock lock(&mu_);
  if (cancelled_ || !fatal_.ok() ||
      (max_samples_ >= 0 && returned_ >= max_samples_)) {
    return false;
  }
  // Only the shard the weights (or quotas) choose, so that a batch keeps
  // the proportions.
  const int chosen =
      by_quota_ ? QuotaShardLocked() : ChooseShardLocked(/*queued_only=*/false);
  if (chosen < 0 || shards_[chosen].queue.empty()) return false;
  TakeLocked(chosen, sample);
  return true;
}

void ShardedSampler::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  for (auto& worker : workers_) {
    if (worker->sampler != nullptr) worker->sampler->Cancel();
  }
  cv_.SignalAll();
}

}  // namespace reverb_tf
