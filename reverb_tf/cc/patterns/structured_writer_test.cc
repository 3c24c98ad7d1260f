// SPDX-License-Identifier: Apache-2.0
// StructuredWriter end to end: a ReplayServer on a free port, items created
// by configs and sampled back.
#include "reverb_tf/cc/patterns/structured_writer.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "reverb_tf/cc/client/client.h"
#include "reverb_tf/cc/proto/patterns_cc.pb.h"
#include "reverb_tf/cc/service/server.h"
#include "reverb_tf/cc/testing/status_matchers.h"
#include "reverb_tf/cc/testing/test_util.h"

namespace reverb_tf {
namespace {

using ::reverb_tf::testing::Fifo;
using ::reverb_tf::testing::MakeTableOptions;

constexpr absl::Duration kTimeout = absl::Seconds(20);

TensorPayload Int32(int32_t value) {
  std::string bytes(sizeof(value), '\0');
  std::memcpy(bytes.data(), &value, sizeof(value));
  return *MakePayload(DType::kInt32, {}, bytes);
}

std::vector<int32_t> Values(const TensorPayload& payload) {
  std::vector<int32_t> values(payload.data.size() / sizeof(int32_t));
  std::memcpy(values.data(), payload.data.data(), payload.data.size());
  return values;
}

class StructuredWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = ReplayServer::StartFromOptions(
        {MakeTableOptions("t", Fifo(), Fifo(), 100,
                          RateLimiterOptions::MinSize(1),
                          /*max_times_sampled=*/1)},
        ServerOptions());
    ASSERT_OK(server);
    server_ = *std::move(server);
    client_ = *Client::Create(absl::StrCat("localhost:", server_->port()),
                              ClientOptions());
  }

  std::vector<Sample> SampleAll(int n) {
    SamplerOptions options;
    options.rate_limiter_timeout = kTimeout;
    auto samples = client_->SampleItems("t", n, options);
    EXPECT_OK(samples);
    return samples.ok() ? *std::move(samples) : std::vector<Sample>();
  }

  std::unique_ptr<ReplayServer> server_;
  std::unique_ptr<Client> client_;
};

// Transitions (a[-2:], b[-1]) with b missing in one step; priority 2.
TEST_F(StructuredWriterTest, CreatesItemsOfAppliedConfigs) {
  patterns::StructuredWriterConfig config;
  config.add_flat()->set_start(-2);
  auto* last_b = config.add_flat();
  last_b->set_flat_source_index(1);
  last_b->set_stop(-1);
  config.set_table("t");
  config.mutable_priority()->mutable_constant_fn()->set_value(2.0);
  auto writer =
      StructuredWriter::Create(*client_, {config.SerializeAsString()});
  ASSERT_OK(writer);
  for (int i = 0; i < 4; ++i) {
    std::vector<std::optional<TensorPayload>> step = {Int32(i), Int32(10 * i)};
    if (i == 2) step[1].reset();
    ASSERT_OK((*writer)->Append(std::move(step), false));
  }
  ASSERT_OK((*writer)->Flush(0, kTimeout));
  std::vector<Sample> samples = SampleAll(2);
  ASSERT_EQ(samples.size(), 2);
  EXPECT_EQ(Values(samples[0].columns[0]), std::vector<int32_t>({0, 1}));
  EXPECT_EQ(Values(samples[0].columns[1]), std::vector<int32_t>({10}));
  EXPECT_TRUE(samples[0].squeezed[1]);
  EXPECT_FALSE(samples[0].squeezed[0]);
  EXPECT_EQ(Values(samples[1].columns[0]), std::vector<int32_t>({2, 3}));
  EXPECT_EQ(samples[1].info.priority, 2.0);
}

TEST_F(StructuredWriterTest, EndEpisodeConfigsAndErrors) {
  patterns::StructuredWriterConfig config;
  config.add_flat()->set_start(-2);
  config.set_table("t");
  config.mutable_priority()->mutable_constant_fn()->set_value(1.0);
  auto* end = config.add_conditions();
  end->set_is_end_episode(true);
  end->set_eq(1);
  auto writer =
      StructuredWriter::Create(*client_, {config.SerializeAsString()});
  ASSERT_OK(writer);
  std::vector<std::optional<TensorPayload>> first = {Int32(5)};
  ASSERT_OK((*writer)->Append(std::move(first), true));
  std::vector<std::optional<TensorPayload>> again = {Int32(6)};
  EXPECT_EQ((*writer)->Append(std::move(again), false).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_OK((*writer)->Append({std::nullopt}, false));
  std::vector<std::optional<TensorPayload>> second = {Int32(7)};
  ASSERT_OK((*writer)->Append(std::move(second), false));
  ASSERT_OK((*writer)->EndEpisode(true, kTimeout));
  std::vector<Sample> samples = SampleAll(1);
  ASSERT_EQ(samples.size(), 1);
  EXPECT_EQ(Values(samples[0].columns[0]), std::vector<int32_t>({5, 7}));

  EXPECT_EQ(StructuredWriter::Create(*client_, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  config.mutable_flat(0)->set_start(1);
  EXPECT_EQ(StructuredWriter::Create(*client_, {config.SerializeAsString()})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace reverb_tf
