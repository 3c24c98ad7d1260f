// SPDX-License-Identifier: Apache-2.0
// End to end over loopback gRPC: a ReplayServer on a free port and the C++
// Client and TrajectoryWriter talking to it.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "reverb_tf/cc/client/client.h"
#include "reverb_tf/cc/proto/service.grpc.pb.h"
#include "reverb_tf/cc/service/replay_service.h"
#include "reverb_tf/cc/service/server.h"
#include "reverb_tf/cc/testing/client_test_util.h"
#include "reverb_tf/cc/testing/status_matchers.h"
#include "reverb_tf/cc/testing/test_util.h"
#include "reverb_tf/cc/wire/conversions.h"

namespace reverb_tf {
namespace {

using ::reverb_tf::testing::Fifo;
using ::reverb_tf::testing::MakeTableOptions;
using ::reverb_tf::testing::Prioritized;
using ::reverb_tf::testing::Uniform;

constexpr absl::Duration kTimeout = absl::Seconds(20);

// Sample options whose rate-limiter wait is bounded, so a failing test
// cannot hang.
SamplerOptions Bounded() {
  SamplerOptions options;
  options.rate_limiter_timeout = kTimeout;
  return options;
}

TensorPayload FloatStep(float value, int width = 2) {
  std::string bytes(width * sizeof(float), '\0');
  for (int i = 0; i < width; ++i)
    std::memcpy(&bytes[i * sizeof(float)], &value, sizeof(float));
  return *MakePayload(DType::kFloat, {width}, bytes);
}

float FirstFloat(const TensorPayload& payload, int64_t index = 0) {
  float value;
  std::memcpy(&value, payload.data.data() + index * sizeof(float),
              sizeof(float));
  return value;
}

// Every test runs twice: over gRPC and, for what clients of a server of
// the same process do without it (local_server.h), in-process.
class ClientServerTest : public ::testing::TestWithParam<bool> {
 protected:
  ClientServerTest() : in_process_(GetParam()) {}

  void StartServer(std::vector<TableOptions> tables,
                   int64_t max_message_bytes = 1 << 20,
                   int64_t max_stream_chunk_bytes = int64_t{1} << 30) {
    ServerOptions options;
    options.max_message_bytes = max_message_bytes;
    options.max_stream_chunk_bytes = max_stream_chunk_bytes;
    auto server = ReplayServer::StartFromOptions(tables, options);
    ASSERT_OK(server);
    server_ = *std::move(server);
    ClientOptions client_options;
    client_options.max_message_bytes = max_message_bytes;
    client_ = *Client::Create(absl::StrCat("localhost:", server_->port()),
                              client_options);
  }

  std::unique_ptr<TrajectoryWriter> NewWriter(int keep_alive = 1) {
    return testing::NewWriter(*client_, keep_alive);
  }
  int64_t TableSize(const std::string& name) {
    return testing::TableSize(*client_, name);
  }
  // Table `name` as server_info reports it once `done` holds of it, or as it
  // last was when kTimeout passed (for the caller's checks to show).
  TableInfo AwaitTableInfo(const std::string& name,
                           absl::FunctionRef<bool(const TableInfo&)> done) {
    const absl::Time deadline = absl::Now() + kTimeout;
    TableInfo last;
    while (true) {
      auto tables = client_->ServerInfo(kTimeout);
      if (tables.ok()) {
        for (TableInfo& info : *tables) {
          if (info.options.name == name) last = std::move(info);
        }
      }
      if (done(last) || absl::Now() >= deadline) return last;
      absl::SleepFor(absl::Milliseconds(10));
    }
  }

