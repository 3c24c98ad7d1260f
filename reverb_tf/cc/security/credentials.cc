// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/security/credentials.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <tuple>

#include "absl/base/const_init.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace reverb_tf {
namespace {

absl::Mutex defaults_mu(absl::kConstInit);
// Set at first use (from the environment) or by SetDefaultClientSecurity.
ClientSecurity* defaults ABSL_GUARDED_BY(defaults_mu) = nullptr;

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : std::string(value);
}

// OpenSSL's reason for the last failure, or `fallback`.
std::string OpenSslError(const char* fallback) {
  const unsigned long code =
      ERR_get_error();  // NOLINT(runtime/int): OpenSSL's type
  ERR_clear_error();
  if (code == 0) return fallback;
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

std::unique_ptr<BIO, decltype(&BIO_free)> Bio(const std::string& pem) {
  return {BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), &BIO_free};
}

// INVALID_ARGUMENT unless `pem` holds at least one certificate; the first
// goes to `first` if given (the caller frees it).
absl::Status CheckCertificates(const std::string& pem, const char* what,
                               X509** first) {
  auto bio = Bio(pem);
  X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
  if (cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", what,
        " holds no PEM certificate: ", OpenSslError("unreadable")));
  }
  if (first != nullptr) {
    *first = cert;
  } else {
    X509_free(cert);
  }
  return absl::OkStatus();
}

// INVALID_ARGUMENT unless `key_pem` is a private key that belongs to the
// first certificate of `chain_pem`.
absl::Status CheckKeyPair(const std::string& chain_pem,
                          const std::string& key_pem, const char* what) {
  X509* cert = nullptr;
  if (absl::Status status = CheckCertificates(chain_pem, what, &cert);
      !status.ok()) {
    return status;
  }
  std::unique_ptr<X509, decltype(&X509_free)> owned_cert(cert, &X509_free);
  auto bio = Bio(key_pem);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr),
      &EVP_PKEY_free);
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", what,
        "'s key is not a PEM private key: ", OpenSslError("unreadable")));
  }
  if (X509_check_private_key(cert, key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", what, "'s private key does not belong to its certificate"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ClientSecurity> SecurityFromEnvironment() {
  std::string token = Env("REVERB_TF_TOKEN");
  const std::string token_file = Env("REVERB_TF_TOKEN_FILE");
  if (token.empty() && !token_file.empty()) {
    auto contents = ReadPemFile(token_file, "token (REVERB_TF_TOKEN_FILE)");
    if (!contents.ok()) return contents.status();
    token = std::string(absl::StripAsciiWhitespace(*contents));
  }
  auto security = ClientSecurityFromFiles(
      Env("REVERB_TF_TLS_CA_FILE"), Env("REVERB_TF_TLS_CERT_FILE"),
      Env("REVERB_TF_TLS_KEY_FILE"), Env("REVERB_TF_TLS_SERVER_NAME"), token);
  if (!security.ok()) {
    return absl::Status(
        security.status().code(),
        absl::StrCat("REVERB_TF_TLS_* / REVERB_TF_TOKEN environment: ",
                     security.status().message()));
  }
  return security;
}

absl::Status ServerTlsOptions::Validate() const {
  if (cert_chain.empty() != private_key.empty()) {
    return absl::InvalidArgumentError(
        "TLS needs both the certificate chain and its private key");
  }
  if (!client_ca.empty() && cert_chain.empty()) {
    return absl::InvalidArgumentError(
        "a client CA (mutual TLS) needs the server's certificate and key too");
  }
  if (cert_chain.empty()) return absl::OkStatus();
  if (absl::Status pair =
          CheckKeyPair(cert_chain, private_key, "server certificate");
      !pair.ok()) {
    return pair;
  }
  return client_ca.empty() ? absl::OkStatus()
                           : CheckCertificates(client_ca, "client CA", nullptr);
}

absl::Status ClientSecurity::Validate() const {
  if (cert_chain.empty() != private_key.empty()) {
    return absl::InvalidArgumentError(
        "a client certificate (mutual TLS) needs both the certificate and its "
        "key");
  }
  if (!cert_chain.empty() && root_certs.empty()) {
    return absl::InvalidArgumentError(
        "a client certificate needs TLS: give the roots (CA) that verify the "
        "server too");
  }
  if (token.find_first_of("\r\n") != std::string::npos) {
    return absl::InvalidArgumentError("the token must be one line");
  }
  if (!root_certs.empty()) {
    if (absl::Status roots =
            CheckCertificates(root_certs, "TLS roots (CA)", nullptr);
        !roots.ok()) {
      return roots;
    }
  }
  return cert_chain.empty()
             ? absl::OkStatus()
             : CheckKeyPair(cert_chain, private_key, "client certificate");
}

std::string ClientSecurity::Fingerprint() const {
  // Lengths first, so that no two different settings join to the same text.
  return absl::StrCat(root_certs.size(), ":", cert_chain.size(), ":",
                      private_key.size(), ":", server_name.size(), ":",
                      token.size(), ":", root_certs, cert_chain, private_key,
                      server_name, token);
}

absl::StatusOr<std::string> ReadPemFile(const std::string& path,
                                        const std::string& what) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    const int error = errno;
    const std::string reason = absl::StrCat("cannot read the ", what, " file '",
                                            path, "': ", std::strerror(error));
    return error == EACCES ? absl::PermissionDeniedError(reason)
                           : absl::NotFoundError(reason);
  }
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

