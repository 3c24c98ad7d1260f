// SPDX-License-Identifier: Apache-2.0
// The three samplers on their own (client.h's Sampler): StreamSampler over
// loopback gRPC, InProcessSampler against a server of this process, and
// ShardedSampler over two servers, each driven directly rather than through
// Client::NewSampler's choice of sampler.
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "reverb_tf/cc/client/client.h"
#include "reverb_tf/cc/client/client_stub.h"
#include "reverb_tf/cc/client/in_process_sampler.h"
#include "reverb_tf/cc/client/sample_columns.h"
#include "reverb_tf/cc/client/sharded_sampler.h"
#include "reverb_tf/cc/client/stream_sampler.h"
#include "reverb_tf/cc/service/server.h"
#include "reverb_tf/cc/testing/client_test_util.h"
#include "reverb_tf/cc/testing/status_matchers.h"
#include "reverb_tf/cc/testing/test_util.h"

namespace reverb_tf {
namespace {

using ::reverb_tf::testing::StatusIs;

constexpr absl::Duration kTimeout = absl::Seconds(20);
constexpr int64_t kMessageBytes = 1 << 20;

TensorPayload FloatStep(float value) {
  std::string bytes(sizeof(float), '\0');
  std::memcpy(bytes.data(), &value, sizeof(float));
  return *MakePayload(DType::kFloat, {1}, bytes);
}

float Value(const Sample& sample) {
  float value;
  std::memcpy(&value, sample.columns.at(0).data.data(), sizeof(float));
  return value;
}

// A server with table "t" (uniform sampling, limited to MinSize(1)) holding
// one single-step item per value in `values`.
struct TestServer {
  std::unique_ptr<ReplayServer> server;
  std::shared_ptr<ClientStub> stub;

