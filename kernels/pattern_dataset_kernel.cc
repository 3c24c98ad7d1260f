// SPDX-License-Identifier: Apache-2.0
// Kernel of ReverbTfPatternDataset (ops/dataset_ops.cc): applies
// StructuredWriter configs to a dataset of steps with the pattern engine of
// libreverb_tf.so, reached through its std-only facade (pattern_facade.h).
//
// The iterator buffers the most recent max_history() steps as TF tensors
// (shared, not copied), feeds the engine each step and, for every config
// that applies, emits one element: the step tensor itself for a squeezed
// node, the steps stacked along a new leading dimension for a slice.
//
// Only TensorFlow headers and the facade (standard library only) are
// included here: TF's absl/protobuf must not meet ours
// (docs/native_linking.md).
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/tensor_conversion.h"
#include "reverb_tf/cc/patterns/pattern_facade.h"
#include "tensorflow/core/data/captured_function.h"
#include "tensorflow/core/framework/dataset.h"
#include "tensorflow/core/framework/model.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/mutex.h"
#include "tensorflow/core/util/batch_util.h"

namespace reverb_tf {
namespace {

using ::tensorflow::DataTypeVector;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::PartialTensorShape;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::data::CapturedFunction;
using ::tensorflow::data::DatasetBase;
using ::tensorflow::data::DatasetContext;
using ::tensorflow::data::DatasetIterator;
using ::tensorflow::data::FunctionMetadata;
using ::tensorflow::data::InstantiatedCapturedFunction;
using ::tensorflow::data::IteratorContext;
using ::tensorflow::data::SerializationContext;

constexpr char kIsEndOfEpisode[] = "is_end_of_episode";
constexpr char kOtherArguments[] = "other_arguments";

struct DatasetOptions {
  DataTypeVector dtypes;
  std::vector<PartialTensorShape> shapes;
  std::vector<std::string> configs;
  bool clear_after_episode = false;
};

class Dataset : public DatasetBase {
 public:
  Dataset(OpKernelContext* ctx, const DatasetBase* input,
          std::unique_ptr<CapturedFunction> is_end_of_episode,
          DatasetOptions options)
      : DatasetBase(DatasetContext(ctx)),
        input_(input),
        is_end_of_episode_(std::move(is_end_of_episode)),
        options_(std::move(options)) {
    input_->Ref();
  }
  ~Dataset() override { input_->Unref(); }

  std::unique_ptr<tensorflow::data::IteratorBase> MakeIteratorInternal(
      const std::string& prefix) const override {
    return std::make_unique<Iterator>(
        Iterator::Params{this, absl::StrCat(prefix, "::ReverbTfPattern")});
  }

  const DataTypeVector& output_dtypes() const override {
    return options_.dtypes;
  }
  const std::vector<PartialTensorShape>& output_shapes() const override {
    return options_.shapes;
  }
  std::string DebugString() const override {
    return "ReverbTfPatternDatasetOp::Dataset";
  }

  absl::Status InputDatasets(
      std::vector<const DatasetBase*>* inputs) const override {
    inputs->push_back(input_);
    return absl::OkStatus();
  }
  absl::Status CheckExternalState() const override {
    TF_RETURN_IF_ERROR(is_end_of_episode_->CheckExternalState());
    return input_->CheckExternalState();
  }

 protected:
  absl::Status AsGraphDefInternal(SerializationContext* ctx,
                                  DatasetGraphDefBuilder* b,
                                  tensorflow::Node** output) const override {
    tensorflow::Node* input = nullptr;
    TF_RETURN_IF_ERROR(b->AddInputDataset(ctx, input_, &input));
    std::vector<tensorflow::Node*> other_arguments;
    DataTypeVector other_arguments_types;
    TF_RETURN_IF_ERROR(is_end_of_episode_->AddToGraph(ctx, b, &other_arguments,
                                                      &other_arguments_types));
    tensorflow::AttrValue func, arguments_types, dtypes, shapes, configs, clear;
    b->BuildAttrValue(is_end_of_episode_->func(), &func);
    b->BuildAttrValue(other_arguments_types, &arguments_types);
    b->BuildAttrValue(options_.dtypes, &dtypes);
    b->BuildAttrValue(options_.shapes, &shapes);
    b->BuildAttrValue(options_.configs, &configs);
    b->BuildAttrValue(options_.clear_after_episode, &clear);
    return b->AddDataset(this, {{0, input}}, {{1, other_arguments}},
                         {{kIsEndOfEpisode, func},
                          {"Targuments", arguments_types},
                          {"dtypes", dtypes},
                          {"shapes", shapes},
                          {"configs", configs},
                          {"clear_after_episode", clear}},
                         output);
  }

