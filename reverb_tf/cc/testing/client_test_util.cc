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