  testing::ScopedInProcess in_process_;
  std::unique_ptr<ReplayServer> server_;
  std::unique_ptr<Client> client_;
};

INSTANTIATE_TEST_SUITE_P(Transports, ClientServerTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "InProcess" : "Grpc";
                         });

TEST_P(ClientServerTest, WriteAndSampleRoundTrip) {
  StartServer({MakeTableOptions("t", Fifo(), Fifo(), 100,
                                RateLimiterOptions::MinSize(1),
                                /*max_times_sampled=*/1)});
  auto writer = NewWriter(/*keep_alive=*/3);
  std::vector<int64_t> steps;
  for (int t = 0; t < 5; ++t) {
    auto step = writer->Append({FloatStep(t)});
    ASSERT_OK(step);
    steps.push_back(*step);
    if (t >= 2) {
      // Overlapping 3-step trajectories reuse the chunks already sent.
      ASSERT_OK(writer->CreateItem(
          "t", 1.0,
          {ItemColumn{0, {steps[t - 2], steps[t - 1], steps[t]}, false}}));
    }
  }
  ASSERT_OK(writer->CreateItem("t", 1.0, {ItemColumn{0, {steps[4]}, true}}));
  ASSERT_OK(writer->Flush(0, kTimeout));
  EXPECT_EQ(TableSize("t"), 4);

  auto samples = client_->SampleItems("t", 4, Bounded());
  ASSERT_OK(samples);
  ASSERT_EQ(samples->size(), 4u);
  for (int i = 0; i < 3; ++i) {  // Fifo: oldest first
    const TensorPayload& column = (*samples)[i].columns[0];
    EXPECT_EQ(column.shape, (Shape{3, 2}));
    for (int t = 0; t < 3; ++t) EXPECT_EQ(FirstFloat(column, 2 * t), i + t);
  }
  const TensorPayload& squeezed = (*samples)[3].columns[0];
  EXPECT_EQ(squeezed.shape, (Shape{2}));
  EXPECT_EQ(FirstFloat(squeezed), 4);
  EXPECT_EQ((*samples)[0].info.times_sampled, 1);
  EXPECT_EQ((*samples)[0].info.table_size, 4);
}

TEST_P(ClientServerTest,
       LargeChunksArriveIntactAndStayReadableWhileTheyTravel) {
  // Remote writers hand gRPC the chunk bytes in place (wire/insert_frame.h):
  // the server must get exactly them, and the writer's cells must read the
  // same while their message is being written.
  constexpr int kSteps = 48;
  constexpr int kWidth = 28224 / 4;
  StartServer({MakeTableOptions("t", Fifo(), Fifo(), kSteps,
                                RateLimiterOptions::MinSize(1),
                                /*max_times_sampled=*/1)},
              /*max_message_bytes=*/8 << 20);
  auto writer = NewWriter(/*keep_alive=*/kSteps);
  std::vector<int64_t> steps;
  for (int t = 0; t < kSteps; ++t) {
    std::string bytes(kWidth * sizeof(float), '\0');
    for (int i = 0; i < kWidth; ++i) {
      const float value = static_cast<float>(t * kWidth + i);
      std::memcpy(&bytes[i * sizeof(float)], &value, sizeof(float));
    }
    auto step = writer->Append({*MakePayload(DType::kFloat, {kWidth}, bytes)});
    ASSERT_OK(step);
    steps.push_back(*step);
    ASSERT_OK(writer->CreateItem("t", 1.0, {ItemColumn{0, {*step}, true}}));
    // Cells written up to now, some of them in a message on its way.
    for (int back = 0; back <= std::min(t, 3); ++back) {
      auto cells = writer->ReadCells(0, {steps[t - back]});
      ASSERT_OK(cells);
      ASSERT_EQ(FirstFloat(*cells, kWidth - 1),
                static_cast<float>((t - back + 1) * kWidth - 1));
    }
  }
  ASSERT_OK(writer->Flush(0, kTimeout));
  writer.reset();  // the chunks now live on only where the server keeps them
  auto samples = client_->SampleItems("t", kSteps, Bounded());
  ASSERT_OK(samples);
  ASSERT_EQ(samples->size(), static_cast<size_t>(kSteps));
  for (int t = 0; t < kSteps; ++t) {  // Fifo: in order
    const TensorPayload& column = (*samples)[t].columns[0];
    ASSERT_EQ(column.shape, (Shape{kWidth}));
    for (int i = 0; i < kWidth; i += 997) {
      ASSERT_EQ(FirstFloat(column, i), static_cast<float>(t * kWidth + i))
          << t << " " << i;
    }
    ASSERT_EQ(FirstFloat(column, kWidth - 1),
              static_cast<float>((t + 1) * kWidth - 1));
  }
}

TEST_P(ClientServerTest, CompressedChunksFromTheWriterRoundTrip) {
  // zstd chunks travel with their compression and uncompressed size, in
  // place like plain ones; the server checks and stores them as sent.
  StartServer(
      {MakeTableOptions("t", Fifo(), Fifo(), 10, RateLimiterOptions::MinSize(1),
                        /*max_times_sampled=*/1)});
  TrajectoryWriterOptions options;
  options.num_keep_alive_refs = 4;
  options.zstd_level = 3;
  auto writer = client_->NewTrajectoryWriter(options);
  ASSERT_OK(writer);
  std::vector<int64_t> steps;
  for (int t = 0; t < 4; ++t) {
    auto step =
        (*writer)->Append({FloatStep(static_cast<float>(t), /*width=*/4096)});
    ASSERT_OK(step);
    steps.push_back(*step);
  }
  ASSERT_OK((*writer)->CreateItem("t", 1.0, {ItemColumn{0, steps, false}}));
  ASSERT_OK((*writer)->Flush(0, kTimeout));
  auto samples = client_->SampleItems("t", 1, Bounded());
  ASSERT_OK(samples);
  ASSERT_EQ(samples->size(), 1u);
  const TensorPayload& column = (*samples)[0].columns[0];
  ASSERT_EQ(column.shape, (Shape{4, 4096}));
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(FirstFloat(column, t * 4096), t);
    EXPECT_EQ(FirstFloat(column, t * 4096 + 4095), t);
  }
}

TEST_P(ClientServerTest, MultiColumnItemsAndMissingColumns) {
  StartServer({MakeTableOptions("t", Uniform(), Fifo(), 100,
                                RateLimiterOptions::MinSize(1))});
  auto writer = NewWriter(2);
  auto s0 = writer->Append(
      {FloatStep(1),
       *MakeStringPayload({}, std::vector<std::string>{"hello"})});
  auto s1 = writer->Append({FloatStep(2), std::nullopt});
  ASSERT_OK(s0);
  ASSERT_OK(s1);
  EXPECT_EQ(writer->num_columns(), 2);
  auto missing = writer->CreateItem("t", 1.0, {ItemColumn{1, {*s1}, true}});
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  ASSERT_OK(writer->CreateItem(
      "t", 1.0,
      {ItemColumn{0, {*s0, *s1}, false}, ItemColumn{1, {*s0}, true}}));
  ASSERT_OK(writer->Flush(0, kTimeout));
  auto samples = client_->SampleItems("t", 1, Bounded());
  ASSERT_OK(samples);
  EXPECT_EQ((*samples)[0].columns[0].shape, (Shape{2, 2}));
  EXPECT_EQ(*DecodeStrings((*samples)[0].columns[1]),
            std::vector<std::string>{"hello"});
}

