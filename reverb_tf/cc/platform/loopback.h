// SPDX-License-Identifier: Apache-2.0
// The loopback interfaces, for servers that listen on "localhost".
//
// "localhost" names both 127.0.0.1 and ::1, and clients of localhost:P try
// [::1]:P first. A server that bound only one of them would leave the other
// to whatever process holds it (Bazel's server listens on [::1]), and its
// clients would reach that process. So our servers bind each loopback
// address on its own, on the same port, and require both.
//
// Thread safety: thread-safe (no state).
#ifndef REVERB_TF_CC_PLATFORM_LOOPBACK_H_
#define REVERB_TF_CC_PLATFORM_LOOPBACK_H_

namespace reverb_tf {

// True if this machine has an IPv6 loopback interface to listen on.
bool Ipv6LoopbackUsable();

// A port that 127.0.0.1 and [::1] both have free right now, or 0 if none
// was found. A race lost between this and the real bind makes that bind
// fail; callers try again.
int PortFreeOnBothLoopbacks();

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_PLATFORM_LOOPBACK_H_
