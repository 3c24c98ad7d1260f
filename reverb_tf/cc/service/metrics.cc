// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/service/metrics.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace reverb_tf {
namespace {

// Label values escape backslash, double quote and newline.
std::string EscapeLabel(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    return absl::StrCat(static_cast<int64_t>(value));
  }
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.17g", value);
  return buffer;
}

}  // namespace

constexpr std::array<double, 16> LatencyHistogram::kBounds;

void LatencyHistogram::Observe(absl::Duration duration) {
  const double seconds = absl::ToDoubleSeconds(duration);
  size_t bucket = 0;
  while (bucket < kBounds.size() && seconds > kBounds[bucket]) ++bucket;
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_nanos_.fetch_add(absl::ToInt64Nanoseconds(duration),
                       std::memory_order_relaxed);
}

LatencyHistogram::Snapshot LatencyHistogram::Read() const {
  Snapshot snapshot;
  for (size_t i = 0; i < counts_.size(); ++i) {
    snapshot.counts[i] = counts_[i].load(std::memory_order_relaxed);
    snapshot.count += snapshot.counts[i];
  }
  snapshot.sum_seconds =
      static_cast<double>(sum_nanos_.load(std::memory_order_relaxed)) * 1e-9;
  return snapshot;
}

void PrometheusText::Family(absl::string_view name, absl::string_view type,
                            absl::string_view help) {
  absl::StrAppend(&text_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ",
                  type, "\n");
}

void PrometheusText::Scalar(absl::string_view name, absl::string_view type,
                            absl::string_view help, double value) {
  Family(name, type, help);
  Sample(name, {}, value);
}

void PrometheusText::Sample(absl::string_view name, const Labels& labels,
                            double value) {
  absl::StrAppend(&text_, name);
  if (!labels.empty()) {
    text_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      absl::StrAppend(&text_, i > 0 ? "," : "", labels[i].first, "=\"",
                      EscapeLabel(labels[i].second), "\"");
    }
    text_ += '}';
  }
  absl::StrAppend(&text_, " ", FormatValue(value), "\n");
}

void PrometheusText::Histogram(absl::string_view name, const Labels& labels,
                               const LatencyHistogram::Snapshot& histogram) {
  int64_t cumulative = 0;
  Labels with_le = labels;
  with_le.emplace_back("le", "");
  for (size_t i = 0; i < histogram.counts.size(); ++i) {
    cumulative += histogram.counts[i];
    with_le.back().second = i < LatencyHistogram::kBounds.size()
                                ? absl::StrCat(LatencyHistogram::kBounds[i])
                                : "+Inf";
    Sample(absl::StrCat(name, "_bucket"), with_le,
           static_cast<double>(cumulative));
  }
  Sample(absl::StrCat(name, "_sum"), labels, histogram.sum_seconds);
  Sample(absl::StrCat(name, "_count"), labels,
         static_cast<double>(histogram.count));
}