 private:
  class Iterator : public DatasetIterator<Dataset> {
   public:
    explicit Iterator(const Params& params)
        : DatasetIterator<Dataset>(params) {}

    absl::Status Initialize(IteratorContext* ctx) override {
      TF_RETURN_IF_ERROR(
          dataset()->input_->MakeIterator(ctx, this, prefix(), &input_impl_));
      TF_RETURN_IF_ERROR(
          dataset()->is_end_of_episode_->Instantiate(ctx, &is_end_of_episode_));
      const int32_t num_columns =
          static_cast<int32_t>(dataset()->input_->output_dtypes().size());
      return ToTfStatus(tf_facade::NewPatternEngine(dataset()->options_.configs,
                                                    num_columns, &engine_));
    }

    absl::Status GetNextInternal(IteratorContext* ctx, std::vector<Tensor>* out,
                                 bool* end_of_sequence) override {
      tensorflow::mutex_lock lock(mu_);
      while (ready_.empty()) {
        if (!input_impl_) {
          *end_of_sequence = true;
          return absl::OkStatus();
        }
        std::vector<Tensor> step;
        bool input_ended = false;
        TF_RETURN_IF_ERROR(input_impl_->GetNext(ctx, &step, &input_ended));
        if (input_ended) {
          input_impl_.reset();
          continue;
        }
        TF_RETURN_IF_ERROR(AddStep(ctx, std::move(step)));
      }
      *end_of_sequence = false;
      *out = std::move(ready_.front());
      ready_.pop_front();
      return absl::OkStatus();
    }

   protected:
    std::shared_ptr<tensorflow::data::model::Node> CreateNode(
        IteratorContext*,
        tensorflow::data::model::Node::Args args) const override {
      return tensorflow::data::model::MakeUnknownRatioNode(std::move(args));
    }
    absl::Status SaveInternal(SerializationContext*,
                              tensorflow::data::IteratorStateWriter*) override {
      return absl::UnimplementedError(
          "a reverb_tf PatternDataset iterator cannot be saved; recreate it");
    }
    absl::Status RestoreInternal(
        IteratorContext*, tensorflow::data::IteratorStateReader*) override {
      return absl::UnimplementedError(
          "a reverb_tf PatternDataset iterator cannot be restored; recreate "
          "it");
    }

   private:
    struct BufferedStep {
      int64_t id;
      std::vector<Tensor> columns;
    };

    absl::Status AddStep(IteratorContext* ctx, std::vector<Tensor> step)
        TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      std::vector<Tensor> result;
      TF_RETURN_IF_ERROR(is_end_of_episode_->RunWithBorrowedArgs(
          ctx, step, &result, model_node()));
      if (result.size() != 1 || result[0].dtype() != tensorflow::DT_BOOL ||
          result[0].NumElements() != 1) {
        return absl::InvalidArgumentError(
            "`is_end_of_episode` must return a single scalar bool");
      }
      const bool end_of_episode = result[0].flat<bool>()(0);

      const int64_t id = next_id_++;
      if (static_cast<int32_t>(buffer_.size()) >= engine_->max_history())
        buffer_.pop_front();
      buffer_.push_back(BufferedStep{id, std::move(step)});
      const std::vector<Tensor>& columns = buffer_.back().columns;
      values_.assign(columns.size(), tf_facade::ColumnBytes());
      for (size_t c = 0; c < columns.size(); ++c) {
        if (!engine_->watched(static_cast<int32_t>(c))) continue;
        const Tensor& tensor = columns[c];
        if (!tensorflow::DataTypeCanUseMemcpy(tensor.dtype())) {
          values_[c].dtype = 0;  // not a number: the engine sees a non-scalar
          values_[c].num_elements = tensor.NumElements();
          continue;
        }
        const auto data = tensor.tensor_data();
        values_[c] = tf_facade::ColumnBytes{
            static_cast<int32_t>(tensor.dtype()), tensor.NumElements(),
            data.data(), data.size()};
      }
      applications_.clear();
      TF_RETURN_IF_ERROR(
          ToTfStatus(engine_->AppendStep(id, values_, &applications_)));
      TF_RETURN_IF_ERROR(Emit());
      if (end_of_episode) {
        const bool clear = dataset()->options_.clear_after_episode;
        TF_RETURN_IF_ERROR(
            ToTfStatus(engine_->EndEpisode(clear, &applications_)));
        TF_RETURN_IF_ERROR(Emit());
        if (clear) buffer_.clear();
      }
      return absl::OkStatus();
    }

