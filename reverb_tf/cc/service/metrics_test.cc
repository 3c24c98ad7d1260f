// SPDX-License-Identifier: Apache-2.0
// The metrics building blocks: histogram buckets, the text format's
// escaping and histogram lines. (The served page is checked end to end, with
// Prometheus's own parser, by tests/test_metrics.py.)
#include "reverb_tf/cc/service/metrics.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "gtest/gtest.h"
#include "reverb_tf/cc/service/server.h"
#include "reverb_tf/cc/testing/status_matchers.h"
#include "reverb_tf/cc/testing/test_util.h"

namespace reverb_tf {
namespace {

TEST(LatencyHistogramTest, PutsDurationsInTheirBucketsAndSumsThem) {
  LatencyHistogram histogram;
  histogram.Observe(absl::Microseconds(50));   // <= 100 us
  histogram.Observe(absl::Microseconds(100));  // on a bound: that bucket
  histogram.Observe(absl::Milliseconds(3));    // <= 5 ms
  histogram.Observe(absl::Seconds(60));        // above every bound
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
  EXPECT_NE(text.find("# HELP m Help text.\n# TYPE m gauge\n"),
            std::string::npos);
  EXPECT_NE(text.find("m{table=\"a\\\"b\\\\c\\nd\"} 1.5\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("\nm 3\n"), std::string::npos);
  EXPECT_NE(text.find("h_bucket{method=\"X\",le=\"0.0001\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("h_bucket{method=\"X\",le=\"0.01\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("h_bucket{method=\"X\",le=\"0.025\"} 2\n"),
            std::string::npos);
  EXPECT_NE(text.find("h_bucket{method=\"X\",le=\"+Inf\"} 2\n"),
            std::string::npos);
  EXPECT_NE(text.find("h_count{method=\"X\"} 2\n"), std::string::npos);
}

// One HTTP/1.0 request to 127.0.0.1:port; the whole response.
std::string HttpGet(int port, const std::string& method,
                    const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) ==
      0) {
    const std::string request = method + " " + path + " HTTP/1.0\r\n\r\n";
    if (write(fd, request.data(), request.size()) ==
        static_cast<ssize_t>(request.size())) {
      char buffer[4096];
      ssize_t n;
      while ((n = read(fd, buffer, sizeof(buffer))) > 0)
        response.append(buffer, n);
    }
  }
  close(fd);
  return response;
}

TEST(MetricsHttpTest, ServesMetricsAndDashboardAndRefusesTheRest) {
  ServerOptions options;
  options.metrics_port = 0;
  auto server = ReplayServer::StartFromOptions(
      {testing::MakeTableOptions("t", testing::Uniform(), testing::Fifo(), 10,
                                 RateLimiterOptions::MinSize(1))},
      options);
  ASSERT_OK(server);
  const int port = (*server)->metrics_port();
  ASSERT_GT(port, 0);
  const std::string metrics = HttpGet(port, "GET", "/metrics");
  EXPECT_EQ(metrics.rfind("HTTP/1.1 200", 0), 0u) << metrics.substr(0, 200);
  EXPECT_NE(metrics.find("text/plain; version=0.0.4"), std::string::npos);
  EXPECT_NE(metrics.find("reverb_tf_table_size{table=\"t\"} 0\n"),
            std::string::npos);
  EXPECT_NE(metrics.find(
                "reverb_tf_table_items_by_priority{table=\"t\",le=\"+Inf\"} 0"),
            std::string::npos);
  const std::string dashboard = HttpGet(port, "GET", "/");
  EXPECT_NE(dashboard.find("text/html"), std::string::npos);
  EXPECT_NE(dashboard.find("<title>reverb_tf server</title>"),
            std::string::npos);
  EXPECT_EQ(HttpGet(port, "GET", "/nope").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(HttpGet(port, "DELETE", "/metrics").rfind("HTTP/1.1 405", 0), 0u);
  // A second server cannot take the port; the first keeps serving.
  options.metrics_port = port;
  auto second = ReplayServer::StartFromOptions(
      {testing::MakeTableOptions("t", testing::Uniform(), testing::Fifo(), 10,
                                 RateLimiterOptions::MinSize(1))},
      options);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  (*server)->Stop();
  EXPECT_EQ(HttpGet(port, "GET", "/metrics"), "");  // closed with the server
}

}  // namespace
}  // namespace reverb_tf
