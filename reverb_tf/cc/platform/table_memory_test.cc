// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/platform/table_memory.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace reverb_tf {
namespace {

// kB of transparent huge pages in the mapping that starts at `block`, from
// /proc/self/smaps; -1 if there is no such mapping.
int64_t AnonHugePagesKb(const void* block) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_block = false;
  while (std::getline(smaps, line)) {
    uintptr_t start = 0, end = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> start >> dash >> end && dash == '-') {
      in_block = start == reinterpret_cast<uintptr_t>(block);
      continue;
    }
    if (in_block && line.rfind("AnonHugePages:", 0) == 0) {
      return std::stoll(line.substr(std::strlen("AnonHugePages:")));
    }
  }
  return -1;
}

bool TransparentHugePagesOn() {
  std::ifstream setting("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string text((std::istreambuf_iterator<char>(setting)),
                   std::istreambuf_iterator<char>());
  return !text.empty() && text.find("[never]") == std::string::npos;
}

TEST(TableMemoryTest, SmallBlocksComeFromTheHeapAndBigOnesAreMappedAligned) {
  const int64_t before = MappedTableBytes();
  void* small = AllocateTableMemory(1000);
  EXPECT_EQ(MappedTableBytes(), before);
  std::memset(small, 1, 1000);
  FreeTableMemory(small, 1000);

  const size_t bytes = 3 * kHugeBlockBytes + 17;
  auto* big = static_cast<unsigned char*>(AllocateTableMemory(bytes));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big) % kHugeBlockBytes, 0u);
  EXPECT_EQ(MappedTableBytes(),
            before + static_cast<int64_t>(3 * kHugeBlockBytes + 4096));
  std::memset(big, 7, bytes);  // all of it is writable
  EXPECT_EQ(big[bytes - 1], 7);
  FreeTableMemory(big, bytes);
  EXPECT_EQ(MappedTableBytes(), before);
  FreeTableMemory(nullptr, bytes);  // like operator delete, a no-op
}

TEST(TableMemoryTest, BigBlocksGetHugePagesWhereTheKernelOffersThem) {
  const size_t bytes = 8 * kHugeBlockBytes;
  auto* block = static_cast<unsigned char*>(AllocateTableMemory(bytes));
  std::memset(block, 1, bytes);
  const int64_t huge_kb = AnonHugePagesKb(block);
  FreeTableMemory(block, bytes);
  ASSERT_GE(huge_kb, 0) << "the block is not a mapping of its own";
  if (TransparentHugePagesOn()) {
    EXPECT_GT(huge_kb, 0)
        << "no huge page although transparent huge pages are on";
  }
}

TEST(TableMemoryTest, MapsAndVectorsGrowShrinkAndGiveTheirMemoryBack) {
  const int64_t before = MappedTableBytes();
  {
    TableMap<uint64_t, uint64_t> map;
    TableVector<double> vector;
    for (uint64_t key = 0; key < 400000; ++key) {
      map[key * 7919] = key;
      vector.push_back(static_cast<double>(key));
    }
    EXPECT_GT(MappedTableBytes(), before);
    for (uint64_t key = 0; key < 400000; key += 997) {
      ASSERT_EQ(map.at(key * 7919), key);
      ASSERT_EQ(vector[key], static_cast<double>(key));
    }
    TableMap<uint64_t, uint64_t> moved = std::move(map);
    EXPECT_EQ(moved.size(), 400000u);
  }
  EXPECT_EQ(MappedTableBytes(), before);
}

}  // namespace
}  // namespace reverb_tf
