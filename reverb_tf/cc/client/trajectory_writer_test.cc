// SPDX-License-Identifier: Apache-2.0
// The C++ TrajectoryWriter against a real server on a free loopback port:
// partial steps, per-column configuration, episodes, the release of chunks
// that left the keep-alive window (counted on the server), a full in-flight
// window, and batched (vectorised-environment) writers.
#include "reverb_tf/cc/client/trajectory_writer.h"

#include <cmath>
#include <cstring>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "reverb_tf/cc/client/client.h"
#include "reverb_tf/cc/service/server.h"
#include "reverb_tf/cc/testing/client_test_util.h"
#include "reverb_tf/cc/testing/status_matchers.h"
#include "reverb_tf/cc/testing/test_util.h"

namespace reverb_tf {
namespace {

using ::reverb_tf::testing::Fifo;
using ::reverb_tf::testing::MakeTableOptions;
using ::reverb_tf::testing::Uniform;

constexpr absl::Duration kTimeout = absl::Seconds(20);

TensorPayload FloatStep(float value) {
  std::string bytes(sizeof(float), '\0');
  std::memcpy(bytes.data(), &value, sizeof(float));
  return *MakePayload(DType::kFloat, {1}, bytes);
}

// One step of `values.size()` environments: row b holds values[b].
TensorPayload FloatBatch(const std::vector<float>& values) {
  std::string bytes(values.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return *MakePayload(DType::kFloat, {static_cast<int64_t>(values.size()), 1},
                      bytes);
}

float FloatAt(const TensorPayload& payload, int64_t index) {
  float value;
  std::memcpy(&value, payload.data.data() + index * sizeof(float),
              sizeof(float));
  return value;
}

SamplerOptions BoundedSampling() {
  SamplerOptions options;
  options.rate_limiter_timeout = kTimeout;
  return options;
}

class TrajectoryWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = ReplayServer::StartFromOptions(
        {MakeTableOptions("small", Uniform(), Fifo(), 8,
                          RateLimiterOptions::MinSize(1)),
         MakeTableOptions("big", Uniform(), Fifo(), 10000,
                          RateLimiterOptions::MinSize(1))},
        ServerOptions());
    ASSERT_OK(server);
    server_ = *std::move(server);
    client_ = *Client::Create(absl::StrCat("localhost:", server_->port()));
  }

  std::unique_ptr<TrajectoryWriter> NewWriter(int keep_alive = 1) {
    return testing::NewWriter(*client_, keep_alive);
  }
  int64_t TableSize(const std::string& name) {
    return testing::TableSize(*client_, name);
  }
  std::unique_ptr<TrajectoryWriter> NewBatchedWriter(int lanes,
                                                     int keep_alive) {
    TrajectoryWriterOptions options;
    options.num_lanes = lanes;
    options.num_keep_alive_refs = keep_alive;
    auto writer = client_->NewTrajectoryWriter(options);
    EXPECT_OK(writer);
    return writer.ok() ? *std::move(writer) : nullptr;
  }
  int64_t NumEpisodes(const std::string& name) {
    auto tables = client_->ServerInfo(kTimeout);
    EXPECT_OK(tables);
    if (!tables.ok()) return -1;
    for (const TableInfo& info : *tables) {
      if (info.options.name == name) return info.num_episodes;
    }
    return -1;
  }

