// SPDX-License-Identifier: Apache-2.0
#include "reverb_tf/cc/client/sample_batch.h"

#include <cstring>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "reverb_tf/cc/chunk_store.h"
#include "reverb_tf/cc/client/in_process_sampler.h"
#include "reverb_tf/cc/platform/status_macros.h"

namespace reverb_tf {
namespace {

std::string TypeString(DType dtype, absl::Span<const int64_t> shape) {
  return absl::StrCat(DTypeName(dtype), ShapeDebugString(shape));
}

// One column of one sample, wherever its bytes are: a materialized
// payload, or rows of a chunk read in place.
struct ColumnView {
  DType dtype = DType::kInvalid;
  Shape shape;
  bool squeezed = false;
  // Fixed-size dtypes: the row-major bytes, kept alive by `hold`.
  absl::string_view bytes;
  ChunkBytes hold;
  // kString: the (uncompressed) payload holding the elements.
  const TensorPayload* strings = nullptr;
};

// Lays out the batch's columns from its first sample.
absl::Status StartColumns(absl::Span<const ColumnView> first,
                          int64_t batch_size, StackedBatch* batch) {
  batch->columns.resize(first.size());
  for (size_t i = 0; i < first.size(); ++i) {
    const ColumnView& view = first[i];
    StackedColumn& column = batch->columns[i];
    column.dtype = view.dtype;
    column.squeezed = view.squeezed;
    column.shape.clear();
    column.shape.push_back(batch_size);
    column.shape.insert(column.shape.end(), view.shape.begin(),
                        view.shape.end());
    if (view.dtype == DType::kString) {
      continue;
    }
    const int64_t row_bytes = static_cast<int64_t>(view.bytes.size());
    if (row_bytes > 0 && batch_size > kMaxPayloadBytes / row_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("a batch of ", batch_size, " items of column ", i, " (",
                       TypeString(view.dtype, view.shape), ", ", row_bytes,
                       " bytes each) would exceed ", kMaxPayloadBytes,
                       " bytes; use a smaller batch"));
    }
    // Grown to its final size once; rows are copied in as samples arrive.
    column.data.reserve(batch_size * row_bytes);
  }
  return absl::OkStatus();
}

absl::Status AppendColumns(absl::Span<const ColumnView> views,
                           const SampleInfo& info, int64_t batch_size,
                           StackedBatch* batch) {
  if (batch->infos.empty())
    RETURN_IF_ERROR(StartColumns(views, batch_size, batch));
  const int64_t index = batch->size();
  if (views.size() != batch->columns.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot batch samples with different numbers of columns: sample 0 has ",
        batch->columns.size(), ", sample ", index, " has ", views.size()));
  }
  for (size_t i = 0; i < views.size(); ++i) {
    const ColumnView& view = views[i];
    StackedColumn& column = batch->columns[i];
    const bool same_shape = view.shape.size() + 1 == column.shape.size() &&
                            std::equal(view.shape.begin(), view.shape.end(),
                                       column.shape.begin() + 1);
    if (view.dtype != column.dtype || !same_shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot batch column ", i, ": sample 0 is ",
          TypeString(column.dtype,
                     absl::MakeConstSpan(column.shape).subspan(1)),
          " but sample ", index, " is ", TypeString(view.dtype, view.shape),
          "; every item of a batch needs the same dtype and shape"));
    }
    if (view.dtype == DType::kString) {
      ASSIGN_OR_RETURN(std::vector<std::string> elements,
                       DecodeStrings(*view.strings));
      for (std::string& element : elements)
        column.strings.push_back(std::move(element));
    } else {
      column.data.append(view.bytes.data(), view.bytes.size());
    }
  }
  batch->infos.push_back(info);
  return absl::OkStatus();
}

absl::Status AppendSample(const Sample& sample, int64_t batch_size,
                          StackedBatch* batch) {
  absl::InlinedVector<ColumnView, 8> views(sample.columns.size());
  for (size_t i = 0; i < sample.columns.size(); ++i) {
    const TensorPayload& payload = sample.columns[i];
    if (payload.compression != Compression::kNone) {
      return absl::InternalError("the sampler returned a compressed column");
    }
    ColumnView& view = views[i];
    view.dtype = payload.dtype;
    view.shape = payload.shape;
    view.squeezed = i < sample.squeezed.size() && sample.squeezed[i];
    if (payload.dtype == DType::kString) {
      view.strings = &payload;
    } else {
      view.bytes = payload.data;
    }
  }
  return AppendColumns(views, sample.info, batch_size, batch);
}

