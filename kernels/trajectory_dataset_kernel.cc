// SPDX-License-Identifier: Apache-2.0
// Kernel of ReverbTfTrajectoryDataset (ops/dataset_ops.cc): a DatasetBase
// whose iterator streams samples through libreverb_tf.so's std-only facade.
//
// Only TensorFlow headers and tf_facade.h (standard library only) are
// included here: TF's absl/protobuf must not meet ours
// (docs/native_linking.md).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/element_tensor.h"
#include "kernels/tensor_conversion.h"
#include "reverb_tf/cc/client/tf_facade.h"
#include "tensorflow/core/framework/cancellation.h"
#include "tensorflow/core/framework/dataset.h"
#include "tensorflow/core/framework/model.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/mutex.h"

namespace reverb_tf {
namespace {

using ::tensorflow::DataType;
using ::tensorflow::DataTypeVector;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::PartialTensorShape;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::data::DatasetBase;
using ::tensorflow::data::DatasetContext;
using ::tensorflow::data::DatasetIterator;
using ::tensorflow::data::IteratorContext;
using ::tensorflow::data::SerializationContext;

// key, probability, table_size, priority, times_sampled; with sampling_stats
// also table_weight and min_probability.
constexpr int kInfoFields = 5;
constexpr int kInfoFieldsWithStats = 7;

// The dataset's settings, one source of truth for the kernel, the dataset
// and its graph serialization.
struct DatasetOptions {
  int64_t max_in_flight_samples_per_worker = 100;
  int64_t num_workers_per_iterator = -1;
  int64_t max_samples_per_stream = -1;
  int64_t max_samples = -1;
  int64_t rate_limiter_timeout_ms = -1;
  bool unsqueeze = false;
  bool sampling_stats = false;
  std::vector<std::string> column_names;
  DataTypeVector dtypes;
  std::vector<PartialTensorShape> shapes;

  absl::Status Validate() const {
    if (max_in_flight_samples_per_worker < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("max_in_flight_samples_per_worker must be >= 1, got ",
                       max_in_flight_samples_per_worker));
    }
    if (max_samples_per_stream == 0 || max_samples_per_stream < -1) {
      return absl::InvalidArgumentError(
          absl::StrCat("max_samples_per_stream must be -1 or >= 1, got ",
                       max_samples_per_stream));
    }
    if (max_samples == 0 || max_samples < -1) {
      return absl::InvalidArgumentError(
          absl::StrCat("max_samples must be -1 or >= 1, got ", max_samples));
    }
    if (num_workers_per_iterator == 0 || num_workers_per_iterator < -1) {
      return absl::InvalidArgumentError(
          absl::StrCat("num_workers_per_iterator must be -1 or >= 1, got ",
                       num_workers_per_iterator));
    }
    if (dtypes.size() != shapes.size() ||
        dtypes.size() <= static_cast<size_t>(info_fields())) {
      return absl::InvalidArgumentError(
          absl::StrCat("dtypes (", dtypes.size(), ") and shapes (",
                       shapes.size(), ") must describe the ", info_fields(),
                       " info fields and at least one column"));
    }
    return absl::OkStatus();
  }

  int info_fields() const {
    return sampling_stats ? kInfoFieldsWithStats : kInfoFields;
  }
};

class Dataset : public DatasetBase {
 public:
  Dataset(OpKernelContext* ctx, std::string server_address, std::string table,
          DatasetOptions options)
      : DatasetBase(DatasetContext(ctx)),
        server_address_(std::move(server_address)),
        table_(std::move(table)),
        options_(std::move(options)) {}

  std::unique_ptr<tensorflow::data::IteratorBase> MakeIteratorInternal(
      const std::string& prefix) const override {
    return std::make_unique<Iterator>(
        Iterator::Params{this, absl::StrCat(prefix, "::ReverbTfTrajectory")});
  }

  const DataTypeVector& output_dtypes() const override {
    return options_.dtypes;
  }
  const std::vector<PartialTensorShape>& output_shapes() const override {
    return options_.shapes;
  }
  std::string DebugString() const override {
    return absl::StrCat("ReverbTfTrajectoryDatasetOp(", server_address_, ", ",
                        table_, ")");
  }
  absl::Status InputDatasets(std::vector<const DatasetBase*>*) const override {
    return absl::OkStatus();
  }
  // The state is the server's; the dataset itself can be rebuilt anywhere
  // from its address and table, which is what graph serialization needs.
  absl::Status CheckExternalState() const override { return absl::OkStatus(); }

