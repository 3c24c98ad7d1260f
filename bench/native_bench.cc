// SPDX-License-Identifier: Apache-2.0
// Native ceiling of the hot paths, without Python: a server in this process
// and the C++ client over loopback gRPC. Compare with bench/python_bench.py
// and the Python-level benchmarks to see what the Python layer costs.
//
//   native_bench                          the server's hot paths
//   native_bench --spill_reads DIR [GB]   the disk tier's two ways to read a
//       record back: SpillStore::Read (from its mapping of the segment) and
//       pread (ReadSpillRecord), each with its checksum, over GB (default 2)
//       of 28,224-byte frames written to DIR, at random, page cache warm
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "reverb_tf/cc/client/client.h"
#include "reverb_tf/cc/service/server.h"
#include "reverb_tf/cc/spill_store.h"

namespace {

using namespace reverb_tf;  // NOLINT: a short benchmark program.

TensorPayload Filled(DType dtype, Shape shape, int64_t bytes) {
  return *MakePayload(dtype, std::move(shape), std::string(bytes, '\1'));
}

// us per record of `read` over `records` at random, for about `seconds`,
// into a batch-sized buffer as a sampler's rows.
template <typename ReadFn>
double UsPerRecord(const std::vector<SpillLocation>& records, ReadFn read,
                   double seconds) {
  constexpr int kRows = 192;  // 64 items of 3 frames
  std::vector<char> batch(kRows * static_cast<size_t>(records[0].size));
  std::mt19937_64 random(1);
  int64_t n = 0;
  const absl::Time start = absl::Now();
  while (absl::Now() - start < absl::Seconds(seconds)) {
    for (int row = 0; row < kRows; ++row) {
      const SpillLocation& where = records[random() % records.size()];
      if (!read(where, batch.data() + row * where.size)) std::abort();
    }
    n += kRows;
  }
  return absl::ToDoubleMicroseconds(absl::Now() - start) / n;
}

int SpillReads(const std::string& dir, double gb) {
  constexpr size_t kFrame = 84 * 84 * 4;
  auto store = SpillStore::Open(dir);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 1;
  }
  std::vector<SpillLocation> records;
  std::string frame(kFrame, '\0');
  std::mt19937_64 random(7);
  for (int64_t i = 0; i < static_cast<int64_t>(gb * 1e9 / kFrame); ++i) {
    for (size_t j = 0; j < kFrame; j += 8) {
      const uint64_t word = random();
      std::memcpy(&frame[j], &word, 8);
    }
    records.push_back(*(*store)->Append(frame));
  }
  std::vector<int> fds;
  for (uint32_t s = 0; s <= records.back().segment; ++s) {
    fds.push_back(open((*store)->SegmentPath(s).c_str(), O_RDONLY));
  }
  const auto mapped = [&](const SpillLocation& where, char* out) {
    return (*store)->Read(where, out).ok();
  };
  const auto pread = [&](const SpillLocation& where, char* out) {
    return ReadSpillRecord(fds[where.segment],
                           (*store)->SegmentPath(where.segment), where, out)
        .ok();
  };
  UsPerRecord(records, mapped, 2);  // maps every page once
  for (int round = 0; round < 3; ++round) {
    std::printf("spill reads, %.1f GB: mapping %.2f us/frame, pread %.2f\n", gb,
                UsPerRecord(records, mapped, 3),
                UsPerRecord(records, pread, 3));
  }
  for (int fd : fds) close(fd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "--spill_reads") == 0) {
    return SpillReads(argv[2], argc >= 4 ? std::atof(argv[3]) : 2.0);
  }
  TableOptions options;
  options.name = "t";
  options.sampler = {SelectorOptions::Kind::kUniform, 1};
  options.remover = {SelectorOptions::Kind::kFifo, 1};
  options.max_size = 1 << 20;
  options.rate_limiter = RateLimiterOptions::MinSize(1);
  auto server = *ReplayServer::StartFromOptions({options}, ServerOptions());
  auto client = *Client::Create(absl::StrCat("localhost:", server->port()));

  constexpr int kItems = 200000;
  auto writer = *client->NewTrajectoryWriter(TrajectoryWriterOptions());
  absl::Time start = absl::Now();
  for (int i = 0; i < kItems; ++i) {
    auto step = *writer->Append({Filled(DType::kFloat, {4}, 16),
                                 Filled(DType::kInt32, {}, 4),
                                 Filled(DType::kFloat, {}, 4)});
    if (!writer
             ->CreateItem(
                 "t", 1.0,
                 {ItemColumn{0, {step}, true}, ItemColumn{1, {step}, true},
                  ItemColumn{2, {step}, true}})
             .ok())
      return 1;
    if (i % 24 == 23 && !writer->Flush(24, absl::Seconds(30)).ok()) return 1;
  }
  if (!writer->Flush(0, absl::Seconds(30)).ok()) return 1;
  double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::printf("insert small items: %.0f items/s\n", kItems / seconds);

  start = absl::Now();
  int64_t sampled = 0;
  while (absl::Now() - start < absl::Seconds(2)) {
    sampled += static_cast<int64_t>(
        client->SampleItems("t", 256, SamplerOptions())->size());
  }
  std::printf("sample (256 per call): %.0f items/s\n",
              sampled / absl::ToDoubleSeconds(absl::Now() - start));

  auto keys = *client->SampleItems("t", 256, SamplerOptions());
  std::vector<std::pair<Key, double>> updates;
  for (const Sample& s : keys) updates.push_back({s.info.key, 2.0});
  start = absl::Now();
  int64_t updated = 0;
  while (absl::Now() - start < absl::Seconds(2)) {
    updated +=
        client->MutatePriorities("t", updates, {}, absl::Seconds(10))->updated;
  }
  std::printf("priority updates (256 per call): %.0f keys/s\n",
              updated / absl::ToDoubleSeconds(absl::Now() - start));
  start = absl::Now();
  int64_t calls = 0;
  while (absl::Now() - start < absl::Seconds(2)) {
    if (!client->ServerInfo(absl::Seconds(10)).ok()) return 1;
    ++calls;
  }
  std::printf("unary round trip (server_info): %.0f us\n",
              absl::ToDoubleMicroseconds(absl::Now() - start) / calls);
  server->Stop();
  return 0;
}
