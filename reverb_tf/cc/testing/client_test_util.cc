// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/testing/client_test_util.h"

#include "gtest/gtest.h"

namespace reverb_tf::testing {

std::unique_ptr<TrajectoryWriter> NewWriter(Client& client, int keep_alive) {
  TrajectoryWriterOptions options;
  options.num_keep_alive_refs = keep_alive;
  auto writer = client.NewTrajectoryWriter(options);
  if (!writer.ok()) std::abort();
  return *std::move(writer);
}

int64_t ActiveStreams(const ReplayServer& server) {
  const std::string text = server.MetricsText();
  const std::string name = "\nreverb_tf_active_streams ";
  const size_t at = text.find(name);
  if (at == std::string::npos) return -1;
  return std::stoll(text.substr(at + name.size()));
}

int64_t AwaitActiveStreams(const ReplayServer& server, int64_t want) {
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  int64_t count = ActiveStreams(server);
  while (count != want && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
    count = ActiveStreams(server);
  }
  return count;
}

int64_t TableSize(Client& client, const std::string& name) {
  auto tables = client.ServerInfo(absl::Seconds(20));
  EXPECT_TRUE(tables.ok()) << tables.status();
  if (!tables.ok()) return -1;
  for (const TableInfo& info : *tables) {
    if (info.options.name == name) return info.current_size;
  }
  ADD_FAILURE() << "the server has no table '" << name << "'";
  return -1;
}

}  // namespace reverb_tf::testing
