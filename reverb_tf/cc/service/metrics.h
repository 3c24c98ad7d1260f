// SPDX-License-Identifier: Apache-2.0
// Prometheus metrics of a replay server: the counters the service updates on
// its hot paths, and the text exposition format (version 0.0.4) they are
// rendered in.
//
// Hot paths only touch relaxed atomics (no locks). Table state is read when
// a scrape renders the page, under each table's lock, once per scrape.
//
// Thread safety: LatencyHistogram and ServiceMetrics are thread-safe;
// PrometheusText is a single-threaded builder.
#ifndef REVERB_TF_CC_SERVICE_METRICS_H_
#define REVERB_TF_CC_SERVICE_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace reverb_tf {

// Durations in fixed buckets (seconds), from 100 us to 10 s.
class LatencyHistogram {
 public:
  static constexpr std::array<double, 16> kBounds = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
      0.05,   0.1,     0.25,   0.5,   1.0,    2.5,   5.0,  10.0};

  void Observe(absl::Duration duration);

  struct Snapshot {
    // Per bucket (the last: above every bound), not cumulative.
    std::array<int64_t, kBounds.size() + 1> counts{};
    double sum_seconds = 0;
    int64_t count = 0;
  };
  Snapshot Read() const;

 private:
  std::array<std::atomic<int64_t>, kBounds.size() + 1> counts_{};
  std::atomic<int64_t> sum_nanos_{0};
};

// What the service counts as it serves.
struct ServiceMetrics {
  // The service's methods, for per-method latencies.
  enum Method { kInsertStream, kSampleStream, kMutatePriorities, kReset, kServerInfo,
                kCheckpoint, kNumMethods };
  static constexpr std::array<absl::string_view, kNumMethods> kMethodNames = {
      "InsertStream", "SampleStream", "MutatePriorities", "Reset", "ServerInfo",
      "Checkpoint"};

  // Stream message bytes, as they cross the wire.
  std::atomic<int64_t> received_bytes{0};
  std::atomic<int64_t> sent_bytes{0};
  // Unary methods: per call. Streams: per message handled (an insert
  // request until its acknowledgement, a sample response until written),
  // rate-limiter waits included.
  std::array<LatencyHistogram, kNumMethods> latency;
};

// Builds a page in the Prometheus text exposition format.
class PrometheusText {
 public:
  using Labels = std::vector<std::pair<absl::string_view, std::string>>;

  // Starts a metric family: its HELP and TYPE lines ("counter", "gauge",
  // "histogram"). Families must not repeat.
  void Family(absl::string_view name, absl::string_view type, absl::string_view help);
  // One sample of the current family (`name` may add _bucket/_sum/_count).
  void Sample(absl::string_view name, const Labels& labels, double value);
  void Histogram(absl::string_view name, const Labels& labels,
                 const LatencyHistogram::Snapshot& histogram);

  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

// This process's resident set size in bytes (0 if /proc cannot tell).
int64_t ResidentMemoryBytes();

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_SERVICE_METRICS_H_
