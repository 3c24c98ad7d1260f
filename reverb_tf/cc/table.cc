// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/table.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "reverb_tf/cc/platform/deadline.h"
#include "reverb_tf/cc/platform/status_macros.h"

namespace reverb_tf {
absl::Status TableOptions::Validate() const {
  if (name.empty()) return absl::InvalidArgumentError("table name is empty");
  if (max_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("table '", name, "': max_size (", max_size,
                     ") must be a positive integer"));
  }
  for (const auto& [role, selector] :
       {std::pair<const char*, const SelectorOptions*>{"sampler", &sampler},
        {"remover", &remover}}) {
    if (absl::Status status = selector->Validate(); !status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("table '", name, "': ", role, ": ", status.message()));
    }
  }
  if (absl::Status status = rate_limiter.Validate(); !status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("table '", name, "': ", status.message()));
  }
  if (signature.has_value()) {
    for (const ColumnSpec& column : signature->columns) {
      if (!IsValidDType(static_cast<int32_t>(column.dtype))) {
        return absl::InvalidArgumentError(
            absl::StrCat("table '", name, "': signature column '", column.name,
                         "' has an invalid dtype"));
      }
      for (int64_t d : column.shape) {
        if (d < -1) {
          return absl::InvalidArgumentError(absl::StrCat(
              "table '", name, "': signature column '", column.name,
              "' has dimension ", d, " (use -1 for any size)"));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status TableOptions::CheckNew() const {
  RETURN_IF_ERROR(Validate());
  if (max_times_sampled < 1) {
    if (absl::Status status = rate_limiter.CheckLive(); !status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("table '", name, "': ", status.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Table>> Table::Create(TableOptions options,
                                                     uint64_t seed) {
  RETURN_IF_ERROR(options.Validate());
  ASSIGN_OR_RETURN(auto sampler, MakeSelector(options.sampler, seed));
  ASSIGN_OR_RETURN(auto remover, MakeSelector(options.remover, seed + 1));
  return std::shared_ptr<Table>(
      new Table(std::move(options), std::move(sampler), std::move(remover)));
}

Table::Table(TableOptions options, std::unique_ptr<ItemSelector> sampler,
             std::unique_ptr<ItemSelector> remover)
    : options_(std::move(options)),
      sampler_(std::move(sampler)),
      remover_(std::move(remover)),
      sampler_priority_matters_(sampler_->priority_matters()),
      remover_priority_matters_(remover_->priority_matters()),
      rate_limiter_(options_.rate_limiter) {}

Table::~Table() { Close(); }

absl::Status Table::AwaitLocked(absl::FunctionRef<bool()> ready,
                                absl::Time deadline, Cancellation* cancel,
                                RateLimiterCallStats* stats, const char* what,
                                bool* waited, absl::Duration recheck) {
  *waited = false;
  if (closed_) {
    return absl::CancelledError(
        absl::StrCat("table '", name(), "' is closed: the server is stopping"));
  }
  if (ready()) {
    ++stats->completed;
    return absl::OkStatus();
  }
  *waited = true;
  const absl::Time start = absl::Now();
  Cancellation::Id wakeup_id = 0;
  bool registered = false;
  if (cancel != nullptr) {
    std::weak_ptr<Table> weak = weak_from_this();
    registered = cancel->Register(
        [weak] {
          if (auto table = weak.lock()) {
            absl::MutexLock lock(&table->mu_);
            table->cv_.SignalAll();
          }
        },
        &wakeup_id);
  }
  ++stats->pending;
  absl::Status status;
  while (true) {
    if (closed_) {
      status = absl::CancelledError(
          absl::StrCat("table '", name(), "' was closed while waiting to ",
                       what, ": the server is stopping"));
      break;
    }
    if (cancel != nullptr && cancel->IsCancelled()) {
      status = absl::CancelledError(absl::StrCat(
          "cancelled while waiting to ", what, " in table '", name(), "'"));
      break;
    }
    if (ready()) break;
    if (absl::Now() >= deadline) {
      status = absl::DeadlineExceededError(absl::StrCat(
          "rate limiter timeout: table '", name(), "' did not allow to ", what,
          " within ", absl::FormatDuration(deadline - start)));
      break;
    }
    cv_.WaitWithDeadline(&mu_, std::min(deadline, absl::Now() + recheck));
  }
  --stats->pending;
  if (registered) cancel->Unregister(wakeup_id);
  if (status.ok()) {
    ++stats->completed;
    ++stats->limited;
    stats->completed_wait_time += absl::Now() - start;
  }
  return status;
}

absl::Status Table::EvictOverflowLocked(std::vector<Item>* graveyard) {
  while (static_cast<int64_t>(items_.size()) > options_.max_size) {
    ASSIGN_OR_RETURN(auto victim, remover_->Sample());
    RETURN_IF_ERROR(DeleteLocked(victim.key, graveyard));
    ++counters_.evicted;
  }
  return absl::OkStatus();
}

double PriorityHistogram::UpperBound(int bucket) {
  if (bucket <= 0) return 0.0;
  if (bucket >= kNumBuckets - 1) return std::numeric_limits<double>::infinity();
  return std::ldexp(1.0, bucket - 11);
}

int PriorityHistogram::BucketOf(double priority) {
  if (!(priority > 0)) return 0;
  if (std::isinf(priority)) return kNumBuckets - 1;
  int exponent;
  const double mantissa =
      std::frexp(priority, &exponent);  // priority = m * 2^e, m in [0.5, 1)
  // The smallest e' with priority <= 2^e'.
  const int ceiling = mantissa == 0.5 ? exponent - 1 : exponent;
  return std::clamp(ceiling + 11, 1, kNumBuckets - 1);
}

absl::Status Table::CheckPriority(double priority) const {
  const bool weights =
      options_.sampler.kind == SelectorOptions::Kind::kPrioritized ||
      options_.remover.kind == SelectorOptions::Kind::kPrioritized;
  return weights ? ValidatePriorityWeight(priority)
                 : ValidatePriority(priority);
}

void Table::CountEpisodeLocked(const Item& item, int delta) {
  if (item.trajectory.empty() || item.trajectory.front().slices().empty())
    return;
  const ChunkSlice& first = item.trajectory.front().slices().front();
  const uint64_t episode = first.chunk->episode_id(first.offset);
  if (delta > 0) {
    ++episode_items_[episode];
    return;
  }
  auto it = episode_items_.find(episode);
  if (it != episode_items_.end() && --it->second == 0) {
    episode_items_.erase(it);
    ++num_deleted_episodes_;
  }
}

absl::Status Table::AssignLocked(Item* item) {
  RETURN_IF_ERROR(sampler_->Update(item->key, item->priority));
  RETURN_IF_ERROR(remover_->Update(item->key, item->priority));
  if (journal_ != nullptr) journal_->Inserted(*this, *item);
  Item& stored = items_.at(item->key);
  CountPriorityLocked(stored.priority, -1);
  CountPriorityLocked(item->priority, 1);
  stored.priority = item->priority;
  CountEpisodeLocked(*item, 1);
  CountEpisodeLocked(stored, -1);
  std::swap(stored.trajectory, item->trajectory);  // old one dies with *item
  if (snapshots_alive_ > 0) kept_for_snapshots_.push_back(std::move(*item));
  return absl::OkStatus();
}

absl::Status Table::DeleteLocked(Key key, std::vector<Item>* graveyard) {
  auto it = items_.find(key);
  if (it == items_.end()) {
    return absl::NotFoundError(
        absl::StrCat("key ", key, " not in table '", name(), "'"));
  }
  RETURN_IF_ERROR(sampler_->Delete(key));
  RETURN_IF_ERROR(remover_->Delete(key));
  CountEpisodeLocked(it->second, -1);
  CountPriorityLocked(it->second.priority, -1);
  (snapshots_alive_ > 0 ? kept_for_snapshots_ : *graveyard)
      .push_back(std::move(it->second));
  items_.erase(it);
  NoteSizeLocked();
  rate_limiter_.RecordDelete();
  return absl::OkStatus();
}

absl::Status Table::InsertOrAssign(Item item, absl::Duration timeout,
                                   Cancellation* cancel) {
  return Insert(std::move(item), timeout, cancel, /*rate_limited=*/true);
}

absl::Status Table::ReplayInsert(Item item) {
  return Insert(std::move(item), absl::ZeroDuration(), nullptr,
                /*rate_limited=*/false);
}

void Table::SetMemoryBudget(MemoryBudget* budget) {
  absl::MutexLock lock(&mu_);
  budget_ = budget;
}

absl::Status Table::AwaitMemoryLocked(absl::Time deadline,
                                      Cancellation* cancel) {
  // A full table evicts as it inserts: only a growing one needs room.
  const auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return budget_->HasRoom() ||
           static_cast<int64_t>(items_.size()) >= options_.max_size;
  };
  if (ready()) return absl::OkStatus();
  const bool probe = deadline <= absl::Now();  // a zero timeout: not a refusal
  RateLimiterCallStats stats;  // the budget counts its own waits
  bool waited;
  budget_->NoteWaiting(1);
  absl::Status status = AwaitLocked(ready, deadline, cancel, &stats, "insert",
                                    &waited, MemoryBudget::kRecheck);
  budget_->NoteWaiting(-1);
  if (absl::IsDeadlineExceeded(status)) {
    if (!probe) budget_->NoteRefused();
    return budget_->Exhausted(absl::StrCat("insert into table '", name(), "'"));
  }
  return status;
}

void Table::SetJournal(TableJournal* journal) {
  absl::MutexLock lock(&mu_);
  journal_ = journal;
}

absl::Status Table::CheckInsert(const Item& item, bool* off_signature) const {
  RETURN_IF_ERROR(CheckPriority(item.priority));
  RETURN_IF_ERROR(ValidateTrajectory(item.trajectory));
  *off_signature = false;
  if (options_.signature.has_value()) {
    if (absl::Status status = ValidateAgainstSignature(
            item.trajectory, *options_.signature, item.legacy_steps);
        !status.ok()) {
      if (!item.unchecked) {
        return absl::InvalidArgumentError(absl::StrCat(
            "item ", item.key, " does not match the signature of table '",
            name(), "': ", status.message()));
      }
      *off_signature = true;
    }
  }
  return absl::OkStatus();
}

absl::Status Table::Insert(Item item, absl::Duration timeout,
                           Cancellation* cancel, bool rate_limited) {
  bool off_signature = false;
  RETURN_IF_ERROR(CheckInsert(item, &off_signature));
  const absl::Time deadline = DeadlineAfter(timeout);
  std::vector<Item> graveyard;  // destroyed after the lock is released
  absl::MutexLock lock(&mu_);
  return InsertLocked(item, off_signature, rate_limited, deadline, cancel,
                      &graveyard);
}

absl::Status Table::InsertAvailable(absl::Span<Item> items, int64_t* stored) {
  *stored = 0;
  // Checked before the lock is taken, a window at a time: a caller that
  // comes back after a wait for the item the limiter held re-checks at most
  // one window, not every item after it.
  constexpr size_t kWindow = 64;
  bool off_signature[kWindow];
  // A deadline already passed: what would wait fails at once, as with a
  // zero timeout.
  const absl::Time deadline = absl::Now();
  std::vector<Item> graveyard;  // destroyed after the lock is released
  for (size_t first = 0; first < items.size(); first += kWindow) {
    const size_t end = std::min(items.size(), first + kWindow);
    size_t valid = end;
    absl::Status invalid;
    for (size_t i = first; i < end; ++i) {
      invalid = CheckInsert(items[i], &off_signature[i - first]);
      if (!invalid.ok()) {
        valid = i;  // the items before it are still stored
        break;
      }
    }
    {
      absl::MutexLock lock(&mu_);
      for (size_t i = first; i < valid; ++i) {
        RETURN_IF_ERROR(InsertLocked(items[i], off_signature[i - first],
                                     /*rate_limited=*/true, deadline, nullptr,
                                     &graveyard));
        ++*stored;
      }
    }
    if (!invalid.ok()) return invalid;
  }
  return absl::OkStatus();
}

absl::Status Table::InsertLocked(Item& item, bool off_signature,
                                 bool rate_limited, absl::Time deadline,
                                 Cancellation* cancel,
                                 std::vector<Item>* graveyard) {
  item.times_sampled = 0;
  RETURN_IF_ERROR(WritableLocked());
  // Counted once the item is stored or assigned: InsertAvailable's caller
  // retries, with a wait, an item the limiter held.
  auto assign = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (off_signature) ++counters_.off_signature;
    return AssignLocked(&item);
  };
  if (items_.contains(item.key)) return assign();

  if (rate_limited) {
    bool waited;
    RETURN_IF_ERROR(AwaitLocked(
        [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return rate_limiter_.CanInsert(static_cast<int64_t>(items_.size()));
        },
        deadline, cancel, &rate_limiter_.insert_stats(), "insert", &waited));
    // The log may have failed while we waited.
    RETURN_IF_ERROR(WritableLocked());
    // Another writer may have inserted the same key while we waited.
    if (items_.contains(item.key)) return assign();
    if (budget_ != nullptr && !budget_->HasRoom()) {
      RETURN_IF_ERROR(AwaitMemoryLocked(deadline, cancel));
      RETURN_IF_ERROR(WritableLocked());
      if (items_.contains(item.key)) return assign();
    }
  }

  RETURN_IF_ERROR(sampler_->Insert(item.key, item.priority));
  if (absl::Status status = remover_->Insert(item.key, item.priority);
      !status.ok()) {
    sampler_->Delete(item.key).IgnoreError();
    return status;
  }
  if (journal_ != nullptr) journal_->Inserted(*this, item);
  if (off_signature) ++counters_.off_signature;
  const Key key = item.key;
  CountEpisodeLocked(item, 1);
  CountPriorityLocked(item.priority, 1);
  items_.emplace(key, std::move(item));
  NoteSizeLocked();
  rate_limiter_.RecordInsert();
  ++counters_.inserted;
  RETURN_IF_ERROR(EvictOverflowLocked(graveyard));
  cv_.SignalAll();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SampledItem>> Table::Sample(int32_t max_samples,
                                                       absl::Duration timeout,
                                                       Cancellation* cancel) {
  if (max_samples < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_samples must be >= 1, got ", max_samples));
  }
  const absl::Time deadline = DeadlineAfter(timeout);
  std::vector<SampledItem> samples;
  std::vector<Item> graveyard;
  absl::MutexLock lock(&mu_);
  auto can_sample = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return rate_limiter_.CanSample(static_cast<int64_t>(items_.size()));
  };
  bool waited;
  RETURN_IF_ERROR(AwaitLocked(can_sample, deadline, cancel,
                              &rate_limiter_.sample_stats(), "sample",
                              &waited));
  samples.reserve(std::min<int64_t>(max_samples, items_.size()));
  if (options_.max_times_sampled <= 0) {
    absl::Status status = SampleBatchLocked(max_samples, waited, &samples);
    cv_.SignalAll();
    if (!status.ok()) return status;
    return samples;
  }
  do {
    if (!samples.empty()) ++rate_limiter_.sample_stats().completed;
    ASSIGN_OR_RETURN(auto choice, sampler_->Sample());
    Item& item = items_.at(choice.key);
    rate_limiter_.RecordSample();
    ++counters_.sampled;
    SampledItem& sample = samples.emplace_back();
    sample.key = item.key;
    sample.probability = choice.probability;
    sample.table_size = static_cast<int64_t>(items_.size());
    sample.table_weight = sampler_->TotalWeight();
    sample.min_probability = sampler_->MinProbability();
    sample.rate_limited = waited && samples.size() == 1;
    TakeSampleLocked(item, &sample);
    if (item.times_sampled >= options_.max_times_sampled) {
      sample.removed = true;
      const Key removed = item.key;
      RETURN_IF_ERROR(DeleteLocked(removed, &graveyard));
      if (journal_ != nullptr) journal_->SampledOut(*this, removed);
      ++counters_.sampled_out;
    }
  } while (static_cast<int32_t>(samples.size()) < max_samples && can_sample());
  cv_.SignalAll();
  return samples;
}

void Table::TakeSampleLocked(Item& item, SampledItem* sample) {
  if (item.times_sampled++ == 0) ++num_unique_samples_;
  sample->priority = item.priority;
  sample->times_sampled = item.times_sampled;
  sample->trajectory = item.trajectory;
}

absl::Status Table::SampleBatchLocked(int32_t max_samples, bool waited,
                                      std::vector<SampledItem>* samples) {
  // Without max_times_sampled no sample removes an item, so the choices do
  // not depend on each other's items: choose the whole batch first, then
  // visit the items. Their keys are random, so in a large table the item,
  // its trajectory array and each of its chunks miss the cache; fetching
  // them in stages, kStage samples apart, overlaps those misses (as
  // MutatePriorities does), where one sample after the other would wait
  // for each in turn.
  do {
    if (!samples->empty()) ++rate_limiter_.sample_stats().completed;
    ASSIGN_OR_RETURN(ItemSelector::KeyWithProbability choice,
                     sampler_->Sample());
    rate_limiter_.RecordSample();
    ++counters_.sampled;
    SampledItem& sample = samples->emplace_back();
    sample.key = choice.key;
    sample.probability = choice.probability;
  } while (static_cast<int32_t>(samples->size()) < max_samples &&
           rate_limiter_.CanSample(static_cast<int64_t>(items_.size())));
  const double table_weight = sampler_->TotalWeight();
  const double min_probability = sampler_->MinProbability();
  const int64_t table_size = static_cast<int64_t>(items_.size());
  const int64_t n = static_cast<int64_t>(samples->size());
  std::vector<Item*> found(n, nullptr);
  constexpr int64_t kStage = 6;
  for (int64_t i = -3 * kStage; i < n; ++i) {
    if (const int64_t j = i + 3 * kStage; j < n)
      items_.prefetch((*samples)[j].key);
    if (const int64_t j = i + 2 * kStage; j >= 0 && j < n) {
      found[j] = &items_.at((*samples)[j].key);
      const Trajectory& trajectory = found[j]->trajectory;
      if (!trajectory.empty()) __builtin_prefetch(trajectory.data());
    }
    if (const int64_t j = i + kStage; j >= 0 && j < n) {
      for (const SlicedColumn& column : found[j]->trajectory) {
        for (const ChunkSlice& slice : column.slices())
          __builtin_prefetch(slice.chunk.get());
      }
    }
    if (i < 0) continue;
    SampledItem& sample = (*samples)[i];
    sample.table_size = table_size;
    sample.table_weight = table_weight;
    sample.min_probability = min_probability;
    sample.rate_limited = waited && i == 0;
    TakeSampleLocked(*found[i], &sample);
  }
  return absl::OkStatus();
}

absl::StatusOr<MutationResult> Table::MutatePriorities(
    absl::Span<const std::pair<Key, double>> updates,
    absl::Span<const Key> deletes) {
  for (const auto& [key, priority] : updates) {
    if (absl::Status status = CheckPriority(priority); !status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("priority update for key ",
                                                     key, " in table '", name(),
                                                     "': ", status.message()));
    }
  }
  MutationResult result;
  std::vector<Item> graveyard;
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(WritableLocked());
  // Keys are random: in a large table each lookup misses the cache, so
  // the lookups ask for the key kAhead further on.
  constexpr size_t kAhead = 16;
  for (size_t i = 0; i < std::min(kAhead, updates.size()); ++i)
    items_.prefetch(updates[i].first);
  std::vector<std::pair<Key, double>> present;
  std::vector<Item*> items;
  present.reserve(updates.size());
  items.reserve(updates.size());
  for (size_t i = 0; i < updates.size(); ++i) {
    if (i + kAhead < updates.size()) items_.prefetch(updates[i + kAhead].first);
    auto it = items_.find(updates[i].first);
    if (it == items_.end()) {
      ++result.missing;
      continue;
    }
    present.push_back(updates[i]);
    items.push_back(&it->second);
  }
  // A present item is in both selectors, and those that ignore priorities
  // have nothing to change. The sampler takes the batch at once
  // (a prioritized one recomputes each tree node once for it); if it
  // refuses an update, the ones before it are applied everywhere, as they
  // would be one by one. A remover's Update cannot fail for a present key
  // and a checked priority.
  size_t applied = present.size();
  absl::Status refused;
  if (sampler_priority_matters_)
    refused = sampler_->UpdateMany(present, &applied);
  for (size_t i = 0; i < applied; ++i) {
    const auto& [key, priority] = present[i];
    if (remover_priority_matters_)
      RETURN_IF_ERROR(remover_->Update(key, priority));
    CountPriorityLocked(items[i]->priority, -1);
    CountPriorityLocked(priority, 1);
    items[i]->priority = priority;
    ++result.updated;
    ++counters_.priority_updates;
  }
  if (!refused.ok()) {
    // The journal is told of what did change, so that a replay agrees.
    if (journal_ != nullptr && applied > 0) {
      journal_->Mutated(*this, absl::MakeConstSpan(present).first(applied), {});
    }
    return refused;
  }
  for (Key key : deletes) {
    if (!items_.contains(key)) {
      ++result.missing;
      continue;
    }
    RETURN_IF_ERROR(DeleteLocked(key, &graveyard));
    ++result.deleted;
    ++counters_.deleted;
  }
  if (journal_ != nullptr) journal_->Mutated(*this, updates, deletes);
  if (result.deleted > 0) cv_.SignalAll();
  return result;
}

absl::Status Table::WritableLocked() const {
  return journal_ != nullptr ? journal_->Writable() : absl::OkStatus();
}

absl::Status Table::Reset() {
  TableMap<Key, Item> graveyard;
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(WritableLocked());
  graveyard.swap(items_);
  NoteSizeLocked();
  if (snapshots_alive_ > 0) {
    for (auto& [key, item] : graveyard)
      kept_for_snapshots_.push_back(std::move(item));
  }
  sampler_->Clear();
  remover_->Clear();
  rate_limiter_.Reset();
  if (journal_ != nullptr) journal_->WasReset(*this);
  ++counters_.resets;
  priorities_ = PriorityHistogram();
  num_unique_samples_ = 0;
  episode_items_.clear();
  num_deleted_episodes_ = 0;
  cv_.SignalAll();
  return absl::OkStatus();
}

void Table::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
  cv_.SignalAll();
}

void Table::Open() {
  absl::MutexLock lock(&mu_);
  closed_ = false;
}

absl::Status Table::CheckHostableLocked(const void* server) const {
  if (host_ == nullptr || host_ == server) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "table '", name(), "' is hosted by a running server (port ",
      host_port_ > 0 ? absl::StrCat(host_port_) : std::string("not bound yet"),
      "); stop it first, or host table.replace() (a new, empty table)"));
}

absl::Status Table::CheckHostable(const void* server) const {
  absl::MutexLock lock(&mu_);
  return CheckHostableLocked(server);
}

absl::Status Table::Host(const void* server) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckHostableLocked(server));
  host_ = server;
  host_port_ = 0;
  return absl::OkStatus();
}

