// SPDX-License-Identifier: Apache-2.0
// The HTTP endpoint of a server's Prometheus metrics (GET /metrics) and of its
// live dashboard (GET /, dashboard.html, which polls /metrics), served by
// GNU libmicrohttpd (linked statically, built without HTTPS) on one thread of
// its own.
//
// Thread safety: Start() and the destructor are not concurrent with each
// other; `render` is called on the server's thread, one request at a time.
#ifndef REVERB_TF_CC_SERVICE_METRICS_HTTP_H_
#define REVERB_TF_CC_SERVICE_METRICS_HTTP_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

struct MHD_Daemon;

namespace reverb_tf {

class MetricsHttpServer {
 public:
  // Listens on `host` ("localhost" is 127.0.0.1 and ::1, each bound on the
  // same port and both required; "0.0.0.0" or "::" every interface) and
  // `port` (0: a free one); GET /metrics answers render()'s text, GET / the
  // dashboard. UNAVAILABLE if the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& host, int port, std::function<std::string()> render);

  // Stops serving (waits for a request being answered).
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }

  // The value of the Content-Type header of /metrics.
  static constexpr char kContentType[] =
      "text/plain; version=0.0.4; charset=utf-8";

 private:
  explicit MetricsHttpServer(std::function<std::string()> render)
      : render_(std::move(render)) {}

  // A daemon on `node`:`port`; `bound` gets its port. Null if the address
  // cannot be bound.
  absl::StatusOr<MHD_Daemon*> Listen(const std::string& node, int port,
                                     bool every_interface, int* bound);

  const std::function<std::string()> render_;
  std::vector<MHD_Daemon*> daemons_;  // one per address
  int port_ = 0;
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_SERVICE_METRICS_HTTP_H_