    // Turns applications_ into elements of ready_.
    absl::Status Emit() TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      const DataTypeVector& dtypes = dataset()->options_.dtypes;
      for (const tf_facade::PatternApplication& application : applications_) {
        if (application.nodes.size() != dtypes.size()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "config ", application.config, " has ", application.nodes.size(),
              " pattern nodes but the dataset's elements have ", dtypes.size(),
              " components"));
        }
        std::vector<Tensor> element;
        element.reserve(application.nodes.size());
        for (const tf_facade::PatternNodeSteps& node : application.nodes) {
          if (node.squeeze) {
            element.push_back(Cell(node.steps[0], node.column));
            continue;
          }
          const Tensor& first = Cell(node.steps[0], node.column);
          TensorShape shape = first.shape();
          shape.InsertDim(0, static_cast<int64_t>(node.steps.size()));
          Tensor stacked(first.dtype(), shape);
          for (size_t i = 0; i < node.steps.size(); ++i) {
            TF_RETURN_IF_ERROR(tensorflow::batch_util::CopyElementToSlice(
                Cell(node.steps[i], node.column), &stacked,
                static_cast<int64_t>(i)));
          }
          element.push_back(std::move(stacked));
        }
        ready_.push_back(std::move(element));
      }
      applications_.clear();
      return absl::OkStatus();
    }

    // The engine only names steps it still buffers, which are ours too.
    const Tensor& Cell(int64_t id, int32_t column) const
        TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return buffer_[id - buffer_.front().id].columns[column];
    }

    tensorflow::mutex mu_;
    std::unique_ptr<tensorflow::data::IteratorBase> input_impl_
        TF_GUARDED_BY(mu_);
    std::unique_ptr<InstantiatedCapturedFunction> is_end_of_episode_;
    std::unique_ptr<tf_facade::FacadePatternEngine> engine_;
    std::deque<BufferedStep> buffer_ TF_GUARDED_BY(mu_);
    int64_t next_id_ TF_GUARDED_BY(mu_) = 0;
    std::vector<tf_facade::ColumnBytes> values_ TF_GUARDED_BY(mu_);
    std::vector<tf_facade::PatternApplication> applications_ TF_GUARDED_BY(mu_);
    std::deque<std::vector<Tensor>> ready_ TF_GUARDED_BY(mu_);
  };

  const DatasetBase* const input_;
  const std::unique_ptr<CapturedFunction> is_end_of_episode_;
  const DatasetOptions options_;
};

class PatternDatasetOp : public tensorflow::data::UnaryDatasetOpKernel {
 public:
  explicit PatternDatasetOp(OpKernelConstruction* ctx)
      : UnaryDatasetOpKernel(ctx) {
    OP_REQUIRES_OK(ctx,
                   FunctionMetadata::Create(ctx, kIsEndOfEpisode, /*params=*/{},
                                            &func_metadata_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dtypes", &options_.dtypes));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("shapes", &options_.shapes));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("configs", &options_.configs));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("clear_after_episode",
                                     &options_.clear_after_episode));
    OP_REQUIRES(ctx, options_.dtypes.size() == options_.shapes.size(),
                absl::InvalidArgumentError(
                    "dtypes and shapes must have the same length"));
    // Reject invalid configs when the op is built, not at the first step.
    std::unique_ptr<tf_facade::FacadePatternEngine> probe;
    OP_REQUIRES_OK(ctx, ToTfStatus(tf_facade::NewPatternEngine(options_.configs,
                                                               0, &probe)));
  }

  void MakeDataset(OpKernelContext* ctx, DatasetBase* input,
                   DatasetBase** output) override {
    std::unique_ptr<CapturedFunction> is_end_of_episode;
    OP_REQUIRES_OK(
        ctx, CapturedFunction::Create(ctx, func_metadata_, kOtherArguments,
                                      &is_end_of_episode));
    *output = new Dataset(ctx, input, std::move(is_end_of_episode), options_);
  }

 private:
  std::shared_ptr<FunctionMetadata> func_metadata_;
  DatasetOptions options_;
};

REGISTER_KERNEL_BUILDER(
    Name("ReverbTfPatternDataset").Device(tensorflow::DEVICE_CPU),
    PatternDatasetOp);

}  // namespace
}  // namespace reverb_tf
