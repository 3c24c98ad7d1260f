// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/wire/conversions.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "reverb_tf/cc/platform/status_macros.h"
#include "reverb_tf/cc/wire/table_messages.h"

namespace reverb_tf {
namespace {

void CallStatsToProto(const RateLimiterCallStats& stats,
                      schema::RateLimiterCallStats* out) {
  out->set_completed(stats.completed);
  out->set_limited(stats.limited);
  out->set_pending(stats.pending);
  out->set_completed_wait_time_s(
      absl::ToDoubleSeconds(stats.completed_wait_time));
}

RateLimiterCallStats CallStatsFromProto(
    const schema::RateLimiterCallStats& stats) {
  RateLimiterCallStats out;
  out.completed = stats.completed();
  out.limited = stats.limited();
  out.pending = stats.pending();
  out.completed_wait_time = absl::Seconds(stats.completed_wait_time_s());
  return out;
}

// The key under which rows [offset, offset + length) of lane chunk `key`
// travel in a sample response: distinct per run of rows, so two slices of
// one chunk are two chunks of the message unless they are the same rows. (A
// clash with another chunk's key in the same message is as unlikely as two
// writers' random keys clashing.)
ChunkKey RowsChunkKey(ChunkKey key, int32_t offset, int32_t length) {
  const uint64_t run =
      (static_cast<uint64_t>(static_cast<uint32_t>(offset)) << 32) |
      static_cast<uint32_t>(length);
  uint64_t z = key + 0x9e3779b97f4a7c15ULL * (run + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Writes rows [offset, offset + length) of `chunk` as chunk `key`; returns
// their bytes. Only an uncompressed fixed-size chunk can be cut: any other
// is written whole (offset 0, all its rows). Fails as Chunk::Read() does.
absl::StatusOr<int64_t> RowsToProto(const Chunk& chunk, ChunkKey key,
                                    int32_t offset, int32_t length,
                                    proto::Chunk* out) {
  ASSIGN_OR_RETURN(const ChunkBytes bytes, chunk.Read());
  const absl::string_view data = bytes.view();
  const bool whole = offset == 0 && length == chunk.num_steps();
  const size_t row_bytes = data.size() / static_cast<size_t>(chunk.num_steps());
  const absl::string_view rows =
      whole ? data
            : data.substr(row_bytes * static_cast<size_t>(offset),
                          row_bytes * static_cast<size_t>(length));
  out->set_key(key);
  out->set_episode_id(chunk.episode_id(offset));
  out->set_episode_step(chunk.episode_step());
  proto::Tensor* tensor = out->mutable_tensor();
  tensor->set_dtype(static_cast<int32_t>(chunk.dtype()));
  tensor->mutable_shape()->Assign(chunk.shape().begin(), chunk.shape().end());
  tensor->set_shape(0, length);
  tensor->set_compression(static_cast<uint32_t>(chunk.compression()));
  tensor->set_uncompressed_size(whole ? chunk.uncompressed_size()
                                      : static_cast<int64_t>(rows.size()));
  tensor->set_data(rows.data(), rows.size());
  return static_cast<int64_t>(rows.size());
}

// `status` of a chunk of item `key`, saying which item it is.
absl::Status ForItem(uint64_t key, const absl::Status& status) {
  return absl::Status(status.code(),
                      absl::StrCat("item ", key, ": ", status.message()));
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

absl::StatusOr<TensorPayload> PayloadFromProto(proto::Tensor* tensor) {
  if (!IsValidDType(tensor->dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid dtype ", tensor->dtype()));
  }
  if (tensor->compression() > static_cast<uint32_t>(Compression::kZstd)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown compression ", tensor->compression()));
  }
  TensorPayload payload;
  payload.dtype = static_cast<DType>(tensor->dtype());
  payload.shape.assign(tensor->shape().begin(), tensor->shape().end());
  payload.compression = static_cast<Compression>(tensor->compression());
  payload.uncompressed_size = tensor->uncompressed_size();
  payload.data.swap(*tensor->mutable_data());
  RETURN_IF_ERROR(payload.Validate());
  return payload;
}

void PayloadToProto(TensorPayload payload, proto::Tensor* tensor) {
  PayloadMetadataToProto(payload, tensor);
  tensor->mutable_data()->swap(payload.data);
}

void PayloadMetadataToProto(const TensorPayload& payload,
                            proto::Tensor* tensor) {
  tensor->set_dtype(static_cast<int32_t>(payload.dtype));
  tensor->mutable_shape()->Assign(payload.shape.begin(), payload.shape.end());
  tensor->set_compression(static_cast<uint32_t>(payload.compression));
  tensor->set_uncompressed_size(payload.uncompressed_size);
}

absl::StatusOr<TableOptions> TableOptionsFromConfig(
    const schema::PriorityTableCheckpoint& config) {
  return TableOptionsFromMessage(config);
}

void TableInfoToProto(const TableInfo& info, schema::TableInfo* out) {
  const TableOptions& options = info.options;
  out->set_name(options.name);
  SelectorToMessage(options.sampler, out->mutable_sampler_options());
  SelectorToMessage(options.remover, out->mutable_remover_options());
  out->set_max_size(options.max_size);
  out->set_max_times_sampled(options.max_times_sampled);
  if (options.signature.has_value()) {
    SignatureToMessage(*options.signature, out->mutable_signature());
  }
  out->set_current_size(info.current_size);
  out->set_num_unique_samples(info.num_unique_samples);
  out->set_num_episodes(info.num_episodes);
  out->set_num_deleted_episodes(info.num_deleted_episodes);
  out->set_sampler_total_weight(info.sampler_total_weight);
  out->set_sampler_min_item_weight(info.sampler_min_item_weight);
  // dm-reverb reports its per-table worker thread's times; reverb_tf's
  // tables have none, so the message is there and all zero.
  out->mutable_table_worker_time();
  schema::RateLimiterInfo* limiter = out->mutable_rate_limiter_info();
  RateLimiterToMessage(info.rate_limiter_info.options, limiter);
  limiter->set_inserts(info.rate_limiter_info.inserts);
  limiter->set_samples(info.rate_limiter_info.samples);
  limiter->set_deletes(info.rate_limiter_info.deletes);
  CallStatsToProto(info.rate_limiter_info.insert_stats,
                   limiter->mutable_insert_stats());
  CallStatsToProto(info.rate_limiter_info.sample_stats,
                   limiter->mutable_sample_stats());
}

std::string SerializeTableInfo(const TableInfo& info) {
  schema::TableInfo message;
  TableInfoToProto(info, &message);
  return message.SerializeAsString();
}

absl::StatusOr<TableInfo> TableInfoFromProto(const schema::TableInfo& proto) {
  TableInfo info;
  TableOptions& options = info.options;
  options.name = proto.name();
  ASSIGN_OR_RETURN(
      options.sampler,
      SelectorFromMessage(proto.sampler_options(), options.name, "sampler"));
  ASSIGN_OR_RETURN(
      options.remover,
      SelectorFromMessage(proto.remover_options(), options.name, "remover"));
  options.max_size = proto.max_size();
  options.max_times_sampled = proto.max_times_sampled();
  const schema::RateLimiterInfo& limiter = proto.rate_limiter_info();
  options.rate_limiter = RateLimiterFromMessage(limiter);
  if (proto.has_signature()) {
    options.signature = SignatureFromMessage(proto.signature());
  }
  RETURN_IF_ERROR(options.Validate());
  info.current_size = proto.current_size();
  info.num_unique_samples = proto.num_unique_samples();
  info.num_episodes = proto.num_episodes();
  info.num_deleted_episodes = proto.num_deleted_episodes();
  info.sampler_total_weight = proto.sampler_total_weight();
  info.sampler_min_item_weight = proto.sampler_min_item_weight();
  info.rate_limiter_info.options = options.rate_limiter;
  info.rate_limiter_info.inserts = limiter.inserts();
  info.rate_limiter_info.samples = limiter.samples();
  info.rate_limiter_info.deletes = limiter.deletes();
  info.rate_limiter_info.insert_stats =
      CallStatsFromProto(limiter.insert_stats());
  info.rate_limiter_info.sample_stats =
      CallStatsFromProto(limiter.sample_stats());
  return info;
}

namespace {

// `columns` as a trajectory over `chunks`; `key` names the item in errors.
absl::Status TrajectoryFromProto(
    const google::protobuf::RepeatedPtrField<proto::Column>& columns,
    const absl::flat_hash_map<ChunkKey, ChunkRef>& chunks, uint64_t key,
    Trajectory* trajectory) {
  trajectory->reserve(columns.size());
  for (const proto::Column& proto_column : columns) {
    SlicedColumn& column = trajectory->emplace_back();
    column.set_squeeze(proto_column.squeeze());
    for (const proto::Slice& slice : proto_column.slices()) {
      auto it = chunks.find(slice.chunk_key());
      if (it == chunks.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("item ", key, " references chunk ", slice.chunk_key(),
                         " which this stream has not sent or has released"));
      }
      column.add_slice(ChunkSlice{it->second, slice.offset(), slice.length()});
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Item> ItemFromProto(
    const proto::Item& proto_item,
    const absl::flat_hash_map<ChunkKey, ChunkRef>& chunks) {
  Item item;
  item.key = proto_item.key();
  item.priority = proto_item.priority();
  item.legacy_steps = proto_item.legacy_steps();
  item.unchecked = proto_item.unchecked();
  RETURN_IF_ERROR(TrajectoryFromProto(proto_item.columns(), chunks, item.key,
                                      &item.trajectory));
  return item;
}

absl::Status ItemsFromBatch(
    const proto::ItemBatch& batch,
    const absl::flat_hash_map<ChunkKey, ChunkRef>& chunks,
    std::vector<Item>* items) {
  const int n = batch.keys_size();
  if (batch.priorities_size() != n || batch.lanes_size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an item batch has ", n, " keys, ", batch.priorities_size(),
        " priorities and ", batch.lanes_size(), " lanes; they must match"));
  }
  if (n == 0) return absl::OkStatus();
  Trajectory shape;
  RETURN_IF_ERROR(
      TrajectoryFromProto(batch.columns(), chunks, batch.keys(0), &shape));
  int32_t last_offset = 0;  // the largest offset any lane moves on
  for (const SlicedColumn& column : shape) {
    for (const ChunkSlice& slice : column.slices()) {
      last_offset = std::max(last_offset, slice.offset);
    }
  }
  items->reserve(items->size() + n);
  for (int i = 0; i < n; ++i) {
    const int32_t lane = batch.lanes(i);
    if (lane < 0 || int64_t{last_offset} + lane > INT32_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat("item ", batch.keys(i), " of an item batch has lane ",
                       lane, ", which moves its slices outside [0, 2^31-1]"));
    }
    Item& item = items->emplace_back();
    item.key = batch.keys(i);
    item.priority = batch.priorities(i);
    item.unchecked = batch.unchecked();
    item.trajectory = shape;
    for (SlicedColumn& column : item.trajectory) {
      for (ChunkSlice& slice : column.mutable_slices()) slice.offset += lane;
    }
  }
  return absl::OkStatus();
}

void SpillStatsToProto(const ChunkStore::SpillStats& stats,
                       proto::SpillInfo* out) {
  out->set_dir(stats.dir);
  out->set_ram_bytes(stats.ram_bytes);
  out->set_disk_bytes(stats.disk_bytes);
  out->set_disk_file_bytes(stats.disk_file_bytes);
  out->set_spilled_chunks(stats.spilled_chunks);
  out->set_spilled_bytes(stats.spilled_bytes);
  out->set_ram_reads(stats.ram_reads);
  out->set_disk_reads(stats.disk_reads);
  out->set_disk_read_bytes(stats.disk_read_bytes);
  out->set_disk_read_seconds(stats.disk_read_seconds);
  out->set_compactions(stats.compactions);
  out->set_compacted_bytes(stats.compacted_bytes);
  out->set_last_error(stats.last_error);
  out->set_compaction_error(stats.compaction_error);
}

ChunkStore::SpillStats SpillStatsFromProto(const proto::SpillInfo& info) {
  ChunkStore::SpillStats stats;
  stats.dir = info.dir();
  stats.ram_bytes = info.ram_bytes();
  stats.disk_bytes = info.disk_bytes();
  stats.disk_file_bytes = info.disk_file_bytes();
  stats.spilled_chunks = info.spilled_chunks();
  stats.spilled_bytes = info.spilled_bytes();
  stats.ram_reads = info.ram_reads();
  stats.disk_reads = info.disk_reads();
  stats.disk_read_bytes = info.disk_read_bytes();
  stats.disk_read_seconds = info.disk_read_seconds();
  stats.compactions = info.compactions();
  stats.compacted_bytes = info.compacted_bytes();
  stats.last_error = info.last_error();
  stats.compaction_error = info.compaction_error();
  return stats;
}

SampleInfo SampleInfoFromProto(const proto::SampleInfo& proto) {
  SampleInfo info;
  info.key = proto.key();
  info.probability = proto.probability();
  info.table_size = proto.table_size();
  info.priority = proto.priority();
  info.times_sampled = proto.times_sampled();
  info.rate_limited = proto.rate_limited();
  info.table_weight = proto.table_weight();
  info.min_probability = proto.min_probability();
  return info;
}

absl::StatusOr<int64_t> SampleToProto(const SampledItem& sample,
                                      proto::SampleResponse* response,
                                      absl::flat_hash_set<ChunkKey>* sent) {
  int64_t bytes = 0;
  proto::SampledItem* out = response->add_items();
  proto::SampleInfo* info = out->mutable_info();
  info->set_key(sample.key);
  info->set_probability(sample.probability);
  info->set_table_size(sample.table_size);
  info->set_priority(sample.priority);
  info->set_times_sampled(sample.times_sampled);
  info->set_rate_limited(sample.rate_limited);
  info->set_table_weight(sample.table_weight);
  info->set_min_probability(sample.min_probability);
  for (const SlicedColumn& column : sample.trajectory) {
    proto::Column* out_column = out->add_columns();
    out_column->set_squeeze(column.squeeze());
    for (const ChunkSlice& slice : column.slices()) {
      proto::Slice* out_slice = out_column->add_slices();
      const Chunk& chunk = *slice.chunk;
      if (chunk.num_lanes() > 0 && chunk.compression() == Compression::kNone &&
          chunk.dtype() != DType::kString) {
        // A lane chunk holds every environment's rows, and a sample wants
        // one environment's: send those rows alone, as a chunk of their own.
        const ChunkKey key =
            RowsChunkKey(chunk.key(), slice.offset, slice.length);
        out_slice->set_chunk_key(key);
        out_slice->set_offset(0);
        out_slice->set_length(slice.length);
        if (sent->insert(key).second) {
          absl::StatusOr<int64_t> added = RowsToProto(
              chunk, key, slice.offset, slice.length, response->add_chunks());
          if (!added.ok()) return ForItem(sample.key, added.status());
          bytes += *added;
        }
        continue;
      }
      out_slice->set_chunk_key(chunk.key());
      out_slice->set_offset(slice.offset);
      out_slice->set_length(slice.length);
      if (sent->insert(chunk.key()).second) {
        absl::StatusOr<int64_t> added = RowsToProto(
            chunk, chunk.key(), 0, chunk.num_steps(), response->add_chunks());
        if (!added.ok()) return ForItem(sample.key, added.status());
        bytes += *added;
      }
    }
  }
  return bytes;
}

}  // namespace reverb_tf
