// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/local_server.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "absl/base/const_init.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"

namespace reverb_tf {
namespace {

struct Entry {
  std::string host;
  std::shared_ptr<LocalServer> server;
  // The registering process. A fork()ed child inherits the registry, and a
  // copy of the server without its threads: its clients must reach the real
  // server over the wire, or their writes would land in the child's copy.
  pid_t pid;
};

absl::Mutex registry_mu(absl::kConstInit);
absl::flat_hash_map<int, Entry>* registry ABSL_GUARDED_BY(registry_mu) =
    nullptr;

std::atomic<int> enabled{-1};  // -1: not read from the environment yet

bool IsLoopbackHost(absl::string_view host) {
  return host == "localhost" || host == "127.0.0.1" || host == "::1" ||
         host == "[::1]";
}

// Interfaces a loopback client reaches a server bound to.
bool ServesLoopback(absl::string_view host) {
  return IsLoopbackHost(host) || host == "0.0.0.0" || host == "::" ||
         host == "[::]";
}

}  // namespace

void RegisterLocalServer(int port, const std::string& host,
                         std::shared_ptr<LocalServer> server) {
  absl::MutexLock lock(&registry_mu);
  if (registry == nullptr) registry = new absl::flat_hash_map<int, Entry>();
  (*registry)[port] = Entry{host, std::move(server), getpid()};
}

void UnregisterLocalServer(int port, const LocalServer* server) {
  absl::MutexLock lock(&registry_mu);
  if (registry == nullptr) return;
  auto it = registry->find(port);
  if (it != registry->end() && it->second.server.get() == server)
    registry->erase(it);
}

int LoopbackPort(absl::string_view address) {
  if (!absl::ConsumePrefix(&address, "ipv4:") &&
      !absl::ConsumePrefix(&address, "ipv6:")) {
    absl::ConsumePrefix(&address, "dns:///");
  }
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return -1;
  int port;
  if (!IsLoopbackHost(address.substr(0, colon)) ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port)) {
    return -1;
  }
  return port;
}

std::shared_ptr<LocalServer> FindLocalServer(int port) {
  if (port <= 0 || !InProcessEnabled()) return nullptr;
  absl::MutexLock lock(&registry_mu);
  if (registry == nullptr) return nullptr;
  auto it = registry->find(port);
  if (it == registry->end() || !ServesLoopback(it->second.host) ||
      it->second.pid != getpid()) {
    return nullptr;
  }
  return it->second.server;
}

void SetInProcessEnabled(bool value) { enabled.store(value ? 1 : 0); }

bool InProcessEnabled() {
  int value = enabled.load(std::memory_order_relaxed);
  if (value < 0) {
    const char* env = std::getenv("REVERB_TF_IN_PROCESS");
    value = env != nullptr && std::strcmp(env, "0") == 0 ? 0 : 1;
    enabled.store(value);
  }
  return value == 1;
}

}  // namespace reverb_tf
