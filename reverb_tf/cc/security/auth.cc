// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/security/auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace reverb_tf {
namespace {

std::array<uint8_t, 32> Sha256(absl::string_view text) {
  std::array<uint8_t, 32> digest;
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(),
         digest.data());
  return digest;
}

bool ParseHexDigest(absl::string_view hex, std::array<uint8_t, 32>* digest) {
  if (hex.size() != 64) return false;
  for (size_t i = 0; i < 32; ++i) {
    int value = 0;
    for (char c : hex.substr(2 * i, 2)) {
      const char lower = absl::ascii_tolower(c);
      int nibble;
      if (lower >= '0' && lower <= '9') {
        nibble = lower - '0';
      } else if (lower >= 'a' && lower <= 'f') {
        nibble = lower - 'a' + 10;
      } else {
        return false;
      }
      value = value * 16 + nibble;
    }
    (*digest)[i] = static_cast<uint8_t>(value);
  }
  return true;
}

}  // namespace

absl::string_view RoleName(Role role) {
  switch (role) {
    case Role::kReader:
      return "reader";
    case Role::kWriter:
      return "writer";
    case Role::kAdmin:
      return "admin";
  }
  return "unknown";
}

absl::StatusOr<std::unique_ptr<TokenAuthenticator>> TokenAuthenticator::Create(
    absl::string_view contents) {
  std::vector<Entry> entries;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(contents, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokens file line ", line_number, ": expected 'ROLE TOKEN', got ",
          fields.size(), " fields"));
    }
    Entry entry;
    if (fields[0] == "reader") {
      entry.role = Role::kReader;
    } else if (fields[0] == "writer") {
      entry.role = Role::kWriter;
    } else if (fields[0] == "admin") {
      entry.role = Role::kAdmin;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("tokens file line ", line_number, ": unknown role '",
                       fields[0].substr(0, 32), "' (reader, writer or admin)"));
    }
    absl::string_view token = fields[1];
    if (absl::ConsumePrefix(&token, "sha256:")) {
      if (!ParseHexDigest(token, &entry.digest)) {
        return absl::InvalidArgumentError(
            absl::StrCat("tokens file line ", line_number,
                         ": a sha256: digest needs 64 hex digits"));
      }
    } else {
      entry.digest = Sha256(token);
    }
    for (const Entry& other : entries) {
      if (other.digest == entry.digest) {
        return absl::InvalidArgumentError(
            absl::StrCat("tokens file line ", line_number,
                         ": the token of an earlier line again"));
      }
    }
    entries.push_back(entry);
  }
  if (entries.empty()) {
    return absl::InvalidArgumentError("the tokens file names no token");
  }
  return std::unique_ptr<TokenAuthenticator>(
      new TokenAuthenticator(std::move(entries)));
}

absl::Status TokenAuthenticator::Authorize(absl::string_view authorization,
                                           Role needed,
                                           absl::string_view method) const {
  absl::string_view token = authorization;
  if (!absl::ConsumePrefix(&token, "Bearer ") || token.empty()) {
    return absl::UnauthenticatedError(absl::StrCat(
        method,
        " needs a bearer token (authorization: Bearer ...); the call had ",
        authorization.empty() ? "none" : "another kind of authorization"));
  }
  const std::array<uint8_t, 32> digest = Sha256(token);
  // Every entry is compared, in constant time, whatever matches.
  int found = -1;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const bool equal =
        CRYPTO_memcmp(digest.data(), entries_[i].digest.data(), 32) == 0;
    found = equal ? static_cast<int>(i) : found;
  }
  if (found < 0) {
    return absl::UnauthenticatedError(absl::StrCat(
        method, ": the bearer token is not one this server knows"));
  }
  const Role role = entries_[found].role;
  if (static_cast<int>(role) < static_cast<int>(needed)) {
    return absl::PermissionDeniedError(
        absl::StrCat(method, " needs the role '", RoleName(needed),
                     "'; this token's role is '", RoleName(role), "'"));
  }
  return absl::OkStatus();
}

}  // namespace reverb_tf
