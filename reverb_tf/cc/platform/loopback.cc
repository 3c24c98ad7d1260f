// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/platform/loopback.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace reverb_tf {

bool Ipv6LoopbackUsable() {
  const int fd = socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in6 address{};
  address.sin6_family = AF_INET6;
  address.sin6_addr = in6addr_loopback;
  const bool usable =
      bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return usable;
}

int PortFreeOnBothLoopbacks() {
  for (int attempt = 0; attempt < 64; ++attempt) {
    const int fd6 = socket(AF_INET6, SOCK_STREAM, 0);
    const int fd4 = socket(AF_INET, SOCK_STREAM, 0);
    int port = 0;
    if (fd6 >= 0 && fd4 >= 0) {
      sockaddr_in6 v6{};
      v6.sin6_family = AF_INET6;
      v6.sin6_addr = in6addr_loopback;
      socklen_t length = sizeof(v6);
      if (bind(fd6, reinterpret_cast<sockaddr*>(&v6), sizeof(v6)) == 0 &&
          getsockname(fd6, reinterpret_cast<sockaddr*>(&v6), &length) == 0) {
        sockaddr_in v4{};
        v4.sin_family = AF_INET;
        v4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        v4.sin_port = v6.sin6_port;
        if (bind(fd4, reinterpret_cast<sockaddr*>(&v4), sizeof(v4)) == 0) {
          port = ntohs(v6.sin6_port);
        }
      }
    }
    if (fd6 >= 0) close(fd6);
    if (fd4 >= 0) close(fd4);
    if (port != 0) return port;
  }
  return 0;
}

}  // namespace reverb_tf
