// SPDX-License-Identifier: Apache-2.0
// Coverage-guided fuzzing (libFuzzer) of everything that decodes or
// validates bytes from the wire, in both directions:
//
//   first byte % 3 == 0: the rest is an InsertRequest, read as the server
//     reads it (which must agree with protobuf), run through the
//     server's insert path (payload checks, zstd verification, chunk store,
//     item resolution, table insert with signature and slice checks); every
//     stored item is then sampled, packed as the server packs it and decoded
//     as a client decodes it, so a chunk the server accepted can never fail
//     or lie on the client.
//   == 1: the rest is a SampleResponse from a hostile server, decoded by the
//     client, which must not trust any size in it.
//   == 2: the rest is a MutatePrioritiesRequest applied to tables holding
//     items with keys 1..8.
//
// Any crash, sanitizer report, a table whose invariants break, or a stored
// item the client cannot decode is a finding. Built and run by scripts/fuzz.sh
// (clang, -fsanitize=fuzzer).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/stubs/logging.h"
#include "google/protobuf/text_format.h"
#include "reverb_tf/cc/chunk_store.h"
#include "reverb_tf/cc/client/client.h"
#include "reverb_tf/cc/platform/cancellation.h"
#include "reverb_tf/cc/proto/service.pb.h"
#include "reverb_tf/cc/table.h"
#include "reverb_tf/cc/wire/conversions.h"
#include "reverb_tf/cc/wire/insert_request_reader.h"

namespace reverb_tf {
namespace {

// The tables requests name: "t" (no signature), "p" (prioritized) and "s"
// (a float32 [-1, 2] column and an int32 scalar column).
constexpr const char* kTables[] = {
    R"pb(table_name: "t"
         sampler { uniform: true }
         remover { fifo: true }
         max_size: 64
         rate_limiter {
           samples_per_insert: 1
           min_size_to_sample: 1
           min_diff: -1e300
           max_diff: 1e300
         })pb",
    R"pb(table_name: "p"
         sampler { prioritized { priority_exponent: 0.8 } }
         remover { lifo: true }
         max_size: 16
         max_times_sampled: 2
         rate_limiter {
           samples_per_insert: 1
           min_size_to_sample: 1
           min_diff: -1e300
           max_diff: 1e300
         })pb",
    R"pb(table_name: "s"
         sampler { fifo: true }
         remover { fifo: true }
         max_size: 16
         rate_limiter {
           samples_per_insert: 1
           min_size_to_sample: 1
           min_diff: -1e300
           max_diff: 1e300
         }
         signature {
           columns {
             name: "a"
             dtype: 1
             shape: [ -1, 2 ]
           }
           columns { name: "b" dtype: 3 }
         })pb",
};

std::vector<std::shared_ptr<Table>>& Tables() {
  static auto* tables = [] {
    DisableMutexDeadlockDetection();
    // Invalid UTF-8 in a string field is a parse failure protobuf also logs;
    // at fuzzing rates that log would drown the findings.
    google::protobuf::SetLogHandler(nullptr);
    auto* built = new std::vector<std::shared_ptr<Table>>();
    for (const char* text : kTables) {
      schema::PriorityTableCheckpoint config;
      if (!google::protobuf::TextFormat::ParseFromString(text, &config))
        std::abort();
      auto options = TableOptionsFromConfig(config);
      if (!options.ok()) std::abort();
      auto table = Table::Create(*options, /*seed=*/1);
      if (!table.ok()) std::abort();
      built->push_back(*std::move(table));
    }
    return built;
  }();
  return *tables;
}

std::shared_ptr<Table> FindTable(const std::string& name) {
  for (const auto& table : Tables()) {
    if (table->name() == name) return table;
  }
  return nullptr;
}

// A server-accepted item the client cannot decode is a bug, not a status.
void DecodeAsAClientWould(Table& table) {
  auto samples = table.Sample(4, absl::ZeroDuration());
  if (!samples.ok()) return;
  proto::SampleResponse response;
  absl::flat_hash_set<ChunkKey> sent;
  for (const SampledItem& sample : *samples)
    SampleToProto(sample, &response, &sent).IgnoreError();
  std::vector<Sample> decoded;
  absl::Status status = DecodeSampleResponse(&response, &decoded);
  if (!status.ok()) {
    std::fprintf(stderr, "stored item does not decode: %s\n",
                 status.ToString().c_str());
    std::abort();
  }
}

// Fails loudly on broken invariants; empties the tables (bounded memory
// across runs).
void CheckAndReset() {
  for (const auto& table : Tables()) {
    if (absl::Status status = table->CheckInvariants(); !status.ok()) {
      std::fprintf(stderr, "table %s: %s\n", table->name().c_str(),
                   status.ToString().c_str());
      std::abort();
    }
    DecodeAsAClientWould(*table);
    table->Reset().IgnoreError();  // no journal: cannot fail
  }
}