 protected:
  absl::Status AsGraphDefInternal(SerializationContext* ctx,
                                  DatasetGraphDefBuilder* b,
                                  tensorflow::Node** output) const override {
    tensorflow::Node* address = nullptr;
    tensorflow::Node* table = nullptr;
    TF_RETURN_IF_ERROR(
        b->AddScalar(tensorflow::tstring(server_address_), &address));
    TF_RETURN_IF_ERROR(b->AddScalar(tensorflow::tstring(table_), &table));
    tensorflow::AttrValue max_in_flight, workers, per_stream, max_samples,
        timeout, unsqueeze, stats, names, dtypes, shapes;
    b->BuildAttrValue(options_.max_in_flight_samples_per_worker,
                      &max_in_flight);
    b->BuildAttrValue(options_.num_workers_per_iterator, &workers);
    b->BuildAttrValue(options_.max_samples_per_stream, &per_stream);
    b->BuildAttrValue(options_.max_samples, &max_samples);
    b->BuildAttrValue(options_.rate_limiter_timeout_ms, &timeout);
    b->BuildAttrValue(options_.unsqueeze, &unsqueeze);
    b->BuildAttrValue(options_.sampling_stats, &stats);
    b->BuildAttrValue(options_.column_names, &names);
    b->BuildAttrValue(options_.dtypes, &dtypes);
    b->BuildAttrValue(options_.shapes, &shapes);
    return b->AddDataset(this, {address, table},
                         {{"max_in_flight_samples_per_worker", max_in_flight},
                          {"num_workers_per_iterator", workers},
                          {"max_samples_per_stream", per_stream},
                          {"max_samples", max_samples},
                          {"rate_limiter_timeout_ms", timeout},
                          {"unsqueeze", unsqueeze},
                          {"sampling_stats", stats},
                          {"column_names", names},
                          {"dtypes", dtypes},
                          {"shapes", shapes}},
                         output);
  }

 private:
  class Iterator : public DatasetIterator<Dataset> {
   public:
    explicit Iterator(const Params& params)
        : DatasetIterator<Dataset>(params) {}

    ~Iterator() override {
      if (deregister_) deregister_();
    }

    absl::Status Initialize(IteratorContext* ctx) override {
      const DatasetOptions& options = dataset()->options_;
      TF_RETURN_IF_ERROR(CheckAgainstTableSignature());
      tf_facade::SamplerOptions sampler_options;
      sampler_options.max_in_flight = options.max_in_flight_samples_per_worker;
      sampler_options.max_samples = options.max_samples;
      sampler_options.max_samples_per_stream = options.max_samples_per_stream;
      sampler_options.num_streams =
          static_cast<int32_t>(options.num_workers_per_iterator);
      sampler_options.rate_limiter_timeout_ms = options.rate_limiter_timeout_ms;
      TF_RETURN_IF_ERROR(ToTfStatus(
          tf_facade::NewSampler(dataset()->server_address_, dataset()->table_,
                                sampler_options, &sampler_)));
      // Deleting the iterator or cancelling the step cancels the stream, so a
      // GetNext blocked on the server returns at once.
      tf_facade::FacadeSampler* sampler = sampler_.get();
      return tensorflow::RegisterCancellationCallback(
          ctx->cancellation_manager(), [sampler] { sampler->Cancel(); },
          &deregister_);
    }

