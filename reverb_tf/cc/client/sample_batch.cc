// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/client/sample_batch.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "reverb_tf/cc/platform/status_macros.h"

namespace reverb_tf {
namespace {

std::string TypeString(DType dtype, absl::Span<const int64_t> shape) {
  return absl::StrCat(DTypeName(dtype), ShapeDebugString(shape));
}

// Lays out the batch's columns from its first sample.
absl::Status StartColumns(const Sample& first, int64_t batch_size, StackedBatch* batch) {
  batch->columns.resize(first.columns.size());
  for (size_t i = 0; i < first.columns.size(); ++i) {
    const TensorPayload& payload = first.columns[i];
    if (payload.compression != Compression::kNone) {
      return absl::InternalError("the sampler returned a compressed column");
    }
    StackedColumn& column = batch->columns[i];
    column.dtype = payload.dtype;
    column.squeezed = i < first.squeezed.size() && first.squeezed[i];
    column.shape.clear();
    column.shape.push_back(batch_size);
    column.shape.insert(column.shape.end(), payload.shape.begin(), payload.shape.end());
    if (payload.dtype == DType::kString) {
      column.strings.reserve(batch_size * payload.num_elements());
    } else {
      const int64_t row_bytes = static_cast<int64_t>(payload.data.size());
      if (row_bytes > 0 && batch_size > kMaxPayloadBytes / row_bytes) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "a batch of ", batch_size, " items of column ", i, " (",
            TypeString(payload.dtype, payload.shape), ", ", row_bytes,
            " bytes each) would exceed ", kMaxPayloadBytes, " bytes; use a smaller batch"));
      }
      // Grown to its final size once; rows are copied in as samples arrive.
      column.data.reserve(batch_size * row_bytes);
    }
  }
  return absl::OkStatus();
}

absl::Status AppendSample(Sample& sample, StackedBatch* batch) {
  const int64_t index = batch->size();
  if (sample.columns.size() != batch->columns.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot batch samples with different numbers of columns: sample 0 has ",
        batch->columns.size(), ", sample ", index, " has ", sample.columns.size()));
  }
  for (size_t i = 0; i < sample.columns.size(); ++i) {
    TensorPayload& payload = sample.columns[i];
    StackedColumn& column = batch->columns[i];
    const bool same_shape =
        payload.shape.size() + 1 == column.shape.size() &&
        std::equal(payload.shape.begin(), payload.shape.end(), column.shape.begin() + 1);
    if (payload.dtype != column.dtype || !same_shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot batch column ", i, ": sample 0 is ",
          TypeString(column.dtype, absl::MakeConstSpan(column.shape).subspan(1)), " but sample ",
          index, " is ", TypeString(payload.dtype, payload.shape),
          "; every item of a batch needs the same dtype and shape"));
    }
    if (payload.compression != Compression::kNone) {
      return absl::InternalError("the sampler returned a compressed column");
    }
    if (payload.dtype == DType::kString) {
      ASSIGN_OR_RETURN(std::vector<std::string> elements, DecodeStrings(payload));
      for (std::string& element : elements) column.strings.push_back(std::move(element));
    } else {
      column.data.append(payload.data);
    }
  }
  batch->infos.push_back(sample.info);
  return absl::OkStatus();
}

}  // namespace

absl::Status NextStackedBatch(Sampler* sampler, int64_t batch_size, StackedBatch* batch) {
  if (batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size must be at least 1, got ", batch_size));
  }
  batch->infos.clear();
  batch->columns.clear();
  batch->infos.reserve(batch_size);
  Sample sample;
  absl::Status status;
  while (batch->size() < batch_size) {
    // Samples already received are taken without a wait; Next() blocks only
    // when none is.
    if (!sampler->TryNext(&sample)) {
      status = sampler->Next(&sample);
      if (!status.ok()) break;
    }
    if (batch->infos.empty()) {
      status = StartColumns(sample, batch_size, batch);
      if (!status.ok()) return status;
    }
    status = AppendSample(sample, batch);
    if (!status.ok()) return status;
  }
  const int64_t size = batch->size();
  for (StackedColumn& column : batch->columns) column.shape[0] = size;
  return status;
}

}  // namespace reverb_tf
