// SPDX-License-Identifier: Apache-2.0
// Rate limiting: when may a table accept an insert or hand out a sample.
//
// All four limiters users know (MinSize, SampleToInsertRatio, Queue, Stack)
// are one mechanism with different parameters, so there is one class and four
// named constructors for its options:
//
//   diff = inserts * samples_per_insert - samples
//
//   An insert is allowed while the table is still filling up
//   (size < min_size_to_sample) or while  diff + samples_per_insert <=
//   max_diff. A sample is allowed once  size >= min_size_to_sample  and while
//   diff - 1 >= min_diff.
//
// A limiter never fails a call; the Table blocks callers (with a deadline and
// a Cancellation) until the limiter allows them. `inserts` counts only new
// keys (assigning an existing key changes nothing here); `samples` counts
// every item handed out.
//
// Thread safety: not thread-safe. The owning Table calls every method with
// its mutex held.
#ifndef REVERB_TF_CC_RATE_LIMITERS_RATE_LIMITER_H_
#define REVERB_TF_CC_RATE_LIMITERS_RATE_LIMITER_H_

#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "reverb_tf/cc/platform/export.h"

namespace reverb_tf {

struct REVERB_TF_EXPORT RateLimiterOptions {
  double samples_per_insert = 1.0;
  int64_t min_size_to_sample = 1;
  double min_diff = -std::numeric_limits<double>::max();
  double max_diff = std::numeric_limits<double>::max();

  // Sampling is blocked until the table holds `min_size_to_sample` items;
  // otherwise unlimited.
  static RateLimiterOptions MinSize(int64_t min_size_to_sample);
  // Keeps samples/inserts near `samples_per_insert`, within `error_buffer`
  // samples of slack around the point reached at min_size_to_sample
  // (offset = samples_per_insert * min_size_to_sample, as in dm-reverb).
  static RateLimiterOptions SampleToInsertRatio(double samples_per_insert,
                                                int64_t min_size_to_sample,
                                                double error_buffer);
  // Each item sampled exactly once, at most `max_size` waiting (with a Fifo
  // table that is a queue, with a Lifo table a stack).
  static RateLimiterOptions Queue(int64_t max_size);
  static RateLimiterOptions Stack(int64_t max_size);

  // InvalidArgument unless samples_per_insert > 0, min_size_to_sample >= 1,
  // min_diff <= max_diff and none is NaN. What every limiter must satisfy,
  // also one restored from a checkpoint.
  absl::Status Validate() const;

  // The limiters a program asks for by name, with every check of their
  // arguments: the one place these rules live (Python's
  // reverb_tf.rate_limiters only converts types and translates the status).
  // InvalidArgument with a message naming the argument, in dm-reverb's words
  // where programs match on them.
  static absl::StatusOr<RateLimiterOptions> Checked(double samples_per_insert,
                                                    int64_t min_size_to_sample,
                                                    double min_diff,
                                                    double max_diff);
  static absl::StatusOr<RateLimiterOptions> CheckedMinSize(
      int64_t min_size_to_sample);
  // dm-reverb's rule for this preset: the window max_diff - min_diff must be
  // at least 2 * max(1, samples_per_insert), so that one insert (diff +=
  // samples_per_insert) and one sample (diff -= 1) always fit in it. Stricter
  // than CheckLive (some narrower windows never block), but it is what
  // programs written for dm-reverb expect to be refused.
  static absl::StatusOr<RateLimiterOptions> CheckedSampleToInsertRatio(
      double samples_per_insert, int64_t min_size_to_sample,
      double error_buffer);
  // The same preset with the window given as (min_diff, max_diff).
  static absl::StatusOr<RateLimiterOptions> CheckedSampleToInsertRatio(
      double samples_per_insert, int64_t min_size_to_sample, double min_diff,
      double max_diff);
  // Queue and Stack: `size` >= 1 items waiting at most.
  static absl::StatusOr<RateLimiterOptions> CheckedQueue(int64_t size);

  // InvalidArgument if a table whose items stay until removed (no
  // max_times_sampled) can reach a state in which neither an insert nor a
  // sample may ever proceed: after min_size_to_sample inserts, diff moves by
  // +samples_per_insert and -1, and the calls deadlock on any reachable diff
  // in (max_diff - samples_per_insert, min_diff + 1). Exact for the
  // reachable diffs (Queue(1)'s window of 1 passes, a SampleToInsertRatio
  // window of 1 does not), so the server binary's raw --config limiters get
  // the same protection the presets give. Assumes Validate() passed.
  absl::Status CheckLive() const;

  // Why valid options may still surprise a program (a single thread that
  // inserts and then samples blocks for good); empty if nothing.
  std::string Caveat() const;
  std::string DebugString() const;
  bool operator==(const RateLimiterOptions& o) const {
    return samples_per_insert == o.samples_per_insert &&
           min_size_to_sample == o.min_size_to_sample &&
           min_diff == o.min_diff && max_diff == o.max_diff;
  }
};

// Counters for one kind of call (insert or sample), as server_info reports.
struct RateLimiterCallStats {
  int64_t completed = 0;  // calls the limiter let through
  int64_t limited = 0;    // of those, how many had to wait first
  int64_t pending = 0;    // calls waiting right now
  absl::Duration completed_wait_time = absl::ZeroDuration();
};

struct RateLimiterInfo {
  RateLimiterOptions options;
  int64_t inserts = 0;
  int64_t samples = 0;
  int64_t deletes = 0;
  RateLimiterCallStats insert_stats;
  RateLimiterCallStats sample_stats;
};

class REVERB_TF_EXPORT RateLimiter {
 public:
  explicit RateLimiter(const RateLimiterOptions& options) : options_(options) {}

  bool CanInsert(int64_t table_size) const;
  bool CanSample(int64_t table_size) const;
  // Whether `n` (>= 1) inserts, one after another with no sample between,
  // or `n` samples with no insert between, would all pass now.
  bool CanInsertN(int64_t table_size, int64_t n) const;
  bool CanSampleN(int64_t table_size, int64_t n) const;

  void RecordInsert() { ++inserts_; }
  void RecordSample() { ++samples_; }
  void RecordDelete() { ++deletes_; }

  // Bookkeeping for calls that pass through the limiter.
  RateLimiterCallStats& insert_stats() { return insert_stats_; }
  RateLimiterCallStats& sample_stats() { return sample_stats_; }

  // Forgets all counts (Table::Reset).
  void Reset();

  const RateLimiterOptions& options() const { return options_; }

  // Restores counters (checkpoint load).
  void RestoreCounters(int64_t inserts, int64_t samples, int64_t deletes);

  RateLimiterInfo info() const;

 private:
  double diff() const;

  RateLimiterOptions options_;
  int64_t inserts_ = 0;
  int64_t samples_ = 0;
  int64_t deletes_ = 0;
  RateLimiterCallStats insert_stats_;
  RateLimiterCallStats sample_stats_;
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_RATE_LIMITERS_RATE_LIMITER_H_