    // As dm-reverb's: dtypes or shapes that the table's signature rules out
    // fail when the iterator is made, in its words, before a read takes an
    // item from the table that could never be returned. A server that cannot
    // be asked now, or a table without a signature, leaves it to the first
    // element (the sampler reports or waits out what is wrong).
    absl::Status CheckAgainstTableSignature() {
      const DatasetOptions& options = dataset()->options_;
      bool has_signature = false;
      std::vector<tf_facade::ColumnSignature> signature;
      if (!tf_facade::GetTableSignature(dataset()->server_address_,
                                        dataset()->table_, /*timeout_ms=*/-1,
                                        &has_signature, &signature)
               .ok() ||
          !has_signature) {
        return absl::OkStatus();
      }
      std::string& table_signature = table_signature_;
      std::vector<tensorflow::PartialTensorShape>& shapes = signature_shapes_;
      table_signature.clear();
      shapes.clear();
      for (size_t i = 0; i < signature.size(); ++i) {
        shapes.emplace_back(signature[i].shape);
        absl::StrAppend(
            &table_signature, i == 0 ? "" : ", ", i, ": Tensor<name: '",
            signature[i].name, "', dtype: ",
            tensorflow::DataTypeString(
                static_cast<tensorflow::DataType>(signature[i].dtype)),
            ", shape: ", shapes[i].DebugString(), ">");
      }
      const int info_fields = options.info_fields();
      const size_t columns = options.dtypes.size() - info_fields;
      if (signature.size() != columns) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Inconsistent number of tensors requested from table '",
            dataset()->table_, "'.  Requested ", columns,
            " tensors, but table signature shows ", signature.size(),
            " tensors.  Table signature: ", table_signature));
      }
      for (size_t i = 0; i < columns; ++i) {
        const tensorflow::DataType dtype = options.dtypes[info_fields + i];
        // A timestep dataset asks for items of its steps (a leading time
        // dimension); the signature, as the user's spec, describes a step.
        tensorflow::PartialTensorShape spec = options.shapes[info_fields + i];
        if (options.unsqueeze && spec.dims() >= 1) spec.RemoveDim(0);
        const auto expected =
            static_cast<tensorflow::DataType>(signature[i].dtype);
        if (dtype != expected || !spec.IsCompatibleWith(shapes[i])) {
          return absl::InvalidArgumentError(absl::StrCat(
              "Requested incompatible tensor at flattened index ", i,
              " from table '", dataset()->table_,
              "'.  Requested (dtype, shape): (",
              tensorflow::DataTypeString(dtype), ", ", spec.DebugString(),
              ").  Signature (dtype, shape): (",
              tensorflow::DataTypeString(expected), ", ",
              shapes[i].DebugString(),
              ").  Table signature: ", table_signature));
        }
      }
      return absl::OkStatus();
    }

    absl::Status GetNextInternal(IteratorContext* ctx, std::vector<Tensor>* out,
                                 bool* end_of_sequence) override {
      tensorflow::mutex_lock lock(mu_);
      *end_of_sequence = false;
      if (done_) {
        *end_of_sequence = true;
        return absl::OkStatus();
      }
      // One sample object for the iterator's life: Next() then reuses its
      // vectors' storage instead of allocating them for every element.
      tf_facade::Sample& sample = sample_;
      const tf_facade::Status status = sampler_->Next(&sample);
      const auto code = static_cast<absl::StatusCode>(status.code);
      if (code == absl::StatusCode::kOutOfRange ||
          (code == absl::StatusCode::kDeadlineExceeded &&
           dataset()->options_.rate_limiter_timeout_ms >= 0)) {
        done_ = true;
        *end_of_sequence = true;
        return absl::OkStatus();
      }
      TF_RETURN_IF_ERROR(ToTfStatus(status));
      const DatasetOptions& options = dataset()->options_;
      const int info_fields = options.info_fields();
      const size_t columns = options.dtypes.size() - info_fields;
      if (sample.columns.size() != columns) {
        return absl::InvalidArgumentError(
            absl::StrCat("the sampled item of table '", dataset()->table_,
                         "' has ", sample.columns.size(),
                         " columns but the dataset expects ", columns));
      }
      out->reserve(options.dtypes.size());
      out->push_back(NewElementTensor(tensorflow::DT_UINT64, TensorShape({})));
      out->back().scalar<uint64_t>()() = sample.info.key;
      out->push_back(NewElementTensor(tensorflow::DT_DOUBLE, TensorShape({})));
      out->back().scalar<double>()() = sample.info.probability;
      out->push_back(NewElementTensor(tensorflow::DT_INT64, TensorShape({})));
      out->back().scalar<int64_t>()() = sample.info.table_size;
      out->push_back(NewElementTensor(tensorflow::DT_DOUBLE, TensorShape({})));
      out->back().scalar<double>()() = sample.info.priority;
      out->push_back(NewElementTensor(tensorflow::DT_INT32, TensorShape({})));
      out->back().scalar<int32_t>()() = sample.info.times_sampled;
      if (options.sampling_stats) {
        out->push_back(
            NewElementTensor(tensorflow::DT_DOUBLE, TensorShape({})));
        out->back().scalar<double>()() = sample.info.table_weight;
        out->push_back(
            NewElementTensor(tensorflow::DT_DOUBLE, TensorShape({})));
        out->back().scalar<double>()() = sample.info.min_probability;
      }
      for (size_t i = 0; i < columns; ++i) {
        if (options.unsqueeze && i < sample.squeezed.size() &&
            sample.squeezed[i]) {
          auto& shape = sample.columns[i].shape;
          shape.insert(shape.begin(), 1);
        }
        // A column that does not fit the dataset's spec, in dm-reverb's
        // words (programs match on them), then which column it is.
        const tensorflow::DataType dtype = options.dtypes[info_fields + i];
        const tensorflow::PartialTensorShape& spec =
            options.shapes[info_fields + i];
        const auto actual =
            static_cast<tensorflow::DataType>(sample.columns[i].dtype);
        const tensorflow::PartialTensorShape shape(sample.columns[i].shape);
        // As dm-reverb's: a trajectory column is held to the table's
        // signature when the iterator could read it (an item written
        // unchecked may not fit it), and only then to the requested shape,
        // which the signature was found compatible with.
        const bool by_signature =
            !options.unsqueeze && i < signature_shapes_.size();
        const tensorflow::PartialTensorShape& held_to =
            by_signature ? signature_shapes_[i] : spec;
        if (actual != dtype || !held_to.IsCompatibleWith(shape)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "Received incompatible tensor at flattened index ", i,
              " from table '", dataset()->table_,
              "'.  Specification has (dtype, shape): (",
              tensorflow::DataTypeString(dtype), ", ", held_to.DebugString(),
              ").  Tensor has (dtype, shape): (",
              tensorflow::DataTypeString(actual), ", ", shape.DebugString(),
              ").",
              by_signature
                  ? absl::StrCat(" Table signature: ", table_signature_)
                  : std::string(),
              i < options.column_names.size() &&
                      !options.column_names[i].empty()
                  ? absl::StrCat(" (column '", options.column_names[i], "')")
                  : std::string()));
        }
        if (!spec.IsCompatibleWith(shape)) {
          // dm-reverb leaves this one to TensorFlow's check of the
          // dataset's output shapes; these are its words.
          return absl::InvalidArgumentError(
              absl::StrCat("Incompatible shapes at component ", info_fields + i,
                           ": expected ", spec.DebugString(), " but got ",
                           shape.DebugString(), "."));
        }
        Tensor tensor;
        absl::Status converted =
            ColumnToTensor(sample.columns[i], dtype, spec, i, &tensor);
        if (!converted.ok() && i < options.column_names.size()) {
          return absl::Status(converted.code(),
                              absl::StrCat("column '", options.column_names[i],
                                           "': ", converted.message()));
        }
        TF_RETURN_IF_ERROR(converted);
        out->push_back(std::move(tensor));
      }
      return absl::OkStatus();
    }

   protected:
    std::shared_ptr<tensorflow::data::model::Node> CreateNode(
        IteratorContext*,
        tensorflow::data::model::Node::Args args) const override {
      return tensorflow::data::model::MakeSourceNode(std::move(args));
    }
    absl::Status SaveInternal(SerializationContext*,
                              tensorflow::data::IteratorStateWriter*) override {
      return absl::UnimplementedError(
          "a reverb_tf dataset iterator has no state of its own to save; "
          "recreate it");
    }
    absl::Status RestoreInternal(
        IteratorContext*, tensorflow::data::IteratorStateReader*) override {
      return absl::UnimplementedError(
          "a reverb_tf dataset iterator has no state of its own to restore; "
          "recreate it");
    }

   private:
    tensorflow::mutex mu_;
    std::unique_ptr<tf_facade::FacadeSampler> sampler_;
    // The table's signature as the iterator found it when it was made, one
    // shape per column, and as dm-reverb's messages print it; empty when
    // the table has none or the server could not be asked then. Written by
    // Initialize before any GetNext, read-only after.
    std::vector<tensorflow::PartialTensorShape> signature_shapes_;
    std::string table_signature_;
    std::function<void()> deregister_;
    bool done_ TF_GUARDED_BY(mu_) = false;
    tf_facade::Sample sample_ TF_GUARDED_BY(mu_);
  };

  const std::string server_address_;
  const std::string table_;
  const DatasetOptions options_;
};

