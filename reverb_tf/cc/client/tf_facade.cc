// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/client/tf_facade.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "reverb_tf/cc/client/client.h"
#include "reverb_tf/cc/client/shared_clients.h"
#include "reverb_tf/cc/client/trajectory_writer.h"
#include "reverb_tf/cc/platform/cancellation.h"
#include "reverb_tf/cc/platform/deadline.h"

namespace reverb_tf::tf_facade {

class CallCancellation::Impl {
 public:
  Cancellation cancellation;
};

CallCancellation::CallCancellation() : impl_(new Impl) {}
CallCancellation::~CallCancellation() { delete impl_; }
void CallCancellation::Cancel() { impl_->cancellation.Cancel(); }

namespace {

Status FromAbsl(const absl::Status& status) {
  return Status{static_cast<int>(status.code()), std::string(status.message())};
}

class SamplerAdapter : public FacadeSampler {
 public:
  SamplerAdapter(std::shared_ptr<Client> client,
                 std::unique_ptr<Sampler> sampler)
      : client_(std::move(client)), sampler_(std::move(sampler)) {}

  Status Next(Sample* out) override {
    reverb_tf::Sample sample;
    if (absl::Status status = sampler_->Next(&sample); !status.ok())
      return FromAbsl(status);
    out->info = sample.info;
    out->squeezed = sample.squeezed;
    out->columns.resize(sample.columns.size());
    for (size_t i = 0; i < sample.columns.size(); ++i) {
      TensorPayload& column = sample.columns[i];
      out->columns[i].dtype = static_cast<int32_t>(column.dtype);
      out->columns[i].shape.assign(column.shape.begin(), column.shape.end());
      out->columns[i].data = std::move(column.data);
    }
    return Status{};
  }

  void Cancel() override { sampler_->Cancel(); }

 private:
  std::shared_ptr<Client> client_;
  std::unique_ptr<Sampler> sampler_;
};

TensorPayload PayloadFromFacade(Tensor tensor) {
  TensorPayload payload;
  payload.dtype = static_cast<DType>(tensor.dtype);
  payload.shape.assign(tensor.shape.begin(), tensor.shape.end());
  payload.data = std::move(tensor.data);
  payload.uncompressed_size = static_cast<int64_t>(payload.data.size());
  return payload;
}

// The history positions of a column reference, as Python's slice
// start:stop (step 1) over `length` entries selects them.
std::vector<int64_t> SlicePositions(const ItemColumnRef& ref, int64_t length) {
  auto clamp = [length](int64_t value) {
    if (value < 0) value += length;
    return std::clamp<int64_t>(value, 0, length);
  };
  const int64_t start = ref.has_start ? clamp(ref.start) : 0;
  const int64_t stop = ref.has_stop ? clamp(ref.stop) : length;
  std::vector<int64_t> positions;
  for (int64_t i = start; i < stop; ++i) positions.push_back(i);
  return positions;
}

class WriterAdapter : public FacadeTrajectoryWriter {
 public:
  WriterAdapter(std::shared_ptr<Client> client,
                std::unique_ptr<TrajectoryWriter> writer, bool validate_items)
      : client_(std::move(client)),
        writer_(std::move(writer)),
        validate_items_(validate_items) {}

  Status Append(const std::vector<int32_t>& columns,
                const std::vector<std::string>& names,
                std::vector<Tensor> values, bool partial_step,
                int64_t* step) override {
    if (columns.size() != values.size() || names.size() != values.size()) {
      return Invalid("append: columns, names and values differ in length");
    }
    absl::MutexLock lock(&mu_);
    int32_t width = 0;
    for (int32_t column : columns) {
      if (column < 0) return Invalid("append: a column index is negative");
      width = std::max(width, column + 1);
    }
    std::vector<std::optional<TensorPayload>> cells(width);
    for (size_t i = 0; i < columns.size(); ++i) {
      if (cells[columns[i]].has_value()) {
        return Invalid(absl::StrCat("append: column ", names[i],
                                    " is given twice in one step"));
      }
      if (named_.insert(columns[i]).second) {
        writer_->SetColumnName(columns[i], names[i]);
      }
      cells[columns[i]] = PayloadFromFacade(std::move(values[i]));
    }
    auto index = writer_->Append(std::move(cells), partial_step);
    if (!index.ok()) return FromAbsl(index.status());
    *step = *index;
    return Status{};
  }

