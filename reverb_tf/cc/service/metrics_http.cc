// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/service/metrics_http.h"

#include <netdb.h>
#include <sys/socket.h>

#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "microhttpd/microhttpd.h"
#include "reverb_tf/cc/platform/loopback.h"
#include "reverb_tf/cc/platform/out_of_memory.h"
#include "reverb_tf/cc/platform/status_macros.h"
#include "reverb_tf/cc/service/dashboard_html.h"

namespace reverb_tf {
namespace {

MHD_Result Reply(MHD_Connection* connection, unsigned int code,
                 const std::string& body, const char* content_type) {
  MHD_Response* response = MHD_create_response_from_buffer(
      body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
  const MHD_Result queued = MHD_queue_response(connection, code, response);
  MHD_destroy_response(response);
  return queued;
}

MHD_Result Handle(void* cls, MHD_Connection* connection, const char* url,
                  const char* method, const char* /*version*/,
                  const char* /*upload_data*/, size_t* upload_data_size,
                  void** /*request_state*/) {
  const auto& render = *static_cast<const std::function<std::string()>*>(cls);
  if (std::strcmp(method, MHD_HTTP_METHOD_GET) != 0 &&
      std::strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
    return Reply(connection, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET\n",
                 "text/plain");
  }
  if (*upload_data_size != 0) return MHD_NO;  // a GET with a body
  if (std::strcmp(url, "/") == 0 || std::strcmp(url, "/dashboard") == 0) {
    static const std::string* const kPage = new std::string(kDashboardHtml);
    return Reply(connection, MHD_HTTP_OK, *kPage, "text/html; charset=utf-8");
  }
  if (std::strcmp(url, "/metrics") != 0) {
    return Reply(connection, MHD_HTTP_NOT_FOUND,
                 "not found: the metrics are at /metrics, the dashboard at /\n",
                 "text/plain");
  }
  // A C callback: an exception must not leave it (platform/out_of_memory.h).
  std::string page;
  try {
    page = render();
  } catch (const std::bad_alloc&) {
    return Reply(
        connection, MHD_HTTP_SERVICE_UNAVAILABLE,
        std::string(OutOfMemoryError("rendering the metrics").message()) + "\n",
        "text/plain");
  }
  return Reply(connection, MHD_HTTP_OK, page, MetricsHttpServer::kContentType);
}

}  // namespace

absl::StatusOr<MHD_Daemon*> MetricsHttpServer::Listen(const std::string& node,
                                                      int port,
                                                      bool every_interface,
                                                      int* bound) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int error = getaddrinfo(node.c_str(), std::to_string(port).c_str(),
                                    &hints, &found);
      error != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics: cannot resolve host '", node, "': ", gai_strerror(error)));
  }
  sockaddr_storage address{};
  std::memcpy(&address, found->ai_addr, found->ai_addrlen);
  const bool ipv6 = found->ai_family == AF_INET6;
  freeaddrinfo(found);
  unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO;
  if (ipv6) flags |= every_interface ? MHD_USE_DUAL_STACK : MHD_USE_IPv6;
  MHD_Daemon* daemon = MHD_start_daemon(
      flags, static_cast<uint16_t>(port), nullptr, nullptr, &Handle,
      const_cast<std::function<std::string()>*>(&render_), MHD_OPTION_SOCK_ADDR,
      reinterpret_cast<sockaddr*>(&address),
      // Scrapers are few; a stuck one must not hold a connection forever.
      MHD_OPTION_CONNECTION_LIMIT, 64u, MHD_OPTION_CONNECTION_TIMEOUT, 30u,
      MHD_OPTION_END);
  if (daemon == nullptr) return nullptr;
  const MHD_DaemonInfo* info =
      MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
  *bound = info != nullptr && info->port != 0 ? info->port : port;
  return daemon;
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& host, int port, std::function<std::string()> render) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics port must be in [0, 65535], got ", port));
  }
  auto server = std::unique_ptr<MetricsHttpServer>(
      new MetricsHttpServer(std::move(render)));
  // "localhost" is both loopbacks, each bound on its own on one port
  // (platform/loopback.h); port 0 tries a few ports free on both.
  std::vector<std::string> nodes = {host};
  if (host == "localhost") {
    nodes = {"127.0.0.1"};
    if (Ipv6LoopbackUsable()) nodes.push_back("::1");
  }
  const int attempts = port == 0 && nodes.size() > 1 ? 4 : 1;
  for (int attempt = 0; attempt < attempts && server->daemons_.empty();
       ++attempt) {
    int wanted = attempts > 1 ? PortFreeOnBothLoopbacks() : port;
    for (const std::string& node : nodes) {
      int bound = 0;
      ASSIGN_OR_RETURN(
          MHD_Daemon * daemon,
          server->Listen(node, wanted, host == "::" || host == "0.0.0.0",
                         &bound));
      if (daemon == nullptr) {
        for (MHD_Daemon* started : server->daemons_) MHD_stop_daemon(started);
        server->daemons_.clear();
        break;
      }
      server->daemons_.push_back(daemon);
      wanted = bound;  // the next address on the port the first one got
    }
    server->port_ = wanted;
  }
  if (server->daemons_.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "metrics: cannot listen on ", host, ":", port,
        nodes.size() > 1 ? " (127.0.0.1 and [::1]; in use?)" : " (in use?)"));
  }
  return server;
}

MetricsHttpServer::~MetricsHttpServer() {
  for (MHD_Daemon* daemon : daemons_) MHD_stop_daemon(daemon);
}

}  // namespace reverb_tf
