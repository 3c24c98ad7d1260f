// SPDX-License-Identifier: Apache-2.0
// The size limit of the messages on the wire, a default both ends share.
//
// Thread safety: a constant.
#ifndef REVERB_TF_CC_WIRE_MESSAGE_LIMITS_H_
#define REVERB_TF_CC_WIRE_MESSAGE_LIMITS_H_

#include <cstdint>

namespace reverb_tf {

// The largest gRPC message a server accepts or sends, and a client, unless
// told otherwise: big enough for a batch of hundreds of Atari-sized items.
// The one definition: ServerOptions and ClientOptions::max_message_bytes
// default to it, and the Python bindings take those defaults.
inline constexpr int64_t kDefaultMaxMessageBytes = int64_t{256} << 20;

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_WIRE_MESSAGE_LIMITS_H_
