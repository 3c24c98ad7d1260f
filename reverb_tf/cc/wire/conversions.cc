// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/wire/conversions.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "reverb_tf/cc/platform/status_macros.h"

namespace reverb_tf {
namespace {

absl::StatusOr<SelectorOptions> SelectorFromConfig(
    const proto::SelectorConfig& config, const std::string& table,
    const char* role) {
  SelectorOptions options;
  switch (config.kind_case()) {
    case proto::SelectorConfig::kUniform:
      options.kind = SelectorOptions::Kind::kUniform;
      break;
    case proto::SelectorConfig::kPrioritized:
      options.kind = SelectorOptions::Kind::kPrioritized;
      options.priority_exponent = config.prioritized().priority_exponent();
      break;
    case proto::SelectorConfig::kFifo:
      options.kind = SelectorOptions::Kind::kFifo;
      break;
    case proto::SelectorConfig::kLifo:
      options.kind = SelectorOptions::Kind::kLifo;
      break;
    case proto::SelectorConfig::kHeap:
      options.kind = config.heap().min_heap() ? SelectorOptions::Kind::kMinHeap
                                              : SelectorOptions::Kind::kMaxHeap;
      break;
    case proto::SelectorConfig::KIND_NOT_SET:
      return absl::InvalidArgumentError(absl::StrCat(
          "table '", table, "': ", role,
          " must be one of uniform, prioritized, fifo, lifo, heap"));
  }
  return options;
}

proto::SelectorConfig SelectorToConfig(const SelectorOptions& options) {
  proto::SelectorConfig config;
  switch (options.kind) {
    case SelectorOptions::Kind::kUniform:
      config.set_uniform(true);
      break;
    case SelectorOptions::Kind::kPrioritized:
      config.mutable_prioritized()->set_priority_exponent(
          options.priority_exponent);
      break;
    case SelectorOptions::Kind::kFifo:
      config.set_fifo(true);
      break;
    case SelectorOptions::Kind::kLifo:
      config.set_lifo(true);
      break;
    case SelectorOptions::Kind::kMinHeap:
      config.mutable_heap()->set_min_heap(true);
      break;
    case SelectorOptions::Kind::kMaxHeap:
      config.mutable_heap()->set_min_heap(false);
      break;
  }
  return config;
}

void CallStatsToProto(const RateLimiterCallStats& stats,
                      proto::CallStats* out) {
  out->set_completed(stats.completed);
  out->set_limited(stats.limited);
  out->set_pending(stats.pending);
  out->set_completed_wait_time_s(
      absl::ToDoubleSeconds(stats.completed_wait_time));
}

void RateLimiterToConfig(const RateLimiterOptions& options,
                         proto::RateLimiterConfig* out) {
  out->set_samples_per_insert(options.samples_per_insert);
  out->set_min_size_to_sample(options.min_size_to_sample);
  out->set_min_diff(options.min_diff);
  out->set_max_diff(options.max_diff);
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

void ChunkToProto(const Chunk& chunk, proto::Chunk* out) {
  out->set_key(chunk.key());
  out->set_episode_id(chunk.episode_id());
  out->set_episode_step(chunk.episode_step());
  proto::Tensor* tensor = out->mutable_tensor();
  tensor->set_dtype(static_cast<int32_t>(chunk.dtype()));
  tensor->mutable_shape()->Assign(chunk.shape().begin(), chunk.shape().end());
  tensor->set_compression(static_cast<uint32_t>(chunk.compression()));
  tensor->set_uncompressed_size(chunk.uncompressed_size());
  tensor->set_data(chunk.data().data(), chunk.data().size());
}

absl::StatusOr<TableOptions> TableOptionsFromConfig(
    const proto::TableConfig& config) {
  TableOptions options;
  options.name = config.table_name();
  ASSIGN_OR_RETURN(
      options.sampler,
      SelectorFromConfig(config.sampler(), options.name, "sampler"));
  ASSIGN_OR_RETURN(
      options.remover,
      SelectorFromConfig(config.remover(), options.name, "remover"));
  options.max_size = config.max_size();
  options.max_times_sampled = config.max_times_sampled();
  if (!config.has_rate_limiter()) {
    return absl::InvalidArgumentError(
        absl::StrCat("table '", options.name, "': rate_limiter is required"));
  }
  const proto::RateLimiterConfig& limiter = config.rate_limiter();
  options.rate_limiter.samples_per_insert = limiter.samples_per_insert();
  options.rate_limiter.min_size_to_sample = limiter.min_size_to_sample();
  options.rate_limiter.min_diff = limiter.min_diff();
  options.rate_limiter.max_diff = limiter.max_diff();
  if (config.has_signature()) {
    TableSignature signature;
    for (const proto::ColumnSpec& column : config.signature().columns()) {
      signature.columns.push_back(ColumnSpec{
          column.name(), static_cast<DType>(column.dtype()),
          std::vector<int64_t>(column.shape().begin(), column.shape().end())});
    }
    signature.nested_structure = config.signature().nested_structure();
    options.signature = std::move(signature);
  }
  RETURN_IF_ERROR(options.Validate());
  return options;
}

proto::TableConfig TableOptionsToConfig(const TableOptions& options) {
  proto::TableConfig config;
  config.set_table_name(options.name);
  *config.mutable_sampler() = SelectorToConfig(options.sampler);
  *config.mutable_remover() = SelectorToConfig(options.remover);
  config.set_max_size(options.max_size);
  config.set_max_times_sampled(options.max_times_sampled);
  RateLimiterToConfig(options.rate_limiter, config.mutable_rate_limiter());
  if (options.signature.has_value()) {
    proto::Signature* signature = config.mutable_signature();
    for (const ColumnSpec& column : options.signature->columns) {
      proto::ColumnSpec* out = signature->add_columns();
      out->set_name(column.name);
      out->set_dtype(static_cast<int32_t>(column.dtype));
      out->mutable_shape()->Assign(column.shape.begin(), column.shape.end());
    }
    signature->set_nested_structure(options.signature->nested_structure);
  }
  return config;
}

void TableInfoToProto(const TableInfo& info, proto::TableInfo* out) {
  *out->mutable_config() = TableOptionsToConfig(info.options);
  out->set_current_size(info.current_size);
  out->set_num_unique_samples(info.num_unique_samples);
  out->set_sampler_total_weight(info.sampler_total_weight);
  out->set_sampler_min_item_weight(info.sampler_min_item_weight);
  out->set_num_episodes(info.num_episodes);
  out->set_num_deleted_episodes(info.num_deleted_episodes);
  proto::RateLimiterInfo* limiter = out->mutable_rate_limiter_info();
  RateLimiterToConfig(info.rate_limiter_info.options,
                      limiter->mutable_config());
  limiter->set_inserts(info.rate_limiter_info.inserts);
  limiter->set_samples(info.rate_limiter_info.samples);
  limiter->set_deletes(info.rate_limiter_info.deletes);
  CallStatsToProto(info.rate_limiter_info.insert_stats,
                   limiter->mutable_insert_stats());
  CallStatsToProto(info.rate_limiter_info.sample_stats,
                   limiter->mutable_sample_stats());
}

absl::StatusOr<TableInfo> TableInfoFromProto(
    const proto::TableInfo& proto_info) {
  TableInfo info;
  ASSIGN_OR_RETURN(info.options, TableOptionsFromConfig(proto_info.config()));
  info.current_size = proto_info.current_size();
  info.num_unique_samples = proto_info.num_unique_samples();
  info.sampler_total_weight = proto_info.sampler_total_weight();
  info.sampler_min_item_weight = proto_info.sampler_min_item_weight();
  info.num_episodes = proto_info.num_episodes();
  info.num_deleted_episodes = proto_info.num_deleted_episodes();
  const proto::RateLimiterInfo& limiter = proto_info.rate_limiter_info();
  info.rate_limiter_info.options = info.options.rate_limiter;
  info.rate_limiter_info.inserts = limiter.inserts();
  info.rate_limiter_info.samples = limiter.samples();
  info.rate_limiter_info.deletes = limiter.deletes();
  auto stats = [](const proto::CallStats& in) {
    RateLimiterCallStats out;
    out.completed = in.completed();
    out.limited = in.limited();
    out.pending = in.pending();
    out.completed_wait_time = absl::Seconds(in.completed_wait_time_s());
    return out;
  };
  info.rate_limiter_info.insert_stats = stats(limiter.insert_stats());
  info.rate_limiter_info.sample_stats = stats(limiter.sample_stats());
  return info;
}

absl::StatusOr<Item> ItemFromProto(
    const proto::Item& proto_item,
    const absl::flat_hash_map<ChunkKey, ChunkRef>& chunks) {
  Item item;
  item.key = proto_item.key();
  item.priority = proto_item.priority();
  item.legacy_steps = proto_item.legacy_steps();
  item.unchecked = proto_item.unchecked();
  item.trajectory.reserve(proto_item.columns_size());
  for (const proto::Column& proto_column : proto_item.columns()) {
    SlicedColumn& column = item.trajectory.emplace_back();
    column.set_squeeze(proto_column.squeeze());
    for (const proto::Slice& slice : proto_column.slices()) {
      auto it = chunks.find(slice.chunk_key());
      if (it == chunks.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "item ", item.key, " references chunk ", slice.chunk_key(),
            " which this stream has not sent or has released"));
      }
      column.add_slice(ChunkSlice{it->second, slice.offset(), slice.length()});
    }
  }
  return item;
}

int64_t SampleToProto(const SampledItem& sample,
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
      out_slice->set_chunk_key(slice.chunk->key());
      out_slice->set_offset(slice.offset);
      out_slice->set_length(slice.length);
      if (sent->insert(slice.chunk->key()).second) {
        ChunkToProto(*slice.chunk, response->add_chunks());
        bytes += static_cast<int64_t>(slice.chunk->data().size());
      }
    }
  }
  return bytes;
}

}  // namespace reverb_tf
