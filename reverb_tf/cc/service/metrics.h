// SPDX-License-Identifier: Apache-2.0
// Prometheus metrics of a replay server: the counters the service updates on
// its hot paths, the text exposition format (version 0.0.4) and the page of
// a server's metrics (every family, its help and labels: docs/operations.md
// lists them).
//
// Hot paths only touch relaxed atomics (no locks). Table state is read when
// a scrape renders the page, under each table's lock, once per scrape.
//
// Thread safety: LatencyHistogram and ServiceMetrics are thread-safe;
// PrometheusText is a single-threaded builder; RenderMetricsPage only reads
// its snapshot (and the snapshot's ServiceMetrics, which is thread-safe).
#ifndef REVERB_TF_CC_SERVICE_METRICS_H_
#define REVERB_TF_CC_SERVICE_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "reverb_tf/cc/checkpointing/checkpointer.h"
#include "reverb_tf/cc/checkpointing/wal.h"
#include "reverb_tf/cc/chunk_store.h"
#include "reverb_tf/cc/table.h"

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
  enum Method {
    kInsertStream,
    kSampleStream,
    kMutatePriorities,
    kReset,
    kServerInfo,
    kCheckpoint,
    kNumMethods
  };
  static constexpr std::array<absl::string_view, kNumMethods> kMethodNames = {
      "InsertStream", "SampleStream", "MutatePriorities",
      "Reset",        "ServerInfo",   "Checkpoint"};

  // Stream message bytes, as they cross the wire.
  std::atomic<int64_t> received_bytes{0};
  std::atomic<int64_t> sent_bytes{0};
  // Items received on insert streams, by the message that carried them: an
  // Item, or an ItemBatch of a batched writer (one per environment).
  enum ItemMessage { kItem, kItemBatch, kNumItemMessages };
  static constexpr std::array<absl::string_view, kNumItemMessages>
      kItemMessageNames = {"item", "item_batch"};
  std::array<std::atomic<int64_t>, kNumItemMessages> items_received{};
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
  void Family(absl::string_view name, absl::string_view type,
              absl::string_view help);
  // One sample of the current family (`name` may add _bucket/_sum/_count).
  void Sample(absl::string_view name, const Labels& labels, double value);
  // A family of one sample without labels.
  void Scalar(absl::string_view name, absl::string_view type,
              absl::string_view help, double value);
  void Histogram(absl::string_view name, const Labels& labels,
                 const LatencyHistogram::Snapshot& histogram);

  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

// What one scrape of a server reports, gathered by ReplayServer::MetricsText
// under the server's own locks, so that rendering needs none.
struct MetricsSnapshot {
  std::vector<TableInfo> tables;
  struct Wal {
    WalStats stats;
    bool writable = true;
    int64_t recoveries = 0;
  };
  std::optional<Wal> wal;  // absent: the server keeps no write-ahead log
  struct Budget {
    int64_t limit = 0;
    int64_t used = 0;
    int64_t waiting = 0;
    int64_t refused = 0;
  };
  std::optional<Budget> budget;  // absent: no memory_limit
  // The disk tier (ServerOptions::spill_dir); absent without one.
  std::optional<ChunkStore::SpillStats> spill;
  int64_t chunks = 0;
  int64_t chunk_bytes = 0;
  // Capacity of dead chunks' buffers kept for new ones (chunk_store.h), and
  // of those new chunks took.
  int64_t recycled_chunk_bytes = 0;
  int64_t recycled_chunk_bytes_taken = 0;
  // Not owned; must outlive RenderMetricsPage.
  const ServiceMetrics* service = nullptr;
  int64_t active_streams = 0;
  int64_t checkpoints_ok = 0;
  int64_t checkpoints_failed = 0;
  std::optional<CheckpointStats> last_checkpoint;
  absl::Time last_checkpoint_time;
  int64_t resident_bytes = 0;
  // The bound on gRPC's buffers under an address-space cap; 0: none.
  int64_t grpc_quota_bytes = 0;
};

// The server's metrics page in the Prometheus text format.
std::string RenderMetricsPage(const MetricsSnapshot& snapshot);

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_SERVICE_METRICS_H_
