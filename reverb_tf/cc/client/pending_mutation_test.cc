// SPDX-License-Identifier: Apache-2.0
// Client::StartMutatePriorities against a server that answers mutations
// only when the test lets it: the two-step call's sliced waits, its answer,
// and what abandoning it leaves (the stream is ended; the next call makes
// the unary call, then the stream is opened again).
#include <atomic>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "reverb_tf/cc/client/client.h"
#include "reverb_tf/cc/proto/service.grpc.pb.h"
#include "reverb_tf/cc/testing/status_matchers.h"

namespace reverb_tf {
namespace {

// MutateStream answers each request once released (updated = number of
// keys); the unary call answers at once (updated = 1000 + number of keys),
// so a test can tell which carried a request.
class HeldMutations final : public proto::ReplayService::Service {
 public:
  void Release() {
    absl::MutexLock lock(&mu_);
    released_ = true;
  }
  int streams_ended() {
    absl::MutexLock lock(&mu_);
    return streams_ended_;
  }
  int streams_opened() {
    absl::MutexLock lock(&mu_);
    return streams_opened_;
  }

  grpc::Status MutateStream(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<proto::MutatePrioritiesResponse,
                               proto::MutatePrioritiesRequest>* stream)
      override {
    {
      absl::MutexLock lock(&mu_);
      ++streams_opened_;
    }
    proto::MutatePrioritiesRequest request;
    while (stream->Read(&request)) {
      absl::MutexLock lock(&mu_);
      // Polls: the sync API says a client left only when asked.
      while (!released_ && !context->IsCancelled()) {
        mu_.AwaitWithTimeout(absl::Condition(&released_),
                             absl::Milliseconds(10));
      }
      if (!released_) break;
      proto::MutatePrioritiesResponse response;
      response.set_updated(request.keys_size());
      mu_.Unlock();
      const bool written = stream->Write(response);
      mu_.Lock();
      if (!written) break;
    }
    absl::MutexLock lock(&mu_);
    ++streams_ended_;
    return grpc::Status::OK;
  }

  grpc::Status MutatePriorities(
      grpc::ServerContext*, const proto::MutatePrioritiesRequest* request,
      proto::MutatePrioritiesResponse* response) override {
    response->set_updated(1000 + request->keys_size());
    return grpc::Status::OK;
  }

 private:
  absl::Mutex mu_;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  int streams_opened_ ABSL_GUARDED_BY(mu_) = 0;
  int streams_ended_ ABSL_GUARDED_BY(mu_) = 0;
};

class PendingMutationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    client_ = *Client::Create(absl::StrCat("127.0.0.1:", port));
  }
  void TearDown() override {
    client_.reset();
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(5));
    server_->Wait();
  }

  const std::vector<std::pair<Key, double>> updates_ = {
      {1, 1.0}, {2, 2.0}, {3, 3.0}};
  HeldMutations service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(PendingMutationTest, WaitsInSlicesUntilTheStreamAnswers) {
  Cancellation cancel;
  auto pending = client_->StartMutatePriorities("t", updates_, {}, &cancel);
  ASSERT_OK(pending);
  for (int slice = 0; slice < 3; ++slice) {
    const absl::Time start = absl::Now();
    const absl::Status waited =
        (*pending)->AwaitStreams(start + absl::Milliseconds(50));
    EXPECT_TRUE(absl::IsDeadlineExceeded(waited)) << waited;
    EXPECT_GE(absl::Now() - start, absl::Milliseconds(45));
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  }
  service_.Release();
  ASSERT_OK((*pending)->AwaitStreams(absl::Now() + absl::Seconds(20)));
  EXPECT_FALSE((*pending)->NeedsCalls());
  auto report = (*pending)->Finish(nullptr);
  ASSERT_OK(report);
  EXPECT_EQ(report->updated, 3);  // answered on the stream
}

TEST_F(PendingMutationTest, CancellationEndsTheWaitWithCancelled) {
  Cancellation cancel;
  auto pending = client_->StartMutatePriorities("t", updates_, {}, &cancel);
  ASSERT_OK(pending);
  EXPECT_TRUE(absl::IsDeadlineExceeded(
      (*pending)->AwaitStreams(absl::Now() + absl::Milliseconds(20))));
  cancel.Cancel();
  EXPECT_EQ((*pending)->AwaitStreams(absl::Now() + absl::Seconds(20)).code(),
            absl::StatusCode::kCancelled);
}

TEST_F(PendingMutationTest,
       AnAbandonedRequestEndsItsStreamAndTheNextCallIsUnary) {
  {
    auto pending = client_->StartMutatePriorities("t", updates_, {}, nullptr);
    ASSERT_OK(pending);
    EXPECT_TRUE(absl::IsDeadlineExceeded(
        (*pending)->AwaitStreams(absl::Now() + absl::Milliseconds(20))));
  }  // abandoned, as Ctrl-C does
  // The server's handler sees its stream end.
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (service_.streams_ended() < 1 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(service_.streams_ended(), 1);
  // Within MutationStream::kReopenAfter the unary call carries requests.
  auto unary =
      client_->MutatePriorities("t", updates_, {}, absl::InfiniteDuration());
  ASSERT_OK(unary);
  EXPECT_EQ(unary->updated, 1003);
  EXPECT_EQ(service_.streams_opened(), 1);
  // After it, a new stream.
  service_.Release();
  absl::SleepFor(absl::Seconds(1.2));
  auto streamed =
      client_->MutatePriorities("t", updates_, {}, absl::InfiniteDuration());
  ASSERT_OK(streamed);
  EXPECT_EQ(streamed->updated, 3);
  EXPECT_EQ(service_.streams_opened(), 2);
}

TEST_F(PendingMutationTest, ACallWithADeadlineIsUnary) {
  auto report = client_->MutatePriorities("t", updates_, {}, absl::Seconds(20));
  ASSERT_OK(report);
  EXPECT_EQ(report->updated, 1003);
  EXPECT_EQ(service_.streams_opened(), 0);
}

}  // namespace
}  // namespace reverb_tf