namespace {

// Reads each non-empty path into its string.
absl::Status ReadFiles(
    std::initializer_list<
        std::tuple<const std::string&, std::string*, const char*>>
        files) {
  for (const auto& [path, into, what] : files) {
    if (path.empty()) continue;
    auto contents = ReadPemFile(path, what);
    if (!contents.ok()) return contents.status();
    *into = *std::move(contents);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ServerTlsOptions> ServerTlsFromFiles(
    const std::string& cert_chain_file, const std::string& private_key_file,
    const std::string& client_ca_file) {
  ServerTlsOptions tls;
  absl::Status read =
      ReadFiles({{cert_chain_file, &tls.cert_chain, "TLS certificate chain"},
                 {private_key_file, &tls.private_key, "TLS private key"},
                 {client_ca_file, &tls.client_ca, "TLS client CA"}});
  if (!read.ok()) return read;
  if (absl::Status valid = tls.Validate(); !valid.ok()) return valid;
  return tls;
}

absl::StatusOr<ClientSecurity> ClientSecurityFromFiles(
    const std::string& root_certs_file, const std::string& cert_chain_file,
    const std::string& private_key_file, const std::string& server_name,
    const std::string& token) {
  ClientSecurity security;
  absl::Status read =
      ReadFiles({{root_certs_file, &security.root_certs, "TLS roots (CA)"},
                 {cert_chain_file, &security.cert_chain, "client certificate"},
                 {private_key_file, &security.private_key, "client key"}});
  if (!read.ok()) return read;
  security.server_name = server_name;
  security.token = token;
  if (absl::Status valid = security.Validate(); !valid.ok()) return valid;
  return security;
}

absl::StatusOr<ClientSecurity> DefaultClientSecurity() {
  absl::MutexLock lock(&defaults_mu);
  if (defaults == nullptr) {
    auto from_environment = SecurityFromEnvironment();
    if (!from_environment.ok()) return from_environment.status();
    defaults = new ClientSecurity(*std::move(from_environment));
  }
  return *defaults;
}

absl::Status SetDefaultClientSecurity(const ClientSecurity& security) {
  if (absl::Status valid = security.Validate(); !valid.ok()) return valid;
  absl::MutexLock lock(&defaults_mu);
  if (defaults == nullptr) defaults = new ClientSecurity();
  *defaults = security;
  return absl::OkStatus();
}

std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(
    const ServerTlsOptions& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(
      tls.client_ca.empty()
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = tls.client_ca;
  options.pem_key_cert_pairs.push_back({tls.private_key, tls.cert_chain});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(
    const ClientSecurity& security) {
  if (!security.tls()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = security.root_certs;
  options.pem_private_key = security.private_key;
  options.pem_cert_chain = security.cert_chain;
  return grpc::SslCredentials(options);
}

}  // namespace reverb_tf
