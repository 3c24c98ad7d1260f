// SPDX-License-Identifier: Apache-2.0
// A Client over several real ReplayServers on loopback: target parsing,
// writer placement, proportional sampling, broadcast priority updates,
// aggregated info, checkpoints of every shard, and shards that go away.
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "reverb_tf/cc/client/client.h"
#include "reverb_tf/cc/client/target.h"
#include "reverb_tf/cc/service/server.h"
#include "reverb_tf/cc/testing/client_test_util.h"
#include "reverb_tf/cc/testing/status_matchers.h"
#include "reverb_tf/cc/testing/test_util.h"

namespace reverb_tf {
namespace {

using ::reverb_tf::testing::Fifo;
using ::reverb_tf::testing::MakeTableOptions;
using ::reverb_tf::testing::Prioritized;
using ::reverb_tf::testing::Uniform;

constexpr absl::Duration kTimeout = absl::Seconds(20);

TEST(TargetTest, ParsesListsAddressListsAndDnsTargets) {
  auto parts = ParseTarget("localhost:1, localhost:2,localhost:1");
  ASSERT_OK(parts);
  ASSERT_EQ(parts->size(), 2);  // the duplicate is dropped
  EXPECT_EQ((*parts)[0].target, "localhost:1");
  EXPECT_EQ((*parts)[1].target, "localhost:2");
  EXPECT_TRUE((*parts)[0].resolve.empty());

  parts = ParseTarget("ipv4:127.0.0.1:5,127.0.0.1:6");
  ASSERT_OK(parts);
  ASSERT_EQ(parts->size(), 2);
  EXPECT_EQ((*parts)[1].target, "ipv4:127.0.0.1:6");  // the scheme is inherited
  parts = ParseTarget("ipv6:[::1]:5,[::1]:6");
  ASSERT_OK(parts);
  EXPECT_EQ((*parts)[1].target, "ipv6:[::1]:6");

  for (const char* dns :
       {"dns:///replay.svc:8000", "dns://8.8.8.8/replay.svc:8000",
        "dns:replay.svc:8000"}) {
    parts = ParseTarget(dns);
    ASSERT_OK(parts);
    ASSERT_EQ(parts->size(), 1);
    EXPECT_EQ((*parts)[0].resolve, "replay.svc:8000") << dns;
    EXPECT_EQ((*parts)[0].target, dns);
  }
  EXPECT_FALSE(ParseTarget("").ok());
  EXPECT_FALSE(ParseTarget("a:1,,b:2").ok());
  EXPECT_EQ(ParseTarget("a:1, ").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TargetTest, ResolvesNamesIntoAddressesButKeepsLoopbackAliasesOneShard) {
  auto addresses = ResolveAddresses("127.0.0.1:80");
  ASSERT_OK(addresses);
  EXPECT_EQ(*addresses, std::vector<std::string>{"ipv4:127.0.0.1:80"});
  addresses = ResolveAddresses("[::1]:80");
  ASSERT_OK(addresses);
  EXPECT_EQ(*addresses, std::vector<std::string>{"ipv6:[::1]:80"});
  EXPECT_EQ(ResolveAddresses("no-such-host.invalid:80").status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(ResolveAddresses("nohost").status().code(),
            absl::StatusCode::kInvalidArgument);

  // "localhost" may resolve to 127.0.0.1 and ::1: one server, not two shards.
  EXPECT_EQ(ExpandTarget(*ParseTarget("dns:///localhost:80")),
            std::vector<std::string>{"dns:///localhost:80"});
  // A name that does not resolve (yet) stays one shard for gRPC to resolve.
  EXPECT_EQ(ExpandTarget(*ParseTarget("dns:///no-such-host.invalid:80")),
            std::vector<std::string>{"dns:///no-such-host.invalid:80"});
  EXPECT_EQ(
      ExpandTarget(*ParseTarget("a:1,ipv4:10.0.0.1:2,10.0.0.2:2")),
      (std::vector<std::string>{"a:1", "ipv4:10.0.0.1:2", "ipv4:10.0.0.2:2"}));
}

TensorPayload IntStep(int32_t value) {
  std::string bytes(sizeof(value), '\0');
  std::memcpy(bytes.data(), &value, sizeof(value));
  return *MakePayload(DType::kInt32, {}, bytes);
}

int32_t IntOf(const TensorPayload& payload) {
  int32_t value;
  std::memcpy(&value, payload.data.data(), sizeof(value));
  return value;
}

class ShardedClientTest : public ::testing::Test {
 protected:
  // Starts `n` servers with `tables` each and a client of all of them.
  void StartShards(int n, const std::vector<TableOptions>& tables) {
    std::vector<std::string> addresses;
    for (int i = 0; i < n; ++i) {
      auto server = ReplayServer::StartFromOptions(tables, ServerOptions());
      ASSERT_OK(server);
      addresses.push_back(absl::StrCat("localhost:", (*server)->port()));
      servers_.push_back(*std::move(server));
      shard_clients_.push_back(*Client::Create(addresses.back()));
    }
    target_ = absl::StrJoin(addresses, ",");
    client_ = *Client::Create(target_);
  }

  // Writes `count` one-step items of table `table` with values from `first`
  // through a writer of `client`.
  void Write(Client& client, const std::string& table, int first, int count,
             double priority = 1.0) {
    auto writer = testing::NewWriter(client);
    for (int i = first; i < first + count; ++i) {
      auto step = writer->Append({IntStep(i)});
      ASSERT_OK(step);
      ASSERT_OK(writer->CreateItem(table, priority, {{0, {*step}, true}}));
    }
    ASSERT_OK(writer->Flush(0, kTimeout));
    ASSERT_OK(writer->Close());
  }

  // Which shard holds value v (the values each shard's table holds).
  std::map<int32_t, int> ValuesByShard(const std::string& table) {
    std::map<int32_t, int> shard_of;
    for (size_t s = 0; s < servers_.size(); ++s) {
      const int64_t size = testing::TableSize(*shard_clients_[s], table);
      SamplerOptions options;
      options.rate_limiter_timeout = kTimeout;
      auto samples = shard_clients_[s]->SampleItems(
          table, std::max<int64_t>(size * 20, 1), options);
      EXPECT_OK(samples);
      for (const Sample& sample : *samples)
        shard_of[IntOf(sample.columns[0])] = s;
    }
    return shard_of;
  }

  // Two shards of prioritized table "p", `per_shard` items each (values 0..
  // and 1000..); returns each item's value by key, the keys as a learner
  // gets them: from the merged sampler.
  std::map<Key, int32_t> TwoPrioritizedShards(int per_shard) {
    StartShards(2, {MakeTableOptions("p", Prioritized(1.0), Fifo(), 1000,
                                     RateLimiterOptions::MinSize(1))});
    Write(*shard_clients_[0], "p", 0, per_shard);
    Write(*shard_clients_[1], "p", 1000, per_shard);
    SamplerOptions options;
    options.rate_limiter_timeout = kTimeout;
    auto samples = client_->SampleItems("p", 40 * per_shard, options);
    std::map<Key, int32_t> value_of;
    EXPECT_OK(samples);
    if (!samples.ok()) return value_of;
    for (const Sample& sample : *samples)
      value_of[sample.info.key] = IntOf(sample.columns[0]);
    EXPECT_EQ(value_of.size(), 2 * per_shard);
    return value_of;
  }

  std::vector<std::unique_ptr<ReplayServer>> servers_;
  std::vector<std::unique_ptr<Client>> shard_clients_;
  std::string target_;
  std::unique_ptr<Client> client_;
};

TableOptions UniformTable(const std::string& name = "t",
                          int64_t max_size = 10000) {
  return MakeTableOptions(name, Uniform(), Fifo(), max_size,
                          RateLimiterOptions::MinSize(1));
}

TEST_F(ShardedClientTest, WritersSpreadAcrossShardsAndEachStaysOnOne) {
  StartShards(3, {UniformTable()});
  EXPECT_EQ(client_->ShardAddresses().size(), 3);
  // Six writers of ten items each: every writer's items land on one shard,
  // and the writers take the shards in turn.
  for (int w = 0; w < 6; ++w) Write(*client_, "t", w * 10, 10);
  std::map<int32_t, int> shard_of = ValuesByShard("t");
  ASSERT_EQ(shard_of.size(), 60);
  std::map<int, int> writers_per_shard;
  for (int w = 0; w < 6; ++w) {
    const int shard = shard_of[w * 10];
    for (int i = w * 10; i < w * 10 + 10; ++i)
      EXPECT_EQ(shard_of[i], shard) << i;
    ++writers_per_shard[shard];
  }
  EXPECT_EQ(writers_per_shard, (std::map<int, int>{{0, 2}, {1, 2}, {2, 2}}));
}

TEST_F(ShardedClientTest, NewWritersGoToTheShardWithTheFewestWriters) {
  StartShards(2, {UniformTable()});
  // Two writers of another client keep streams open on shard 0.
  std::vector<std::unique_ptr<TrajectoryWriter>> busy;
  for (int w = 0; w < 2; ++w) {
    busy.push_back(testing::NewWriter(*shard_clients_[0]));
    auto step = busy.back()->Append({IntStep(-1)});
    ASSERT_OK(step);
    ASSERT_OK(busy.back()->CreateItem("t", 1.0, {{0, {*step}, true}}));
    ASSERT_OK(busy.back()->Flush(0, kTimeout));
  }
  // Whatever the turn says, each new writer of the sharded client takes
  // shard 1, which has none.
  for (int w = 0; w < 4; ++w) Write(*client_, "t", 100 + w, 1);
  EXPECT_EQ(testing::TableSize(*shard_clients_[0], "t"), 2);
  EXPECT_EQ(testing::TableSize(*shard_clients_[1], "t"), 4);
  for (auto& writer : busy) ASSERT_OK(writer->Close());
}

TEST_F(ShardedClientTest, SamplesArriveInProportionToShardSizes) {
  StartShards(2, {UniformTable()});
  Write(*shard_clients_[0], "t", 0, 100);     // values 0..99 on shard 0
  Write(*shard_clients_[1], "t", 1000, 300);  // values 1000..1299 on shard 1
  SamplerOptions options;
  options.rate_limiter_timeout = kTimeout;
  options.max_in_flight = 64;
  auto samples = client_->SampleItems("t", 8000, options);
  ASSERT_OK(samples);
  ASSERT_EQ(samples->size(), 8000);
  int from_first = 0;
  for (const Sample& sample : *samples)
    from_first += IntOf(sample.columns[0]) < 1000;
  // Expected 2000 (a quarter); the binomial standard deviation is ~39.
  EXPECT_NEAR(from_first, 2000, 200);
}

TEST_F(ShardedClientTest, PrioritizedShardsAreWeighedByTheirPrioritySums) {
  StartShards(2, {MakeTableOptions("p", Prioritized(1.0), Fifo(), 1000,
                                   RateLimiterOptions::MinSize(1))});
  Write(*shard_clients_[0], "p", 0, 100, /*priority=*/1.0);     // sum 100
  Write(*shard_clients_[1], "p", 1000, 100, /*priority=*/3.0);  // sum 300
  SamplerOptions options;
  options.rate_limiter_timeout = kTimeout;
  options.max_in_flight = 64;
  auto samples = client_->SampleItems("p", 8000, options);
  ASSERT_OK(samples);
  int from_first = 0;
  for (const Sample& sample : *samples)
    from_first += IntOf(sample.columns[0]) < 1000;
  EXPECT_NEAR(from_first, 2000, 200);
}

TEST_F(ShardedClientTest, MaxSamplesIsExactOverAllShards) {
  StartShards(3, {UniformTable()});
  for (int s = 0; s < 3; ++s) Write(*shard_clients_[s], "t", s * 100, 10);
  SamplerOptions options;
  options.rate_limiter_timeout = kTimeout;
  options.max_samples = 25;
  options.max_in_flight = 8;
  auto sampler = client_->NewSampler("t", options);
  ASSERT_OK(sampler);
  Sample sample;
  for (int i = 0; i < 25; ++i) ASSERT_OK((*sampler)->Next(&sample)) << i;
  EXPECT_EQ((*sampler)->Next(&sample).code(), absl::StatusCode::kOutOfRange);
  sampler->reset();
  // The shards together handed out exactly 25: nothing was over-requested.
  int64_t sampled = 0;
  for (int s = 0; s < 3; ++s) {
    sampled +=
        (*shard_clients_[s]->ServerInfo(kTimeout))[0].rate_limiter_info.samples;
  }
  EXPECT_EQ(sampled, 25);
}

TEST_F(ShardedClientTest, PriorityUpdatesReachTheShardThatHoldsTheKey) {
  const std::map<Key, int32_t> value_of = TwoPrioritizedShards(5);
  ASSERT_EQ(value_of.size(), 10);
  SamplerOptions options;
  options.rate_limiter_timeout = kTimeout;
  std::vector<std::pair<Key, double>> updates;
  for (const auto& [key, value] : value_of)
    updates.push_back({key, 100.0 + value});
  updates.push_back({12345, 1.0});  // a key no shard holds
  auto report = client_->MutatePriorities("p", updates, {}, kTimeout);
  ASSERT_OK(report);
  EXPECT_EQ(report->updated, 10);
  EXPECT_EQ(report->missing, 1);
  EXPECT_TRUE(report->unreachable.empty());
  EXPECT_FALSE(report->warning.empty());  // the first skip is reported at once
  EXPECT_NE(report->warning.find("1 of 11"), std::string::npos)
      << report->warning;
  // Each shard changed only its own items.
  for (int s = 0; s < 2; ++s) {
    auto shard_samples = shard_clients_[s]->SampleItems("p", 100, options);
    ASSERT_OK(shard_samples);
    for (const Sample& sample : *shard_samples) {
      const int32_t value = IntOf(sample.columns[0]);
      EXPECT_EQ(value < 1000 ? 0 : 1, s);
      EXPECT_EQ(sample.info.priority, 100.0 + value);
    }
  }
  // Deletes too.
  std::vector<Key> deletes;
  for (const auto& [key, value] : value_of) {
    if (value == 0 || value == 1000) deletes.push_back(key);
  }
  report = client_->MutatePriorities("p", {}, deletes, kTimeout);
  ASSERT_OK(report);
  EXPECT_EQ(report->deleted, 2);
  EXPECT_EQ(report->missing, 0);
  EXPECT_TRUE(report->warning.empty());  // nothing skipped
  EXPECT_EQ(testing::TableSize(*shard_clients_[0], "p"), 4);
  EXPECT_EQ(testing::TableSize(*shard_clients_[1], "p"), 4);
  // A bad priority is the caller's error, on every shard alike.
  EXPECT_EQ(client_
                ->MutatePriorities("p", {{value_of.begin()->first, -1.0}}, {},
                                   kTimeout)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ShardedClientTest, UpdatesWithoutADeadlineGoOverEachShardsStream) {
  const std::map<Key, int32_t> value_of = TwoPrioritizedShards(3);
  ASSERT_EQ(value_of.size(), 6);
  SamplerOptions options;
  options.rate_limiter_timeout = kTimeout;
  // The sampler's streams end on the servers shortly after it is gone.
  for (const auto& server : servers_)
    ASSERT_EQ(testing::AwaitActiveStreams(*server, 0), 0);
  for (int round = 0; round < 3; ++round) {
    std::vector<std::pair<Key, double>> updates;
    for (const auto& [key, value] : value_of)
      updates.push_back({key, 10.0 * round + value});
    updates.push_back({12345, 1.0});
    auto report =
        client_->MutatePriorities("p", updates, {}, absl::InfiniteDuration());
    ASSERT_OK(report);
    EXPECT_EQ(report->updated, 6);
    EXPECT_EQ(report->missing, 1);
  }
  // One stream on each shard, for all three calls.
  for (size_t s = 0; s < servers_.size(); ++s) {
    EXPECT_EQ(testing::ActiveStreams(*servers_[s]), 1) << s;
  }
  for (int s = 0; s < 2; ++s) {
    auto shard_samples = shard_clients_[s]->SampleItems("p", 50, options);
    ASSERT_OK(shard_samples);
    for (const Sample& sample : *shard_samples) {
      EXPECT_EQ(sample.info.priority, 20.0 + IntOf(sample.columns[0]));
    }
  }
  // A request that fails fails the call, and the streams stay.
  auto bad = client_->MutatePriorities("p", {{value_of.begin()->first, NAN}},
                                       {}, absl::InfiniteDuration());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument)
      << bad.status();
  for (size_t s = 0; s < servers_.size(); ++s) {
    EXPECT_EQ(testing::ActiveStreams(*servers_[s]), 1) << s;
  }
}

TEST_F(ShardedClientTest, InfoAddsUpResetAndCheckpointReachEveryShard) {
  StartShards(2, {UniformTable("t", 50), UniformTable("u", 70)});
  Write(*shard_clients_[0], "t", 0, 3);
  Write(*shard_clients_[1], "t", 0, 4);
  auto info = client_->ServerInfo(kTimeout);
  ASSERT_OK(info);
  ASSERT_EQ(info->size(), 2);
  EXPECT_EQ((*info)[0].options.name, "t");
  EXPECT_EQ((*info)[0].current_size, 7);
  // Uniform: every item weighs 1, so the total is the size.
  EXPECT_EQ((*info)[0].sampler_total_weight, 7.0);
  EXPECT_DOUBLE_EQ((*info)[0].sampler_min_item_weight, 1.0);
  EXPECT_EQ((*info)[1].sampler_min_item_weight,
            0.0);  // empty: nothing to choose
  EXPECT_EQ((*info)[0].rate_limiter_info.inserts, 7);
  EXPECT_EQ((*info)[0].options.max_size, 100);  // the capacity of both
  EXPECT_EQ((*info)[1].options.max_size, 140);
  std::vector<ShardInfo> by_shard = client_->ServerInfoByShard(kTimeout);
  ASSERT_EQ(by_shard.size(), 2);
  EXPECT_EQ((*by_shard[0].tables)[0].current_size, 3);
  EXPECT_EQ((*by_shard[1].tables)[0].current_size, 4);

  // Neither server has a checkpointer: both are asked, both refuse.
  auto paths = client_->Checkpoint(kTimeout);
  EXPECT_EQ(paths.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(paths.status().message().find(by_shard[0].address),
            std::string::npos);
  EXPECT_NE(paths.status().message().find(by_shard[1].address),
            std::string::npos);

  ASSERT_OK(client_->Reset("t", kTimeout));
  EXPECT_EQ(testing::TableSize(*shard_clients_[0], "t"), 0);
  EXPECT_EQ(testing::TableSize(*shard_clients_[1], "t"), 0);
}

TEST_F(ShardedClientTest, AShardThatGoesAwayIsSkippedByUpdatesAndSamplersGoOn) {
  StartShards(2, {UniformTable()});
  Write(*shard_clients_[0], "t", 0, 10);
  Write(*shard_clients_[1], "t", 1000, 10);
  SamplerOptions options;
  options.rate_limiter_timeout = kTimeout;
  options.max_in_flight = 4;
  options.reconnect_timeout = absl::Seconds(2);
  auto sampler = client_->NewSampler("t", options);
  ASSERT_OK(sampler);
  std::set<int> seen;
  Sample sample;
  for (int i = 0; i < 200; ++i) {
    ASSERT_OK((*sampler)->Next(&sample));
    seen.insert(IntOf(sample.columns[0]) < 1000 ? 0 : 1);
  }
  EXPECT_EQ(seen.size(), 2);

  servers_[1]->Stop();
  // The sampler goes on with the shard that is left.
  int from_stopped = 0;
  for (int i = 0; i < 500; ++i) {
    ASSERT_OK((*sampler)->Next(&sample)) << i;
    if (i >= 100) from_stopped += IntOf(sample.columns[0]) >= 1000;
  }
  EXPECT_EQ(from_stopped, 0);
  // Updates skip the unreachable shard and say so.
  auto report = client_->MutatePriorities("t", {{1, 1.0}}, {}, kTimeout);
  ASSERT_OK(report);
  EXPECT_EQ(report->unreachable.size(), 1);
  EXPECT_EQ(report->missing, 1);
  // Info names the shard that is down (without a deadline: no waiting).
  auto info = client_->ServerInfo(absl::InfiniteDuration());
  EXPECT_EQ(info.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(info.status().message().find(client_->ShardAddresses()[1]),
            std::string::npos)
      << info.status();
  // New writers avoid the failing shard once its connection is known bad.
  for (int w = 0; w < 4; ++w) Write(*client_, "t", 5000 + w, 1);
  EXPECT_EQ(testing::TableSize(*shard_clients_[0], "t"), 14);

  servers_[0]->Stop();
  // Every shard gone: a clear error within the reconnect timeout (and the
  // 1.5 s a stream retries a server it cannot reach), never a hang.
  const absl::Time start = absl::Now();
  absl::Status status;
  while (status.ok()) status = (*sampler)->Next(&sample);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(
      client_->MutatePriorities("t", {{1, 1.0}}, {}, kTimeout).status().code(),
      absl::StatusCode::kUnavailable);
}

// The server's reverb_tf_active_streams gauge once it equals `want`, or
// what it was when `deadline` passed.
int64_t ActiveStreamsOnceEqual(ReplayServer& server, int64_t want,
                               absl::Duration deadline = absl::Seconds(5)) {
  const absl::Time end = absl::Now() + deadline;
  int64_t seen = -1;
  while (true) {
    const std::string text = server.MetricsText();
    const std::string name = "\nreverb_tf_active_streams ";
    const size_t at = text.find(name);
    seen = at == std::string::npos ? -1
                                   : std::stoll(text.substr(at + name.size()));
    if (seen == want || absl::Now() > end) return seen;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

TEST_F(ShardedClientTest, SeveralStreamsOnOneServerButOneForAnOrderedTable) {
  StartShards(1,
              {UniformTable(), MakeTableOptions("q", Fifo(), Fifo(), 1000,
                                                RateLimiterOptions::MinSize(1),
                                                /*max_times_sampled=*/1)});
  Write(*client_, "t", 0, 50);
  Write(*client_, "q", 0, 50);
  SamplerOptions options;
  options.rate_limiter_timeout = kTimeout;
  options.num_streams = 3;
  options.max_in_flight = 2;
  {
    auto sampler = client_->NewSampler("t", options);
    ASSERT_OK(sampler);
    Sample sample;
    for (int i = 0; i < 100; ++i) ASSERT_OK((*sampler)->Next(&sample));
    EXPECT_EQ(ActiveStreamsOnceEqual(*servers_[0], 3), 3);
  }
  ASSERT_EQ(ActiveStreamsOnceEqual(*servers_[0], 0), 0);
  {
    auto sampler = client_->NewSampler("q", options);
    ASSERT_OK(sampler);
    Sample sample;
    // A queue keeps its order through its one stream.
    for (int i = 0; i < 50; ++i) {
      ASSERT_OK((*sampler)->Next(&sample));
      EXPECT_EQ(IntOf(sample.columns[0]), i);
    }
    EXPECT_EQ(ActiveStreamsOnceEqual(*servers_[0], 1), 1);
  }
}

}  // namespace
}  // namespace reverb_tf
