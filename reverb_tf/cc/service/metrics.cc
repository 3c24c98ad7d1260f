// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/service/metrics.h"

#include <unistd.h>

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
  sum_nanos_.fetch_add(absl::ToInt64Nanoseconds(duration), std::memory_order_relaxed);
}

LatencyHistogram::Snapshot LatencyHistogram::Read() const {
  Snapshot snapshot;
  for (size_t i = 0; i < counts_.size(); ++i) {
    snapshot.counts[i] = counts_[i].load(std::memory_order_relaxed);
    snapshot.count += snapshot.counts[i];
  }
  snapshot.sum_seconds = static_cast<double>(sum_nanos_.load(std::memory_order_relaxed)) * 1e-9;
  return snapshot;
}

void PrometheusText::Family(absl::string_view name, absl::string_view type,
                            absl::string_view help) {
  absl::StrAppend(&text_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

void PrometheusText::Sample(absl::string_view name, const Labels& labels, double value) {
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
    with_le.back().second =
        i < LatencyHistogram::kBounds.size() ? absl::StrCat(LatencyHistogram::kBounds[i]) : "+Inf";
    Sample(absl::StrCat(name, "_bucket"), with_le, static_cast<double>(cumulative));
  }
  Sample(absl::StrCat(name, "_sum"), labels, histogram.sum_seconds);
  Sample(absl::StrCat(name, "_count"), labels, static_cast<double>(histogram.count));
}

int64_t ResidentMemoryBytes() {
  std::FILE* statm = std::fopen("/proc/self/statm", "r");
  if (statm == nullptr) return 0;
  long pages = 0;
  long resident = 0;
  const int read = std::fscanf(statm, "%ld %ld", &pages, &resident);
  std::fclose(statm);
  return read == 2 ? static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE) : 0;
}

}  // namespace reverb_tf