class TrajectoryDatasetOp : public tensorflow::data::DatasetOpKernel {
 public:
  explicit TrajectoryDatasetOp(OpKernelConstruction* ctx)
      : DatasetOpKernel(ctx) {
    OP_REQUIRES_OK(ctx,
                   ctx->GetAttr("max_in_flight_samples_per_worker",
                                &options_.max_in_flight_samples_per_worker));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_workers_per_iterator",
                                     &options_.num_workers_per_iterator));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("max_samples_per_stream",
                                     &options_.max_samples_per_stream));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("max_samples", &options_.max_samples));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rate_limiter_timeout_ms",
                                     &options_.rate_limiter_timeout_ms));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("unsqueeze", &options_.unsqueeze));
    OP_REQUIRES_OK(ctx,
                   ctx->GetAttr("sampling_stats", &options_.sampling_stats));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("column_names", &options_.column_names));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dtypes", &options_.dtypes));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("shapes", &options_.shapes));
    OP_REQUIRES_OK(ctx, options_.Validate());
  }

  void MakeDataset(OpKernelContext* ctx, DatasetBase** output) override {
    tensorflow::tstring address, table;
    OP_REQUIRES_OK(ctx,
                   tensorflow::data::ParseScalarArgument<tensorflow::tstring>(
                       ctx, "server_address", &address));
    OP_REQUIRES_OK(ctx,
                   tensorflow::data::ParseScalarArgument<tensorflow::tstring>(
                       ctx, "table", &table));
    *output =
        new Dataset(ctx, std::string(address), std::string(table), options_);
  }

 private:
  DatasetOptions options_;
};

REGISTER_KERNEL_BUILDER(
    Name("ReverbTfTrajectoryDataset").Device(tensorflow::DEVICE_CPU),
    TrajectoryDatasetOp);

}  // namespace
}  // namespace reverb_tf
