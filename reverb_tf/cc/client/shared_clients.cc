// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/client/shared_clients.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "reverb_tf/cc/security/credentials.h"

namespace reverb_tf {

absl::StatusOr<std::shared_ptr<Client>> SharedClient(
    const std::string& address) {
  static absl::Mutex mu(absl::kConstInit);
  // Never freed: kernels may run until the process exits.
  static auto* clients =
      new absl::flat_hash_map<std::string, std::shared_ptr<Client>>();
  auto security = DefaultClientSecurity();
  if (!security.ok()) return security.status();
  const std::string key = absl::StrCat(address, "\n", security->Fingerprint());
  absl::MutexLock lock(&mu);
  auto it = clients->find(key);
  if (it != clients->end()) return it->second;
  ClientOptions options;
  options.security = *std::move(security);
  auto client = Client::Create(address, options);
  if (!client.ok()) return client.status();
  std::shared_ptr<Client> shared = *std::move(client);
  clients->emplace(key, shared);
  return shared;
}

}  // namespace reverb_tf
