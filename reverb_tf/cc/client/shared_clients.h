// SPDX-License-Identifier: Apache-2.0
// The process's shared Clients: one per server address and security settings,
// for callers that name a server on every call instead of holding a Client
// (the TensorFlow ops, through tf_facade.h, and TFClient's eager calls that
// skip them, python/bind_client.cc). Both reach a server through the same
// Client, so they share its connections, its mutation streams and the
// once-a-minute rate of its warnings.
//
// Thread safety: thread-safe.
#ifndef REVERB_TF_CC_CLIENT_SHARED_CLIENTS_H_
#define REVERB_TF_CC_CLIENT_SHARED_CLIENTS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "reverb_tf/cc/client/client.h"
#include "reverb_tf/cc/platform/export.h"

namespace reverb_tf {

// The Client of `address` with the process's default security as it is now
// (DefaultClientSecurity()), made on first use and kept for the life of the
// process. Errors are Client::Create's, or the defaults' (a TLS file that
// cannot be read).
REVERB_TF_EXPORT absl::StatusOr<std::shared_ptr<Client>> SharedClient(
    const std::string& address);

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_CLIENT_SHARED_CLIENTS_H_