void Table::SetHostPort(const void* server, int port) {
  absl::MutexLock lock(&mu_);
  if (host_ == server) host_port_ = port;
}

void Table::Unhost(const void* server) {
  absl::MutexLock lock(&mu_);
  if (host_ != server) return;
  host_ = nullptr;
  host_port_ = 0;
}

int64_t Table::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(items_.size());
}

absl::StatusOr<bool> Table::CanInsert(int64_t n) const {
  if (n < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("num_inserts must be >= 1, got ", n));
  absl::MutexLock lock(&mu_);
  return rate_limiter_.CanInsertN(static_cast<int64_t>(items_.size()), n);
}

absl::StatusOr<bool> Table::CanSample(int64_t n) const {
  if (n < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("num_samples must be >= 1, got ", n));
  absl::MutexLock lock(&mu_);
  return rate_limiter_.CanSampleN(static_cast<int64_t>(items_.size()), n);
}

TableInfo Table::info() const {
  TableInfo info;
  info.options = options_;
  absl::MutexLock lock(&mu_);
  info.current_size = static_cast<int64_t>(items_.size());
  info.num_unique_samples = num_unique_samples_;
  info.num_episodes = static_cast<int64_t>(episode_items_.size());
  info.num_deleted_episodes = num_deleted_episodes_;
  info.sampler_total_weight = sampler_->TotalWeight();
  info.sampler_min_item_weight =
      sampler_->MinProbability() * info.sampler_total_weight;
  info.counters = counters_;
  info.priorities = priorities_;
  info.rate_limiter_info = rate_limiter_.info();
  return info;
}

