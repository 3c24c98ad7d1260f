// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/platform/process_memory.h"

#include <cstring>
#include <memory>

#include "gtest/gtest.h"

namespace reverb_tf {
namespace {

TEST(ProcessMemoryTest, ReadsThisProcesssSizes) {
  const std::optional<ProcessMemory> before = ReadProcessMemory();
  ASSERT_TRUE(before.has_value());
  EXPECT_GT(before->resident_bytes, 1 << 20);
  EXPECT_GE(before->mapped_bytes, before->resident_bytes);
  // 64 MiB more, touched: both grow by about that much.
  constexpr size_t kBytes = size_t{64} << 20;
  std::unique_ptr<char[]> block(new char[kBytes]);
  std::memset(block.get(), 1, kBytes);
  const std::optional<ProcessMemory> after = ReadProcessMemory();
  ASSERT_TRUE(after.has_value());
  EXPECT_GE(after->mapped_bytes - before->mapped_bytes, int64_t{60} << 20);
  EXPECT_GE(after->resident_bytes - before->resident_bytes, int64_t{60} << 20);
}

}  // namespace
}  // namespace reverb_tf
