// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/client/tf_facade.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "reverb_tf/cc/client/client.h"
#include "reverb_tf/cc/platform/deadline.h"

namespace reverb_tf::tf_facade {
namespace {

Status FromAbsl(const absl::Status& status) {
  return Status{static_cast<int>(status.code()), std::string(status.message())};
}

// Kernels run many times against few servers: share one Client (one
// channel per shard) per address and security settings (the process's
// defaults when the kernel runs) for the life of the process.
absl::StatusOr<std::shared_ptr<Client>> ClientFor(const std::string& address) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* clients =
      new absl::flat_hash_map<std::string, std::shared_ptr<Client>>();
  auto security = DefaultClientSecurity();
  if (!security.ok()) return security.status();
  const std::string key = absl::StrCat(address, "\n", security->Fingerprint());
  absl::MutexLock lock(&mu);
  auto it = clients->find(key);
  if (it != clients->end()) return it->second;
  ClientOptions options;
  options.security = *std::move(security);
  auto client = Client::Create(address, options);
  if (!client.ok()) return client.status();
  std::shared_ptr<Client> shared = *std::move(client);
  clients->emplace(key, shared);
  return shared;
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

}  // namespace

Status NewSampler(const std::string& server_address, const std::string& table,
                  const SamplerOptions& options,
                  std::unique_ptr<FacadeSampler>* out) {
  auto client = ClientFor(server_address);
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
  auto client = ClientFor(server_address);
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

Status InsertItem(const std::string& server_address,
                  const std::vector<std::string>& tables,
                  const std::vector<double>& priorities,
                  std::vector<Tensor> columns, int64_t timeout_ms) {
  if (tables.size() != priorities.size() || tables.empty()) {
    return Status{
        static_cast<int>(absl::StatusCode::kInvalidArgument),
        "tables and priorities must be non-empty and of the same length"};
  }
  auto client = ClientFor(server_address);
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
      return FromAbsl(status);
    }
  }
  const absl::Duration timeout = TimeoutFromMs(timeout_ms);
  absl::Status status = (*writer)->Flush(0, timeout);
  (*writer)->Close().IgnoreError();
  return FromAbsl(status);
}

}  // namespace reverb_tf::tf_facade