TEST_P(ClientServerTest, KeepAliveWindowIsEnforced) {
  StartServer({MakeTableOptions("t", Uniform(), Fifo(), 100,
                                RateLimiterOptions::MinSize(1))});
  auto writer = NewWriter(2);
  auto s0 = writer->Append({FloatStep(0)});
  writer->Append({FloatStep(1)}).IgnoreError();
  writer->Append({FloatStep(2)}).IgnoreError();
  absl::Status status =
      writer->CreateItem("t", 1.0, {ItemColumn{0, {*s0}, true}});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("num_keep_alive_refs"), std::string::npos)
      << status;
}

TEST_P(ClientServerTest, ChunksCrossTheWireOnce) {
  StartServer({MakeTableOptions("a", Uniform(), Fifo(), 1000,
                                RateLimiterOptions::MinSize(1)),
               MakeTableOptions("b", Uniform(), Fifo(), 1000,
                                RateLimiterOptions::MinSize(1))});
  auto writer = NewWriter(4);
  std::vector<int64_t> steps;
  for (int t = 0; t < 40; ++t) {
    steps.push_back(*writer->Append({FloatStep(t)}));
    if (t >= 3) {
      std::vector<int64_t> window(steps.end() - 4, steps.end());
      ASSERT_OK(writer->CreateItem("a", 1.0, {ItemColumn{0, window, false}}));
      ASSERT_OK(
          writer->CreateItem("b", 1.0, {ItemColumn{0, {steps.back()}, true}}));
    }
  }
  ASSERT_OK(writer->Flush(0, kTimeout));
  EXPECT_EQ(TableSize("a"), 37);
  EXPECT_EQ(TableSize("b"), 37);
  // Every step's data lives on the server exactly once, shared by the items
  // of both tables that cover it. The first item closes a chunk of steps
  // 0-3; every later item closes a chunk of its newest step: 37 chunks, not
  // one per item (74) or per item step (185).
  EXPECT_EQ(server_->num_live_chunks(), 37);
  const int64_t bytes = server_->num_live_chunk_bytes();
  writer.reset();  // the stream's references go; the items' stay
  EXPECT_EQ(server_->num_live_chunks(), 37);
  EXPECT_EQ(server_->num_live_chunk_bytes(), bytes);
  auto samples = client_->SampleItems("a", 37, Bounded());
  ASSERT_OK(samples);
  for (const Sample& sample : *samples) {
    const float first = FirstFloat(sample.columns[0]);
    for (int t = 0; t < 4; ++t)
      EXPECT_EQ(FirstFloat(sample.columns[0], 2 * t), first + t);
  }
}

