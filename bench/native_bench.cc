// SPDX-License-Identifier: Apache-2.0
// Native ceiling of the hot paths, without Python: a server in this process
// and the C++ client over loopback gRPC. Compare with bench/python_bench.py
// and the Python-level benchmarks to see what the Python layer costs.
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "reverb_tf/cc/client/client.h"
#include "reverb_tf/cc/service/server.h"

namespace {

using namespace reverb_tf;  // NOLINT: a short benchmark program.

TensorPayload Filled(DType dtype, Shape shape, int64_t bytes) {
  return *MakePayload(dtype, std::move(shape), std::string(bytes, '\1'));
}

}  // namespace

int main() {
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
