// SPDX-License-Identifier: Apache-2.0
// Bearer-token authentication with roles for the replay service.
//
// A tokens file names who may do what, one token per line:
//
//     # role   token (or sha256:<64 hex digits> of it)
//     writer   2f1c...e9
//     admin    sha256:9a6b...01
//
// Roles are ordered: `reader` may sample and read server info; `writer`
// may also insert and update priorities (what actors and learners need);
// `admin` may also reset tables and checkpoint. A call without a known token
// is UNAUTHENTICATED; a known token whose role is too low is
// PERMISSION_DENIED. Only SHA-256 digests of tokens are kept, a presented
// token is compared with every one of them in constant time, and no message
// ever contains a token.
//
// Thread safety: immutable after Create(); Authorize() is thread-safe.
#ifndef REVERB_TF_CC_SECURITY_AUTH_H_
#define REVERB_TF_CC_SECURITY_AUTH_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "reverb_tf/cc/platform/export.h"

namespace reverb_tf {

enum class Role { kReader = 0, kWriter = 1, kAdmin = 2 };

REVERB_TF_EXPORT absl::string_view RoleName(Role role);

class REVERB_TF_EXPORT TokenAuthenticator {
 public:
  // Parses a tokens file's contents (see above). INVALID_ARGUMENT names the
  // line (never the token) for an unknown role, a malformed digest or a
  // duplicate token, and an empty file.
  static absl::StatusOr<std::unique_ptr<TokenAuthenticator>> Create(
      absl::string_view contents);

  // OK if `authorization` (the call's "authorization" metadata, empty if
  // none) is "Bearer <token>" of a role at least `needed`; `method` names
  // the call in the error.
  absl::Status Authorize(absl::string_view authorization, Role needed,
                         absl::string_view method) const;

  size_t num_tokens() const { return entries_.size(); }

 private:
  struct Entry {
    std::array<uint8_t, 32> digest;
    Role role;
  };
  explicit TokenAuthenticator(std::vector<Entry> entries)
      : entries_(std::move(entries)) {}

  const std::vector<Entry> entries_;
};

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_SECURITY_AUTH_H_
