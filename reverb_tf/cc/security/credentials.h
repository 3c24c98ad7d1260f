// SPDX-License-Identifier: Apache-2.0
// TLS for the replay service and its clients, and the client's bearer token.
//
// The server serves TLS when given a certificate chain and key, and mutual
// TLS (clients must present a certificate the given CA signed) when given a
// client CA too. A client uses TLS when it has root certificates, presents
// its own certificate for mutual TLS, and sends a bearer token (auth.h) with
// every call when it has one.
//
// Clients that are not configured explicitly (TF kernels, Ray actors, the
// CLI) take the process's defaults: what SetDefaultClientSecurity() set, or
// else the environment, read once:
//   REVERB_TF_TLS_CA_FILE      PEM roots (turns TLS on)
//   REVERB_TF_TLS_CERT_FILE,
//   REVERB_TF_TLS_KEY_FILE     the client's certificate and key (mutual TLS)
//   REVERB_TF_TLS_SERVER_NAME  the name to verify instead of the target's host
//   REVERB_TF_TOKEN            the bearer token (REVERB_TF_TOKEN_FILE: from a
//   file)
//
// OpenSSL is linked statically with hidden symbols (docs/native_linking.md):
// TensorFlow's BoringSSL in the same process never meets it.
#ifndef REVERB_TF_CC_SECURITY_CREDENTIALS_H_
#define REVERB_TF_CC_SECURITY_CREDENTIALS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "reverb_tf/cc/platform/export.h"

namespace grpc {
class ChannelCredentials;
class ServerCredentials;
}  // namespace grpc

namespace reverb_tf {

// PEM contents, not paths (ReadPemFile reads a path).
struct REVERB_TF_EXPORT ServerTlsOptions {
  std::string cert_chain;
  std::string private_key;
  // Non-empty: mutual TLS; clients must present a certificate it signed.
  std::string client_ca;

  bool enabled() const { return !cert_chain.empty(); }
  // INVALID_ARGUMENT if only one of chain and key is given, or a client CA
  // without them.
  absl::Status Validate() const;
};

struct REVERB_TF_EXPORT ClientSecurity {
  // Non-empty: TLS, verifying the server against these roots.
  std::string root_certs;
  // Both or neither: the client's certificate for mutual TLS.
  std::string cert_chain;
  std::string private_key;
  // Verify this name in the server's certificate instead of the target's
  // host (e.g. a certificate for "replay.internal" reached by IP address).
  std::string server_name;
  // Sent as "authorization: Bearer <token>" with every call; never logged.
  std::string token;

  bool tls() const { return !root_certs.empty(); }
  absl::Status Validate() const;
  // Equal settings share channels (tf_facade's per-address cache).
  std::string Fingerprint() const;
};

// The file's contents; NOT_FOUND / PERMISSION_DENIED naming the path (and
// `what` it was meant to be).
REVERB_TF_EXPORT absl::StatusOr<std::string> ReadPemFile(
    const std::string& path, const std::string& what);

// The options from PEM files (empty paths: not given), validated.
REVERB_TF_EXPORT absl::StatusOr<ServerTlsOptions> ServerTlsFromFiles(
    const std::string& cert_chain_file, const std::string& private_key_file,
    const std::string& client_ca_file);
REVERB_TF_EXPORT absl::StatusOr<ClientSecurity> ClientSecurityFromFiles(
    const std::string& root_certs_file, const std::string& cert_chain_file,
    const std::string& private_key_file, const std::string& server_name,
    const std::string& token);

// What the environment says (see the top of this file), read now.
REVERB_TF_EXPORT absl::StatusOr<ClientSecurity> SecurityFromEnvironment();

// The process's default client security (see the top of this file), and
// replacing it. Thread-safe; clients created afterwards use the new one.
REVERB_TF_EXPORT absl::StatusOr<ClientSecurity> DefaultClientSecurity();
REVERB_TF_EXPORT absl::Status SetDefaultClientSecurity(
    const ClientSecurity& security);

// gRPC credentials for the options (insecure ones when TLS is off).
std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(
    const ServerTlsOptions& tls);
std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(
    const ClientSecurity& security);

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_SECURITY_CREDENTIALS_H_