absl::Status Table::CheckInvariants() const {
  absl::MutexLock lock(&mu_);
  const int64_t size = static_cast<int64_t>(items_.size());
  if (sampler_->size() != size || remover_->size() != size) {
    return absl::InternalError(absl::StrCat(
        "table '", name(), "' holds ", size, " items but its sampler has ",
        sampler_->size(), " keys and its remover ", remover_->size()));
  }
  if (size > options_.max_size) {
    return absl::InternalError(absl::StrCat("table '", name(), "' holds ", size,
                                            " items, max_size ",
                                            options_.max_size));
  }
  {
    PriorityHistogram expected;
    for (const auto& [key, item] : items_)
      ++expected.counts[PriorityHistogram::BucketOf(item.priority)];
    if (expected.counts != priorities_.counts) {
      return absl::InternalError(
          absl::StrCat("table '", name(),
                       "': its priority histogram does not match its items"));
    }
  }
  const RateLimiterInfo limiter = rate_limiter_.info();
  if (limiter.inserts - limiter.deletes != size) {
    return absl::InternalError(
        absl::StrCat("table '", name(), "': ", limiter.inserts, " inserts - ",
                     limiter.deletes, " deletes != size ", size));
  }
  for (const auto& [key, item] : items_) {
    if (key != item.key) {
      return absl::InternalError(
          absl::StrCat("item ", item.key, " stored under ", key));
    }
    if (options_.max_times_sampled > 0 &&
        item.times_sampled >= options_.max_times_sampled) {
      return absl::InternalError(absl::StrCat(
          "item ", key, " sampled ", item.times_sampled, " times but kept"));
    }
    if (absl::Status status = ValidateTrajectory(item.trajectory);
        !status.ok()) {
      return absl::InternalError(status.message());
    }
  }
  return absl::OkStatus();
}