TEST_P(ClientServerTest, StatusCodesSurviveTheWire) {
  auto options = MakeTableOptions("sig", Uniform(), Fifo(), 10,
                                  RateLimiterOptions::MinSize(2));
  options.signature =
      TableSignature{{ColumnSpec{"obs", DType::kFloat, {2}}}, "nested"};
  StartServer({options});
  // Unknown table on sampling: NOT_FOUND.
  EXPECT_EQ(client_->SampleItems("nope", 1, Bounded()).status().code(),
            absl::StatusCode::kNotFound);
  // Rate limiter timeout: DEADLINE_EXCEEDED.
  SamplerOptions short_timeout;
  short_timeout.rate_limiter_timeout = absl::Milliseconds(100);
  EXPECT_EQ(client_->SampleItems("sig", 1, short_timeout).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  // Signature mismatch: INVALID_ARGUMENT naming the column; the writer then
  // reports the same status from every call.
  auto writer = NewWriter();
  auto step =
      writer->Append({*MakePayload(DType::kInt32, {2}, std::string(8, '\0'))});
  ASSERT_OK(writer->CreateItem("sig", 1.0, {ItemColumn{0, {*step}, true}}));
  absl::Status status = writer->Flush(0, kTimeout);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("'obs'"), std::string::npos) << status;
  EXPECT_EQ(writer->Append({FloatStep(1)}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Unknown table on insert: NOT_FOUND.
  auto other = NewWriter();
  auto s = other->Append({FloatStep(1)});
  ASSERT_OK(other->CreateItem("nope", 1.0, {ItemColumn{0, {*s}, true}}));
  EXPECT_EQ(other->Flush(0, kTimeout).code(),
            absl::StatusCode::kInvalidArgument);
  // Bad priority: INVALID_ARGUMENT.
  EXPECT_EQ(client_->MutatePriorities("sig", {{1, NAN}}, {}, kTimeout)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->Reset("nope", kTimeout).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->Checkpoint(kTimeout).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_P(ClientServerTest, MutateResetAndServerInfo) {
  auto options =
      MakeTableOptions("p", Prioritized(1.0), Fifo(), 10,
                       RateLimiterOptions::SampleToInsertRatio(2.0, 1, 10));
  options.signature =
      TableSignature{{ColumnSpec{"obs", DType::kFloat, {2}}}, "nested-blob"};
  StartServer({options});
  auto writer = NewWriter();
  for (int i = 0; i < 3; ++i) {
    auto step = writer->Append({FloatStep(i)});
    ASSERT_OK(writer->CreateItem("p", 1.0 + i, {ItemColumn{0, {*step}, true}}));
  }
  ASSERT_OK(writer->Flush(0, kTimeout));
  auto samples = client_->SampleItems("p", 2, Bounded());
  ASSERT_OK(samples);
  auto info = client_->ServerInfo(kTimeout);
  ASSERT_OK(info);
  ASSERT_EQ(info->size(), 1u);
  const TableInfo& table = (*info)[0];
  EXPECT_EQ(table.options.name, "p");
  EXPECT_EQ(table.options.sampler, Prioritized(1.0));
  EXPECT_EQ(table.current_size, 3);
  EXPECT_EQ(table.rate_limiter_info.inserts, 3);
  EXPECT_EQ(table.rate_limiter_info.samples, 2);
  EXPECT_EQ(table.rate_limiter_info.insert_stats.completed, 3);
  EXPECT_EQ(table.rate_limiter_info.options.samples_per_insert, 2.0);
  ASSERT_TRUE(table.options.signature.has_value());
  EXPECT_EQ(table.options.signature->nested_structure, "nested-blob");
  EXPECT_EQ(table.options.signature->columns[0].name, "obs");

  const Key key = (*samples)[0].info.key;
  auto result =
      client_->MutatePriorities("p", {{key, 50.0}, {12345, 1.0}}, {}, kTimeout);
  ASSERT_OK(result);
  EXPECT_EQ(result->updated, 1);
  EXPECT_EQ(result->missing, 1);
  // Priorities are now 50 for `key` and the original 1..3 for the others.
  const double total = 50.0 + 6.0 - (*samples)[0].info.priority;
  auto after =
      client_->SampleItems("p", 5, Bounded());  // within the limiter's budget
  ASSERT_OK(after);
  for (const Sample& s : *after) {
    EXPECT_EQ(s.info.priority == 50.0, s.info.key == key);
    EXPECT_NEAR(s.info.probability, s.info.priority / total, 1e-9);
  }
  auto deleted = client_->MutatePriorities("p", {}, {key}, kTimeout);
  EXPECT_EQ(deleted->deleted, 1);
  EXPECT_EQ(TableSize("p"), 2);
  ASSERT_OK(client_->Reset("p", kTimeout));
  EXPECT_EQ(TableSize("p"), 0);
}

using ::reverb_tf::testing::ActiveStreams;
using ::reverb_tf::testing::AwaitActiveStreams;

// Three items of priority 1 in prioritized table "p"; returns their keys.
std::vector<Key> ThreePrioritizedItems(Client& client,
                                       TrajectoryWriter& writer) {
  for (int i = 0; i < 3; ++i) {
    auto step = writer.Append({FloatStep(i)});
    EXPECT_OK(writer.CreateItem("p", 1.0, {ItemColumn{0, {*step}, true}}));
  }
  EXPECT_OK(writer.Flush(0, kTimeout));
  std::vector<Key> keys;
  auto samples = client.SampleItems("p", 60, Bounded());
  EXPECT_OK(samples);
  for (const Sample& sample : *samples) {
    if (std::find(keys.begin(), keys.end(), sample.info.key) == keys.end()) {
      keys.push_back(sample.info.key);
    }
  }
  EXPECT_EQ(keys.size(), 3u);
  return keys;
}

TEST_P(ClientServerTest,
       MutationsWithoutADeadlineShareOneStreamThatSurvivesBadRequests) {
  StartServer({MakeTableOptions("p", Prioritized(1.0), Fifo(), 10,
                                RateLimiterOptions::MinSize(1))});
  auto writer = NewWriter();
  const std::vector<Key> keys = ThreePrioritizedItems(*client_, *writer);
  writer.reset();
  // The writer's and sampler's streams end on the server shortly after.
  ASSERT_EQ(AwaitActiveStreams(*server_, 0), 0);
  for (int i = 0; i < 20; ++i) {
    auto result =
        client_->MutatePriorities("p", {{keys[i % 3], 1.0 + i}, {12345, 1.0}},
                                  {}, absl::InfiniteDuration());
    ASSERT_OK(result);
    EXPECT_EQ(result->updated, 1);
    EXPECT_EQ(result->missing, 1);
  }
  // One stream for all of them (in-process, none: no gRPC at all).
  EXPECT_EQ(ActiveStreams(*server_), GetParam() ? 0 : 1);
  // A bad request fails alone, with the server's words, and the stream stays.
  auto bad = client_->MutatePriorities("p", {{keys[0], NAN}}, {},
                                       absl::InfiniteDuration());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  auto unknown = client_->MutatePriorities("nope", {{keys[0], 1.0}}, {},
                                           absl::InfiniteDuration());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound)
      << unknown.status();
  EXPECT_NE(unknown.status().message().find("nope"), std::string::npos);
  auto deleted = client_->MutatePriorities("p", {{keys[1], 7.0}}, {keys[2]},
                                           absl::InfiniteDuration());
  ASSERT_OK(deleted);
  EXPECT_EQ(deleted->updated, 1);
  EXPECT_EQ(deleted->deleted, 1);
  EXPECT_EQ(ActiveStreams(*server_), GetParam() ? 0 : 1);
  // What the last calls left: keys[0] at 19 (i = 18), keys[1] at 7, keys[2]
  // gone.
  auto samples = client_->SampleItems("p", 40, Bounded());
  ASSERT_OK(samples);
  for (const Sample& sample : *samples) {
    ASSERT_NE(sample.info.key, keys[2]);
    EXPECT_EQ(sample.info.priority, sample.info.key == keys[0] ? 19.0 : 7.0);
  }
  // Closing the client ends its stream on the server.
  client_.reset();
  EXPECT_EQ(AwaitActiveStreams(*server_, 0), 0);
}

TEST_P(ClientServerTest, ConcurrentMutationsAllLandWhetherStreamedOrNot) {
  StartServer({MakeTableOptions("p", Prioritized(1.0), Fifo(), 10,
                                RateLimiterOptions::MinSize(1))});
  auto writer = NewWriter();
  const std::vector<Key> keys = ThreePrioritizedItems(*client_, *writer);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        auto result = client_->MutatePriorities(
            "p", {{keys[t], 1.0 + t * 1000 + i}}, {}, absl::InfiniteDuration());
        if (!result.ok() || result->updated != 1) failures.fetch_add(1);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  // Each thread's last update is its key's priority: nothing reordered.
  auto samples = client_->SampleItems("p", 30, Bounded());
  ASSERT_OK(samples);
  for (const Sample& sample : *samples) {
    const int t = static_cast<int>(
        std::find(keys.begin(), keys.end(), sample.info.key) - keys.begin());
    EXPECT_EQ(sample.info.priority, 1.0 + t * 1000 + 99);
  }
}

TEST(MutationStreamTest, AServerThatRefusesTheStreamIsAskedByUnaryCalls) {
  // One stream allowed, and a writer holds it: the mutation stream is
  // refused (RESOURCE_EXHAUSTED), and the unary call carries the request.
  ServerOptions options;
  options.max_active_streams = 1;
  auto server = ReplayServer::StartFromOptions(
      {MakeTableOptions("p", Prioritized(1.0), Fifo(), 10,
                        RateLimiterOptions::MinSize(1))},
      options);
  ASSERT_OK(server);
  testing::ScopedInProcess over_grpc(false);
  auto client = *Client::Create(absl::StrCat("localhost:", (*server)->port()));
  auto writer = testing::NewWriter(*client, 1);
  auto step = writer->Append({FloatStep(1)});
  ASSERT_OK(writer->CreateItem("p", 1.0, {ItemColumn{0, {*step}, true}}));
  ASSERT_OK(writer->Flush(0, kTimeout));
  ASSERT_EQ(ActiveStreams(**server), 1);
  for (int i = 0; i < 3;
       ++i) {  // the first finds out; the others skip the stream
    auto result = client->MutatePriorities("p", {{12345, 2.0}}, {},
                                           absl::InfiniteDuration());
    ASSERT_OK(result);
    EXPECT_EQ(result->missing, 1);
  }
  EXPECT_EQ(ActiveStreams(**server), 1);
}

TEST(MutationStreamTest, StopEndsAnIdleMutationStreamAtOnce) {
  auto server = ReplayServer::StartFromOptions(
      {MakeTableOptions("p", Prioritized(1.0), Fifo(), 10,
                        RateLimiterOptions::MinSize(1))},
      ServerOptions());
  ASSERT_OK(server);
  testing::ScopedInProcess over_grpc(false);
  auto client = *Client::Create(absl::StrCat("localhost:", (*server)->port()));
  ASSERT_OK(
      client->MutatePriorities("p", {{1, 1.0}}, {}, absl::InfiniteDuration()));
  ASSERT_EQ(ActiveStreams(**server), 1);
  // Without EndAsyncStreams() gRPC's shutdown would wait out its 2 s.
  const absl::Time start = absl::Now();
  (*server)->Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1.5));
  auto after =
      client->MutatePriorities("p", {{1, 1.0}}, {}, absl::InfiniteDuration());
  EXPECT_EQ(after.status().code(), absl::StatusCode::kUnavailable)
      << after.status();
}

// Calls that the server's shutdown cancels still end with an operation on
// their completion queue (a Finish, or a Read or Write that had not seen the
// cancellation); none may start after StopAsyncStreams shut the queue, or
// gRPC aborts the process ("assertion failed: grpc_cq_begin_op"). With
// several stream threads a call's events come from any of them.
TEST(InsertStreamTest, StoppingWhileWritersStreamEndsEveryStreamCleanly) {
  testing::ScopedInProcess over_grpc(false);
  for (int round = 0; round < 24; ++round) {
    ServerOptions options;
    options.stream_threads = 1 + round % 3 * 2;  // 1, 3, 5
    auto server = ReplayServer::StartFromOptions(
        {MakeTableOptions("t", Uniform(), Fifo(), 50,
                          RateLimiterOptions::MinSize(1))},
        options);
    ASSERT_OK(server);
    auto client =
        *Client::Create(absl::StrCat("localhost:", (*server)->port()));
    std::atomic<int> flushed{0};
    std::vector<std::thread> writers;
    for (int w = 0; w < 4; ++w) {
      writers.emplace_back([&, w] {
        auto writer = testing::NewWriter(*client, 1);
        for (int i = 0; i < 100000; ++i) {
          auto step = writer->Append({FloatStep(i)});
          if (!step.ok() ||
              !writer->CreateItem("t", 1.0, {ItemColumn{0, {*step}, true}})
                   .ok()) {
            return;
          }
          // Some writers idle between messages, some do not.
          if (i % 8 == 7 && !writer->Flush(0, kTimeout).ok()) return;
          if (w % 2 == 0 && i % 8 == 7) absl::SleepFor(absl::Microseconds(50));
          if (i == 7) flushed.fetch_add(1);
        }
      });
    }
    const absl::Time deadline = absl::Now() + kTimeout;
    while (flushed.load() < 4 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    ASSERT_EQ(flushed.load(), 4);
    absl::SleepFor(absl::Milliseconds(round % 5));
    (*server)->Stop();
    for (auto& writer : writers) writer.join();
  }
}

TEST_P(ClientServerTest, OversizedItemIsRejectedAndTheServerKeepsServing) {
  StartServer({MakeTableOptions("t", Uniform(), Fifo(), 10,
                                RateLimiterOptions::MinSize(1))},
              /*max_message_bytes=*/64 << 10);
  const std::string big_bytes(200 << 10, 'x');
  // The writer refuses what cannot fit one message, and stays usable.
  auto writer = NewWriter();
  auto big =
      writer->Append({*MakePayload(DType::kUint8, {200 << 10}, big_bytes)});
  ASSERT_OK(big);
  EXPECT_EQ(writer->CreateItem("t", 1.0, {ItemColumn{0, {*big}, true}}).code(),
            absl::StatusCode::kResourceExhausted);
  auto step = writer->Append({std::nullopt, FloatStep(1)});
  ASSERT_OK(step);
  ASSERT_OK(writer->CreateItem("t", 1.0, {ItemColumn{1, {*step}, true}}));
  EXPECT_OK(writer->Flush(0, kTimeout));

  // A client allowing bigger messages than the server gets the server's
  // RESOURCE_EXHAUSTED; other clients are unaffected.
  ClientOptions generous;
  generous.max_message_bytes = 1 << 20;
  auto client =
      *Client::Create(absl::StrCat("localhost:", server_->port()), generous);
  auto big_writer = *client->NewTrajectoryWriter(TrajectoryWriterOptions());
  auto too_big =
      big_writer->Append({*MakePayload(DType::kUint8, {200 << 10}, big_bytes)});
  ASSERT_OK(
      big_writer->CreateItem("t", 1.0, {ItemColumn{0, {*too_big}, true}}));
  EXPECT_EQ(big_writer->Flush(0, kTimeout).code(),
            absl::StatusCode::kResourceExhausted);
  auto small = NewWriter();
  auto s = small->Append({FloatStep(2)});
  ASSERT_OK(small->CreateItem("t", 1.0, {ItemColumn{0, {*s}, true}}));
  EXPECT_OK(small->Flush(0, kTimeout));
  EXPECT_EQ(TableSize("t"), 2);
}

TEST_P(ClientServerTest, CancellationAbortsABlockedSample) {
  StartServer({MakeTableOptions("t", Uniform(), Fifo(), 10,
                                RateLimiterOptions::MinSize(1))});
  Cancellation cancel;
  absl::Status status;
  std::thread sampler([&] {
    status = client_->SampleItems("t", 1, SamplerOptions(), &cancel).status();
  });
  // Cancelling before the sample waits in the limiter would test a call
  // cancelled before it started, not a blocked one.
  const TableInfo waiting = AwaitTableInfo("t", [](const TableInfo& info) {
    return info.rate_limiter_info.sample_stats.pending == 1;
  });
  EXPECT_EQ(waiting.rate_limiter_info.sample_stats.pending, 1);
  const absl::Time start = absl::Now();
  cancel.Cancel();
  sampler.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST_P(ClientServerTest, StoppingTheServerFailsBlockedCallsPromptly) {
  StartServer(
      {MakeTableOptions("q", Fifo(), Fifo(), 1, RateLimiterOptions::Queue(1))});
  // A writer blocked on a full queue and a sampler on an empty table... the
  // queue holds one item, so sample it empty first.
  auto writer = NewWriter();
  for (int i = 0; i < 2; ++i) {
    auto step = writer->Append({FloatStep(i)});
    ASSERT_OK(writer->CreateItem("q", 1.0, {ItemColumn{0, {*step}, true}}));
  }
  absl::Status flush_status, sample_status;
  std::thread flusher([&] { flush_status = writer->Flush(0, kTimeout); });
  // Stopping before the second item reaches the limiter would test a call
  // in flight, not a blocked one.
  const TableInfo blocked = AwaitTableInfo("q", [](const TableInfo& info) {
    return info.current_size == 1 &&
           info.rate_limiter_info.insert_stats.pending == 1;
  });
  EXPECT_EQ(blocked.current_size, 1);
  EXPECT_EQ(blocked.rate_limiter_info.insert_stats.pending, 1);
  const absl::Time start = absl::Now();
  server_->Stop();
  flusher.join();
  EXPECT_FALSE(flush_status.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // A new call to the stopped server without a deadline fails fast instead
  // of hanging; with one, it waits for the server until the deadline.
  EXPECT_EQ(client_->ServerInfo(absl::InfiniteDuration()).status().code(),
            absl::StatusCode::kUnavailable);
  const absl::Time waited_from = absl::Now();
  EXPECT_EQ(client_->ServerInfo(absl::Milliseconds(300)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(absl::Now() - waited_from, absl::Milliseconds(250));
}

// Issue 14, defect 1: a chunk whose zstd frame declares far more bytes than
// its dtype and shape (or that does not decode) must be refused by the
// server, so that no client ever decompresses it.
TEST_P(ClientServerTest,
       PoisonCompressedChunksAreRefusedAndTheServerKeepsServing) {
  StartServer({MakeTableOptions("t", Uniform(), Fifo(), 10,
                                RateLimiterOptions::MinSize(1))});
  auto stub = proto::ReplayService::NewStub(
      grpc::CreateChannel(absl::StrCat("localhost:", server_->port()),
                          grpc::InsecureChannelCredentials()));
  const int64_t tib = int64_t{1} << 40;
  std::string frame("\x28\xb5\x2f\xfd\xe0",
                    5);  // zstd magic, 8-byte size, one segment
  for (int i = 0; i < 8; ++i)
    frame.push_back(static_cast<char>(tib >> (8 * i)));
  frame.append("\x01\x00\x00", 3);  // an empty last raw block
  for (int64_t declared : {tib, int64_t{24}}) {
    grpc::ClientContext context;
    auto stream = stub->InsertStream(&context);
    proto::InsertRequest request;
    proto::Chunk* chunk = request.add_chunks();
    chunk->set_key(7);
    proto::Tensor* tensor = chunk->mutable_tensor();
    tensor->set_dtype(static_cast<int32_t>(DType::kFloat));
    tensor->add_shape(3);
    tensor->add_shape(2);
    tensor->set_compression(1);
    tensor->set_uncompressed_size(declared);
    tensor->set_data(frame);
    proto::Item* item = request.add_items();
    item->set_key(1);
    item->set_table("t");
    item->set_priority(1.0);
    proto::Slice* slice = item->add_columns()->add_slices();
    slice->set_chunk_key(7);
    slice->set_length(1);
    stream->Write(request);
    stream->WritesDone();
    proto::InsertResponse response;
    EXPECT_FALSE(stream->Read(&response));
    grpc::Status status = stream->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << status.error_message();
    EXPECT_NE(status.error_message().find("chunk 7"), std::string::npos)
        << status.error_message();
  }
  EXPECT_EQ(TableSize("t"), 0);
  // A normal round trip still works.
  auto writer = NewWriter();
  auto step = writer->Append({FloatStep(3)});
  ASSERT_OK(writer->CreateItem("t", 1.0, {ItemColumn{0, {*step}, true}}));
  ASSERT_OK(writer->Flush(0, kTimeout));
  auto samples = client_->SampleItems("t", 1, Bounded());
  ASSERT_OK(samples);
  EXPECT_EQ(FirstFloat((*samples)[0].columns[0]), 3.0f);
}

// Issue 14, defect 3: one request must not take unbounded server work or
// memory.
TEST_P(ClientServerTest, HugeSampleRequestsAreServedInBoundedBatches) {
  StartServer({MakeTableOptions("t", Uniform(), Fifo(), 10,
                                RateLimiterOptions::MinSize(1))});
  auto writer = NewWriter();
  auto step = writer->Append({FloatStep(1)});
  ASSERT_OK(writer->CreateItem("t", 1.0, {ItemColumn{0, {*step}, true}}));
  ASSERT_OK(writer->Flush(0, kTimeout));
  auto stub = proto::ReplayService::NewStub(
      grpc::CreateChannel(absl::StrCat("localhost:", server_->port()),
                          grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext context;
    auto stream = stub->SampleStream(&context);
    proto::SampleRequest request;
    request.set_table("t");
    request.set_num_samples(int64_t{1} << 40);
    request.set_flexible_batch_size(std::numeric_limits<int32_t>::max());
    ASSERT_TRUE(stream->Write(request));
    proto::SampleResponse response;
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(stream->Read(&response));
      EXPECT_LE(response.items_size(), ReplayService::kMaxSamplesPerCall);
    }
    // Other calls are served meanwhile.
    const absl::Time start = absl::Now();
    EXPECT_EQ(TableSize("t"), 1);
    EXPECT_LT(absl::Now() - start, absl::Seconds(2));
    context.TryCancel();
  }
  grpc::ClientContext context;
  auto stream = stub->SampleStream(&context);
  proto::SampleRequest request;
  request.set_table("t");
  request.set_num_samples(int64_t{1} << 62);
  ASSERT_TRUE(stream->Write(request));
  proto::SampleResponse response;
  EXPECT_FALSE(stream->Read(&response));
  EXPECT_EQ(stream->Finish().error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST_P(ClientServerTest, ChunksAStreamNeverReleasesAreBounded) {
  StartServer({MakeTableOptions("t", Uniform(), Fifo(), 10,
                                RateLimiterOptions::MinSize(1))},
              /*max_message_bytes=*/1 << 20,
              /*max_stream_chunk_bytes=*/1 << 20);
  auto stub = proto::ReplayService::NewStub(
      grpc::CreateChannel(absl::StrCat("localhost:", server_->port()),
                          grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  auto stream = stub->InsertStream(&context);
  for (int i = 0; i < 20; ++i) {  // 20 x 100 KiB, never referenced or released
    proto::InsertRequest request;
    proto::Chunk* chunk = request.add_chunks();
    chunk->set_key(100 + i);
    PayloadToProto(
        *MakePayload(DType::kUint8, {100 << 10}, std::string(100 << 10, 'x')),
        chunk->mutable_tensor());
    if (!stream->Write(request)) break;
  }
  stream->WritesDone();
  proto::InsertResponse response;
  while (stream->Read(&response)) {
  }
  grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << status.error_message();
  // The same bytes, released as they go, are fine.
  grpc::ClientContext ok_context;
  auto ok_stream = stub->InsertStream(&ok_context);
  for (int i = 0; i < 20; ++i) {
    proto::InsertRequest request;
    proto::Chunk* chunk = request.add_chunks();
    chunk->set_key(200 + i);
    PayloadToProto(
        *MakePayload(DType::kUint8, {100 << 10}, std::string(100 << 10, 'x')),
        chunk->mutable_tensor());
    request.add_release_chunk_keys(200 + i);
    ASSERT_TRUE(ok_stream->Write(request));
    ASSERT_TRUE(ok_stream->Read(&response));
  }
  ok_stream->WritesDone();
  EXPECT_OK(ok_stream->Finish());
}

TEST(ServerTest, BadOptionsAreRejected) {
  EXPECT_EQ(ReplayServer::StartFromOptions(
                {MakeTableOptions("t", Uniform(), Fifo(), 10,
                                  RateLimiterOptions::MinSize(1)),
                 MakeTableOptions("t", Uniform(), Fifo(), 10,
                                  RateLimiterOptions::MinSize(1))},
                ServerOptions())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  ServerOptions bad_port;
  bad_port.port = 70000;
  EXPECT_EQ(ReplayServer::StartFromOptions({}, bad_port).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Client::Create("").status().code(),
            absl::StatusCode::kInvalidArgument);
  ServerOptions wal_alone;
  wal_alone.wal.emplace();
  wal_alone.wal->dir = "/nonexistent/wal";
  absl::Status no_checkpointer = ReplayServer::CheckStart({}, wal_alone);
  EXPECT_EQ(no_checkpointer.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_checkpointer.message().find("outlives the process"),
            absl::string_view::npos)
      << no_checkpointer;
  CheckpointerOptions temporary;
  temporary.root = "/nonexistent/checkpoints";
  temporary.temporary = true;
  EXPECT_EQ(ReplayServer::CheckStart({}, wal_alone, &temporary).code(),
            absl::StatusCode::kInvalidArgument);
  temporary.temporary = false;
  EXPECT_OK(ReplayServer::CheckStart({}, wal_alone, &temporary));
}

TEST(ServerTest, DuplicateTableNamesAreNamed) {
  auto table = [](const std::string& name) {
    return *Table::Create(MakeTableOptions(name, Uniform(), Fifo(), 10,
                                           RateLimiterOptions::MinSize(1)),
                          1);
  };
  absl::Status status = ReplayServer::CheckStart(
      {table("b"), table("a"), table("b"), table("c"), table("a")},
      ServerOptions());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "Multiple items in tables have the same name: a, b (table names "
            "must be unique)");
}

TEST(ServerTest, ATableIsHostedByOneRunningServerAtATime) {
  ASSERT_OK_AND_ASSIGN(
      std::shared_ptr<Table> table,
      Table::Create(MakeTableOptions("t", Uniform(), Fifo(), 10,
                                     RateLimiterOptions::MinSize(1)),
                    1));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ReplayServer> first,
                       ReplayServer::Start({table}, ServerOptions()));
  const std::string hosted =
      absl::StrCat("table 't' is hosted by a running server (port ",
                   first->port(), "); stop it first");
  for (const absl::Status& refused :
       {ReplayServer::CheckStart({table}, ServerOptions()),
        ReplayServer::Start({table}, ServerOptions()).status()}) {
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(refused.message().find(hosted), absl::string_view::npos)
        << refused;
  }
  // The refused start neither closed nor took the table.
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<Client> client,
      Client::Create(absl::StrCat("localhost:", first->port())));
  ASSERT_OK_AND_ASSIGN(auto info, client->ServerInfo(kTimeout));
  EXPECT_EQ(info.size(), 1);
  EXPECT_EQ(table->CheckHostable(nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  // Stop() gives it back: another server hosts it.
  first->Stop();
  EXPECT_OK(table->CheckHostable(nullptr));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ReplayServer> second,
                       ReplayServer::Start({table}, ServerOptions()));
  // A start that fails after taking its tables (the port is taken) gives
  // them back too.
  ASSERT_OK_AND_ASSIGN(
      std::shared_ptr<Table> other,
      Table::Create(MakeTableOptions("u", Uniform(), Fifo(), 10,
                                     RateLimiterOptions::MinSize(1)),
                    2));
  ServerOptions busy;
  busy.port = second->port();
  EXPECT_EQ(ReplayServer::Start({other}, busy).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_OK(other->CheckHostable(nullptr));
  EXPECT_OK(ReplayServer::Start({other}, ServerOptions()).status());
}

}  // namespace
}  // namespace reverb_tf