namespace {

using Labels = PrometheusText::Labels;

// A family of one sample per table: value(info).
template <typename Value>
void TableFamily(const std::vector<TableInfo>& infos, absl::string_view name,
                 absl::string_view type, absl::string_view help, Value value,
                 PrometheusText& page) {
  page.Family(name, type, help);
  for (const TableInfo& info : infos) {
    page.Sample(name, Labels{{"table", info.options.name}},
                static_cast<double>(value(info)));
  }
}

// A family of one sample per table and limiter side (insert, sample):
// value(stats) of the side's RateLimiterCallStats.
template <typename Value>
void RateLimiterSideFamily(const std::vector<TableInfo>& infos,
                           absl::string_view name, absl::string_view type,
                           absl::string_view help, Value value,
                           PrometheusText& page) {
  page.Family(name, type, help);
  for (const TableInfo& info : infos) {
    const RateLimiterInfo& limiter = info.rate_limiter_info;
    page.Sample(name, Labels{{"table", info.options.name}, {"side", "insert"}},
                value(limiter.insert_stats));
    page.Sample(name, Labels{{"table", info.options.name}, {"side", "sample"}},
                value(limiter.sample_stats));
  }
}

// reverb_tf_table_info: each table's selectors and options as labels.
void RenderTableInfo(const std::vector<TableInfo>& infos,
                     PrometheusText& page) {
  page.Family(
      "reverb_tf_table_info", "gauge",
      "Always 1; the labels describe the table's selectors and options.");
  for (const TableInfo& info : infos) {
    page.Sample(
        "reverb_tf_table_info",
        Labels{
            {"table", info.options.name},
            {"sampler", info.options.sampler.DebugString()},
            {"remover", info.options.remover.DebugString()},
            {"max_times_sampled", absl::StrCat(info.options.max_times_sampled)},
            {"signature", info.options.signature.has_value() ? "yes" : "no"}},
        1);
  }
}

// The tables' sizes and the counts of what was done to their items.
void RenderTableCounters(const std::vector<TableInfo>& infos,
                         PrometheusText& page) {
  TableFamily(
      infos, "reverb_tf_table_size", "gauge", "Items in the table.",
      [](const TableInfo& i) { return i.current_size; }, page);
  TableFamily(
      infos, "reverb_tf_table_max_size", "gauge", "Most items the table holds.",
      [](const TableInfo& i) { return i.options.max_size; }, page);
  TableFamily(
      infos, "reverb_tf_table_inserts_total", "counter",
      "New items inserted (replacements of a key not counted).",
      [](const TableInfo& i) { return i.counters.inserted; }, page);
  TableFamily(
      infos, "reverb_tf_table_samples_total", "counter", "Items sampled.",
      [](const TableInfo& i) { return i.counters.sampled; }, page);
  TableFamily(
      infos, "reverb_tf_table_priority_updates_total", "counter",
      "Priority updates applied.",
      [](const TableInfo& i) { return i.counters.priority_updates; }, page);
  TableFamily(
      infos, "reverb_tf_table_resets_total", "counter", "Reset calls.",
      [](const TableInfo& i) { return i.counters.resets; }, page);
  TableFamily(
      infos, "reverb_tf_table_off_signature_items_total", "counter",
      "Items accepted from writers with validate_items=False that do not match "
      "the table's signature.",
      [](const TableInfo& i) { return i.counters.off_signature; }, page);
  page.Family(
      "reverb_tf_table_removed_total", "counter",
      "Items removed, by reason: deleted (by a client), evicted (the table was "
      "full), max_times_sampled.");
  for (const TableInfo& info : infos) {
    const std::pair<const char*, int64_t> reasons[] = {
        {"deleted", info.counters.deleted},
        {"evicted", info.counters.evicted},
        {"max_times_sampled", info.counters.sampled_out}};
    for (const auto& [reason, count] : reasons) {
      page.Sample("reverb_tf_table_removed_total",
                  Labels{{"table", info.options.name}, {"reason", reason}},
                  static_cast<double>(count));
    }
  }
}

// The rate limiters: their waits and the samples per insert they allow.
void RenderRateLimiters(const std::vector<TableInfo>& infos,
                        PrometheusText& page) {
  RateLimiterSideFamily(
      infos, "reverb_tf_table_rate_limiter_blocked_seconds_total", "counter",
      "Time calls spent waiting for the rate limiter (since the last "
      "reset), by "
      "side.",
      [](const RateLimiterCallStats& s) {
        return absl::ToDoubleSeconds(s.completed_wait_time);
      },
      page);
  RateLimiterSideFamily(
      infos, "reverb_tf_table_rate_limiter_waiting_calls", "gauge",
      "Calls waiting for the rate limiter now, by side.",
      [](const RateLimiterCallStats& s) {
        return static_cast<double>(s.pending);
      },
      page);
  TableFamily(
      infos, "reverb_tf_table_samples_per_insert", "gauge",
      "Samples per insert as the rate limiter counts them (since the "
      "last reset; "
      "0 before the first insert).",
      [](const TableInfo& i) {
        const RateLimiterInfo& limiter = i.rate_limiter_info;
        return limiter.inserts > 0 ? static_cast<double>(limiter.samples) /
                                         static_cast<double>(limiter.inserts)
                                   : 0.0;
      },
      page);
  TableFamily(
      infos, "reverb_tf_table_samples_per_insert_target", "gauge",
      "The rate limiter's configured samples per insert.",
      [](const TableInfo& i) {
        return i.rate_limiter_info.options.samples_per_insert;
      },
      page);
}

// How the tables' items spread over priorities.
void RenderPriorityHistograms(const std::vector<TableInfo>& infos,
                              PrometheusText& page) {
  page.Family(
      "reverb_tf_table_items_by_priority", "gauge",
      "Items whose priority is at most `le` (cumulative, powers of two; for "
      "dashboards).");
  for (const TableInfo& info : infos) {
    int64_t cumulative = 0;
    for (int b = 0; b < PriorityHistogram::kNumBuckets; ++b) {
      cumulative += info.priorities.counts[b];
      const double bound = PriorityHistogram::UpperBound(b);
      page.Sample(
          "reverb_tf_table_items_by_priority",
          Labels{{"table", info.options.name},
                 {"le", std::isinf(bound) ? "+Inf" : absl::StrCat(bound)}},
          static_cast<double>(cumulative));
    }
  }
}

// The write-ahead log of a server that keeps one.
void RenderWal(const MetricsSnapshot::Wal& log, PrometheusText& page) {
  const WalStats& wal = log.stats;
  page.Scalar("reverb_tf_wal_entries_total", "counter",
              "Changes queued in the write-ahead log.",
              static_cast<double>(wal.entries));
  page.Scalar("reverb_tf_wal_bytes_total", "counter",
              "Bytes written to the write-ahead log.",
              static_cast<double>(wal.bytes));
  page.Scalar(
      "reverb_tf_wal_writes_total", "counter",
      "Writes of the write-ahead log (each acknowledges one or more calls).",
      static_cast<double>(wal.commits));
  page.Scalar("reverb_tf_wal_syncs_total", "counter",
              "fdatasync calls of the write-ahead log.",
              static_cast<double>(wal.syncs));
  page.Scalar("reverb_tf_wal_files", "gauge",
              "Files of the write-ahead log on disk.",
              static_cast<double>(wal.files));
  page.Scalar(
      "reverb_tf_wal_writable", "gauge",
      "1 while the write-ahead log can be written; 0 while it cannot (a full "
      "disk): reads are served, writes refused until a checkpoint succeeds.",
      log.writable ? 1.0 : 0.0);
  page.Scalar(
      "reverb_tf_wal_recoveries_total", "counter",
      "Times the write-ahead log became writable again after a checkpoint.",
      static_cast<double>(static_cast<uint64_t>(log.recoveries)));
}

// The memory budget of a server that has a memory_limit.
void RenderMemoryBudget(const MetricsSnapshot::Budget& budget,
                        PrometheusText& page) {
  page.Scalar("reverb_tf_memory_limit_bytes", "gauge",
              "The memory budget (memory_limit): chunk bytes plus a fixed "
              "cost per item.",
              static_cast<double>(budget.limit));
  page.Scalar("reverb_tf_memory_used_bytes", "gauge",
              "What the budget counts now: bytes of the chunks held plus "
              "MemoryBudget::kItemBytes per item.",
              static_cast<double>(budget.used));
  page.Scalar(
      "reverb_tf_memory_waiting_calls", "gauge",
      "Inserts and writer chunks waiting for room in the memory budget.",
      static_cast<double>(budget.waiting));
  page.Scalar(
      "reverb_tf_memory_refusals_total", "counter",
      "Inserts and writer chunks refused at their timeout for want of room.",
      static_cast<double>(budget.refused));
}

// The disk tier of a server with a spill directory.
void RenderSpill(const ChunkStore::SpillStats& spill, PrometheusText& page) {
  page.Scalar("reverb_tf_spill_ram_bytes", "gauge",
              "Bytes of spillable (large) chunks held in RAM.",
              static_cast<double>(spill.ram_bytes));
  page.Scalar("reverb_tf_spill_disk_bytes", "gauge",
              "Bytes of live chunks in the spill directory.",
              static_cast<double>(spill.disk_bytes));
  page.Scalar("reverb_tf_spill_file_bytes", "gauge",
              "Size of the spill directory's segment files (live bytes plus "
              "those not yet reclaimed).",
              static_cast<double>(spill.disk_file_bytes));
  page.Scalar("reverb_tf_spill_written_bytes_total", "counter",
              "Chunk bytes written to the spill directory.",
              static_cast<double>(spill.spilled_bytes));
  page.Scalar("reverb_tf_spill_ram_reads_total", "counter",
              "Reads of spillable chunks served from RAM (cache hits).",
              static_cast<double>(spill.ram_reads));
  page.Scalar("reverb_tf_spill_disk_reads_total", "counter",
              "Reads of spilled chunks from disk (cache misses).",
              static_cast<double>(spill.disk_reads));
  page.Scalar("reverb_tf_spill_disk_read_bytes_total", "counter",
              "Bytes read back from the spill directory.",
              static_cast<double>(spill.disk_read_bytes));
  page.Scalar("reverb_tf_spill_disk_read_seconds_total", "counter",
              "Time spent in reads from the spill directory, summed.",
              spill.disk_read_seconds);
  page.Scalar("reverb_tf_spill_compactions_total", "counter",
              "Spill segments emptied by compaction (their live records "
              "moved to the newest segment).",
              static_cast<double>(spill.compactions));
  page.Scalar("reverb_tf_spill_compacted_bytes_total", "counter",
              "Bytes of live records compaction moved (not counted as "
              "written or read).",
              static_cast<double>(spill.compacted_bytes));
  page.Scalar("reverb_tf_spill_failing", "gauge",
              "1 while chunks cannot be written to the spill directory (a "
              "full or failing disk), else 0.",
              spill.last_error.empty() ? 0.0 : 1.0);
  page.Scalar("reverb_tf_spill_compaction_failing", "gauge",
              "1 while compaction cannot move records (a full or failing "
              "disk; spills and writers go on), else 0.",
              spill.compaction_error.empty() ? 0.0 : 1.0);
}

// The chunks held, and the buffers of dead ones kept for new ones.
void RenderChunks(const MetricsSnapshot& snapshot, PrometheusText& page) {
  page.Scalar("reverb_tf_chunks", "gauge",
              "Chunks held by items or writer streams.",
              static_cast<double>(snapshot.chunks));
  page.Scalar("reverb_tf_chunk_bytes", "gauge", "Bytes of the chunks held.",
              static_cast<double>(snapshot.chunk_bytes));
  page.Scalar("reverb_tf_recycled_chunk_bytes", "gauge",
              "Capacity of dead chunks' buffers kept for the next chunks.",
              static_cast<double>(snapshot.recycled_chunk_bytes));
  page.Scalar("reverb_tf_recycled_chunk_bytes_taken_total", "counter",
              "Capacity of kept buffers that new chunks took.",
              static_cast<double>(snapshot.recycled_chunk_bytes_taken));
}

// What the insert and sample streams carried, and how many are open.
void RenderStreams(const MetricsSnapshot& snapshot, PrometheusText& page) {
  const ServiceMetrics& service = *snapshot.service;
  page.Family("reverb_tf_insert_items_received_total", "counter",
              "Items received on insert streams, by the message that carried "
              "them (an item, or an item batch of a batched writer).");
  for (int m = 0; m < ServiceMetrics::kNumItemMessages; ++m) {
    page.Sample(
        "reverb_tf_insert_items_received_total",
        {{"message", std::string(ServiceMetrics::kItemMessageNames[m])}},
        static_cast<double>(
            service.items_received[m].load(std::memory_order_relaxed)));
  }
  page.Scalar("reverb_tf_received_bytes_total", "counter",
              "Bytes of insert and sample stream messages received.",
              static_cast<double>(
                  service.received_bytes.load(std::memory_order_relaxed)));
  page.Scalar(
      "reverb_tf_sent_bytes_total", "counter",
      "Bytes of insert and sample stream messages sent.",
      static_cast<double>(service.sent_bytes.load(std::memory_order_relaxed)));
  page.Scalar("reverb_tf_active_streams", "gauge",
              "Insert, sample and priority-mutation streams open now.",
              static_cast<double>(snapshot.active_streams));
}

// A latency histogram per method.
void RenderLatencies(const ServiceMetrics& service, PrometheusText& page) {
  page.Family(
      "reverb_tf_rpc_duration_seconds", "histogram",
      "Unary calls: the call. Streams: one message, from a request to its "
      "acknowledgement (inserts) or a sample response written, rate-limiter "
      "waits "
      "included.");
  for (int m = 0; m < ServiceMetrics::kNumMethods; ++m) {
    page.Histogram(
        "reverb_tf_rpc_duration_seconds",
        Labels{{"method", std::string(ServiceMetrics::kMethodNames[m])}},
        service.latency[m].Read());
  }
}

// The checkpoints this process wrote, and the last one's size and time.
void RenderCheckpoints(const MetricsSnapshot& snapshot, PrometheusText& page) {
  page.Family("reverb_tf_checkpoints_total", "counter",
              "Checkpoints written by this process, by outcome.");
  page.Sample("reverb_tf_checkpoints_total", Labels{{"outcome", "ok"}},
              static_cast<double>(snapshot.checkpoints_ok));
  page.Sample("reverb_tf_checkpoints_total", Labels{{"outcome", "failed"}},
              static_cast<double>(snapshot.checkpoints_failed));
  if (snapshot.last_checkpoint.has_value()) {
    page.Scalar("reverb_tf_last_checkpoint_duration_seconds", "gauge",
                "How long the last checkpoint took.",
                absl::ToDoubleSeconds(snapshot.last_checkpoint->total));
    page.Scalar("reverb_tf_last_checkpoint_bytes", "gauge",
                "Size of the last checkpoint.",
                static_cast<double>(snapshot.last_checkpoint->bytes));
    page.Scalar("reverb_tf_last_checkpoint_linked_bytes", "gauge",
                "Chunk bytes the last checkpoint left in the spill files it "
                "links to instead of rewriting them.",
                static_cast<double>(snapshot.last_checkpoint->bytes_on_disk));
    page.Scalar("reverb_tf_last_checkpoint_items", "gauge",
                "Items in the last checkpoint.",
                static_cast<double>(snapshot.last_checkpoint->num_items));
    page.Scalar("reverb_tf_last_checkpoint_timestamp_seconds", "gauge",
                "When the last checkpoint finished (Unix time).",
                absl::ToUnixMicros(snapshot.last_checkpoint_time) * 1e-6);
  }
}

}  // namespace

std::string RenderMetricsPage(const MetricsSnapshot& snapshot) {
  PrometheusText page;
  RenderTableInfo(snapshot.tables, page);
  RenderTableCounters(snapshot.tables, page);
  RenderRateLimiters(snapshot.tables, page);
  RenderPriorityHistograms(snapshot.tables, page);
  if (snapshot.wal.has_value()) RenderWal(*snapshot.wal, page);
  if (snapshot.budget.has_value()) RenderMemoryBudget(*snapshot.budget, page);
  if (snapshot.spill.has_value()) RenderSpill(*snapshot.spill, page);
  RenderChunks(snapshot, page);
  RenderStreams(snapshot, page);
  RenderLatencies(*snapshot.service, page);
  RenderCheckpoints(snapshot, page);
  page.Scalar("process_resident_memory_bytes", "gauge",
              "Resident memory size in bytes.",
              static_cast<double>(snapshot.resident_bytes));
  page.Scalar("reverb_tf_grpc_buffer_quota_bytes", "gauge",
              "Bound on gRPC's message buffers, set from the address-space "
              "limit (RLIMIT_AS); 0 when there is none.",
              static_cast<double>(snapshot.grpc_quota_bytes));
  return page.text();
}

}  // namespace reverb_tf
