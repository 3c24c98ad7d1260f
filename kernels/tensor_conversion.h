// SPDX-License-Identifier: Apache-2.0
// Conversions between TF tensors/statuses and libreverb_tf.so's std-only
// facade types, shared by the kernels.
#ifndef REVERB_TF_KERNELS_TENSOR_CONVERSION_H_
#define REVERB_TF_KERNELS_TENSOR_CONVERSION_H_

#include "reverb_tf/cc/client/tf_facade.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace reverb_tf {

absl::Status ToTfStatus(const tf_facade::Status& status);

// Copies one sampled column into a TF tensor, checking it against what the
// caller promised (`expected` may be partially known).
absl::Status ColumnToTensor(const tf_facade::Tensor& column,
                            tensorflow::DataType dtype,
                            const tensorflow::PartialTensorShape& expected,
                            int index, tensorflow::Tensor* out);

// Copies a TF tensor into a facade tensor (strings encoded as the wire does).
absl::Status TensorToColumn(const tensorflow::Tensor& tensor,
                            tf_facade::Tensor* out);

// The scalar string input `name` of the op.
absl::Status ScalarString(tensorflow::OpKernelContext* ctx, const char* name,
                          std::string* out);

}  // namespace reverb_tf

#endif  // REVERB_TF_KERNELS_TENSOR_CONVERSION_H_
