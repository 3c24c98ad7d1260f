#include "reverb_tf/cc/service/metrics_http.h"

#include <netdb.h>
#include <sys/socket.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "microhttpd/microhttpd.h"
#include "reverb_tf/cc/service/dashboard_html.h"

namespace reverb_tf {
namespace {

MHD_Result Reply(MHD_Connection* connection, unsigned int code, const std::string& body,
                 const char* content_type) {
  MHD_Response* response = MHD_create_response_from_buffer(
      body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
  const MHD_Result queued = MHD_queue_response(connection, code, response);
  MHD_destroy_response(response);
  return queued;
}

MHD_Result Handle(void* cls, MHD_Connection* connection, const char* url, const char* method,
                  const char* /*version*/, const char* /*upload_data*/,
                  size_t* upload_data_size, void** /*request_state*/) {
  const auto& render = *static_cast<const std::function<std::string()>*>(cls);
  if (std::strcmp(method, MHD_HTTP_METHOD_GET) != 0 &&
      std::strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
    return Reply(connection, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET\n", "text/plain");
  }
  if (*upload_data_size != 0) return MHD_NO;  // a GET with a body
  if (std::strcmp(url, "/") == 0 || std::strcmp(url, "/dashboard") == 0) {
    static const std::string* const kPage = new std::string(kDashboardHtml);
    return Reply(connection, MHD_HTTP_OK, *kPage, "text/html; charset=utf-8");
  }
  if (std::strcmp(url, "/metrics") != 0) {
    return Reply(connection, MHD_HTTP_NOT_FOUND,
                 "not found: the metrics are at /metrics, the dashboard at /\n", "text/plain");
  }
  return Reply(connection, MHD_HTTP_OK, render(), MetricsHttpServer::kContentType);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& host, int port, std::function<std::string()> render) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("metrics port must be in [0, 65535], got ", port));
  }
  // Loopback by its IPv4 address: what scrapers of "localhost" reach first.
  const std::string node = host == "localhost" ? "127.0.0.1" : host;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int error = getaddrinfo(node.c_str(), std::to_string(port).c_str(), &hints, &found);
      error != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics: cannot resolve host '", host, "': ", gai_strerror(error)));
  }
  sockaddr_storage address{};
  std::memcpy(&address, found->ai_addr, found->ai_addrlen);
  const bool ipv6 = found->ai_family == AF_INET6;
  freeaddrinfo(found);

  auto server = std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(std::move(render)));
  unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO;
  if (ipv6) flags |= host == "::" ? MHD_USE_DUAL_STACK : MHD_USE_IPv6;
  server->daemon_ = MHD_start_daemon(
      flags, static_cast<uint16_t>(port), nullptr, nullptr, &Handle,
      const_cast<std::function<std::string()>*>(&server->render_),
      MHD_OPTION_SOCK_ADDR, reinterpret_cast<sockaddr*>(&address),
      // Scrapers are few; a stuck one must not hold a connection forever.
      MHD_OPTION_CONNECTION_LIMIT, 64u, MHD_OPTION_CONNECTION_TIMEOUT, 30u,
      MHD_OPTION_END);
  if (server->daemon_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", host, ":", port, " (in use?)"));
  }
  const MHD_DaemonInfo* info = MHD_get_daemon_info(server->daemon_, MHD_DAEMON_INFO_BIND_PORT);
  server->port_ = info != nullptr && info->port != 0 ? info->port : port;
  return server;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
}

}  // namespace reverb_tf