  Status CreateItem(const std::string& table, double priority,
                    const std::vector<ItemColumnRef>& refs,
                    CallCancellation* cancel) override {
    // The writer checks the item (TrajectoryWriter::ValidateItem: a column,
    // steps in each) before anything else of its own.
    absl::MutexLock lock(&mu_);
    if (!signed_.contains(table)) {
      if (absl::Status status = SignLocked(table); !status.ok())
        return FromAbsl(status);
    }
    const int64_t length = writer_->history_length();
    std::vector<ItemColumn> columns;
    columns.reserve(refs.size());
    for (const ItemColumnRef& ref : refs) {
      ItemColumn& column = columns.emplace_back();
      column.column = ref.column;
      column.squeeze = ref.squeeze;
      if (ref.squeeze) {
        auto step = writer_->HistoryStep(ref.column, ref.start);
        if (!step.ok()) return FromAbsl(step.status());
        column.steps.push_back(*step);
        continue;
      }
      for (int64_t position : SlicePositions(ref, length)) {
        auto step = writer_->HistoryStep(ref.column, position);
        if (!step.ok()) return FromAbsl(step.status());
        column.steps.push_back(*step);
      }
    }
    return FromAbsl(writer_->CreateItem(table, priority, columns,
                                        absl::InfiniteDuration(),
                                        CancellationOf(cancel)));
  }

  Status Flush(int32_t block_until_num_items, int64_t timeout_ms,
               CallCancellation* cancel) override {
    absl::MutexLock lock(&mu_);
    return FromAbsl(writer_->Flush(block_until_num_items,
                                   TimeoutFromMs(timeout_ms),
                                   CancellationOf(cancel)));
  }

  Status EndEpisode(bool clear_buffers, int64_t timeout_ms,
                    CallCancellation* cancel) override {
    absl::MutexLock lock(&mu_);
    // FAILED_PRECONDITION while a partial step is open: the writer's rule.
    return FromAbsl(writer_->EndEpisode(
        clear_buffers, TimeoutFromMs(timeout_ms), CancellationOf(cancel)));
  }

  int32_t episode_steps() override {
    absl::MutexLock lock(&mu_);
    return writer_->episode_steps();
  }

 private:
  static Status Invalid(std::string message) {
    return Status{static_cast<int>(absl::StatusCode::kInvalidArgument),
                  std::move(message)};
  }

  static Cancellation* CancellationOf(CallCancellation* cancel) {
    return cancel == nullptr ? nullptr : &cancel->impl()->cancellation;
  }

  // Gives the writer `table`'s signature to check items against, as the
  // Python writer does on a table's first item.
  absl::Status SignLocked(const std::string& table)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::optional<TableSignature> signature;
    if (validate_items_) {
      auto tables = client_->ServerInfo(absl::Seconds(3));
      if (!tables.ok()) return tables.status();
      std::vector<std::string> names;
      const TableInfo* found = nullptr;
      for (const TableInfo& info : *tables) {
        names.push_back(info.options.name);
        if (info.options.name == table) found = &info;
      }
      if (found == nullptr) {
        std::sort(names.begin(), names.end());
        return absl::InvalidArgumentError(absl::StrCat(
            "Unable to create item in table '", table,
            "' since the table could not be found. (it has: ",
            names.empty() ? "no tables" : absl::StrJoin(names, ", "), ")"));
      }
      signature = found->options.signature;
    }
    writer_->SetTableSignature(table, std::move(signature));
    signed_.insert(table);
    return absl::OkStatus();
  }

