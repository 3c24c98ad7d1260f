// SPDX-License-Identifier: Apache-2.0
// HealthService over a real gRPC server on a loopback port, with gRPC's own
// generated client: what a probe sees.
#include "reverb_tf/cc/service/health_service.h"

#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "reverb_tf/cc/proto/health.grpc.pb.h"
#include "reverb_tf/cc/testing/status_matchers.h"

namespace reverb_tf {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

class HealthServiceTest : public ::testing::Test {
 protected:
  void Start(int max_watches = HealthService::kDefaultMaxWatches) {
    health_ = std::make_unique<HealthService>(max_watches);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(health_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = Health::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (server_ != nullptr) {
      health_->Shutdown();
      server_->Shutdown();
      server_->Wait();
    }
  }

  grpc::Status Check(const std::string& service,
                     HealthCheckResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    HealthCheckRequest request;
    request.set_service(service);
    return stub_->Check(&context, request, response);
  }

  // An open Watch of `service`.
  struct Watching {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<HealthCheckResponse>> reader;
    HealthCheckResponse::ServingStatus Next() {
      HealthCheckResponse response;
      EXPECT_TRUE(reader->Read(&response));
      return response.status();
    }
  };
  std::unique_ptr<Watching> Watch(const std::string& service) {
    auto watching = std::make_unique<Watching>();
    watching->context.set_deadline(std::chrono::system_clock::now() +
                                   std::chrono::seconds(30));
    HealthCheckRequest request;
    request.set_service(service);
    watching->reader = stub_->Watch(&watching->context, request);
    return watching;
  }

  std::unique_ptr<HealthService> health_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Health::Stub> stub_;
};

TEST_F(HealthServiceTest, CheckAnswersKnownServicesAndNotFoundForOthers) {
  Start();
  health_->SetServingStatus("", true);
  health_->SetServingStatus("replay", false);
  HealthCheckResponse response;
  ASSERT_OK(Check("", &response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  ASSERT_OK(Check("replay", &response));
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
  const grpc::Status unknown = Check("no.such.Service", &response);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(unknown.error_message().find("no.such.Service"), std::string::npos);

  health_->SetAllServingStatus(true);
  ASSERT_OK(Check("replay", &response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);

  // A huge name is echoed only in part: the error still reaches the client.
  const grpc::Status huge = Check(std::string(1 << 20, 'x'), &response);
  EXPECT_EQ(huge.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_LT(huge.error_message().size(), 300u);
  EXPECT_NE(huge.error_message().find("1048576 bytes"), std::string::npos);
}

TEST_F(HealthServiceTest, WatchSendsTheStatusThenEachChangeOfItsOwnService) {
  Start();
  health_->SetServingStatus("replay", false);
  std::unique_ptr<Watching> watching = Watch("replay");
  EXPECT_EQ(watching->Next(), HealthCheckResponse::NOT_SERVING);
  // Another service's change, and a repeat of the same status, are not news:
  // the next message is the real change.
  health_->SetServingStatus("other", true);
  health_->SetServingStatus("replay", false);
  health_->SetServingStatus("replay", true);
  EXPECT_EQ(watching->Next(), HealthCheckResponse::SERVING);
  // Shutdown says NOT_SERVING and ends the call cleanly.
  health_->Shutdown();
  EXPECT_EQ(watching->Next(), HealthCheckResponse::NOT_SERVING);
  HealthCheckResponse extra;
  EXPECT_FALSE(watching->reader->Read(&extra));
  EXPECT_OK(watching->reader->Finish());
}

TEST_F(HealthServiceTest, WatchOfAnUnknownServiceWaitsForItToAppear) {
  Start();
  std::unique_ptr<Watching> watching = Watch("later");
  EXPECT_EQ(watching->Next(), HealthCheckResponse::SERVICE_UNKNOWN);
  health_->SetServingStatus("later", true);
  EXPECT_EQ(watching->Next(), HealthCheckResponse::SERVING);
}

TEST_F(HealthServiceTest, NothingLooksHealthyAfterShutdown) {
  Start();
  health_->SetServingStatus("", true);
  health_->Shutdown();
  health_->SetServingStatus("", true);
  health_->SetAllServingStatus(true);
  HealthCheckResponse response;
  ASSERT_OK(Check("", &response));
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
  // A Watch that starts now hears NOT_SERVING and ends.
  std::unique_ptr<Watching> watching = Watch("");
  EXPECT_EQ(watching->Next(), HealthCheckResponse::NOT_SERVING);
  EXPECT_OK(watching->reader->Finish());
}

TEST_F(HealthServiceTest, WatchesAreBoundedAndAClientThatLeavesFreesItsSlot) {
  Start(/*max_watches=*/2);
  health_->SetServingStatus("", true);
  std::unique_ptr<Watching> first = Watch("");
  std::unique_ptr<Watching> second = Watch("");
  EXPECT_EQ(first->Next(), HealthCheckResponse::SERVING);
  EXPECT_EQ(second->Next(), HealthCheckResponse::SERVING);
  std::unique_ptr<Watching> refused = Watch("");
  HealthCheckResponse response;
  EXPECT_FALSE(refused->reader->Read(&response));
  EXPECT_EQ(refused->reader->Finish().error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);

  // The first client leaves while nothing changes: its handler notices
  // (within the watcher's first check) and its slot is free again.
  first->context.TryCancel();
  first->reader->Finish().IgnoreError();
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  bool admitted = false;
  while (!admitted && absl::Now() < deadline) {
    std::unique_ptr<Watching> again = Watch("");
    HealthCheckResponse status;
    if (again->reader->Read(&status)) {
      admitted = true;
      EXPECT_EQ(status.status(), HealthCheckResponse::SERVING);
      again->context.TryCancel();
    }
    again->reader->Finish().IgnoreError();
    if (!admitted) absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(admitted);
}

}  // namespace
}  // namespace reverb_tf