// The server's store: one for all inputs, so that chunk bytes land in
// buffers of earlier inputs' chunks.
ChunkStore& Store() {
  static ChunkStore* const store = [] {
    auto* store = new ChunkStore();
    store->RecycleBuffers(int64_t{64} << 20);
    return store;
  }();
  return *store;
}

void Insert(const uint8_t* data, size_t size) {
  // The server's reader (recycled buffers, input in pieces as gRPC's slices)
  // must read exactly what protobuf reads.
  proto::InsertRequest expected;
  const bool parsed = expected.ParseFromArray(data, static_cast<int>(size));
  proto::InsertRequest request;
  google::protobuf::io::ArrayInputStream input(data, static_cast<int>(size),
                                               1 + static_cast<int>(size % 61));
  ChunkStore& store = Store();
  const bool read = ReadInsertRequest(
      &input, &request, [&](size_t n) { return store.TakeBuffer(n); });
  // The server's look before it reads: it must not fail on any bytes.
  google::protobuf::io::ArrayInputStream scan(data, static_cast<int>(size));
  const bool may_hold_large_chunks = MayHoldLargeChunks(&scan);
  if (read != parsed ||
      (read && request.SerializeAsString() != expected.SerializeAsString())) {
    std::fprintf(stderr,
                 "ReadInsertRequest %s what protobuf %s (large chunks: %s)\n",
                 read ? "read" : "refused", parsed ? "read" : "refused",
                 may_hold_large_chunks ? "maybe" : "no");
    std::abort();
  }
  if (!read) return;
  absl::flat_hash_map<ChunkKey, ChunkRef> chunks;
  for (proto::Chunk& proto_chunk : *request.mutable_chunks()) {
    auto payload = PayloadFromProto(proto_chunk.mutable_tensor());
    if (!payload.ok() || !VerifyCompressed(*payload).ok()) return;
    auto chunk = store.Insert(proto_chunk.key(), proto_chunk.episode_id(),
                              proto_chunk.episode_step(), *std::move(payload),
                              proto_chunk.lane_episode_ids());
    if (!chunk.ok()) return;
    chunks[proto_chunk.key()] = *std::move(chunk);
  }
  for (const proto::Item& proto_item : request.items()) {
    std::shared_ptr<Table> table = FindTable(proto_item.table());
    if (table == nullptr) continue;
    auto item = ItemFromProto(proto_item, chunks);
    if (!item.ok()) continue;
    table->InsertOrAssign(*std::move(item), absl::ZeroDuration()).IgnoreError();
  }
  for (const proto::ItemBatch& batch : request.item_batches()) {
    std::shared_ptr<Table> table = FindTable(batch.table());
    if (table == nullptr) continue;
    std::vector<Item> items;
    ItemsFromBatch(batch, chunks, &items).IgnoreError();
    int64_t stored = 0;
    table->InsertAvailable(absl::MakeSpan(items), &stored).IgnoreError();
  }
  CheckAndReset();
}

void DecodeHostileResponse(const uint8_t* data, size_t size) {
  proto::SampleResponse response;
  if (!response.ParseFromArray(data, static_cast<int>(size))) return;
  std::vector<Sample> samples;
  DecodeSampleResponse(&response, &samples).IgnoreError();
}

void Mutate(const uint8_t* data, size_t size) {
  proto::MutatePrioritiesRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return;
  std::shared_ptr<Table> table = FindTable(request.table());
  if (table == nullptr || request.keys_size() != request.priorities_size())
    return;
  // Items 1..8, one float32 [1, 2] step each (what "s" expects in column 0
  // is checked by its signature, so "s" gets none).
  ChunkStore store;
  std::string bytes(8, '\0');
  auto payload = MakePayload(DType::kFloat, {1, 2}, bytes);
  if (!payload.ok()) std::abort();
  auto chunk = store.Insert(1, 0, 0, *std::move(payload));
  if (!chunk.ok()) std::abort();
  for (const auto& each : Tables()) {
    if (each->name() == "s") continue;
    for (Key key = 1; key <= 8; ++key) {
      Item item;
      item.key = key;
      item.priority = static_cast<double>(key);
      item.trajectory.push_back(
          SlicedColumn{{ChunkSlice{*chunk, 0, 1}}, false});
      if (!each->InsertOrAssign(std::move(item), absl::ZeroDuration()).ok())
        std::abort();
    }
  }
  std::vector<std::pair<Key, double>> updates;
  for (int i = 0; i < request.keys_size(); ++i) {
    updates.emplace_back(request.keys(i), request.priorities(i));
  }
  table
      ->MutatePriorities(updates, absl::MakeConstSpan(request.deletes().data(),
                                                      request.deletes_size()))
      .IgnoreError();
  CheckAndReset();
}

}  // namespace
}  // namespace reverb_tf

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  switch (data[0] % 3) {
    case 0:
      reverb_tf::Insert(data + 1, size - 1);
      break;
    case 1:
      reverb_tf::DecodeHostileResponse(data + 1, size - 1);
      break;
    default:
      reverb_tf::Mutate(data + 1, size - 1);
  }
  return 0;
}
