// SPDX-License-Identifier: Apache-2.0
// Kernels of the graph-mode trajectory writer (ops/writer_ops.cc): a
// ResourceBase holding the facade's writer (client/tf_facade.h), which is
// the C++ TrajectoryWriter the Python writer uses, and one kernel per call.
// Blocking calls (create_item at the in-flight limit, flush, end_episode)
// return CANCELLED when TensorFlow cancels the step.
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/tensor_conversion.h"
#include "reverb_tf/cc/client/tf_facade.h"
#include "tensorflow/core/framework/cancellation.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/tensor.h"

namespace reverb_tf {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;

class WriterResource : public tensorflow::ResourceBase {
 public:
  explicit WriterResource(
      std::unique_ptr<tf_facade::FacadeTrajectoryWriter> writer)
      : writer_(std::move(writer)) {}

  std::string DebugString() const override {
    return "reverb_tf trajectory writer";
  }

  tf_facade::FacadeTrajectoryWriter& writer() { return *writer_; }

 private:
  // Destroying the resource closes the writer (its destructor waits a
  // moment for items in flight, as the Python writer's close()).
  const std::unique_ptr<tf_facade::FacadeTrajectoryWriter> writer_;
};

class CreateWriterOp : public OpKernel {
 public:
  explicit CreateWriterOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    int64_t keep_alive, chunk, in_flight;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_keep_alive_refs", &keep_alive));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("max_chunk_length", &chunk));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("max_in_flight_items", &in_flight));
    OP_REQUIRES_OK(ctx,
                   ctx->GetAttr("validate_items", &options_.validate_items));
    options_.num_keep_alive_refs = static_cast<int32_t>(keep_alive);
    options_.max_chunk_length = static_cast<int32_t>(chunk);
    options_.max_in_flight_items = static_cast<int32_t>(in_flight);
    OP_REQUIRES_OK(ctx, ctx->GetAttr("container", &container_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("shared_name", &name_));
    OP_REQUIRES(
        ctx, !name_.empty(),
        absl::InvalidArgumentError("a trajectory writer needs a shared_name"));
  }

  void Compute(OpKernelContext* ctx) override {
    std::string address;
    OP_REQUIRES_OK(ctx, ScalarString(ctx, "server_address", &address));
    tensorflow::ResourceMgr* manager = ctx->resource_manager();
    const std::string container =
        container_.empty() ? manager->default_container() : container_;
    WriterResource* resource;
    OP_REQUIRES_OK(
        ctx, manager->LookupOrCreate<WriterResource>(
                 container, name_, &resource,
                 [&](WriterResource** out) -> absl::Status {
                   std::unique_ptr<tf_facade::FacadeTrajectoryWriter> writer;
                   TF_RETURN_IF_ERROR(ToTfStatus(tf_facade::NewTrajectoryWriter(
                       address, options_, &writer)));
                   *out = new WriterResource(std::move(writer));
                   return absl::OkStatus();
                 }));
    resource->Unref();
    OP_REQUIRES_OK(ctx, tensorflow::MakeResourceHandleToOutput(
                            ctx, 0, container, name_,
                            tensorflow::TypeIndex::Make<WriterResource>()));
  }

 private:
  tf_facade::WriterOptions options_;
  std::string container_;
  std::string name_;
};

// The writer behind input 0; the caller holds a reference while it runs.
absl::Status LookupWriter(OpKernelContext* ctx,
                          tensorflow::core::RefCountPtr<WriterResource>* out) {
  return tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, 0),
                                    out);
}

// Runs `call` with a cancellation that TensorFlow's step cancellation
// triggers.
absl::Status Cancellable(
    OpKernelContext* ctx,
    const std::function<tf_facade::Status(tf_facade::CallCancellation*)>&
        call) {
  tf_facade::CallCancellation cancel;
  std::function<void()> deregister;
  TF_RETURN_IF_ERROR(tensorflow::RegisterCancellationCallback(
      ctx->cancellation_manager(), [&cancel] { cancel.Cancel(); },
      &deregister));
  const tf_facade::Status status = call(&cancel);
  deregister();
  return ToTfStatus(status);
}

class AppendOp : public OpKernel {
 public:
  explicit AppendOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::vector<int64_t> columns;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("columns", &columns));
    columns_.assign(columns.begin(), columns.end());
    OP_REQUIRES_OK(ctx, ctx->GetAttr("names", &names_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("partial_step", &partial_step_));
    OP_REQUIRES(ctx, names_.size() == columns_.size(),
                absl::InvalidArgumentError(
                    "columns and names must have the same length"));
  }

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<WriterResource> resource;
    OP_REQUIRES_OK(ctx, LookupWriter(ctx, &resource));
    tensorflow::OpInputList values;
    OP_REQUIRES_OK(ctx, ctx->input_list("values", &values));
    OP_REQUIRES(ctx, values.size() == static_cast<int>(columns_.size()),
                absl::InvalidArgumentError(
                    "values and columns must have the same length"));
    std::vector<tf_facade::Tensor> cells(values.size());
    for (int i = 0; i < values.size(); ++i) {
      OP_REQUIRES_OK(ctx, TensorToColumn(values[i], &cells[i]));
    }
    int64_t step = 0;
    OP_REQUIRES_OK(
        ctx, ToTfStatus(resource->writer().Append(
                 columns_, names_, std::move(cells), partial_step_, &step)));
    Tensor* out;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, {}, &out));
    out->scalar<int64_t>()() = step;
  }

 private:
  std::vector<int32_t> columns_;
  std::vector<std::string> names_;
  bool partial_step_ = false;
};

