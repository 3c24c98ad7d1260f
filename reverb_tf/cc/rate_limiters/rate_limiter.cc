// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/rate_limiters/rate_limiter.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "reverb_tf/cc/platform/status_macros.h"

namespace reverb_tf {
namespace {

// dm-reverb's words for a SampleToInsertRatio window too small, which
// programs match on.
constexpr char kErrorBufferPhrase[] =
    "The size of error_buffer must be >= max(1.0, samples_per_insert) as "
    "smaller values could completely block samples and/or insert calls.";

// A double as Python prints it in these messages ("0.0", "2.5", "1e-07"):
// the Python layer used to word them, and tests and programs read them so.
std::string Number(double value) {
  if (std::isfinite(value) && value == std::floor(value) &&
      std::fabs(value) < 1e16) {
    return absl::StrFormat("%.1f", value);
  }
  return absl::StrCat(value);
}

absl::Status CheckPositive(const char* name, int64_t value) {
  if (value >= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(name, " (", value, ") must be a positive integer"));
}

absl::Status CheckSamplesPerInsert(double samples_per_insert) {
  if (samples_per_insert > 0 && std::isfinite(samples_per_insert)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("samples_per_insert (",
                                                 Number(samples_per_insert),
                                                 ") must be finite and > 0"));
}

// What every limiter's samples_per_insert and min_size_to_sample must be.
absl::Status CheckRatio(double samples_per_insert, int64_t min_size_to_sample) {
  RETURN_IF_ERROR(CheckSamplesPerInsert(samples_per_insert));
  return CheckPositive("min_size_to_sample", min_size_to_sample);
}

// The exponent K of the smallest power of two with value * 2^K an integer,
// or -1 if K would exceed `max_exponent` (the value is then as good as
// irrational for CheckLive's grid).
int BinaryDenominatorExponent(double value, int max_exponent) {
  for (int k = 0; k <= max_exponent; ++k) {
    const double scaled = std::ldexp(value, k);
    if (scaled == std::floor(scaled)) return k;
  }
  return -1;
}

}  // namespace

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
  const double offset =
      static_cast<double>(min_size_to_sample) * samples_per_insert;
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
  RETURN_IF_ERROR(CheckRatio(samples_per_insert, min_size_to_sample));
  if (min_diff > max_diff) {
    return absl::InvalidArgumentError(absl::StrCat(
        "min_diff (", min_diff, ") must be <= max_diff (", max_diff, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<RateLimiterOptions> RateLimiterOptions::Checked(
    double samples_per_insert, int64_t min_size_to_sample, double min_diff,
    double max_diff) {
  RateLimiterOptions options;
  options.samples_per_insert = samples_per_insert;
  options.min_size_to_sample = min_size_to_sample;
  options.min_diff = min_diff;
  options.max_diff = max_diff;
  if (absl::Status status = options.Validate(); !status.ok()) return status;
  return options;
}

absl::StatusOr<RateLimiterOptions> RateLimiterOptions::CheckedMinSize(
    int64_t min_size_to_sample) {
  if (absl::Status status =
          CheckPositive("min_size_to_sample", min_size_to_sample);
      !status.ok()) {
    return status;
  }
  return MinSize(min_size_to_sample);
}

absl::StatusOr<RateLimiterOptions>
RateLimiterOptions::CheckedSampleToInsertRatio(double samples_per_insert,
                                               int64_t min_size_to_sample,
                                               double error_buffer) {
  // The window form checks the arguments before the window, so a bad
  // samples_per_insert is reported as such, not as a NaN window.
  const RateLimiterOptions options =
      SampleToInsertRatio(samples_per_insert, min_size_to_sample, error_buffer);
  return CheckedSampleToInsertRatio(samples_per_insert, min_size_to_sample,
                                    options.min_diff, options.max_diff);
}

absl::StatusOr<RateLimiterOptions>
RateLimiterOptions::CheckedSampleToInsertRatio(double samples_per_insert,
                                               int64_t min_size_to_sample,
                                               double min_diff,
                                               double max_diff) {
  RETURN_IF_ERROR(CheckRatio(samples_per_insert, min_size_to_sample));
  // One insert moves diff up by samples_per_insert and one sample down by
  // 1: in a narrower window there may be no state from which both can go.
  const double window = max_diff - min_diff;
  const double needed = 2 * std::max(1.0, samples_per_insert);
  if (!(window >= needed)) {
    return absl::InvalidArgumentError(absl::StrCat(
        kErrorBufferPhrase, " (error_buffer leaves a window of ",
        Number(window), " between min_diff (", Number(min_diff),
        ") and max_diff (", Number(max_diff),
        "); it must be at least 2 * max(1.0, "
        "samples_per_insert) = ",
        Number(needed),
        " so that neither inserts nor samples can block for good)"));
  }
  return Checked(samples_per_insert, min_size_to_sample, min_diff, max_diff);
}

absl::StatusOr<RateLimiterOptions> RateLimiterOptions::CheckedQueue(
    int64_t size) {
  if (absl::Status status = CheckPositive("size", size); !status.ok()) {
    return status;
  }
  return Queue(size);
}

absl::Status RateLimiterOptions::CheckLive() const {
  const double s = samples_per_insert;
  const double window = max_diff - min_diff;
  // Deadlocked diffs lie in (max_diff - s, min_diff + 1): none when the
  // window holds a whole insert and a whole sample (this also covers the
  // unbounded sides, whose window is infinite).
  const double t = window - s;  // a diff d is deadlocked iff d - min_diff > t
  if (!(t < 1.0)) return absl::OkStatus();
  // The lowest diffs from which a sample may not go, r = d - min_diff in
  // [0, 1), are where a deadlock can happen: every reachable diff can walk
  // down by samples into that band, and from r an insert leads (after
  // samples) to frac(r + s). So the band positions reachable are
  // frac(r0 + a * s), a = 0, 1, ...: with s = M / 2^K (M odd) a grid of
  // spacing 2^-K through frac(r0), whose largest point is the one to test.
  // Diffs below the band (r < 0, before sampling has started) only insert.
  double r0 = static_cast<double>(min_size_to_sample) * s - min_diff;
  if (r0 < 0) r0 += std::ceil(-r0 / s) * s;
  r0 -= std::floor(r0);
  const int k = BinaryDenominatorExponent(s, /*max_exponent=*/30);
  double highest;
  if (k < 0) {
    highest = 1.0;  // dense: positions come arbitrarily close to 1
  } else {
    const double spacing = std::ldexp(1.0, -k);
    highest = std::fmod(r0, spacing) + (1.0 - spacing);
  }
  if (highest <= t) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "rate limiter can block inserts and samples for good: ", DebugString(),
      " reaches a diff (inserts * samples_per_insert - samples) above "
      "max_diff - samples_per_insert (",
      Number(max_diff - s), ") and below min_diff + 1 (", Number(min_diff + 1),
      "), where neither may proceed; widen the window max_diff - min_diff to "
      "at least samples_per_insert + 1 (",
      Number(s + 1), ")"));
}

std::string RateLimiterOptions::Caveat() const {
  const double start =
      static_cast<double>(min_size_to_sample) * samples_per_insert;
  if (!(max_diff < start)) return "";
  return absl::StrCat(
      "max_diff (", Number(max_diff),
      ") is below min_size_to_sample * "
      "samples_per_insert (",
      Number(start),
      "); inserts will block once the "
      "table is full enough to sample until samples catch up, which "
      "deadlocks a single thread that inserts and then samples.");
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
  const int64_t limited =
      n - std::max<int64_t>(0, options_.min_size_to_sample - table_size);
  return limited <= 0 ||
         diff() + static_cast<double>(n) * options_.samples_per_insert <=
             options_.max_diff;
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
