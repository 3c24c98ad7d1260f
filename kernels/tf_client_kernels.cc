// SPDX-License-Identifier: Apache-2.0
// Kernels of the TFClient ops (ops/client_ops.cc). They reach the server
// through libreverb_tf.so's std-only facade; each call is synchronous and the
// blocking ones support step cancellation.
#include <cmath>
#include <string>
#include <vector>

#include "kernels/tensor_conversion.h"
#include "reverb_tf/cc/client/tf_facade.h"
#include "tensorflow/core/framework/cancellation.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_util.h"
#include "tensorflow/core/platform/logging.h"

namespace reverb_tf {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;

absl::Status Vector(OpKernelContext* ctx, const char* name,
                    const Tensor** out) {
  TF_RETURN_IF_ERROR(ctx->input(name, out));
  if (!tensorflow::TensorShapeUtils::IsVector((*out)->shape())) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " must be a vector, got shape ", (*out)->shape().DebugString()));
  }
  return absl::OkStatus();
}

class UpdatePrioritiesOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    std::string address, table;
    const Tensor* keys;
    const Tensor* priorities;
    OP_REQUIRES_OK(ctx, ScalarString(ctx, "server_address", &address));
    OP_REQUIRES_OK(ctx, ScalarString(ctx, "table", &table));
    // dm-reverb's words, which programs match on.
    OP_REQUIRES_OK(ctx, ctx->input("keys", &keys));
    OP_REQUIRES_OK(ctx, ctx->input("priorities", &priorities));
    // In dm-reverb's order too: the keys' rank first, then whether the
    // priorities have the keys' shape (a scalar priority is a mismatch).
    const std::string rank_error = absl::StrCat(
        "Tensors `keys` and `priorities` must be of rank 1. (Shapes ",
        keys->shape().DebugString(), " and ", priorities->shape().DebugString(),
        ".)");
    OP_REQUIRES(ctx, tensorflow::TensorShapeUtils::IsVector(keys->shape()),
                absl::InvalidArgumentError(rank_error));
    OP_REQUIRES(ctx, keys->shape() == priorities->shape(),
                absl::InvalidArgumentError(absl::StrCat(
                    "Tensors `keys` and `priorities` do not match in shape (",
                    keys->shape().DebugString(), " vs. ",
                    priorities->shape().DebugString(), ")")));
    const auto k = keys->flat<uint64_t>();
    const auto p = priorities->flat<double>();
    std::vector<uint64_t> key_vector(k.data(), k.data() + k.size());
    std::vector<double> priority_vector(p.data(), p.data() + p.size());
    std::string warning;
    OP_REQUIRES_OK(ctx, ToTfStatus(tf_facade::UpdatePriorities(
                            address, table, key_vector, priority_vector,
                            /*timeout_ms=*/-1, &warning)));
    // At most once a minute per server address (the facade rate-limits it).
    if (!warning.empty()) LOG(WARNING) << "reverb_tf: " << warning;
  }
};

class InsertOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    std::string address;
    const Tensor* tables;
    const Tensor* priorities;
    OP_REQUIRES_OK(ctx, ScalarString(ctx, "server_address", &address));
    OP_REQUIRES_OK(ctx, Vector(ctx, "tables", &tables));
    OP_REQUIRES_OK(ctx, Vector(ctx, "priorities", &priorities));
    OP_REQUIRES(ctx, tables->NumElements() == priorities->NumElements(),
                absl::InvalidArgumentError(
                    "tables and priorities must have the same length"));
    std::vector<std::string> table_vector;
    const auto table_names = tables->flat<tensorflow::tstring>();
    for (int64_t i = 0; i < table_names.size(); ++i)
      table_vector.emplace_back(table_names(i));
    const auto p = priorities->flat<double>();
    std::vector<double> priority_vector(p.data(), p.data() + p.size());
    // Checked here, before the tables, as dm-reverb's kernel does, and in its
    // words: the server would reject NaN too, but in the table's wording.
    for (size_t i = 0; i < priority_vector.size(); ++i) {
      OP_REQUIRES(ctx, !std::isnan(priority_vector[i]),
                  absl::InvalidArgumentError(absl::StrCat(
                      "`priority` must not be nan. (priorities[", i,
                      "], for table '", table_vector[i], "')")));
    }
    tensorflow::OpInputList data;
    OP_REQUIRES_OK(ctx, ctx->input_list("data", &data));
    std::vector<tf_facade::Tensor> columns(data.size());
    for (int i = 0; i < data.size(); ++i) {
      OP_REQUIRES_OK(ctx, TensorToColumn(data[i], &columns[i]));
    }
    OP_REQUIRES_OK(ctx, ToTfStatus(tf_facade::InsertItem(
                            address, table_vector, priority_vector,
                            std::move(columns), -1)));
  }
};