  const std::shared_ptr<Client> client_;
  absl::Mutex mu_;
  const std::unique_ptr<TrajectoryWriter> writer_ ABSL_PT_GUARDED_BY(mu_);
  const bool validate_items_;
  absl::flat_hash_set<int32_t> named_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> signed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

Status NewSampler(const std::string& server_address, const std::string& table,
                  const SamplerOptions& options,
                  std::unique_ptr<FacadeSampler>* out) {
  auto client = SharedClient(server_address);
  if (!client.ok()) return FromAbsl(client.status());
  reverb_tf::SamplerOptions sampler_options;
  sampler_options.max_in_flight = options.max_in_flight;
  sampler_options.max_samples = options.max_samples;
  sampler_options.rate_limiter_timeout =
      TimeoutFromMs(options.rate_limiter_timeout_ms);
  sampler_options.num_streams = options.num_streams;
  sampler_options.max_samples_per_stream = options.max_samples_per_stream;
  auto sampler = (*client)->NewSampler(table, sampler_options);
  if (!sampler.ok()) return FromAbsl(sampler.status());
  *out = std::make_unique<SamplerAdapter>(*client, *std::move(sampler));
  return Status{};
}

Status GetTableSignature(const std::string& server_address,
                         const std::string& table, int64_t timeout_ms,
                         bool* has_signature,
                         std::vector<ColumnSignature>* columns) {
  *has_signature = false;
  columns->clear();
  auto client = SharedClient(server_address);
  if (!client.ok()) return FromAbsl(client.status());
  auto info = (*client)->ServerInfoOfAnyShard(TimeoutFromMs(timeout_ms));
  if (!info.ok()) return FromAbsl(info.status());
  for (const TableInfo& found : *info) {
    if (found.options.name != table || !found.options.signature) continue;
    for (const ColumnSpec& spec : found.options.signature->columns) {
      columns->push_back(ColumnSignature{
          spec.name, static_cast<int32_t>(spec.dtype), spec.shape});
    }
    *has_signature = true;
    break;
  }
  return Status{};
}

Status DecodeStrings(const Tensor& tensor, std::vector<std::string>* out) {
  TensorPayload payload;
  payload.dtype = DType::kString;
  payload.shape.assign(tensor.shape.begin(), tensor.shape.end());
  payload.data = tensor.data;
  payload.uncompressed_size = static_cast<int64_t>(payload.data.size());
  auto strings = reverb_tf::DecodeStrings(payload);
  if (!strings.ok()) return FromAbsl(strings.status());
  *out = *std::move(strings);
  return Status{};
}

Status UpdatePriorities(const std::string& server_address,
                        const std::string& table,
                        const std::vector<uint64_t>& keys,
                        const std::vector<double>& priorities,
                        int64_t timeout_ms, std::string* warning) {
  if (keys.size() != priorities.size()) {
    return Status{static_cast<int>(absl::StatusCode::kInvalidArgument),
                  "keys and priorities must have the same length"};
  }
  auto client = SharedClient(server_address);
  if (!client.ok()) return FromAbsl(client.status());
  std::vector<std::pair<Key, double>> updates(keys.size());
  for (size_t i = 0; i < keys.size(); ++i)
    updates[i] = {keys[i], priorities[i]};
  const absl::Duration timeout = TimeoutFromMs(timeout_ms);
  // Priority updates are idempotent, so a server that is briefly unreachable
  // is retried, a bounded number of times.
  absl::Status status = RetryUnavailable(
      [&](int) {
        auto report = (*client)->MutatePriorities(table, updates, {}, timeout);
        if (report.ok() && warning != nullptr)
          *warning = std::move(report->warning);
        return report.status();
      },
      [] { return true; });
  return FromAbsl(status);
}

namespace {

// A failed insert into a table the server does not have is reported in
// dm-reverb's words (its TFClient looks the table up in its signature cache
// before inserting), which programs match on. The server is asked only on
// this error path, so a successful insert costs no extra call, and not
// when the server is unreachable, which the lookup would only wait on.
absl::Status NameMissingTable(Client& client,
                              const std::vector<std::string>& tables,
                              absl::Status failure) {
  if (failure.code() != absl::StatusCode::kNotFound &&
      failure.code() != absl::StatusCode::kInvalidArgument) {
    return failure;
  }
  auto info = client.ServerInfoOfAnyShard(absl::Seconds(5));
  if (!info.ok()) return failure;
  std::vector<std::string> names;
  for (const TableInfo& table : *info) names.push_back(table.options.name);
  for (const std::string& table : tables) {
    if (std::find(names.begin(), names.end(), table) != names.end()) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "Unable to find signatures for table '", table,
        "' in signature cache.  Available tables: [",
        names.empty() ? ""
                      : absl::StrCat("'", absl::StrJoin(names, "', '"), "'"),
        "]. (", failure.message(), ")"));
  }
  return failure;
}

}  // namespace