  std::unique_ptr<ReplayServer> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(TrajectoryWriterTest, ChunksThatLeaveTheWindowAreReleasedOnTheServer) {
  // Items go to a table of 8: once they are evicted, only the writer's
  // keep-alive window (3 steps) may keep chunks alive on the server. A
  // writer that never released would leave all 2,000 there.
  auto writer = NewWriter(3);
  for (int t = 0; t < 2000; ++t) {
    const int64_t step = *writer->Append({FloatStep(t)});
    ASSERT_OK(writer->CreateItem("small", 1.0, {ItemColumn{0, {step}, true}},
                                 kTimeout));
  }
  ASSERT_OK(writer->Flush(0, kTimeout));
  EXPECT_EQ(TableSize("small"), 8);
  // 8 items' chunks plus at most the window's 3.
  EXPECT_LE(server_->num_live_chunks(), 8 + 3);
  writer.reset();
  EXPECT_LE(server_->num_live_chunks(), 8);
}

TEST_F(TrajectoryWriterTest,
       PartialStepsShareOneIndexAndRejectAColumnGivenTwice) {
  auto writer = NewWriter(2);
  auto first =
      writer->Append({FloatStep(1), std::nullopt}, /*partial_step=*/true);
  ASSERT_OK(first);
  auto second =
      writer->Append({std::nullopt, FloatStep(2)}, /*partial_step=*/true);
  ASSERT_OK(second);
  EXPECT_EQ(*first, *second);
  auto twice =
      writer->Append({FloatStep(3), std::nullopt}, /*partial_step=*/false);
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kInvalidArgument)
      << twice.status();
  // The open step's cells can be referenced before it is closed.
  EXPECT_OK(writer->CreateItem(
      "big", 1.0,
      {ItemColumn{0, {*first}, true}, ItemColumn{1, {*first}, true}},
      kTimeout));
  auto closed = writer->Append({}, /*partial_step=*/false);
  ASSERT_OK(closed);
  EXPECT_EQ(*closed, *first);
  auto next = writer->Append({FloatStep(4), FloatStep(5)});
  ASSERT_OK(next);
  EXPECT_EQ(*next, *first + 1);
  ASSERT_OK(writer->Flush(0, kTimeout));
  EXPECT_EQ(TableSize("big"), 1);
}

TEST_F(TrajectoryWriterTest, EndEpisodeRefusesAnOpenPartialStep) {
  auto writer = NewWriter(2);
  ASSERT_OK(writer->Append({FloatStep(1)}, /*partial_step=*/true));
  absl::Status refused = writer->EndEpisode(/*clear_buffers=*/true, kTimeout);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(refused.message(), "partial step is open"))
      << refused;
  // Nothing changed: the step is still open, the episode goes on.
  EXPECT_TRUE(writer->step_open());
  ASSERT_OK(writer->FinishStep());
  EXPECT_FALSE(writer->step_open());
  EXPECT_EQ(writer->episode_steps(), 1);
  EXPECT_OK(writer->FinishStep());  // none open: nothing to do
  EXPECT_OK(writer->EndEpisode(/*clear_buffers=*/true, kTimeout));
  EXPECT_EQ(writer->episode_steps(), 0);
}

TEST_F(TrajectoryWriterTest, ItemAndFlushArgumentsAreCheckedFirst) {
  auto writer = NewWriter(2);
  const int64_t step = *writer->Append({FloatStep(1)});
  auto expect_invalid = [](const absl::Status& status,
                           absl::string_view phrase) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), phrase)) << status;
  };
  expect_invalid(writer->CreateItem("big", std::nan(""),
                                    {ItemColumn{0, {step}, true}}, kTimeout),
                 "`priority` must not be nan.");
  expect_invalid(writer->CreateItem("big", 1.0, {}, kTimeout),
                 "trajectory must not be empty.");
  expect_invalid(
      writer->CreateItem(
          "big", 1.0, {ItemColumn{0, {step}, true}, ItemColumn{0, {}, false}},
          kTimeout),
      "trajectory must not be empty. (A column references no "
      "steps.)");
  expect_invalid(writer->CreateItem(
                     "big", 1.0, {ItemColumn{0, {step, step}, true}}, kTimeout),
                 "a squeezed column must reference exactly one step");
  expect_invalid(writer->Flush(-1, kTimeout),
                 "block_until_num_items must be >= 0, got -1");
  // Before the writer's own state: a closed writer still names the
  // argument.
  ASSERT_OK(writer->Close());
  expect_invalid(writer->CreateItem("big", 1.0, {}, kTimeout),
                 "trajectory must not be empty.");
  expect_invalid(writer->Flush(-1, kTimeout), "block_until_num_items");
  EXPECT_OK(TrajectoryWriter::ValidateItem(1.0, {ItemColumn{0, {step}, true}}));
  EXPECT_OK(TrajectoryWriter::ValidateFlush(0));
  EXPECT_EQ(TableSize("big"), 0);
}

