// The metrics building blocks: histogram buckets, the text format's
// escaping and histogram lines. (The served page is checked end to end, with
// Prometheus's own parser, by tests/test_metrics.py.)
#include "reverb_tf/cc/service/metrics.h"

#include "gtest/gtest.h"

namespace reverb_tf {
namespace {

TEST(LatencyHistogramTest, PutsDurationsInTheirBucketsAndSumsThem) {
  LatencyHistogram histogram;
  histogram.Observe(absl::Microseconds(50));    // <= 100 us
  histogram.Observe(absl::Microseconds(100));   // on a bound: that bucket
  histogram.Observe(absl::Milliseconds(3));     // <= 5 ms
  histogram.Observe(absl::Seconds(60));         // above every bound
  const LatencyHistogram::Snapshot snapshot = histogram.Read();
  EXPECT_EQ(snapshot.count, 4);
  EXPECT_EQ(snapshot.counts[0], 2);
  EXPECT_EQ(snapshot.counts[5], 1);
  EXPECT_EQ(snapshot.counts.back(), 1);
  EXPECT_NEAR(snapshot.sum_seconds, 60.00315, 1e-9);
}

TEST(PrometheusTextTest, EscapesLabelsAndWritesCumulativeBuckets) {
  PrometheusText page;
  page.Family("m", "gauge", "Help text.");
  page.Sample("m", {{"table", "a\"b\\c\nd"}}, 1.5);
  page.Sample("m", {}, 3);
  LatencyHistogram histogram;
  histogram.Observe(absl::Microseconds(10));
  histogram.Observe(absl::Milliseconds(20));
  page.Family("h", "histogram", "Latency.");
  page.Histogram("h", {{"method", "X"}}, histogram.Read());
  const std::string& text = page.text();
  EXPECT_NE(text.find("# HELP m Help text.\n# TYPE m gauge\n"), std::string::npos);
  EXPECT_NE(text.find("m{table=\"a\\\"b\\\\c\\nd\"} 1.5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nm 3\n"), std::string::npos);
  EXPECT_NE(text.find("h_bucket{method=\"X\",le=\"0.0001\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("h_bucket{method=\"X\",le=\"0.01\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("h_bucket{method=\"X\",le=\"0.025\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("h_bucket{method=\"X\",le=\"+Inf\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("h_count{method=\"X\"} 2\n"), std::string::npos);
}

TEST(ResidentMemoryTest, ReadsThisProcesssRss) {
  EXPECT_GT(ResidentMemoryBytes(), 1 << 20);
}

}  // namespace
}  // namespace reverb_tf