Status InsertItem(const std::string& server_address,
                  const std::vector<std::string>& tables,
                  const std::vector<double>& priorities,
                  std::vector<Tensor> columns, int64_t timeout_ms) {
  if (tables.size() != priorities.size() || tables.empty()) {
    return Status{
        static_cast<int>(absl::StatusCode::kInvalidArgument),
        "tables and priorities must be non-empty and of the same length"};
  }
  auto client = SharedClient(server_address);
  if (!client.ok()) return FromAbsl(client.status());
  // dm-reverb inserts through its legacy Writer: one step with a time
  // dimension, checked against the signature as a legacy item.
  TrajectoryWriterOptions options;
  options.legacy_items = true;
  auto writer = (*client)->NewTrajectoryWriter(options);
  if (!writer.ok()) return FromAbsl(writer.status());
  std::vector<std::optional<TensorPayload>> step(columns.size());
  for (size_t i = 0; i < columns.size(); ++i) {
    TensorPayload payload;
    payload.dtype = static_cast<DType>(columns[i].dtype);
    payload.shape.assign(columns[i].shape.begin(), columns[i].shape.end());
    payload.data = std::move(columns[i].data);
    payload.uncompressed_size = static_cast<int64_t>(payload.data.size());
    step[i] = std::move(payload);
  }
  auto index = (*writer)->Append(std::move(step));
  if (!index.ok()) return FromAbsl(index.status());
  std::vector<ItemColumn> refs(columns.size());
  for (size_t i = 0; i < columns.size(); ++i) {
    refs[i] = ItemColumn{static_cast<int32_t>(i), {*index}, /*squeeze=*/false};
  }
  for (size_t t = 0; t < tables.size(); ++t) {
    if (absl::Status status =
            (*writer)->CreateItem(tables[t], priorities[t], refs);
        !status.ok()) {
      return FromAbsl(NameMissingTable(**client, tables, status));
    }
  }
  const absl::Duration timeout = TimeoutFromMs(timeout_ms);
  absl::Status status = (*writer)->Flush(0, timeout);
  (*writer)->Close().IgnoreError();
  return FromAbsl(NameMissingTable(**client, tables, status));
}

Status NewTrajectoryWriter(const std::string& server_address,
                           const WriterOptions& options,
                           std::unique_ptr<FacadeTrajectoryWriter>* out) {
  auto client = SharedClient(server_address);
  if (!client.ok()) return FromAbsl(client.status());
  TrajectoryWriterOptions writer_options;
  writer_options.num_keep_alive_refs = options.num_keep_alive_refs;
  writer_options.max_chunk_length = options.max_chunk_length;
  writer_options.max_in_flight_items = options.max_in_flight_items;
  writer_options.validate_items = options.validate_items;
  if (absl::Status valid = writer_options.Validate(); !valid.ok())
    return FromAbsl(valid);
  auto writer = (*client)->NewTrajectoryWriter(writer_options);
  if (!writer.ok()) return FromAbsl(writer.status());
  *out = std::make_unique<WriterAdapter>(*client, *std::move(writer),
                                         options.validate_items);
  return Status{};
}

}  // namespace reverb_tf::tf_facade