class SampleOp : public OpKernel {
 public:
  explicit SampleOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dtypes", &dtypes_));
  }

  void Compute(OpKernelContext* ctx) override {
    std::string address, table;
    OP_REQUIRES_OK(ctx, ScalarString(ctx, "server_address", &address));
    OP_REQUIRES_OK(ctx, ScalarString(ctx, "table", &table));
    tf_facade::SamplerOptions options;
    options.max_in_flight = 1;
    options.max_samples = 1;
    std::unique_ptr<tf_facade::FacadeSampler> sampler;
    OP_REQUIRES_OK(ctx, ToTfStatus(tf_facade::NewSampler(address, table,
                                                         options, &sampler)));
    // Cancelling the step aborts a sample blocked on the rate limiter.
    std::function<void()> deregister;
    tf_facade::FacadeSampler* raw = sampler.get();
    OP_REQUIRES_OK(ctx, tensorflow::RegisterCancellationCallback(
                            ctx->cancellation_manager(),
                            [raw] { raw->Cancel(); }, &deregister));
    tf_facade::Sample sample;
    const tf_facade::Status status = sampler->Next(&sample);
    deregister();
    OP_REQUIRES_OK(ctx, ToTfStatus(status));
    OP_REQUIRES(ctx, sample.columns.size() == dtypes_.size(),
                absl::InvalidArgumentError(absl::StrCat(
                    "the sampled item of table '", table, "' has ",
                    sample.columns.size(), " columns but data_dtypes lists ",
                    dtypes_.size())));
    Tensor* out;
    constexpr int kDataOutputs = 7;  // the info outputs come first
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, {}, &out));
    out->scalar<uint64_t>()() = sample.info.key;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, {}, &out));
    out->scalar<double>()() = sample.info.probability;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, {}, &out));
    out->scalar<int64_t>()() = sample.info.table_size;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, {}, &out));
    out->scalar<double>()() = sample.info.priority;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(4, {}, &out));
    out->scalar<int32_t>()() = sample.info.times_sampled;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(5, {}, &out));
    out->scalar<double>()() = sample.info.table_weight;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(6, {}, &out));
    out->scalar<double>()() = sample.info.min_probability;
    // As dm-reverb's, the op returns the item's first timestep: a column
    // with a time dimension loses it (squeezed columns are one step already).
    for (size_t i = 0; i < dtypes_.size(); ++i) {
      // dm-reverb's words for a dtype the item does not have, which
      // programs match on; ColumnToTensor would word it otherwise.
      const auto actual =
          static_cast<tensorflow::DataType>(sample.columns[i].dtype);
      OP_REQUIRES(
          ctx, actual == dtypes_[i],
          absl::InvalidArgumentError(absl::StrCat(
              "Type mismatch: actual ", tensorflow::DataTypeString(actual),
              " vs. expect ", tensorflow::DataTypeString(dtypes_[i]),
              " (column ", i, " of the sampled item of table '", table, "')")));
      Tensor column;
      OP_REQUIRES_OK(
          ctx, ColumnToTensor(sample.columns[i], dtypes_[i],
                              tensorflow::PartialTensorShape(), i, &column));
      if (!sample.squeezed[i]) {
        OP_REQUIRES(ctx, column.dims() >= 1 && column.dim_size(0) >= 1,
                    absl::InvalidArgumentError(absl::StrCat(
                        "column ", i, " of the sampled item of table '", table,
                        "' has no timestep")));
        column = tensorflow::tensor::DeepCopy(column.SubSlice(0));
      }
      ctx->set_output(kDataOutputs + i, column);
    }
  }

 private:
  tensorflow::DataTypeVector dtypes_;
};

REGISTER_KERNEL_BUILDER(
    Name("ReverbTfUpdatePriorities").Device(tensorflow::DEVICE_CPU),
    UpdatePrioritiesOp);
REGISTER_KERNEL_BUILDER(Name("ReverbTfInsert").Device(tensorflow::DEVICE_CPU),
                        InsertOp);
REGISTER_KERNEL_BUILDER(Name("ReverbTfSample").Device(tensorflow::DEVICE_CPU),
                        SampleOp);

}  // namespace
}  // namespace reverb_tf
