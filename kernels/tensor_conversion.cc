// SPDX-License-Identifier: Apache-2.0
#include "kernels/tensor_conversion.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kernels/element_tensor.h"

namespace reverb_tf {

using ::tensorflow::DataType;
using ::tensorflow::PartialTensorShape;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

absl::Status ToTfStatus(const tf_facade::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.code),
                      status.message);
}

absl::Status ColumnToTensor(const tf_facade::Tensor& column, DataType dtype,
                            const PartialTensorShape& expected, int index,
                            Tensor* out) {
  if (static_cast<DataType>(column.dtype) != dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "column ", index, " of the sampled item is ",
        tensorflow::DataTypeString(static_cast<DataType>(column.dtype)),
        " but the op expects ", tensorflow::DataTypeString(dtype)));
  }
  TensorShape shape;
  TF_RETURN_IF_ERROR(TensorShape::BuildTensorShape(column.shape, &shape));
  if (!expected.IsCompatibleWith(shape)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "column ", index, " of the sampled item has shape ",
        shape.DebugString(), " but the op expects ", expected.DebugString()));
  }
  *out = NewElementTensor(dtype, shape);
  if (dtype == tensorflow::DT_STRING) {
    std::vector<std::string> strings;
    TF_RETURN_IF_ERROR(ToTfStatus(tf_facade::DecodeStrings(column, &strings)));
    auto flat = out->flat<tensorflow::tstring>();
    for (size_t i = 0; i < strings.size(); ++i) flat(i) = std::move(strings[i]);
    return absl::OkStatus();
  }
  const size_t bytes = out->TotalBytes();
  if (bytes != column.data.size()) {
    return absl::InternalError(absl::StrCat("column ", index, " holds ",
                                            column.data.size(),
                                            " bytes, expected ", bytes));
  }
  std::memcpy(out->data(), column.data.data(), bytes);
  return absl::OkStatus();
}

absl::Status TensorToColumn(const Tensor& tensor, tf_facade::Tensor* out) {
  out->dtype = static_cast<int32_t>(tensor.dtype());
  out->shape.clear();
  for (int d = 0; d < tensor.dims(); ++d)
    out->shape.push_back(tensor.dim_size(d));
  out->data.clear();
  if (tensor.dtype() == tensorflow::DT_STRING) {
    const auto flat = tensor.flat<tensorflow::tstring>();
    for (int64_t i = 0; i < flat.size(); ++i) {
      const tensorflow::tstring& element = flat(i);
      uint64_t length = element.size();
      while (length >= 0x80) {  // varint, as tensor_payload.h encodes strings
        out->data.push_back(static_cast<char>((length & 0x7f) | 0x80));
        length >>= 7;
      }
      out->data.push_back(static_cast<char>(length));
      out->data.append(element.data(), element.size());
    }
    return absl::OkStatus();
  }
  if (!tensorflow::DataTypeCanUseMemcpy(tensor.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("reverb_tf cannot store ",
                     tensorflow::DataTypeString(tensor.dtype()), " tensors"));
  }
  const auto data = tensor.tensor_data();
  out->data.assign(data.data(), data.size());
  return absl::OkStatus();
}

absl::Status ScalarString(tensorflow::OpKernelContext* ctx, const char* name,
                          std::string* out) {
  const tensorflow::Tensor* tensor;
  TF_RETURN_IF_ERROR(ctx->input(name, &tensor));
  if (!tensorflow::TensorShapeUtils::IsScalar(tensor->shape())) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " must be a scalar, got shape ", tensor->shape().DebugString()));
  }
  *out = std::string(tensor->scalar<tensorflow::tstring>()());
  return absl::OkStatus();
}

}  // namespace reverb_tf
