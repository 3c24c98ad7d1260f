// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/rate_limiters/rate_limiter.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace reverb_tf {

RateLimiterOptions RateLimiterOptions::MinSize(int64_t min_size_to_sample) {
  RateLimiterOptions options;
  options.min_size_to_sample = min_size_to_sample;
  return options;
}

RateLimiterOptions RateLimiterOptions::SampleToInsertRatio(
    double samples_per_insert, int64_t min_size_to_sample,
    double error_buffer) {
  RateLimiterOptions options;
  options.samples_per_insert = samples_per_insert;
  options.min_size_to_sample = min_size_to_sample;
  // Center the window on the diff the table has when it first allows
  // sampling, so neither side starts out blocked.
  const double offset = static_cast<double>(min_size_to_sample) * samples_per_insert;
  options.min_diff = offset - error_buffer;
  options.max_diff = offset + error_buffer;
  return options;
}

RateLimiterOptions RateLimiterOptions::Queue(int64_t max_size) {
  RateLimiterOptions options;
  options.samples_per_insert = 1.0;
  options.min_size_to_sample = 1;
  options.min_diff = 0;
  options.max_diff = static_cast<double>(max_size);
  return options;
}

RateLimiterOptions RateLimiterOptions::Stack(int64_t max_size) {
  return Queue(max_size);
}

absl::Status RateLimiterOptions::Validate() const {
  if (std::isnan(samples_per_insert) || std::isnan(min_diff) ||
      std::isnan(max_diff)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rate limiter options contain NaN: ", DebugString()));
  }
  if (!(samples_per_insert > 0) || std::isinf(samples_per_insert)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "samples_per_insert must be finite and > 0, got ", samples_per_insert));
  }
  if (min_size_to_sample < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "min_size_to_sample must be >= 1, got ", min_size_to_sample));
  }
  if (min_diff > max_diff) {
    return absl::InvalidArgumentError(absl::StrCat(
        "min_diff (", min_diff, ") must be <= max_diff (", max_diff, ")"));
  }
  return absl::OkStatus();
}

std::string RateLimiterOptions::DebugString() const {
  return absl::StrCat("RateLimiter(samples_per_insert=", samples_per_insert,
                      ", min_size_to_sample=", min_size_to_sample,
                      ", min_diff=", min_diff, ", max_diff=", max_diff, ")");
}

double RateLimiter::diff() const {
  return static_cast<double>(inserts_) * options_.samples_per_insert -
         static_cast<double>(samples_);
}

bool RateLimiter::CanInsert(int64_t table_size) const {
  if (table_size < options_.min_size_to_sample) return true;
  return diff() + options_.samples_per_insert <= options_.max_diff;
}

bool RateLimiter::CanSample(int64_t table_size) const {
  if (table_size < options_.min_size_to_sample || table_size == 0) return false;
  return diff() - 1.0 >= options_.min_diff;
}

bool RateLimiter::CanInsertN(int64_t table_size, int64_t n) const {
  // Inserts below min_size_to_sample always pass; the rest must keep diff
  // within max_diff.
  const int64_t limited = n - std::max<int64_t>(0, options_.min_size_to_sample - table_size);
  return limited <= 0 ||
         diff() + static_cast<double>(n) * options_.samples_per_insert <= options_.max_diff;
}

bool RateLimiter::CanSampleN(int64_t table_size, int64_t n) const {
  if (table_size < options_.min_size_to_sample || table_size == 0) return false;
  return diff() - static_cast<double>(n) >= options_.min_diff;
}

void RateLimiter::Reset() {
  inserts_ = samples_ = deletes_ = 0;
  insert_stats_ = sample_stats_ = RateLimiterCallStats{};
}

void RateLimiter::RestoreCounters(int64_t inserts, int64_t samples,
                                  int64_t deletes) {
  inserts_ = inserts;
  samples_ = samples;
  deletes_ = deletes;
}

RateLimiterInfo RateLimiter::info() const {
  RateLimiterInfo info;
  info.options = options_;
  info.inserts = inserts_;
  info.samples = samples_;
  info.deletes = deletes_;
  info.insert_stats = insert_stats_;
  info.sample_stats = sample_stats_;
  return info;
}

}  // namespace reverb_tf
