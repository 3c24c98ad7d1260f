// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/client/target.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <memory>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace reverb_tf {
namespace {

// The "name:port" of a dns: target, or empty if `target` is not one.
// gRPC's forms: "dns:name:port", "dns:///name:port", "dns://auth/name:port".
std::string DnsName(absl::string_view target) {
  if (!absl::ConsumePrefix(&target, "dns:")) return "";
  if (absl::ConsumePrefix(&target, "//")) {
    const size_t slash = target.find('/');
    if (slash == absl::string_view::npos) return "";
    target.remove_prefix(slash + 1);
  }
  return std::string(target);
}

}  // namespace

absl::StatusOr<std::vector<TargetPart>> ParseTarget(absl::string_view target) {
  std::vector<TargetPart> parts;
  absl::flat_hash_set<std::string> seen;
  std::string scheme;  // of the last ipv4:/ipv6: element, inherited by the next
  for (absl::string_view element : absl::StrSplit(target, ',')) {
    element = absl::StripAsciiWhitespace(element);
    if (element.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "server address '", target, "' is empty or has an empty element"));
    }
    std::string full(element);
    if (absl::StartsWith(element, "ipv4:") ||
        absl::StartsWith(element, "ipv6:")) {
      scheme = std::string(element.substr(0, 5));
    } else if (!scheme.empty() && !absl::StrContains(element, ":/") &&
               !absl::StartsWith(element, "dns:") &&
               !absl::StartsWith(element, "unix:")) {
      full = absl::StrCat(scheme, element);
    } else {
      scheme.clear();
    }
    if (!seen.insert(full).second) continue;
    TargetPart& part = parts.emplace_back();
    part.resolve = DnsName(full);
    part.target = std::move(full);
  }
  return parts;
}

absl::StatusOr<std::vector<std::string>> ResolveAddresses(
    absl::string_view host_port) {
  const size_t colon = host_port.rfind(':');
  if (colon == absl::string_view::npos || colon + 1 == host_port.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", host_port, "' has no port (expected name:port)"));
  }
  std::string host(host_port.substr(0, colon));
  const std::string port(host_port.substr(colon + 1));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int error = getaddrinfo(host.c_str(), port.c_str(), &hints, &result);
  if (error != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve '", host_port,
                                               "': ", gai_strerror(error)));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owned(result,
                                                           &freeaddrinfo);
  std::vector<std::string> addresses;
  for (const addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (ai->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(ai->ai_addr);
      inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
      addresses.push_back(absl::StrCat("ipv4:", text, ":", port));
    } else if (ai->ai_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(ai->ai_addr);
      inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
      addresses.push_back(absl::StrCat("ipv6:[", text, "]:", port));
    }
  }
  std::sort(addresses.begin(), addresses.end());
  addresses.erase(std::unique(addresses.begin(), addresses.end()),
                  addresses.end());
  if (addresses.empty()) {
    return absl::UnavailableError(
        absl::StrCat("'", host_port, "' resolves to no address"));
  }
  return addresses;
}

std::vector<std::string> ExpandTarget(const std::vector<TargetPart>& parts) {
  std::vector<std::string> shards;
  absl::flat_hash_set<std::string> seen;
  auto add = [&](std::string shard) {
    if (seen.insert(shard).second) shards.push_back(std::move(shard));
  };
  for (const TargetPart& part : parts) {
    if (part.resolve.empty()) {
      add(part.target);
      continue;
    }
    auto addresses = ResolveAddresses(part.resolve);
    // Loopback addresses of one name and port ("localhost": 127.0.0.1 and
    // ::1) are one server listening on both, not shards.
    const bool all_loopback =
        addresses.ok() &&
        std::all_of(addresses->begin(), addresses->end(),
                    [](const std::string& a) {
                      return absl::StartsWith(a, "ipv4:127.") ||
                             absl::StartsWith(a, "ipv6:[::1]");
                    });
    if (!addresses.ok() || addresses->size() == 1 || all_loopback) {
      add(part.target);  // gRPC resolves it, again after every failure
      continue;
    }
    for (std::string& address : *addresses) add(std::move(address));
  }
  return shards;
}

}  // namespace reverb_tf
