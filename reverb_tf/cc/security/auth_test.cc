// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/security/auth.h"

#include "gtest/gtest.h"
#include "reverb_tf/cc/testing/status_matchers.h"

namespace reverb_tf {
namespace {

TEST(TokenAuthenticatorTest, RolesAreOrderedAndUnknownTokensUnauthenticated) {
  auto auth = TokenAuthenticator::Create(
      "# comment\n\nreader r-token\nwriter  w-token\n"
      // sha256("a-token")
      "admin "
      "sha256:"
      "1F6076E3A47BA1DED08025FFE06E57AF217C14F9407F33FBA50F99B1C7019387\n");
  ASSERT_OK(auth);
  EXPECT_EQ((*auth)->num_tokens(), 3);
  EXPECT_OK((*auth)->Authorize("Bearer r-token", Role::kReader, "ServerInfo"));
  EXPECT_OK(
      (*auth)->Authorize("Bearer w-token", Role::kReader, "SampleStream"));
  EXPECT_OK(
      (*auth)->Authorize("Bearer w-token", Role::kWriter, "InsertStream"));
  absl::Status denied =
      (*auth)->Authorize("Bearer r-token", Role::kWriter, "InsertStream");
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(denied.message().find("'writer'"), std::string::npos) << denied;
  EXPECT_NE(denied.message().find("'reader'"), std::string::npos) << denied;
  EXPECT_EQ(denied.message().find("r-token"), std::string::npos)
      << denied;  // never the token
  EXPECT_EQ((*auth)->Authorize("Bearer w-token", Role::kAdmin, "Reset").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_OK((*auth)->Authorize("Bearer a-token", Role::kAdmin, "Reset"));
  for (const char* bad :
       {"", "Bearer ", "Basic dXNlcg==", "Bearer nope", "bearer w-token"}) {
    absl::Status status = (*auth)->Authorize(bad, Role::kReader, "ServerInfo");
    EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated) << bad;
    EXPECT_EQ(status.message().find("nope"), std::string::npos);
  }
}

TEST(TokenAuthenticatorTest, DigestsMatchTheTokensTheyHash) {
  // sha256("secret") = 2bb80d53...
  auto auth = TokenAuthenticator::Create(
      "admin "
      "sha256:"
      "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b\n");
  ASSERT_OK(auth);
  EXPECT_OK((*auth)->Authorize("Bearer secret", Role::kAdmin, "Checkpoint"));
  EXPECT_EQ(
      (*auth)->Authorize("Bearer secreT", Role::kAdmin, "Checkpoint").code(),
      absl::StatusCode::kUnauthenticated);
}

TEST(TokenAuthenticatorTest, MalformedFilesNameTheLineNotTheToken) {
  for (const auto& [contents, line] :
       std::vector<std::pair<std::string, std::string>>{
           {"writer\n", "line 1"},
           {"writer a b\n", "line 1"},
           {"# x\nroot my-secret\n", "line 2"},
           {"admin sha256:abc\n", "line 1"},
           {"admin my-secret\nwriter my-secret\n", "line 2"}}) {
    auto auth = TokenAuthenticator::Create(contents);
    ASSERT_FALSE(auth.ok()) << contents;
    EXPECT_EQ(auth.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(auth.status().message().find(line), std::string::npos)
        << auth.status();
    EXPECT_EQ(auth.status().message().find("my-secret"), std::string::npos)
        << auth.status();
  }
  EXPECT_FALSE(TokenAuthenticator::Create("# nothing\n").ok());
}

}  // namespace
}  // namespace reverb_tf
