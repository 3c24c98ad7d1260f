// SPDX-License-Identifier: Apache-2.0
// Client targets that name one replay server or several (shards).
//
// A Client is given one target string. It names:
//   * one server: "host:port" or any single gRPC target ("unix:/path",
//     "dns:///name:port" that resolves to one address), handed to gRPC as is;
//   * several servers, each a shard of the same tables:
//       - a comma-separated list of targets, "host1:port,host2:port" (what
//         the Python API makes of a list of addresses);
//       - gRPC's address lists, "ipv4:10.0.0.1:8000,10.0.0.2:8000" and
//         "ipv6:[::1]:8000,[::1]:8001": every address is a shard (a
//         scheme-less element after one of them inherits its scheme);
//       - "dns:///name:port" (or "dns://authority/name:port") whose name
//         resolves to several addresses: every address is a shard, as a
//         Kubernetes headless Service lists its pods.
// docs/scale_out.md explains why the client keeps one channel per shard
// instead of one round-robin channel over all of them.
//
// Thread safety: stateless; the functions may run concurrently from any
// thread (ResolveAddresses, and ExpandTarget through it, blocks in
// getaddrinfo, which is thread-safe).
#ifndef REVERB_TF_CC_CLIENT_TARGET_H_
#define REVERB_TF_CC_CLIENT_TARGET_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace reverb_tf {

// One element of a parsed target.
struct TargetPart {
  // A gRPC target naming one server, or (when `resolve`) the original
  // "dns:..." target.
  std::string target;
  // "name:port" to resolve into one shard per address; empty unless the
  // element is a dns: target.
  std::string resolve;
};

// Splits `target` into its elements, without resolving names. Duplicates are
// dropped. InvalidArgument for an empty target or element.
absl::StatusOr<std::vector<TargetPart>> ParseTarget(absl::string_view target);

// Resolves "name:port" (the host may be a bracketed IPv6 literal) into gRPC
// targets of its addresses, "ipv4:a.b.c.d:port" / "ipv6:[addr]:port",
// sorted and without duplicates. UNAVAILABLE if the name does not resolve.
absl::StatusOr<std::vector<std::string>> ResolveAddresses(
    absl::string_view host_port);

// The shards `parts` name now: fixed elements as they are, dns: elements
// that resolve to several addresses as one shard per address, and those
// that resolve to one address, to loopback addresses only (one server on
// 127.0.0.1 and ::1) or (for now) to none as the dns: target itself, which
// gRPC keeps resolving. Sorted as given, duplicates dropped.
std::vector<std::string> ExpandTarget(const std::vector<TargetPart>& parts);

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_CLIENT_TARGET_H_