TableSnapshot Table::Snapshot() const {
  TableSnapshot snapshot;
  snapshot.options = options_;
  // Allocate and touch the arrays before taking the lock for the copy: at
  // 200k items the page faults of fresh memory would otherwise be a good
  // part of the pause. Items of a table almost always have the same shape,
  // so the first item's sizes predict the rest.
  size_t num_items = 0;
  size_t columns_per_item = 0;
  size_t slices_per_item = 0;
  {
    absl::MutexLock lock(&mu_);
    num_items = items_.size();
    if (!items_.empty()) {
      const Trajectory& first = items_.begin()->second.trajectory;
      columns_per_item = first.size();
      for (const SlicedColumn& column : first)
        slices_per_item += column.slices().size();
    }
  }
  // Some slack for items inserted in between.
  num_items += num_items / 16 + 16;
  snapshot.items.resize(num_items);
  snapshot.columns.resize(num_items * columns_per_item);
  snapshot.slices.resize(num_items * slices_per_item);
  snapshot.chunks.resize(num_items * slices_per_item);
  std::vector<std::pair<uint64_t, Key>> ranks(num_items);
  size_t item_count = 0, column_count = 0, slice_count = 0;
  bool ranked = false;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time locked = absl::Now();
    ++snapshots_alive_;
    snapshot.rate_limiter = rate_limiter_.info();
    snapshot.num_unique_samples = num_unique_samples_;
    // In the map's own order: sequential, unlike a walk in insertion order.
    for (const auto& [key, item] : items_) {
      if (item_count == snapshot.items.size())
        snapshot.items.resize(2 * item_count);
      snapshot.items[item_count++] = {
          item.key,           item.priority,
          item.times_sampled, static_cast<uint32_t>(item.trajectory.size()),
          column_count,       0};
      for (const SlicedColumn& column : item.trajectory) {
        if (column_count == snapshot.columns.size()) {
          snapshot.columns.resize(2 * column_count + 16);
        }
        snapshot.columns[column_count++] = {
            slice_count, static_cast<uint32_t>(column.slices().size()),
            column.squeeze()};
        for (const ChunkSlice& slice : column.slices()) {
          if (slice_count == snapshot.slices.size()) {
            snapshot.slices.resize(2 * slice_count + 16);
            snapshot.chunks.resize(2 * slice_count + 16);
          }
          snapshot.slices[slice_count] = {slice.offset, slice.length};
          snapshot.chunks[slice_count++] = slice.chunk.get();
        }
      }
    }
    ranks.clear();  // keeps the touched capacity
    ranked = remover_->AppendInsertionRanks(&ranks) ||
             sampler_->AppendInsertionRanks(&ranks);
    snapshot.pause = absl::Now() - locked;
  }
  snapshot.items.resize(item_count);
  snapshot.columns.resize(column_count);
  snapshot.slices.resize(slice_count);
  snapshot.chunks.resize(slice_count);
  std::shared_ptr<const Table> self = shared_from_this();
  snapshot.pin = std::shared_ptr<const void>(
      nullptr, [self](const void*) { self->Unpin(); });
  if (ranked) {
    absl::flat_hash_map<Key, uint64_t> rank_of;
    rank_of.reserve(ranks.size());
    for (const auto& [rank, key] : ranks) rank_of.emplace(key, rank);
    for (auto& item : snapshot.items) item.rank = rank_of.at(item.key);
    std::sort(
        snapshot.items.begin(), snapshot.items.end(),
        [](const TableSnapshot::ItemRecord& a,
           const TableSnapshot::ItemRecord& b) { return a.rank < b.rank; });
  }
  return snapshot;
}