// The rows of `column` in its chunk, if it is one slice of an uncompressed,
// fixed-size chunk (what nearly every column is): read in place, without
// materializing the sample.
bool RowsInPlace(const SlicedColumn& column, ColumnView* view) {
  if (column.slices().size() != 1) return false;
  const ChunkSlice& slice = column.slices()[0];
  const Chunk& chunk = *slice.chunk;
  const absl::Span<const int64_t> shape = chunk.shape();
  if (chunk.compression() != Compression::kNone ||
      chunk.dtype() == DType::kString || shape.empty() || slice.offset < 0 ||
      slice.length < 0 || slice.offset + slice.length > shape[0] ||
      (column.squeeze() && slice.length != 1)) {
    return false;  // the general path reports what is wrong, if anything
  }
  int64_t row_bytes = DTypeSize(chunk.dtype());
  for (size_t d = 1; d < shape.size(); ++d) row_bytes *= shape[d];
  view->dtype = chunk.dtype();
  view->squeezed = column.squeeze();
  view->shape.assign(shape.begin() + (column.squeeze() ? 1 : 0), shape.end());
  if (!column.squeeze()) view->shape[0] = slice.length;
  // A chunk that cannot be read back goes the general way, which says why.
  absl::StatusOr<ChunkBytes> bytes = chunk.Read();
  if (!bytes.ok()) return false;
  view->hold = *std::move(bytes);
  view->bytes = view->hold.view().substr(slice.offset * row_bytes,
                                         slice.length * row_bytes);
  return true;
}

absl::Status AppendItem(const SampledItem& item, int64_t batch_size,
                        StackedBatch* batch) {
  absl::InlinedVector<ColumnView, 8> views(item.trajectory.size());
  bool in_place = true;
  for (size_t i = 0; i < item.trajectory.size() && in_place; ++i) {
    in_place = RowsInPlace(item.trajectory[i], &views[i]);
  }
  if (!in_place) {
    Sample sample;
    RETURN_IF_ERROR(MaterializeSample(item, &sample));
    return AppendSample(sample, batch_size, batch);
  }
  return AppendColumns(views, item, batch_size, batch);
}

// NextStackedBatch for a server of this process: the sampled items' chunks
// are read in place (no Sample of payloads per item).
absl::Status NextStackedInProcess(InProcessSampler* sampler, int64_t batch_size,
                                  StackedBatch* batch) {
  std::vector<SampledItem> items;
  absl::Status status;
  while (batch->size() < batch_size) {
    status = sampler->NextItems(batch_size - batch->size(), &items);
    if (!status.ok()) break;
    for (const SampledItem& item : items)
      RETURN_IF_ERROR(AppendItem(item, batch_size, batch));
  }
  return status;
}

}  // namespace

absl::Status NextStackedBatch(Sampler* sampler, int64_t batch_size,
                              StackedBatch* batch) {
  if (batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size must be at least 1, got ", batch_size));
  }
  batch->infos.clear();
  batch->columns.clear();
  batch->infos.reserve(batch_size);
  absl::Status status;
  if (auto* local = dynamic_cast<InProcessSampler*>(sampler);
      local != nullptr && local->buffered() == 0) {
    status = NextStackedInProcess(local, batch_size, batch);
  } else {
    Sample sample;
    while (batch->size() < batch_size) {
      // Samples already received are taken without a wait; Next() blocks
      // only when none is.
      if (!sampler->TryNext(&sample)) {
        status = sampler->Next(&sample);
        if (!status.ok()) break;
      }
      status = AppendSample(sample, batch_size, batch);
      if (!status.ok()) return status;
    }
  }
  const int64_t size = batch->size();
  for (StackedColumn& column : batch->columns) column.shape[0] = size;
  return status;
}

}  // namespace reverb_tf
