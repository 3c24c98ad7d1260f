// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/checkpointing/record_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "reverb_tf/cc/testing/status_matchers.h"

namespace reverb_tf {
namespace {

struct Entry {
  uint8_t type;
  std::string payload;
};

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

std::string RandomBytes(size_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string bytes(size, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  return bytes;
}

void Write(const std::string& path, const std::vector<Entry>& entries,
           bool compressible = true) {
  auto writer = RecordWriter::Create(path);
  ASSERT_OK(writer);
  for (const Entry& entry : entries) {
    // Split every payload into head and body to exercise both parts.
    const size_t half = entry.payload.size() / 2;
    ASSERT_OK((*writer)->Add(
        entry.type, absl::string_view(entry.payload).substr(0, half),
        absl::string_view(entry.payload).substr(half), compressible));
  }
  ASSERT_OK((*writer)->Close());
}

absl::StatusOr<std::vector<Entry>> ReadAll(const std::string& path) {
  auto reader = RecordReader::Open(path);
  if (!reader.ok()) return reader.status();
  std::vector<Entry> entries;
  while (true) {
    Entry entry;
    absl::string_view payload;
    auto more = (*reader)->Next(&entry.type, &payload);
    if (!more.ok()) return more.status();
    if (!*more) return entries;
    entry.payload = std::string(payload);
    entries.push_back(std::move(entry));
  }
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void Spit(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// Small entries packed into several records, a large compressible one and a
// large incompressible one (each in a record of its own).
std::vector<Entry> MixedEntries() {
  std::vector<Entry> entries;
  for (int i = 0; i < 5000; ++i) {
    entries.push_back(
        {static_cast<uint8_t>(1 + i % 3),
         absl::StrCat("entry ", i, " ", std::string(i % 300, 'x'))});
  }
  entries.push_back({7, std::string(3 << 20, 'z')});
  entries.push_back({8, RandomBytes(2 << 20, 1)});
  entries.push_back({9, ""});
  return entries;
}

TEST(RecordFileTest, RoundTripsEntriesOfEverySize) {
  const std::string path = TempPath("round_trip.rtf");
  const std::vector<Entry> entries = MixedEntries();
  Write(path, entries);
  auto read = ReadAll(path);
  ASSERT_OK(read);
  ASSERT_EQ(read->size(), entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    EXPECT_EQ((*read)[i].type, entries[i].type) << i;
    EXPECT_EQ((*read)[i].payload, entries[i].payload) << i;
  }
  // Repetitive entries are compressed: the file is far smaller than its data.
  struct stat info;
  ASSERT_EQ(::stat(path.c_str(), &info), 0);
  size_t raw = 0;
  for (const Entry& entry : entries) raw += entry.payload.size();
  EXPECT_LT(info.st_size, raw / 2 + (2 << 20));
}

TEST(RecordFileTest, IncompressibleEntriesAreStoredAsIs) {
  const std::string path = TempPath("stored.rtf");
  const std::string data = RandomBytes(3 << 20, 2);
  Write(path, {{1, data}}, /*compressible=*/false);
  struct stat info;
  ASSERT_EQ(::stat(path.c_str(), &info), 0);
  EXPECT_LT(static_cast<size_t>(info.st_size), data.size() + 100);
  auto read = ReadAll(path);
  ASSERT_OK(read);
  ASSERT_EQ(read->size(), 1u);
  EXPECT_EQ((*read)[0].payload, data);
}

TEST(RecordFileTest, EveryTruncationIsReportedOrEndsAtARecordBoundary) {
  const std::string path = TempPath("truncate_src.rtf");
  std::vector<Entry> entries;
  for (int i = 0; i < 60; ++i) entries.push_back({1, RandomBytes(20000, i)});
  Write(path, entries, /*compressible=*/false);
  const std::string bytes = Slurp(path);
  const std::string cut = TempPath("truncated.rtf");
  int reported = 0;
  for (size_t size = 0; size < bytes.size(); size += 997) {
    Spit(cut, bytes.substr(0, size));
    auto read = ReadAll(cut);
    if (read.ok()) {
      // A cut exactly between records reads as a shorter file; the
      // checkpoint's end entry catches that one level up.
      EXPECT_LT(read->size(), entries.size());
      for (size_t i = 0; i < read->size(); ++i)
        EXPECT_EQ((*read)[i].payload, entries[i].payload);
      continue;
    }
    ++reported;
    EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss)
        << read.status();
    EXPECT_NE(read.status().message().find(cut), std::string::npos)
        << read.status();
  }
  EXPECT_GT(reported, 0);
}

TEST(RecordFileTest, EveryFlippedBitIsDetected) {
  const std::string path = TempPath("flip_src.rtf");
  std::vector<Entry> entries;
  for (int i = 0; i < 40; ++i)
    entries.push_back({2, absl::StrCat("payload number ", i)});
  entries.push_back({3, RandomBytes(RecordWriter::kTargetRecordBytes + 10, 3)});
  Write(path, entries);
  const std::string bytes = Slurp(path);
  const std::string damaged = TempPath("flipped.rtf");
  std::mt19937 rng(7);
  for (size_t i = 0; i < bytes.size(); i += (i < 4096 ? 1 : 4099)) {
    std::string copy = bytes;
    copy[i] = static_cast<char>(copy[i] ^ (1 << (rng() % 8)));
    Spit(damaged, copy);
    auto read = ReadAll(damaged);
    EXPECT_FALSE(read.ok())
        << "flipping a bit of byte " << i << " went unnoticed";
    if (!read.ok()) {
      EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss)
          << read.status();
    }
  }
}

TEST(RecordFileTest, RejectsFilesThatAreNotCheckpoints) {
  const std::string path = TempPath("not_a_checkpoint.rtf");
  Spit(path, "hello, this is some text file and not a checkpoint");
  auto read = ReadAll(path);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(read.status().message().find("not a reverb_tf checkpoint"),
            std::string::npos);
  EXPECT_EQ(RecordReader::Open(TempPath("missing.rtf")).status().code(),
            absl::StatusCode::kNotFound);
}

// The classic ceiling of protobuf-based formats is 2 GiB per message; ours
// has none. Writes (sparse-cheap, stored) entries past 2.5 GiB and reads the
// last ones back.
TEST(RecordFileTest, FilesBeyondTwoGibibytes) {
  const std::string path = TempPath("large.rtf");
  const std::string block = RandomBytes(64 << 20, 9);
  const int blocks = 40;  // 2.5 GiB
  {
    auto writer = RecordWriter::Create(path);
    ASSERT_OK(writer);
    for (int i = 0; i < blocks; ++i) {
      const std::string head = absl::StrCat("block ", i);
      ASSERT_OK((*writer)->Add(1, head, block, /*compressible=*/false));
    }
    ASSERT_OK((*writer)->Add(2, "last"));
    ASSERT_OK((*writer)->Close());
    EXPECT_GT((*writer)->bytes_written(), uint64_t{5} << 29);
  }
  auto reader = RecordReader::Open(path);
  ASSERT_OK(reader);
  uint8_t type;
  absl::string_view payload;
  for (int i = 0; i < blocks; ++i) {
    auto more = (*reader)->Next(&type, &payload);
    ASSERT_OK(more);
    ASSERT_TRUE(*more);
    ASSERT_EQ(payload.substr(0, payload.size() - block.size()),
              absl::StrCat("block ", i));
  }
  auto more = (*reader)->Next(&type, &payload);
  ASSERT_OK(more);
  ASSERT_TRUE(*more);
  EXPECT_EQ(type, 2);
  EXPECT_EQ(payload, "last");
  more = (*reader)->Next(&type, &payload);
  ASSERT_OK(more);
  EXPECT_FALSE(*more);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace reverb_tf