void Table::Unpin() const {
  std::vector<Item> released;
  absl::MutexLock lock(&mu_);
  if (--snapshots_alive_ == 0) released.swap(kept_for_snapshots_);
  // `released` is destroyed after the lock is released (declared first).
}

absl::Status Table::LoadItems(std::vector<Item> items) {
  for (const Item& item : items) {
    absl::Status status = CheckPriority(item.priority);
    if (status.ok()) status = ValidateTrajectory(item.trajectory);
    if (!status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table '", name(), "': item ", item.key, ": ", status.message()));
    }
  }
  std::vector<Item> graveyard;
  absl::MutexLock lock(&mu_);
  for (Item& item : items) {
    if (options_.max_times_sampled > 0 &&
        item.times_sampled >= options_.max_times_sampled) {
      ++load_discarded_;
      continue;
    }
    if (items_.contains(item.key)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table '", name(), "': item ", item.key, " appears twice"));
    }
    RETURN_IF_ERROR(sampler_->Insert(item.key, item.priority));
    RETURN_IF_ERROR(remover_->Insert(item.key, item.priority));
    if (item.times_sampled > 0) ++num_unique_samples_;
    const Key key = item.key;
    CountEpisodeLocked(item, 1);
    CountPriorityLocked(item.priority, 1);
    items_.emplace(key, std::move(item));
    NoteSizeLocked();
    if (static_cast<int64_t>(items_.size()) > options_.max_size)
      ++load_discarded_;
    RETURN_IF_ERROR(EvictOverflowLocked(&graveyard));
    rate_limiter_.RecordInsert();
  }
  return absl::OkStatus();
}

void Table::FinishLoad(const TableInfo& saved) {
  absl::MutexLock lock(&mu_);
  const int64_t size = static_cast<int64_t>(items_.size());
  const RateLimiterInfo& limiter_state = saved.rate_limiter_info;
  if (load_discarded_ == 0 && limiter_state.options == options_.rate_limiter &&
      limiter_state.inserts - limiter_state.deletes == size) {
    rate_limiter_.RestoreCounters(limiter_state.inserts, limiter_state.samples,
                                  limiter_state.deletes);
    num_unique_samples_ = saved.num_unique_samples;
  } else {
    const RateLimiterOptions& limiter = options_.rate_limiter;
    const double fresh = static_cast<double>(size) * limiter.samples_per_insert;
    const double balance = std::min(fresh, limiter.max_diff);
    rate_limiter_.RestoreCounters(
        size, static_cast<int64_t>(std::ceil(fresh - balance)), 0);
  }
  load_discarded_ = 0;
  cv_.SignalAll();
}

}  // namespace reverb_tf