  static TestServer Start(const std::vector<float>& values,
                          const SelectorOptions& sampler = testing::Uniform()) {
    TestServer s;
    auto server = ReplayServer::StartFromOptions(
        {testing::MakeTableOptions("t", sampler, testing::Fifo(), 1000,
                                   RateLimiterOptions::MinSize(1))},
        ServerOptions{});
    EXPECT_OK(server);
    s.server = *std::move(server);
    const std::string address = absl::StrCat("localhost:", s.server->port());
    std::unique_ptr<Client> client = *Client::Create(address, ClientOptions{});
    std::unique_ptr<TrajectoryWriter> writer = testing::NewWriter(*client);
    for (float value : values) {
      absl::StatusOr<int64_t> step = writer->Append({FloatStep(value)});
      EXPECT_OK(step);
      EXPECT_OK(writer->CreateItem("t", 1.0, {ItemColumn{0, {*step}, true}}));
    }
    EXPECT_OK(writer->Flush(0, kTimeout));
    s.stub = std::make_shared<ClientStub>(
        address,
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()),
        kMessageBytes);
    return s;
  }
};

SamplerOptions Bounded(int64_t max_samples = -1) {
  SamplerOptions options;
  options.rate_limiter_timeout = kTimeout;
  options.max_samples = max_samples;
  options.max_in_flight = 4;
  return options;
}

TEST(SampleBudgetTest, EachStreamTakesAtMostItsShareOfWhatRemains) {
  SampleBudget budget(10, 3);
  EXPECT_EQ(budget.Take(100), 4);  // ceil(10 / 3)
  EXPECT_EQ(budget.Take(1), 1);
  EXPECT_EQ(budget.Take(100), 2);  // ceil(5 / 3)
  EXPECT_EQ(budget.Take(100), 1);
  EXPECT_EQ(budget.Take(100), 1);
  EXPECT_EQ(budget.Take(100), 1);
  EXPECT_EQ(budget.Take(100), 0);
  budget.Give(2);  // a failed stream's samples come back
  EXPECT_EQ(budget.Take(100), 1);
  EXPECT_EQ(budget.Take(100), 1);
  EXPECT_EQ(budget.Take(100), 0);
}

TEST(JoinSlicesTest, TakesAWholeChunkOnItsLastUseAndCopiesItOtherwise) {
  TensorPayload chunk = FloatStep(7);  // one row
  const std::string bytes = chunk.data;
  auto whole = [&](TensorPayload* last_use) {
    return JoinSlices(1, /*squeeze=*/true, [&](size_t) {
      return absl::StatusOr<ChunkRows>(ChunkRows{&chunk, 0, 1, last_use});
    });
  };
  absl::StatusOr<TensorPayload> copied = whole(nullptr);
  ASSERT_OK(copied);
  EXPECT_EQ(copied->data, bytes);
  EXPECT_TRUE(copied->shape.empty());  // squeezed
  EXPECT_EQ(chunk.data, bytes);        // still there for later uses
  absl::StatusOr<TensorPayload> taken = whole(&chunk);
  ASSERT_OK(taken);
  EXPECT_EQ(taken->data, bytes);
  EXPECT_TRUE(taken->shape.empty());
  EXPECT_TRUE(chunk.data.empty());  // taken, not copied
}

TEST(StreamSamplerTest, DeliversMaxSamplesThenEndsTheStream) {
  testing::ScopedInProcess in_process(false);
  TestServer s = TestServer::Start({1, 2, 3}, testing::Fifo());
  StreamSampler sampler(s.stub, "t", Bounded(/*max_samples=*/5));
  std::vector<float> seen;
  for (int i = 0; i < 5; ++i) {
    Sample sample;
    ASSERT_OK(sampler.Next(&sample));
    EXPECT_EQ(sample.info.table_size, 3);
    EXPECT_EQ(sample.info.probability, 1.0);  // fifo
    seen.push_back(Value(sample));
  }
  // Fifo over items that stay: the oldest every time.
  EXPECT_EQ(seen, std::vector<float>(5, 1.0f));
  EXPECT_TRUE(sampler.ordered());
  Sample sample;
  EXPECT_THAT(sampler.Next(&sample), StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_FALSE(sampler.TryNext(&sample));
}

TEST(StreamSamplerTest, AsksForMoreOnceHalfTheWindowIsConsumed) {
  testing::ScopedInProcess in_process(false);
  TestServer s = TestServer::Start({1, 2, 3});
  StreamSampler sampler(s.stub, "t", Bounded());  // a window of 4
  std::shared_ptr<Table> table = *s.server->FindTable("t");
  Sample sample;
  ASSERT_OK(sampler.Next(&sample));
  ASSERT_OK(sampler.Next(&sample));
  // Two of four consumed: two more are asked for before the buffer runs
  // dry, so the server samples six without another call of Next().
  const absl::Time deadline = absl::Now() + kTimeout;
  while (table->info().counters.sampled < 6 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(table->info().counters.sampled, 6);
}

TEST(StreamSamplerTest, CancelEndsAWaitForTheRateLimiter) {
  testing::ScopedInProcess in_process(false);
  TestServer s = TestServer::Start({});  // empty: MinSize(1) holds samples back
  SamplerOptions options = Bounded();
  options.rate_limiter_timeout = absl::InfiniteDuration();
  StreamSampler sampler(s.stub, "t", options);
  std::thread cancel([&] {
    absl::SleepFor(absl::Milliseconds(200));
    sampler.Cancel();
  });
  Sample sample;
  const absl::Status status = sampler.Next(&sample);
  cancel.join();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kCancelled));
}

TEST(StreamSamplerTest, AnAbsentTableIsNotFound) {
  testing::ScopedInProcess in_process(false);
  TestServer s = TestServer::Start({1});
  StreamSampler sampler(s.stub, "missing", Bounded());
  Sample sample;
  EXPECT_THAT(sampler.Next(&sample), StatusIs(absl::StatusCode::kNotFound));
}

TEST(InProcessSamplerTest, SamplesTheTableWithoutAStream) {
  TestServer s = TestServer::Start({5, 6});
  ASSERT_NE(s.stub->Local(), nullptr);  // the server is in this process
  InProcessSampler sampler(s.stub, "t", Bounded(/*max_samples=*/3));
  std::vector<SampledItem> items;
  ASSERT_OK(sampler.NextItems(2, &items));
  ASSERT_EQ(items.size(), 2);
  Sample sample;
  ASSERT_OK(MaterializeSample(items[0], &sample));
  EXPECT_TRUE(Value(sample) == 5.0f || Value(sample) == 6.0f);
  EXPECT_EQ(sample.info.table_size, 2);
  EXPECT_DOUBLE_EQ(sample.info.probability, 0.5);
  // One of max_samples is left; then the sampler is done.
  ASSERT_OK(sampler.Next(&sample));
  EXPECT_THAT(sampler.Next(&sample), StatusIs(absl::StatusCode::kOutOfRange));
}

TEST(ShardedSamplerTest, DrawsFromShardsInProportionToTheirWeight) {
  testing::ScopedInProcess in_process(false);
  // Shard a holds one item (value 1), shard b three (value 2): sampled as
  // one table of four, 3 in 4 samples come from b.
  TestServer a = TestServer::Start({1});
  TestServer b = TestServer::Start({2, 2, 2});
  SamplerOptions options = Bounded();
  options.max_in_flight = 16;
  ShardedSampler sampler({a.stub, b.stub}, "t", options,
                         {ShardedSampler::ShardTable{1, 1, 1},
                          ShardedSampler::ShardTable{3, 3, 1}});
  constexpr int kSamples = 2000;
  int from_b = 0;
  for (int i = 0; i < kSamples; ++i) {
    Sample sample;
    ASSERT_OK(sampler.Next(&sample));
    // The merged table's info: four items, each with probability 1/4.
    EXPECT_EQ(sample.info.table_size, 4);
    EXPECT_DOUBLE_EQ(sample.info.probability, 0.25);
    if (Value(sample) == 2.0f) ++from_b;
  }
  // 1500 expected; the standard deviation is about 19.
  EXPECT_GT(from_b, 1400);
  EXPECT_LT(from_b, 1600);
}

TEST(ShardedSamplerTest, SplitsMaxSamplesBetweenTheShards) {
  testing::ScopedInProcess in_process(false);
  TestServer a = TestServer::Start({1, 1});
  TestServer b = TestServer::Start({2, 2});
  ShardedSampler sampler({a.stub, b.stub}, "t", Bounded(/*max_samples=*/10),
                         {ShardedSampler::ShardTable{2, 2, 1},
                          ShardedSampler::ShardTable{2, 2, 1}});
  for (int i = 0; i < 10; ++i) {
    Sample sample;
    ASSERT_OK(sampler.Next(&sample));
  }
  Sample sample;
  EXPECT_THAT(sampler.Next(&sample), StatusIs(absl::StatusCode::kOutOfRange));
}

}  // namespace
}  // namespace reverb_tf
