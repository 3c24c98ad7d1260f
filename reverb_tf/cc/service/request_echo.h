// SPDX-License-Identifier: Apache-2.0
// Text from a request, fit to quote in an error sent back to the client.
#ifndef REVERB_TF_CC_SERVICE_REQUEST_ECHO_H_
#define REVERB_TF_CC_SERVICE_REQUEST_ECHO_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace reverb_tf {

// `text` in quotes if it has at most 128 bytes, else its first 128 and its
// length: the error stays within gRPC's metadata limit whatever the client
// sent.
inline std::string QuotedFromRequest(absl::string_view text) {
  constexpr size_t kEchoed = 128;
  if (text.size() <= kEchoed) return absl::StrCat("'", text, "'");
  return absl::StrCat("'", text.substr(0, kEchoed), "...' (", text.size(),
                      " bytes)");
}

// The same without quotes, where a message repeats another system's wording
// (dm-reverb's "Priority table NAME was not found").
inline std::string EchoedFromRequest(absl::string_view text) {
  constexpr size_t kEchoed = 128;
  if (text.size() <= kEchoed) return std::string(text);
  return absl::StrCat(text.substr(0, kEchoed), "... (", text.size(), " bytes)");
}

}  // namespace reverb_tf

#endif  // REVERB_TF_CC_SERVICE_REQUEST_ECHO_H_