TEST_F(TrajectoryWriterTest, ConfigureWidensOneColumnsWindow) {
  auto writer = NewWriter(1);
  std::vector<int64_t> steps;
  for (int t = 0; t < 3; ++t)
    steps.push_back(*writer->Append({FloatStep(t), FloatStep(t)}));
  // Column 0 keeps one step: its older steps are gone.
  EXPECT_EQ(
      writer
          ->CreateItem("big", 1.0, {ItemColumn{0, {steps[0]}, true}}, kTimeout)
          .code(),
      absl::StatusCode::kInvalidArgument);
  ASSERT_OK(
      writer->Configure(1, /*num_keep_alive_refs=*/4, /*max_chunk_length=*/0));
  for (int t = 3; t < 6; ++t)
    steps.push_back(*writer->Append({FloatStep(t), FloatStep(t)}));
  EXPECT_OK(writer->CreateItem(
      "big", 1.0,
      {ItemColumn{1, {steps[2], steps[3], steps[4], steps[5]}, false}},
      kTimeout));
  EXPECT_EQ(
      writer
          ->CreateItem("big", 1.0, {ItemColumn{0, {steps[4]}, true}}, kTimeout)
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(writer->Configure(7, 2, 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(writer->Configure(0, -1, 0).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_OK(writer->Flush(0, kTimeout));
  EXPECT_EQ(TableSize("big"), 1);
}

TEST_F(TrajectoryWriterTest, EndEpisodeFlushesAndClearsTheOldEpisodesCells) {
  auto writer = NewWriter(4);
  const int64_t old_step = *writer->Append({FloatStep(1)});
  ASSERT_OK(writer->CreateItem("big", 1.0, {ItemColumn{0, {old_step}, true}},
                               kTimeout));
  EXPECT_EQ(writer->episode_steps(), 1);
  ASSERT_OK(writer->EndEpisode(/*clear_buffers=*/true, kTimeout));
  EXPECT_EQ(writer->num_in_flight_items(), 0);  // flushed
  EXPECT_EQ(TableSize("big"), 1);
  EXPECT_EQ(writer->episode_steps(), 0);
  const int64_t new_step = *writer->Append({FloatStep(2)});
  EXPECT_GT(new_step, old_step);  // ids run on across episodes
  EXPECT_EQ(
      writer
          ->CreateItem("big", 1.0, {ItemColumn{0, {old_step}, true}}, kTimeout)
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_OK(writer->CreateItem("big", 1.0, {ItemColumn{0, {new_step}, true}},
                               kTimeout));
  ASSERT_OK(writer->Flush(0, kTimeout));
  EXPECT_EQ(TableSize("big"), 2);
}

TEST(TrajectoryWriterStatusTest,
     AStreamTheServerRefusesReportsTheServersStatus) {
  // One stream allowed, held by a blocked sampler: every writer stream is
  // refused with RESOURCE_EXHAUSTED. Its write may fail before the status
  // arrives; the writer must still report the server's status, not a
  // placeholder ("the stream broke", UNAVAILABLE). The sampler's stream is
  // what fills the server's one slot: over gRPC, not in-process.
  testing::ScopedInProcess grpc_only(false);
  ServerOptions options;
  options.max_active_streams = 1;
  auto server = ReplayServer::StartFromOptions(
      {MakeTableOptions("t", Uniform(), Fifo(), 10,
                        RateLimiterOptions::MinSize(5))},
      options);
  ASSERT_OK(server);
  auto client = *Client::Create(absl::StrCat("localhost:", (*server)->port()));
  SamplerOptions sampler_options;
  auto sampler = *client->NewSampler("t", sampler_options);
  std::thread blocked([&] {
    Sample sample;
    sampler->Next(&sample).IgnoreError();  // until cancelled
  });
  // Until the sampler's stream holds the slot, a writer's could take it.
  ASSERT_EQ(testing::AwaitActiveStreams(**server, 1), 1);
  for (int attempt = 0; attempt < 20; ++attempt) {
    auto writer = testing::NewWriter(*client, 1);
    const int64_t step = *writer->Append({FloatStep(attempt)});
    absl::Status status =
        writer->CreateItem("t", 1.0, {ItemColumn{0, {step}, true}}, kTimeout);
    if (status.ok()) status = writer->Flush(0, kTimeout);
    EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  }
  sampler->Cancel();
  blocked.join();
}

TEST_F(TrajectoryWriterTest, ReadCellsServesTheWindowFromOpenAndSentChunks) {
  // Chunks of 2 steps: cells are read from the open chunk, from a closed one
  // that is still queued, and from one whose bytes went out in a message.
  auto writer = NewWriter(4);
  for (int t = 0; t < 3; ++t) ASSERT_OK(writer->Append({FloatStep(t)}));
  ASSERT_OK(
      writer->CreateItem("big", 1.0, {ItemColumn{0, {0, 1}, false}}, kTimeout));
  ASSERT_OK(writer->Flush(0, kTimeout));  // steps 0-1 were sent
  absl::StatusOr<TensorPayload> cells = writer->ReadCells(0, {0, 1, 2});
  ASSERT_OK(cells);
  EXPECT_EQ(cells->shape, (Shape{3, 1}));
  EXPECT_EQ(FloatAt(*cells, 0), 0.0f);
  EXPECT_EQ(FloatAt(*cells, 1), 1.0f);
  EXPECT_EQ(FloatAt(*cells, 2), 2.0f);
  // Sending gave the message the chunk's bytes in place: a second item on
  // the same chunk still reads them, and the server stored both items.
  ASSERT_OK(
      writer->CreateItem("big", 1.0, {ItemColumn{0, {1}, true}}, kTimeout));
  ASSERT_OK(writer->Flush(0, kTimeout));
  EXPECT_EQ(FloatAt(*writer->ReadCells(0, {1}), 0), 1.0f);
  EXPECT_EQ(TableSize("big"), 2);
  // Out of the window: the writer no longer has the data.
  for (int t = 3; t < 8; ++t) ASSERT_OK(writer->Append({FloatStep(t)}));
  EXPECT_EQ(writer->ReadCells(0, {1}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(writer->IsReferenceable(0, 3));
  EXPECT_TRUE(writer->IsReferenceable(0, 4));
  EXPECT_EQ(FloatAt(*writer->ReadCells(0, {7}), 0), 7.0f);
}

TEST_F(TrajectoryWriterTest,
       HistoryStepCountsFromTheLastClearAndExplainsMisses) {
  auto writer = NewWriter(2);
  writer->SetColumnName(1, "obs");
  ASSERT_OK(writer->Append({FloatStep(0), std::nullopt}));
  ASSERT_OK(writer->Append({FloatStep(1), FloatStep(1)}));
  ASSERT_OK(writer->Append({FloatStep(2), FloatStep(2)}));
  EXPECT_EQ(writer->history_length(), 3);
  EXPECT_EQ(*writer->HistoryStep(0, -1), 2);
  EXPECT_EQ(*writer->HistoryStep(1, 1), 1);
  absl::StatusOr<int64_t> old = writer->HistoryStep(0, 0);
  EXPECT_EQ(old.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(old.status().message().find("keep-alive window"),
            std::string::npos);
  EXPECT_EQ(writer->HistoryStep(0, 3).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(writer->HistoryStep(0, -4).status().code(),
            absl::StatusCode::kOutOfRange);
  // Step ids run on across episodes; the history restarts only when cleared.
  ASSERT_OK(writer->EndEpisode(/*clear_buffers=*/false, kTimeout));
  ASSERT_OK(writer->Append({std::nullopt, FloatStep(3)}));
  EXPECT_EQ(writer->history_length(), 4);
  absl::StatusOr<int64_t> missing = writer->HistoryStep(0, -1);
  EXPECT_NE(missing.status().message().find("no value"), std::string::npos);
  ASSERT_OK(writer->EndEpisode(/*clear_buffers=*/true, kTimeout));
  EXPECT_EQ(writer->history_length(), 0);
  ASSERT_OK(writer->Append({FloatStep(4), FloatStep(4)}));
  EXPECT_EQ(*writer->HistoryStep(1, 0), 4);
  // Column names reach the value checks.
  absl::StatusOr<int64_t> bad = writer->Append(
      {FloatStep(5), *MakePayload(DType::kInt32, {1}, std::string(4, '\0'))});
  EXPECT_NE(
      bad.status().message().find("Tensor of wrong dtype provided for column "
                                  "'obs'. Got int32 but expected float."),
      std::string::npos)
      << bad.status();
}

TEST_F(TrajectoryWriterTest, CreateItemChecksTheTableSignatureItWasGiven) {
  auto writer = NewWriter(3);
  writer->SetColumnName(0, "x");
  for (int t = 0; t < 3; ++t) ASSERT_OK(writer->Append({FloatStep(t)}));
  TableSignature signature;
  signature.columns.push_back(ColumnSpec{"obs", DType::kFloat, {-1, 1}});
  writer->SetTableSignature("big", signature);
  EXPECT_OK(
      writer->CreateItem("big", 1.0, {ItemColumn{0, {0, 1}, false}}, kTimeout));
  absl::Status squeezed =
      writer->CreateItem("big", 1.0, {ItemColumn{0, {2}, true}}, kTimeout);
  EXPECT_EQ(squeezed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(squeezed.message().find(
                "column 'obs' (data path 'x') must be float32[-1, 1]"),
            std::string::npos)
      << squeezed;
  absl::Status count = writer->CreateItem(
      "big", 1.0, {ItemColumn{0, {1}, false}, ItemColumn{0, {2}, false}},
      kTimeout);
  EXPECT_NE(count.message().find("has 1 columns (obs) but the item has 2"),
            std::string::npos)
      << count;
  // The rejected items changed nothing: the writer goes on.
  writer->SetTableSignature("big", std::nullopt);
  EXPECT_OK(
      writer->CreateItem("big", 1.0, {ItemColumn{0, {2}, true}}, kTimeout));
  ASSERT_OK(writer->Flush(0, kTimeout));
  EXPECT_EQ(TableSize("big"), 2);
}

TEST_F(TrajectoryWriterTest, ConfigureWithoutChunkLengthFitsASmallerWindow) {
  auto writer = NewWriter(4);
  ASSERT_OK(writer->Append({FloatStep(0)}));
  EXPECT_OK(writer->Configure(0, 2, 0));
  EXPECT_FALSE(writer->Configure(0, 2, 3).ok());
  EXPECT_FALSE(TrajectoryWriter::ValidateColumnOptions(0, 0).ok());
  EXPECT_OK(TrajectoryWriter::ValidateColumnOptions(3, 0));
}

TEST_F(TrajectoryWriterTest, AnItemThatWaitedForTheWindowStillCarriesItsChunk) {
  // Regression: a create that timed out waiting for room in the in-flight
  // window marked its new chunk as sent; the retry then sent the item
  // without it and the server rejected it ("has not sent").
  auto server = ReplayServer::StartFromOptions(
      {MakeTableOptions("q", Fifo(), Fifo(), 1, RateLimiterOptions::Queue(1),
                        /*max_times_sampled=*/1)},
      ServerOptions());
  ASSERT_OK(server);
  auto client = *Client::Create(absl::StrCat("localhost:", (*server)->port()));
  TrajectoryWriterOptions options;
  options.max_in_flight_items = 1;
  auto writer = *client->NewTrajectoryWriter(options);
  for (int t = 0; t < 2; ++t) {
    const int64_t step = *writer->Append({FloatStep(t)});
    ASSERT_OK(
        writer->CreateItem("q", 1.0, {ItemColumn{0, {step}, true}}, kTimeout));
  }
  // Item 1 waits on the server for room in the queue: the window is full.
  const int64_t step = *writer->Append({FloatStep(2)});
  const std::vector<ItemColumn> columns = {ItemColumn{0, {step}, true}};
  EXPECT_EQ(writer->CreateItem("q", 1.0, columns, absl::ZeroDuration()).code(),
            absl::StatusCode::kDeadlineExceeded);
  std::vector<float> sampled;
  std::thread sampler([&] {
    for (int i = 0; i < 3; ++i) {
      auto samples = client->SampleItems("q", 1, BoundedSampling());
      ASSERT_OK(samples);
      sampled.push_back(FloatAt((*samples)[0].columns[0], 0));
    }
  });
  const absl::Status retried = writer->CreateItem("q", 1.0, columns, kTimeout);
  const absl::Status flushed = writer->Flush(0, kTimeout);
  sampler.join();
  EXPECT_OK(retried);
  EXPECT_OK(flushed);
  EXPECT_EQ(sampled, (std::vector<float>{0, 1, 2}));
}

TEST_F(TrajectoryWriterTest,
       BatchedWriterGivesEachEnvironmentItsOwnCellsAndEpisodes) {
  constexpr int kLanes = 3;
  auto writer = NewBatchedWriter(kLanes, /*keep_alive=*/2);
  ASSERT_NE(writer, nullptr);
  std::vector<int64_t> steps;
  for (int t = 0; t < 3; ++t) {
    // Environment b's value at step t: 10 * b + t.
    auto step =
        writer->AppendBatch({FloatBatch({0.f + t, 10.f + t, 20.f + t})});
    ASSERT_OK(step);
    steps.push_back(*step);
  }
  EXPECT_EQ(writer->num_columns(), 1);  // the environments share it
  const std::vector<int32_t> all = {0, 1, 2};
  // The last two steps of every environment; priorities follow the lanes.
  ASSERT_OK(writer->CreateItems("big", std::vector<double>{1, 2, 3},
                                {ItemColumn{0, {steps[1], steps[2]}, false}},
                                all, kTimeout));
  ASSERT_OK(writer->Flush(0, kTimeout));
  EXPECT_EQ(NumEpisodes("big"), kLanes);
  auto samples = client_->SampleItems("big", 3, BoundedSampling());
  ASSERT_OK(samples);
  for (const Sample& sample : *samples) {
    const TensorPayload& column = sample.columns[0];
    ASSERT_EQ(column.shape, (Shape{2, 1}));
    const int lane = static_cast<int>(sample.info.priority) - 1;
    EXPECT_EQ(FloatAt(column, 0), 10 * lane + 1);
    EXPECT_EQ(FloatAt(column, 1), 10 * lane + 2);
  }

  // Environment 1 ends its episode: its old cells are gone, the others' stay.
  const int32_t one = 1;
  ASSERT_OK(writer->EndLaneEpisodes(absl::MakeConstSpan(&one, 1), true));
  EXPECT_EQ(writer->LaneEpisodeSteps(), (std::vector<int32_t>{3, 0, 3}));
  auto step = writer->AppendBatch({FloatBatch({3, 13, 23})});
  ASSERT_OK(step);
  const absl::Status cleared =
      writer->CreateItems("big", std::vector<double>{1, 1, 1},
                          {ItemColumn{0, {steps[2], *step}, false}}, all);
  EXPECT_EQ(cleared.code(), absl::StatusCode::kInvalidArgument) << cleared;
  EXPECT_TRUE(absl::StrContains(cleared.message(), "environment 1")) << cleared;
  const std::vector<int32_t> others = {0, 2};
  ASSERT_OK(writer->CreateItems("big", std::vector<double>{1, 1},
                                {ItemColumn{0, {steps[2], *step}, false}},
                                others, kTimeout));
  ASSERT_OK(writer->CreateItems("big", std::vector<double>{1},
                                {ItemColumn{0, {*step}, true}},
                                absl::MakeConstSpan(&one, 1), kTimeout));
  ASSERT_OK(writer->Flush(0, kTimeout));
  // Nothing of the refused batch was queued: 3 + 2 + 1 items.
  EXPECT_EQ(TableSize("big"), 6);
  // Environment 1's new episode is a fourth episode.
  EXPECT_EQ(NumEpisodes("big"), kLanes + 1);
}

TEST_F(TrajectoryWriterTest, BatchedWriterRejectsBadBatchesAndPlainCalls) {
  auto writer = NewBatchedWriter(2, 1);
  ASSERT_NE(writer, nullptr);
  EXPECT_EQ(writer->AppendBatch({FloatBatch({1, 2, 3})}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(writer->AppendBatch({FloatStep(1)}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(writer->Append({FloatStep(1)}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  const int64_t step = *writer->AppendBatch({FloatBatch({1, 2})});
  EXPECT_EQ(writer->CreateItem("big", 1, {ItemColumn{0, {step}, true}}).code(),
            absl::StatusCode::kFailedPrecondition);
  const std::vector<ItemColumn> columns = {ItemColumn{0, {step}, true}};
  EXPECT_EQ(writer
                ->CreateItems("big", std::vector<double>{1, 1}, columns,
                              std::vector<int32_t>{1, 1})
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(writer
                ->CreateItems("big", std::vector<double>{1}, columns,
                              std::vector<int32_t>{2})
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(writer
                ->CreateItems("big", std::vector<double>{1}, columns,
                              std::vector<int32_t>{0, 1})
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      writer
          ->CreateItems("big", std::vector<double>{1},
                        {ItemColumn{1, {step}, true}}, std::vector<int32_t>{0})
          .code(),
      absl::StatusCode::kInvalidArgument);
  TrajectoryWriterOptions negative;
  negative.num_lanes = -1;
  EXPECT_FALSE(client_->NewTrajectoryWriter(negative).ok());
  // The writer is still usable after every refusal.
  ASSERT_OK(writer->CreateItems("big", std::vector<double>{1, 1}, columns,
                                std::vector<int32_t>{0, 1}, kTimeout));
  ASSERT_OK(writer->Flush(0, kTimeout));
  EXPECT_EQ(TableSize("big"), 2);
}

}  // namespace
}  // namespace reverb_tf