class CreateItemOp : public OpKernel {
 public:
  explicit CreateItemOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::vector<int64_t> columns, starts, stops;
    std::vector<bool> has_starts, has_stops, squeeze;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("columns", &columns));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("starts", &starts));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("stops", &stops));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("has_starts", &has_starts));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("has_stops", &has_stops));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("squeeze", &squeeze));
    const size_t n = columns.size();
    OP_REQUIRES(ctx,
                starts.size() == n && stops.size() == n &&
                    has_starts.size() == n && has_stops.size() == n &&
                    squeeze.size() == n,
                absl::InvalidArgumentError(
                    "the item's column attributes differ in length"));
    for (size_t i = 0; i < n; ++i) {
      refs_.push_back(tf_facade::ItemColumnRef{
          static_cast<int32_t>(columns[i]), starts[i], stops[i],
          static_cast<bool>(has_starts[i]), static_cast<bool>(has_stops[i]),
          static_cast<bool>(squeeze[i])});
    }
  }

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<WriterResource> resource;
    OP_REQUIRES_OK(ctx, LookupWriter(ctx, &resource));
    std::string table;
    OP_REQUIRES_OK(ctx, ScalarString(ctx, "table", &table));
    const Tensor* priority;
    OP_REQUIRES_OK(ctx, ctx->input("priority", &priority));
    OP_REQUIRES(ctx, tensorflow::TensorShapeUtils::IsScalar(priority->shape()),
                absl::InvalidArgumentError(
                    absl::StrCat("priority must be a scalar, got shape ",
                                 priority->shape().DebugString())));
    const double value = priority->scalar<double>()();
    OP_REQUIRES_OK(
        ctx, Cancellable(ctx, [&](tf_facade::CallCancellation* cancel) {
          return resource->writer().CreateItem(table, value, refs_, cancel);
        }));
  }

 private:
  std::vector<tf_facade::ItemColumnRef> refs_;
};

// The scalar input `name` of type T.
template <typename T>
absl::Status Scalar(OpKernelContext* ctx, const char* name, T* out) {
  const Tensor* tensor;
  TF_RETURN_IF_ERROR(ctx->input(name, &tensor));
  if (!tensorflow::TensorShapeUtils::IsScalar(tensor->shape())) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " must be a scalar, got shape ", tensor->shape().DebugString()));
  }
  *out = tensor->scalar<T>()();
  return absl::OkStatus();
}

class FlushOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<WriterResource> resource;
    OP_REQUIRES_OK(ctx, LookupWriter(ctx, &resource));
    int32_t block_until = 0;
    int64_t timeout_ms = -1;
    OP_REQUIRES_OK(ctx, Scalar(ctx, "block_until_num_items", &block_until));
    OP_REQUIRES_OK(ctx, Scalar(ctx, "timeout_ms", &timeout_ms));
    OP_REQUIRES_OK(
        ctx, Cancellable(ctx, [&](tf_facade::CallCancellation* cancel) {
          return resource->writer().Flush(block_until, timeout_ms, cancel);
        }));
  }
};

class EndEpisodeOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<WriterResource> resource;
    OP_REQUIRES_OK(ctx, LookupWriter(ctx, &resource));
    bool clear_buffers = true;
    int64_t timeout_ms = -1;
    OP_REQUIRES_OK(ctx, Scalar(ctx, "clear_buffers", &clear_buffers));
    OP_REQUIRES_OK(ctx, Scalar(ctx, "timeout_ms", &timeout_ms));
    OP_REQUIRES_OK(ctx,
                   Cancellable(ctx, [&](tf_facade::CallCancellation* cancel) {
                     return resource->writer().EndEpisode(clear_buffers,
                                                          timeout_ms, cancel);
                   }));
  }
};

class EpisodeStepsOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<WriterResource> resource;
    OP_REQUIRES_OK(ctx, LookupWriter(ctx, &resource));
    Tensor* out;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, {}, &out));
    out->scalar<int32_t>()() = resource->writer().episode_steps();
  }
};

#define REVERB_TF_CPU_KERNEL(name, kernel) \
  REGISTER_KERNEL_BUILDER(Name(name).Device(tensorflow::DEVICE_CPU), kernel)

REVERB_TF_CPU_KERNEL("ReverbTfTrajectoryWriter", CreateWriterOp);
REVERB_TF_CPU_KERNEL("ReverbTfTrajectoryWriterAppend", AppendOp);
REVERB_TF_CPU_KERNEL("ReverbTfTrajectoryWriterCreateItem", CreateItemOp);
REVERB_TF_CPU_KERNEL("ReverbTfTrajectoryWriterFlush", FlushOp);
REVERB_TF_CPU_KERNEL("ReverbTfTrajectoryWriterEndEpisode", EndEpisodeOp);
REVERB_TF_CPU_KERNEL("ReverbTfTrajectoryWriterEpisodeSteps", EpisodeStepsOp);

#undef REVERB_TF_CPU_KERNEL

}  // namespace
}  // namespace reverb_tf
